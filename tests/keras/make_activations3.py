"""make_activations3.py — a one-step golden test of Keras 3's newer
activations, which tf.keras 2 does not have:

  x (10,) in [-2, 2), each branch reading it:
    Dense(8, celu) -> Dense(8, hard_tanh) -> Activation(log_sigmoid)
    Dense(8, tanh_shrink), Dense(8, squareplus), Dense(8, sparse_plus),
    Dense(8, sparse_sigmoid), Dense(8, soft_shrink), Dense(8, hard_shrink)
  -> Concatenate -> Dense(6, log_softmax) -> Dense(3, softmax)
Keras 3 Functional, keras.utils.set_random_seed(62), default
initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(63); x = 4 rand(8, 10) - 2 float32; y = randint(0, 3, 8).

Writes into OUTDIR (tests/golden/activations3/) what
golden_step.write_keras3 writes. Keras is never a dependency of mxu: this
script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_activations3.py tests/golden/activations3
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402

import golden_step  # noqa: E402

DENSE = ["tanh_shrink", "squareplus", "sparse_plus",
         "sparse_sigmoid", "soft_shrink", "hard_shrink"]


def build(K):
    L = K.layers
    x = K.Input(shape=(10,), name="x")
    h = L.Dense(8, activation="celu", name="celu")(x)
    h = L.Dense(8, activation="hard_tanh", name="hard_tanh")(h)
    branches = [L.Activation("log_sigmoid", name="log_sigmoid")(h)]
    for name in DENSE:
        branches.append(L.Dense(8, activation=name, name=name)(x))
    h = L.Concatenate(name="all")(branches)
    h = L.Dense(6, activation="log_softmax", name="log_softmax")(h)
    y = L.Dense(3, activation="softmax", name="out")(h)
    return K.Model(x, y, name="activations3")


def main(out):
    np.random.seed(63)
    x = (4 * np.random.rand(8, 10) - 2).astype(np.float32)
    y = np.random.randint(0, 3, size=8)
    golden_step.write_keras3(build, keras, 62, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
