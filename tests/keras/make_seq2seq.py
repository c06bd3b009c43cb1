"""make_seq2seq.py — a one-step golden test for a softmax over every step
of a sequence, trained with categorical_crossentropy on one-hot targets
(Keras' "sequence to sequence learning for performing number addition"
example, small): each step's cross-entropy, meaned over the steps.

  x (5, 4) -> LSTM(6) -> RepeatVector(3) -> LSTM(5, return_sequences)
  -> Dense(4, softmax)                                            (3, 4)
tf_keras (tf.keras 2) Sequential, tf_keras.utils.set_random_seed(12),
default initializers; SGD(0.1), categorical_crossentropy, accuracy.
Batch: np.random.seed(13); x = 2 rand(6, 5, 4) - 1 float32; y one-hot
rows of randint(0, 4, (6, 3)).

Writes into OUTDIR (tests/golden/seq2seq/) what golden_step.py writes
(y as float targets), model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_seq2seq.py tests/golden/seq2seq
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
        K.Input(shape=(5, 4), name="x"),
        L.LSTM(6, name="encode"),
        L.RepeatVector(3, name="repeat"),
        L.LSTM(5, return_sequences=True, name="decode"),
        L.Dense(4, activation="softmax", name="chars"),
    ], name="seq2seq")


def main(out):
    np.random.seed(13)
    x = (2 * np.random.rand(6, 5, 4) - 1).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[np.random.randint(0, 4, size=(6, 3))]
    golden_step.write_dialects(build, tf_keras, keras, 12, x, y, out,
                               loss="categorical_crossentropy")


if __name__ == "__main__":
    main(sys.argv[1])
