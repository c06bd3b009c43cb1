"""make_attention.py — a one-step golden test for MultiHeadAttention:
self-attention with the causal mask, value_dim and output_shape of its
own; cross-attention with a key of its own and no biases; attention over
both axes of a (2, 3, 4) grid.

  x (6, 4) -> a = MHA(2, 3, value_dim 4, output_shape 5)(x, x, causal)  (6, 5)
  c = LayerNormalization(a + Dense(5)(x))                               (6, 5)
  k = Dense(3)(x)                                                       (6, 3)
  d = MHA(3, 2, use_bias False)(c, x, k)                                (6, 5)
  g = Reshape((2, 3, 4))(x); f = Reshape((6, 4))(MHA(2, 3)(g, g))       (6, 4)
  out = Dense(5, softmax)(GlobalAveragePooling1D(concat(d, f)))
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(5),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(6); x = 2 rand(6, 6, 4) - 1 float32; y =
randint(0, 5, 6).

Writes into OUTDIR (tests/golden/attention/) what golden_step.py writes,
model.k3.json and model.keras (Keras 3's archive with the initial weights).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_attention.py tests/golden/attention
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
    x = K.Input(shape=(6, 4), name="x")
    a = L.MultiHeadAttention(2, 3, value_dim=4, output_shape=5,
                             name="self")(x, x, use_causal_mask=True)
    b = L.Dense(5, name="skip")(x)
    c = L.LayerNormalization(name="norm")(L.Add(name="add")([a, b]))
    k = L.Dense(3, name="keys")(x)
    d = L.MultiHeadAttention(3, 2, use_bias=False, name="cross")(c, x, k)
    g = L.Reshape((2, 3, 4), name="grid")(x)
    f = L.MultiHeadAttention(2, 3, name="over_grid")(g, g)
    f = L.Reshape((6, 4), name="rows")(f)
    h = L.Concatenate(name="concat")([d, f])
    h = L.GlobalAveragePooling1D(name="pool")(h)
    out = L.Dense(5, activation="softmax", name="probs")(h)
    return K.Model(x, out, name="attention")


def main(out):
    np.random.seed(6)
    x = (2 * np.random.rand(6, 6, 4) - 1).astype(np.float32)
    y = np.random.randint(0, 5, size=6).astype(np.int32)
    golden_step.write_dialects(build, tf_keras, keras, 5, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
