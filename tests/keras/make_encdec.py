"""make_encdec.py — a one-step golden test of Keras' encoder-decoder
sequence to sequence model (its "character-level recurrent sequence to
sequence" example, small): an LSTM encoder's final states (return_state)
start the LSTM decoder (initial_state), trained with teacher forcing; a GRU
encoder's state starts a GRU decoder beside it.

  enc (4, 5) -> LSTM(6, return_state) -> [_, h, c]
  dec (3, 4) -> LSTM(6, sequences, return_state, initial_state=[h, c])
             -> [seq, _, _]
  enc -> GRU(3, return_state, go_backwards) -> [_, g]
  dec -> GRU(3, sequences, initial_state=[g]) -> gseq
  enc -> Bidirectional(LSTM(2, sequences, return_state)) -> [_, fh, fc,
         bh, bc]
  dec -> Bidirectional(LSTM(2, sequences), sum, initial_state=[fh, fc, bh,
         bc]) -> bseq
  Concatenate([seq, gseq, bseq]) -> Dense(4, softmax)             (3, 4)
tf_keras (tf.keras 2) Functional, tf_keras.utils.set_random_seed(16),
default initializers; SGD(0.1), categorical_crossentropy, accuracy.
Batch: np.random.seed(17); enc = 2 rand(6, 4, 5) - 1, dec = 2 rand(6, 3,
4) - 1 float32 (batch.h5's x and x_1); y one-hot rows of randint(0, 4,
(6, 3)).

Writes into OUTDIR (tests/golden/encdec/) what golden_step.py writes,
model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_encdec.py tests/golden/encdec
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
    enc = K.Input(shape=(4, 5), name="enc")
    dec = K.Input(shape=(3, 4), name="dec")
    _, h, c = L.LSTM(6, return_state=True, name="encoder")(enc)
    seq, _, _ = L.LSTM(6, return_sequences=True, return_state=True,
                       name="decoder")(dec, initial_state=[h, c])
    _, g = L.GRU(3, return_state=True, go_backwards=True,
                 name="gru_encoder")(enc)
    gseq = L.GRU(3, return_sequences=True, name="gru_decoder")(
        dec, initial_state=[g])
    _, fh, fc, bh, bc = L.Bidirectional(
        L.LSTM(2, return_sequences=True, return_state=True),
        name="bi_encoder")(enc)
    bseq = L.Bidirectional(L.LSTM(2, return_sequences=True),
                           merge_mode="sum", name="bi_decoder")(
        dec, initial_state=[fh, fc, bh, bc])
    both = L.Concatenate(name="both")([seq, gseq, bseq])
    out = L.Dense(4, activation="softmax", name="chars")(both)
    return K.Model([enc, dec], out, name="encdec")


def main(out):
    np.random.seed(17)
    enc = (2 * np.random.rand(6, 4, 5) - 1).astype(np.float32)
    dec = (2 * np.random.rand(6, 3, 4) - 1).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[np.random.randint(0, 4, size=(6, 3))]
    golden_step.write_dialects(build, tf_keras, keras, 16, [enc, dec], y, out,
                               loss="categorical_crossentropy")


if __name__ == "__main__":
    main(sys.argv[1])
