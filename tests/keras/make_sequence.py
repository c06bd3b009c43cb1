"""make_sequence.py — a one-step golden test for the sequence layers: a
text model's Embedding of int32 token ids, Conv1D (causal and dilated,
strided 'same', grouped), MaxPooling1D, AveragePooling1D and the global
1-D poolings.

  ids (16,) int32 -> h = Embedding(50, 8)
  a = MaxPooling1D(2)(Conv1D(6, 3, causal, dilation 2, relu)(h))   (8, 6)
  b = Conv1D(6, 3, strides 2, same)(h)                               (8, 6)
  c = Conv1D(4, 1, groups 2)(AveragePooling1D(3, 1, same)(a + b))    (8, 4)
  out = Dense(5, softmax)(concat(GlobalAveragePooling1D(c),
                                 GlobalMaxPooling1D(c)))
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(5),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(7); x = randint(0, 50, (6, 16)) int32, y =
randint(0, 5, 6).

Writes into OUTDIR (tests/golden/sequence/) what golden_step.py writes,
model.k3.json (the same model built in Keras 3) and model.keras (Keras 3's
archive of it with the initial weights).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_sequence.py tests/golden/sequence
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
    x = K.Input(shape=(16,), dtype="int32", name="ids")
    h = L.Embedding(50, 8, name="embed")(x)
    a = L.Conv1D(6, 3, padding="causal", dilation_rate=2, activation="relu",
                 name="causal")(h)
    a = L.MaxPooling1D(2, name="max1d")(a)
    b = L.Conv1D(6, 3, strides=2, padding="same", name="strided")(h)
    c = L.Add(name="add")([a, b])
    c = L.AveragePooling1D(3, strides=1, padding="same", name="avg1d")(c)
    c = L.Conv1D(4, 1, groups=2, name="grouped")(c)
    g = L.Concatenate(name="concat")([
        L.GlobalAveragePooling1D(name="gap1d")(c),
        L.GlobalMaxPooling1D(name="gmp1d")(c)])
    out = L.Dense(5, activation="softmax", name="probs")(g)
    return K.Model(x, out, name="sequence")


def main(out):
    np.random.seed(7)
    x = np.random.randint(0, 50, size=(6, 16)).astype(np.int32)
    y = np.random.randint(0, 5, size=6).astype(np.int32)
    golden_step.write_dialects(build, tf_keras, keras, 5, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
