"""make_rnn_cells.py — a one-step golden test of Keras' RNN layer around
one cell, the way keras.io's custom-RNN examples write recurrent layers:

  x (5, 3)
  -> RNN(LSTMCell(4), return_sequences, return_state)  (5, 4), h (4), c (4)
  -> RNN(GRUCell(3), return_sequences, go_backwards)   (5, 3)
  -> RNN(SimpleRNNCell(2, relu))                        (2,)
  x -> Bidirectional(RNN(GRUCell(2)), sum)              (2,)
  Concatenate([those, h, c]) -> Dense(3, softmax)
tf_keras (tf.keras 2) Functional, tf_keras.utils.set_random_seed(70),
default initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(71); x = 2 rand(6, 5, 3) - 1 float32; y = randint(0, 3, 6).

Writes into OUTDIR (tests/golden/rnn_cells/) what golden_step.py writes,
model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_rnn_cells.py tests/golden/rnn_cells
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
    x = K.Input(shape=(5, 3), name="x")
    s, h, c = L.RNN(L.LSTMCell(4), return_sequences=True, return_state=True,
                    name="lstm_rnn")(x)
    s = L.RNN(L.GRUCell(3), return_sequences=True, go_backwards=True,
              name="gru_rnn")(s)
    s = L.RNN(L.SimpleRNNCell(2, activation="relu"), name="simple_rnn")(s)
    b = L.Bidirectional(L.RNN(L.GRUCell(2), name="rnn_gru"), merge_mode="sum",
                        name="both_ways")(x)
    y = L.Concatenate(name="concat")([s, b, h, c])
    y = L.Dense(3, activation="softmax", name="out")(y)
    return K.Model(x, y, name="rnn_cells")


def main(out):
    np.random.seed(71)
    x = (2 * np.random.rand(6, 5, 3) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_dialects(build, tf_keras, keras, 70, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
