"""make_multi_outputs.py — a Keras model of three outputs, its compile
settings and its data, for the mxu command's reading of an .npz keyed by
output name and of per-output losses from the model file (test_npz):

  x (8,) -> Dense(16, relu) -> kind: Dense(3, softmax)   sparse CE, accuracy
                            -> size: Dense(1)            mse x 0.5, mae
                            -> odd:  Dense(1)            binary CE from logits
                                                         x 2, accuracy

kind is the argmax of x[0:3], size the sum of x[3:6], odd whether
x[6] x[7] > 0. Adam(0.01).

Writes into tests/npz/: multi_outputs.k3.json (Keras 3's model JSON with
the compile_config its .keras archive holds), multi_outputs.tf2.json
(tf.keras 2's, with the training_config its model.save(.h5) writes) and
multi_outputs.npz (x_train, kind_train, size_train, odd_train of 600 and
the same _test of 200). Prints Keras 3's fit (30 epochs, batch 32) on it
for the record.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_multi_outputs.py
"""
import json
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

OUT = "tests/npz"


def build(K):
    L = K.layers
    x = K.Input(shape=(8,), name="x")
    h = L.Dense(16, activation="relu", name="hidden")(x)
    kind = L.Dense(3, activation="softmax", name="kind")(h)
    size = L.Dense(1, name="size")(h)
    odd = L.Dense(1, name="odd")(h)
    model = K.Model(x, [kind, size, odd], name="multi_outputs")
    model.compile(
        optimizer=K.optimizers.Adam(0.01),
        loss={"kind": "sparse_categorical_crossentropy", "size": "mse",
              "odd": K.losses.BinaryCrossentropy(from_logits=True)},
        loss_weights={"kind": 1.0, "size": 0.5, "odd": 2.0},
        metrics={"kind": ["accuracy"], "size": ["mae"], "odd": ["accuracy"]})
    return model


def data(rng, count):
    x = rng.normal(size=(count, 8)).astype(np.float32)
    kind = x[:, 0:3].argmax(axis=1).astype(np.int64)
    size = x[:, 3:6].sum(axis=1, keepdims=True).astype(np.float32)
    odd = (x[:, 6] * x[:, 7] > 0).astype(np.float32)[:, None]
    return x, kind, size, odd


def main():
    k3 = build(keras)
    config = json.loads(k3.to_json())
    config["compile_config"] = k3.get_compile_config()
    with open(f"{OUT}/multi_outputs.k3.json", "w") as f:
        json.dump(config, f)
    tf2 = build(tf_keras)
    with tempfile.TemporaryDirectory() as tmp:
        tf2.save(os.path.join(tmp, "m.h5"))
        with h5py.File(os.path.join(tmp, "m.h5")) as f:
            training = json.loads(f.attrs["training_config"])
    config = json.loads(tf2.to_json())
    config["training_config"] = training
    with open(f"{OUT}/multi_outputs.tf2.json", "w") as f:
        json.dump(config, f)
    rng = np.random.default_rng(31)
    x, kind, size, odd = data(rng, 600)
    tx, tkind, tsize, todd = data(rng, 200)
    np.savez(f"{OUT}/multi_outputs.npz", x_train=x, kind_train=kind,
             size_train=size, odd_train=odd, x_test=tx, kind_test=tkind,
             size_test=tsize, odd_test=todd)
    keras.utils.set_random_seed(1)
    model = build(keras)
    model.fit(x, {"kind": kind, "size": size, "odd": odd}, epochs=30,
              batch_size=32, verbose=0)
    print(model.evaluate(tx, {"kind": tkind, "size": tsize, "odd": todd},
                         verbose=0, return_dict=True))


if __name__ == "__main__":
    main()
