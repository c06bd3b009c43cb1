"""make_adaptive_pooling.py — a one-step golden test of Keras 3's adaptive
poolings, which tf.keras 2 does not have; every size below leaves cells
whose windows overlap (or differ in size):

  x (10, 9, 2) -> lead = Conv2D(3, 1x1, tanh)                  (10, 9, 3)
  AdaptiveMaxPooling2D((4, 3)), AdaptiveAveragePooling2D((3, 5)) of lead
  r = Reshape((10, 27))(lead): AdaptiveAveragePooling1D(4),
      AdaptiveMaxPooling1D(3)
  v = Reshape((5, 2, 9, 3))(lead): AdaptiveMaxPooling3D((2, 2, 4)),
      AdaptiveAveragePooling3D((3, 2, 2))
  -> each Flatten, Concatenate -> Dense(3, softmax)
Keras 3 Functional, keras.utils.set_random_seed(66), default
initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(67); x = 2 rand(6, 10, 9, 2) - 1 float32; y = randint(0,
3, 6).

Writes into OUTDIR (tests/golden/adaptive_pooling/) what
golden_step.write_keras3 writes. Keras is never a dependency of mxu: this
script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_adaptive_pooling.py \\
      tests/golden/adaptive_pooling
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402

import golden_step  # noqa: E402


def build(K):
    L = K.layers
    x = K.Input(shape=(10, 9, 2), name="x")
    lead = L.Conv2D(3, 1, activation="tanh", name="lead")(x)
    r = L.Reshape((10, 27), name="rows")(lead)
    v = L.Reshape((5, 2, 9, 3), name="volume")(lead)
    pooled = [
        L.AdaptiveMaxPooling2D((4, 3), name="max2d")(lead),
        L.AdaptiveAveragePooling2D((3, 5), name="avg2d")(lead),
        L.AdaptiveAveragePooling1D(4, name="avg1d")(r),
        L.AdaptiveMaxPooling1D(3, name="max1d")(r),
        L.AdaptiveMaxPooling3D((2, 2, 4), name="max3d")(v),
        L.AdaptiveAveragePooling3D((3, 2, 2), name="avg3d")(v),
    ]
    flat = [L.Flatten(name=f"flat{k}")(p) for k, p in enumerate(pooled)]
    h = L.Concatenate(name="all")(flat)
    y = L.Dense(3, activation="softmax", name="out")(h)
    return K.Model(x, y, name="adaptive_pooling")


def main(out):
    np.random.seed(67)
    x = (2 * np.random.rand(6, 10, 9, 2) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_keras3(build, keras, 66, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
