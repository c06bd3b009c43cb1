"""make_gru_reset_before.py — a one-step golden test of GRU with
reset_after=False (Keras 2.2's default, and tf.keras' and Keras 3's
option): the reset gate scales h before its product with U_h, and the
bias is one row of 3 * units.

  x (7, 3), the last steps of some samples zeros; m = Masking(0.0)(x)
  a = GRU(5, return_sequences)(m)                                  (7, 5)
  b, state = GRU(4, go_backwards, return_state)(a)                 (4), (4)
  c = GRU(4, use_bias False)(a, initial_state=state)               (4)
  e = Bidirectional(GRU(3))(x)                                     (6)
  out = Dense(5, softmax)(concat(b, c, e))
every GRU reset_after=False. tf_keras (tf.keras 2) Functional API,
tf_keras.utils.set_random_seed(64), default initializers; SGD(0.1),
sparse_categorical_crossentropy. Batch: np.random.seed(65); x = 2 rand(6,
7, 3) - 1 float32, samples 1 and 4 zero from step 5 on, sample 2 from step
3; y = randint(0, 5, 6).

Writes into OUTDIR (tests/golden/gru_reset_before/) what
golden_step.write_dialects writes. Keras is never a dependency of mxu:
this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_gru_reset_before.py \\
      tests/golden/gru_reset_before
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
    m = L.Masking(0.0, name="mask")(x)
    a = L.GRU(5, reset_after=False, return_sequences=True, name="seq")(m)
    b, state = L.GRU(4, reset_after=False, go_backwards=True,
                     return_state=True, name="enc")(a)
    c = L.GRU(4, reset_after=False, use_bias=False, name="dec")(
        a, initial_state=state)
    e = L.Bidirectional(L.GRU(3, reset_after=False, name="both"),
                        name="bi")(x)
    g = L.Concatenate(name="concat")([b, c, e])
    out = L.Dense(5, activation="softmax", name="probs")(g)
    return K.Model(x, out, name="gru_reset_before")


def main(out):
    np.random.seed(65)
    x = (2 * np.random.rand(6, 7, 3) - 1).astype(np.float32)
    x[[1, 4], 5:] = 0.0
    x[2, 3:] = 0.0
    y = np.random.randint(0, 5, size=6).astype(np.int32)
    golden_step.write_dialects(build, tf_keras, keras, 64, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
