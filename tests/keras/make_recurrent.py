"""make_recurrent.py — a one-step golden test for the recurrent layers:
LSTM, GRU (reset_after) and SimpleRNN, returning sequences or the last
step, read forwards and backwards, and Bidirectional (concat, sum). (Not hard_sigmoid: the two Keras
versions' differ, and both dialects' files must be the same model.)

  x (7, 3) -> a = LSTM(5, return_sequences)                      (7, 5)
  b = GRU(4, return_sequences, go_backwards)(a)                   (7, 4)
  c = SimpleRNN(3)(b)                                             (3)
  d = LSTM(4, go_backwards, activation relu)(x)                   (4)
  e = Bidirectional(LSTM(3, return_sequences))(x)                 (7, 6)
  e = Bidirectional(GRU(2), merge_mode sum)(e)                    (2)
  out = Dense(5, softmax)(concat(c, d, e))
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(8),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(9); x = 2 rand(6, 7, 3) - 1 float32; y =
randint(0, 5, 6).

Writes into OUTDIR (tests/golden/recurrent/) what golden_step.py writes,
model.k3.json (the same model built in Keras 3) and model.keras (Keras 3's
archive of it with the initial weights).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_recurrent.py tests/golden/recurrent
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
    x = K.Input(shape=(7, 3), name="x")
    a = L.LSTM(5, return_sequences=True, name="lstm")(x)
    b = L.GRU(4, return_sequences=True, go_backwards=True, name="gru")(a)
    c = L.SimpleRNN(3, name="rnn")(b)
    d = L.LSTM(4, go_backwards=True, activation="relu", name="lstm_back")(x)
    e = L.Bidirectional(L.LSTM(3, return_sequences=True, name="seq"),
                        name="bi_lstm")(x)
    e = L.Bidirectional(L.GRU(2, name="last"), merge_mode="sum",
                        name="bi_gru")(e)
    g = L.Concatenate(name="concat")([c, d, e])
    out = L.Dense(5, activation="softmax", name="probs")(g)
    return K.Model(x, out, name="recurrent")


def main(out):
    np.random.seed(9)
    x = (2 * np.random.rand(6, 7, 3) - 1).astype(np.float32)
    y = np.random.randint(0, 5, size=6).astype(np.int32)
    golden_step.write_dialects(build, tf_keras, keras, 8, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
