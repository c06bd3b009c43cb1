"""make_rms_norm.py — a one-step golden test of Keras 3's RMS
normalizations, which tf.keras 2 does not have:

  x (6, 5)
  -> Dense(8)                                   (6, 8)
  -> RMSNormalization()                         x / sqrt(mean(x^2) + 1e-6) * scale
  -> Dense(8, relu)
  -> LayerNormalization(rms_scaling=True)       x / sqrt(var(x) + 1e-3) * gamma
  -> GlobalAveragePooling1D -> Dense(3, softmax)
Keras 3 Functional, keras.utils.set_random_seed(60), default
initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(61); x = 2 rand(6, 6, 5) - 1 float32; y = randint(0, 3, 6).

Writes into OUTDIR (tests/golden/rms_norm/) what golden_step.write_keras3
writes. Keras is never a dependency of mxu: this script only regenerates
the files.
  /tmp/kenv/bin/python tests/keras/make_rms_norm.py tests/golden/rms_norm
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402

import golden_step  # noqa: E402


def build(K):
    L = K.layers
    x = K.Input(shape=(6, 5), name="x")
    h = L.Dense(8, name="wide")(x)
    h = L.RMSNormalization(name="rms")(h)
    h = L.Dense(8, activation="relu", name="hidden")(h)
    h = L.LayerNormalization(rms_scaling=True, name="ln_rms")(h)
    h = L.GlobalAveragePooling1D(name="gap")(h)
    y = L.Dense(3, activation="softmax", name="out")(h)
    return K.Model(x, y, name="rms_norm")


def main(out):
    np.random.seed(61)
    x = (2 * np.random.rand(6, 6, 5) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_keras3(build, keras, 60, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
