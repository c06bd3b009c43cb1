"""make_group_attention.py — a one-step golden test of Keras 3's
GroupQueryAttention, which tf.keras 2 does not have:

  x (6, 8)
  -> GroupQueryAttention(head_dim 3, 4 query heads, 2 key/value heads)(x, x)
  -> Add with x -> LayerNormalization                   (6, 8)  "block"
  y (5, 8), z (5, 4)
  GroupQueryAttention(head_dim 2, 2 query heads, 1 key/value head,
                      use_bias False)(block, y, key=z, use_causal_mask)
  -> GlobalAveragePooling1D -> Dense(3, softmax)
Keras 3 Functional, keras.utils.set_random_seed(80), default
initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(81); x = 2 rand(6, 6, 8) - 1, y = 2 rand(6, 5, 8) - 1,
z = 2 rand(6, 5, 4) - 1 float32; labels randint(0, 3, 6). (Keras' layer
takes a query and value of as many features.)

Writes into OUTDIR (tests/golden/group_attention/) what
golden_step.write_keras3 writes. Keras is never a dependency of mxu: this
script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_group_attention.py \\
      tests/golden/group_attention
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402

import golden_step  # noqa: E402


def build(K):
    L = K.layers
    x = K.Input(shape=(6, 8), name="x")
    y = K.Input(shape=(5, 8), name="y")
    z = K.Input(shape=(5, 4), name="z")
    a = L.GroupQueryAttention(head_dim=3, num_query_heads=4,
                              num_key_value_heads=2, name="gqa")(x, x)
    h = L.LayerNormalization(name="norm")(L.Add(name="residual")([x, a]))
    c = L.GroupQueryAttention(head_dim=2, num_query_heads=2,
                              num_key_value_heads=1, use_bias=False,
                              name="mqa")(h, y, key=z, use_causal_mask=True)
    c = L.GlobalAveragePooling1D(name="gap")(c)
    out = L.Dense(3, activation="softmax", name="out")(c)
    return K.Model([x, y, z], out, name="group_attention")


def main(out):
    np.random.seed(81)
    x = (2 * np.random.rand(6, 6, 8) - 1).astype(np.float32)
    y = (2 * np.random.rand(6, 5, 8) - 1).astype(np.float32)
    z = (2 * np.random.rand(6, 5, 4) - 1).astype(np.float32)
    labels = np.random.randint(0, 3, size=6)
    golden_step.write_keras3(build, keras, 80, [x, y, z], labels, out)


if __name__ == "__main__":
    main(sys.argv[1])
