"""make_timeseries.py — a one-step golden test for padded series of floats:
Masking (a step whose features all equal mask_value is padding) through
the layers that use its mask, RepeatVector (an LSTM autoencoder's bridge
from the code back to a sequence) and TimeDistributed(Dense); a
convolutional autoencoder's layers: Conv1DTranspose, UpSampling1D,
ZeroPadding1D, Cropping1D; Dot of vectors, of sequences along the
features (normalized: cosine similarities) and along the steps.

  x (7, 3) -> m = Masking(0.0)(x)                                  (7, 3)
  a = LSTM(5, return_sequences)(m)                                 (7, 5)
  b = GRU(4)(a)                                                    (4)
  c = GlobalAveragePooling1D(TimeDistributed(Dense(4))(m))         (4)
  d = Masking(1.0)(Dense(3, bias_initializer ones)(x))             (7, 3)
  d = SimpleRNN(2)(d)                                              (2)
  r = SimpleRNN(2, return_sequences)(RepeatVector(3)(b))           (3, 2)
  r = TimeDistributed(Dense(2, tanh))(r)                           (3, 2)
  u = Conv1DTranspose(4, 3, strides 2, same, relu)(x)             (14, 4)
  u = Cropping1D((2, 3))(ZeroPadding1D((1, 2))(UpSampling1D(2)(u)))  (26, 4)
  u = Conv1DTranspose(2, 3)(u)                                     (28, 2)
  u = GlobalMaxPooling1D()(u)                                      (2)
  s = Dot(1)([b, c])                                               (1)
  v = Dot(2, normalize)([Dense(3)(x), x]) -> GlobalMaxPooling1D    (7)
  w = Flatten(Dot((1, 1))([x, Dense(3)(x)]))                       (9)
  out = Dense(5, softmax)(concat(b, c, d, Flatten(r), u, s, v, w))
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(6),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(7); x = 2 rand(6, 7, 3) - 1 float32, with rows of
zeros after, before and inside the series, a step with one feature
zero (kept), and a row all zeros but its last step. d's Masking masks
the same steps through the Dense (a zero step gives its bias, ones):
a mask computed from a tensor with a gradient, which passes only at the
unmasked steps.

Writes into OUTDIR (tests/golden/timeseries/) what golden_step.py writes,
model.k3.json and model.keras (Keras 3's archive with the initial weights).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_timeseries.py tests/golden/timeseries
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
    a = L.LSTM(5, return_sequences=True, name="lstm")(m)
    b = L.GRU(4, name="gru")(a)
    c = L.TimeDistributed(L.Dense(4, name="dense"), name="each")(m)
    c = L.GlobalAveragePooling1D(name="pool")(c)
    d = L.Dense(3, bias_initializer="ones", name="shift")(x)
    d = L.Masking(1.0, name="mask_shift")(d)
    d = L.SimpleRNN(2, name="rnn")(d)
    r = L.RepeatVector(3, name="repeat")(b)
    r = L.SimpleRNN(2, return_sequences=True, name="decode")(r)
    r = L.TimeDistributed(L.Dense(2, activation="tanh", name="inner"),
                          name="each_step")(r)
    r = L.Flatten(name="flat")(r)
    u = L.Conv1DTranspose(4, 3, strides=2, padding="same", activation="relu",
                          name="up_conv")(x)
    u = L.UpSampling1D(2, name="up")(u)
    u = L.ZeroPadding1D((1, 2), name="pad")(u)
    u = L.Cropping1D((2, 3), name="crop")(u)
    u = L.Conv1DTranspose(2, 3, name="valid")(u)
    u = L.GlobalMaxPooling1D(name="max")(u)
    s = L.Dot(1, name="dot")([b, c])
    e = L.Dense(3, name="proj")(x)
    v = L.Dot(2, normalize=True, name="cosine")([e, x])
    v = L.GlobalMaxPooling1D(name="max_cos")(v)
    w = L.Flatten(name="flat_steps")(L.Dot((1, 1), name="over_steps")([x, e]))
    h = L.Concatenate(name="concat")([b, c, d, r, u, s, v, w])
    out = L.Dense(5, activation="softmax", name="probs")(h)
    return K.Model(x, out, name="timeseries")


def main(out):
    np.random.seed(7)
    x = (2 * np.random.rand(6, 7, 3) - 1).astype(np.float32)
    x[0, 5:] = 0.0        # padded after
    x[1, :3] = 0.0        # padded before
    x[2, 2:4] = 0.0       # zeros inside
    x[3, 1, 0] = 0.0      # one feature zero: kept
    x[4, :6] = 0.0        # one step, last
    y = np.random.randint(0, 5, size=6).astype(np.int32)
    golden_step.write_dialects(build, tf_keras, keras, 6, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
