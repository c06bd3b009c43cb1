"""make_shared.py — a one-step golden test for Keras' shared layers: one
layer called twice with one set of weights, whose gradient is the sum over
its calls.

  x (6,6,2) -> a = shared_conv(x)       Conv2D(2, 3, same), called twice
  c = shared_conv(ReLU(a)); d = Add([x, c])
  u = shared_dense(GAP(d)); v = shared_dense(GAP(a))   Dense(4, tanh), twice
  out = Dense(3, softmax)(Concatenate([u, v]))
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(2),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(1); x = rand(4, 6, 6, 2) float32; y = randint(0, 3, 4).

Writes into OUTDIR (tests/golden/shared/): model.tf2.json, model.k3.json
(the same model built in Keras 3), initial.h5, after_step.h5 (tf_keras
save_weights before and after one train_on_batch) and batch.h5 (x, y, loss,
predict_before, predict_after), the layout make_golden.py uses.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_shared.py tests/golden/shared
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
    x = K.Input(shape=(6, 6, 2), name="input")
    conv = L.Conv2D(2, 3, padding="same", name="shared_conv")
    dense = L.Dense(4, activation="tanh", name="shared_dense")
    a = conv(x)
    c = conv(L.ReLU(name="relu")(a))
    d = L.Add(name="add")([x, c])
    u = dense(L.GlobalAveragePooling2D(name="gap_d")(d))
    v = dense(L.GlobalAveragePooling2D(name="gap_a")(a))
    out = L.Dense(3, activation="softmax", name="probs")(
        L.Concatenate(name="concat")([u, v]))
    return K.Model(x, out, name="shared")


def main(out):
    os.makedirs(out, exist_ok=True)
    tf_keras.utils.set_random_seed(2)
    model = build(tf_keras)
    model.compile(tf_keras.optimizers.SGD(0.1),
                  "sparse_categorical_crossentropy", ["accuracy"])
    np.random.seed(1)
    x = np.random.rand(4, 6, 6, 2).astype(np.float32)
    y = np.random.randint(0, 3, size=4).astype(np.int32)
    loss = golden_step.write(model, x, y, out)
    k3 = build(keras)
    with open(os.path.join(out, "model.k3.json"), "w") as f:
        f.write(k3.to_json(indent=1))
    print("loss", loss, "layers", [l.name for l in model.layers])


if __name__ == "__main__":
    main(sys.argv[1])
