"""make_dense_attention.py — a one-step golden test of Keras' Attention
(Luong's dot product, scaled or not, and its "concat" score) and
AdditiveAttention (Bahdanau's), the attention of the sequence-to-sequence
tutorials:

  q (5, 4), v (6, 4); key = Dense(4)(v)
  Attention(use_scale)([q, v])                                 luong
  Attention(score_mode="concat", use_scale)([q, v, key])       concat
  AdditiveAttention()([q, v, key])                             bahdanau
  AdditiveAttention(use_scale=False)([q, v])                   plain_sum
  Attention()([q, q], use_causal_mask=True)                    causal
  Concatenate -> Flatten -> Dense(3, softmax)
tf_keras (tf.keras 2) Functional, tf_keras.utils.set_random_seed(18),
default initializers (the scalar scales start at 1: moved 0.1 up before
the step, so that their gradients show); SGD(0.1),
sparse_categorical_crossentropy. Batch: np.random.seed(19); q, v = 2
rand(6, 5, 4) - 1, 2 rand(6, 6, 4) - 1 float32 (batch.h5's x and x_1); y
= randint(0, 3, 6).

Writes into OUTDIR (tests/golden/dense_attention/) what golden_step.py
writes, model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_dense_attention.py \
      tests/golden/dense_attention
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
    q = K.Input(shape=(5, 4), name="q")
    v = K.Input(shape=(6, 4), name="v")
    key = L.Dense(4, name="key")(v)
    parts = [
        L.Attention(use_scale=True, name="luong")([q, v]),
        L.Attention(score_mode="concat", use_scale=True,
                    name="concat")([q, v, key]),
        L.AdditiveAttention(name="bahdanau")([q, v, key]),
        L.AdditiveAttention(use_scale=False, name="plain_sum")([q, v]),
        L.Attention(name="causal")([q, q], use_causal_mask=True),
    ]
    both = L.Concatenate(name="both")(parts)
    out = L.Dense(3, activation="softmax", name="out")(
        L.Flatten(name="flat")(both))
    model = K.Model([q, v], out, name="dense_attention")
    # The scalar scales away from 1, so that a scale read as 1 shows.
    for name in ("luong", "concat"):
        layer = model.get_layer(name)
        layer.set_weights([w + 0.1 for w in layer.get_weights()])
    return model


def main(out):
    np.random.seed(19)
    q = (2 * np.random.rand(6, 5, 4) - 1).astype(np.float32)
    v = (2 * np.random.rand(6, 6, 4) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_dialects(build, tf_keras, keras, 18, [q, v], y, out)


if __name__ == "__main__":
    main(sys.argv[1])
