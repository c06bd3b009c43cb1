"""make_einsum_dense.py — a one-step golden test of Keras' EinsumDense in
the equations Dense computes:

  x (5, 6)
  -> EinsumDense("abc,cd->abd", (None, 4), bias_axes "d", relu)    (5, 4)
  -> EinsumDense("abc,cde->abde", (None, 2, 3), bias_axes "de")     (5, 2, 3)
  -> EinsumDense("abcd,cde->abe", (None, 4), tanh)                  (5, 4)
     (two axes contracted, no bias)
  -> GlobalAveragePooling1D
  -> EinsumDense("...b,bc->...c", (3,), bias_axes "c", softmax)     (3,)
tf_keras (tf.keras 2) Functional, tf_keras.utils.set_random_seed(90),
default initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(91); x = 2 rand(6, 5, 6) - 1 float32; y = randint(0, 3, 6).

Writes into OUTDIR (tests/golden/einsum_dense/) what golden_step.py
writes, model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_einsum_dense.py \\
      tests/golden/einsum_dense
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
    x = K.Input(shape=(5, 6), name="x")
    h = L.EinsumDense("abc,cd->abd", output_shape=(None, 4), bias_axes="d",
                      activation="relu", name="dense_like")(x)
    h = L.EinsumDense("abc,cde->abde", output_shape=(None, 2, 3),
                      bias_axes="de", name="split")(h)
    h = L.EinsumDense("abcd,cde->abe", output_shape=(None, 4),
                      activation="tanh", name="merge")(h)
    h = L.GlobalAveragePooling1D(name="gap")(h)
    y = L.EinsumDense("...b,bc->...c", output_shape=(3,), bias_axes="c",
                      activation="softmax", name="out")(h)
    return K.Model(x, y, name="einsum_dense")


def main(out):
    np.random.seed(91)
    x = (2 * np.random.rand(6, 5, 6) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_dialects(build, tf_keras, keras, 90, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
