"""make_separable1d.py — a one-step golden test of Keras' DepthwiseConv1D
and SeparableConv1D over a sequence (steps, channels):

  x (8, 3) -> DepthwiseConv1D(3, depth_multiplier=2, same, relu)
  -> SeparableConv1D(4, 3, strides=2, depth_multiplier=2, tanh)
  -> SeparableConv1D(3, 2, dilation_rate=2, use_bias=False)
  -> Flatten -> Dense(3, softmax)
tf_keras (tf.keras 2) Sequential, tf_keras.utils.set_random_seed(20),
default initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(21); x = 2 rand(6, 8, 3) - 1 float32; y = randint(0, 3, 6).

Writes into OUTDIR (tests/golden/separable1d/) what golden_step.py
writes, model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_separable1d.py \
      tests/golden/separable1d
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

import golden_step  # noqa: E402


def build(K):
    L = K.layers
    return K.Sequential([
        K.Input(shape=(8, 3), name="x"),
        L.DepthwiseConv1D(3, depth_multiplier=2, padding="same",
                          activation="relu", name="depthwise"),
        L.SeparableConv1D(4, 3, strides=2, depth_multiplier=2,
                          activation="tanh", name="separable"),
        L.SeparableConv1D(3, 2, dilation_rate=2, use_bias=False,
                          name="dilated"),
        L.Flatten(name="flat"),
        L.Dense(3, activation="softmax", name="out"),
    ], name="separable1d")


def main(out):
    np.random.seed(21)
    x = (2 * np.random.rand(6, 8, 3) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_dialects(build, tf_keras, keras, 20, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
