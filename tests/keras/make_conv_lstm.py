"""make_conv_lstm.py — a one-step golden test of ConvLSTM2D, as Keras'
next-frame video prediction builds it, with a Conv3D reading the frames,
and of ConvLSTM1D:

  x (3, 6, 5, 1), three frames
  -> ConvLSTM2D(4, 3, same, return_sequences)       (3, 6, 5, 4)
  -> BatchNormalization                                            "seq"
  -> Conv3D(2, (2, 3, 3), same, sigmoid) -> GlobalAveragePooling3D  (2,)
  and "seq" -> ConvLSTM2D(3, 2, strides (1, 2), go_backwards)  (5, 2, 3)
  -> Flatten                                        (30,)
  and x -> Reshape((3, 30, 1)) -> ConvLSTM1D(2, 3, same)    (30, 2)
  -> Flatten                                        (60,)
  -> Concatenate -> Dense(3, softmax)
recurrent_activation "sigmoid" (Keras 3's default; tf.keras 2's is its
hard_sigmoid). tf_keras (tf.keras 2) Functional,
tf_keras.utils.set_random_seed(60), default initializers; SGD(0.1),
sparse_categorical_crossentropy. Batch: np.random.seed(61); x = 2 rand(6,
3, 6, 5, 1) - 1 float32; y = randint(0, 3, 6).

Writes into OUTDIR (tests/golden/conv_lstm/) what golden_step.py writes,
model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_conv_lstm.py tests/golden/conv_lstm
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
    x = K.Input(shape=(3, 6, 5, 1), name="x")
    s = L.ConvLSTM2D(4, 3, padding="same", return_sequences=True,
                     recurrent_activation="sigmoid", name="conv_lstm")(x)
    s = L.BatchNormalization(name="bn")(s)
    a = L.Conv3D(2, (2, 3, 3), padding="same", activation="sigmoid",
                 name="conv3d")(s)
    a = L.GlobalAveragePooling3D(name="gap")(a)
    b = L.ConvLSTM2D(3, 2, strides=(1, 2), go_backwards=True,
                     recurrent_activation="sigmoid", name="conv_lstm_back")(s)
    b = L.Flatten(name="flat")(b)
    r = L.Reshape((3, 30, 1), name="rows")(x)
    r = L.ConvLSTM1D(2, 3, padding="same", recurrent_activation="sigmoid",
                     name="conv_lstm1d")(r)
    r = L.Flatten(name="flat_rows")(r)
    y = L.Concatenate(name="concat")([a, b, r])
    y = L.Dense(3, activation="softmax", name="out")(y)
    return K.Model(x, y, name="conv_lstm")


def main(out):
    np.random.seed(61)
    x = (2 * np.random.rand(6, 3, 6, 5, 1) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_dialects(build, tf_keras, keras, 60, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
