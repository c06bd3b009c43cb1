"""make_masked_series.py — a one-step golden test for a regression over
every step of padded series: Masking's mask reaching a mean_squared_error
loss, which Keras then means over the unmasked steps only.

  x (7, 3) -> Masking(0.0) -> LSTM(4, return_sequences)
  -> TimeDistributed(Dense(2))                                    (7, 2)
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(16),
default initializers; SGD(0.1), mean_squared_error.
Batch: np.random.seed(17); x = 2 rand(6, 7, 3) - 1 float32 with zero
steps after, before and inside; y = rand(6, 7, 2) float32.

Writes into OUTDIR (tests/golden/masked_series/) what golden_step.py
writes (with the loss's name), model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_masked_series.py \\
      tests/golden/masked_series
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
    s = L.LSTM(4, return_sequences=True, name="lstm")(m)
    out = L.TimeDistributed(L.Dense(2, name="inner"), name="each")(s)
    return K.Model(x, out, name="masked_series")


def main(out):
    np.random.seed(17)
    x = (2 * np.random.rand(6, 7, 3) - 1).astype(np.float32)
    x[0, 5:] = 0.0
    x[1, :2] = 0.0
    x[2, 3] = 0.0
    y = np.random.rand(6, 7, 2).astype(np.float32)
    golden_step.write_dialects(build, tf_keras, keras, 16, x, y, out,
                               loss="mean_squared_error")


if __name__ == "__main__":
    main(sys.argv[1])
