"""make_time_distributed.py — a one-step golden test of Keras'
TimeDistributed around image layers, each frame of a clip an image:

  x (3, 8, 8, 1), three frames
  -> TimeDistributed(Conv2D(4, 3, relu))            (3, 6, 6, 4)
  -> TimeDistributed(BatchNormalization)
  -> TimeDistributed(MaxPooling2D(2))               (3, 3, 3, 4)
  -> TimeDistributed(DepthwiseConv2D(2, tanh))      (3, 2, 2, 4)
  -> TimeDistributed(Flatten) -> LSTM(6)            (6,)
  and the depthwise output
  -> TimeDistributed(GlobalAveragePooling2D)        (3, 4)
  -> TimeDistributed(Dense(5, relu)) -> Flatten     (15,)
  -> Concatenate -> Dense(3, softmax)
tf_keras (tf.keras 2) Functional, tf_keras.utils.set_random_seed(40),
default initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(41); x = 2 rand(6, 3, 8, 8, 1) - 1 float32; y =
randint(0, 3, 6).

Writes into OUTDIR (tests/golden/time_distributed/) what golden_step.py
writes, model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_time_distributed.py \
      tests/golden/time_distributed
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
    x = K.Input(shape=(3, 8, 8, 1), name="x")
    h = L.TimeDistributed(L.Conv2D(4, 3, activation="relu", name="conv"),
                          name="frames_conv")(x)
    h = L.TimeDistributed(L.BatchNormalization(name="bn"), name="frames_bn")(h)
    h = L.TimeDistributed(L.MaxPooling2D(2, name="pool"),
                          name="frames_pool")(h)
    h = L.TimeDistributed(
        L.DepthwiseConv2D(2, activation="tanh", name="depthwise"),
        name="frames_depthwise")(h)
    a = L.TimeDistributed(L.Flatten(name="flat"), name="frames_flat")(h)
    a = L.LSTM(6, name="lstm")(a)
    b = L.TimeDistributed(L.GlobalAveragePooling2D(name="gap"),
                          name="frames_gap")(h)
    b = L.TimeDistributed(L.Dense(5, activation="relu", name="dense"),
                          name="frames_dense")(b)
    b = L.Flatten(name="flat_b")(b)
    y = L.Concatenate(name="concat")([a, b])
    y = L.Dense(3, activation="softmax", name="out")(y)
    return K.Model(x, y, name="time_distributed")


def main(out):
    np.random.seed(41)
    x = (2 * np.random.rand(6, 3, 8, 8, 1) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_dialects(build, tf_keras, keras, 40, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
