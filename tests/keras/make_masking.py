"""make_masking.py — a one-step golden test for an Embedding's mask
(mask_zero) through the layers that keep it and those that use it: the
recurrent layers carry their state over a padded step (a Bidirectional's
sequences give zeros there), GlobalAveragePooling1D averages the unpadded
steps, MultiHeadAttention attends between unpadded positions only, Dense
and Add keep the mask.

  ids (8) int32 -> e = Embedding(20, 6, mask_zero)                  (8, 6)
  a = LSTM(5, return_sequences)(e)                                  (8, 5)
  b = GRU(4, go_backwards)(a)                                       (4)
  c = Bidirectional(LSTM(3, return_sequences))(e)                   (8, 6)
  d = GlobalAveragePooling1D(Add(Dense(6)(c), Dense(6)(e)))         (6)
  g = SimpleRNN(3)(e)                                               (3)
  m = GlobalAveragePooling1D(MultiHeadAttention(2, 3)(e, e))        (6)
  out = Dense(5, softmax)(concat(b, d, g, m))
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(4),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: 6 rows of ids padded with 0 after, before and inside the sequence
(np.random.seed(5) for the ids and y = randint(0, 5, 6)).

Writes into OUTDIR (tests/golden/masking/) what golden_step.py writes,
model.k3.json and model.keras (Keras 3's archive with the initial weights).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_masking.py tests/golden/masking
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
    ids = K.Input(shape=(8,), dtype="int32", name="ids")
    e = L.Embedding(20, 6, mask_zero=True, name="embed")(ids)
    a = L.LSTM(5, return_sequences=True, name="lstm")(e)
    b = L.GRU(4, go_backwards=True, name="gru")(a)
    c = L.Bidirectional(L.LSTM(3, return_sequences=True, name="seq"),
                        name="bi")(e)
    d = L.Add(name="add")([L.Dense(6, name="from_bi")(c),
                           L.Dense(6, name="from_embed")(e)])
    d = L.GlobalAveragePooling1D(name="pool")(d)
    g = L.SimpleRNN(3, name="rnn")(e)
    m = L.MultiHeadAttention(2, 3, name="attend")(e, e)
    m = L.GlobalAveragePooling1D(name="pool_attend")(m)
    h = L.Concatenate(name="concat")([b, d, g, m])
    out = L.Dense(5, activation="softmax", name="probs")(h)
    return K.Model(ids, out, name="masking")


def main(out):
    np.random.seed(5)
    x = np.random.randint(1, 20, size=(6, 8)).astype(np.int32)
    x[0, 5:] = 0          # padded after
    x[1, :3] = 0          # padded before
    x[2, 2:4] = 0         # zeros inside
    x[3, 1:] = 0          # one token
    x[4, :7] = 0          # one token, last
    y = np.random.randint(0, 5, size=6).astype(np.int32)
    golden_step.write_dialects(build, tf_keras, keras, 4, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
