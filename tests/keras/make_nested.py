"""make_nested.py — a one-step golden test for models used as layers:
a Functional "base" (conv, BN, relu, 1x1 conv, global pooling) and a
Sequential "head" (Dense) called inside an outer Functional model.

  image (6,6,2) -> base -> head -> Dense(3, softmax) "probs"
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(3),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(2); x = rand(4, 6, 6, 2) float32; y = randint(0, 3, 4).

Writes into OUTDIR (tests/golden/nested/): model.tf2.json, model.k3.json
(the same model built in Keras 3), initial.h5, after_step.h5 (tf_keras
save_weights before and after one train_on_batch; a nested model's group
holds its trainable weights, then its non-trainable ones), initial.weights.h5
(Keras 3's save_weights of the same initial weights: the nested models'
layers under layers/functional/layers/... and layers/sequential/layers/...)
and batch.h5 (x, y, loss, predict_before, predict_after).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_nested.py tests/golden/nested
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

import golden_step  # noqa: E402


def build(K):
    L = K.layers
    base_in = K.Input(shape=(6, 6, 2), name="base_in")
    y = L.Conv2D(3, 3, padding="same", name="b_conv")(base_in)
    y = L.BatchNormalization(name="b_bn")(y)
    y = L.ReLU(name="b_relu")(y)
    y = L.Conv2D(3, 1, name="b_conv2")(y)
    base = K.Model(base_in, L.GlobalAveragePooling2D(name="b_gap")(y),
                   name="base")
    head = K.Sequential([K.Input(shape=(3,)),
                         L.Dense(4, activation="relu", name="h_dense")],
                        name="head")
    x = K.Input(shape=(6, 6, 2), name="image")
    out = L.Dense(3, activation="softmax", name="probs")(head(base(x)))
    return K.Model(x, out, name="outer")


def main(out):
    os.makedirs(out, exist_ok=True)
    tf_keras.utils.set_random_seed(3)
    model = build(tf_keras)
    model.compile(tf_keras.optimizers.SGD(0.1),
                  "sparse_categorical_crossentropy", ["accuracy"])
    np.random.seed(2)
    x = np.random.rand(4, 6, 6, 2).astype(np.float32)
    y = np.random.randint(0, 3, size=4).astype(np.int32)
    k3 = build(keras)
    k3.set_weights(model.get_weights())
    k3.save_weights(os.path.join(out, "initial.weights.h5"))
    with open(os.path.join(out, "model.k3.json"), "w") as f:
        f.write(k3.to_json(indent=1))
    loss = golden_step.write(model, x, y, out)
    before = h5py.File(os.path.join(out, "batch.h5"))["predict_before"][()]
    print("loss", loss, "k3 vs tf2 before",
          np.abs(k3.predict(x, verbose=0) - before).max())


if __name__ == "__main__":
    main(sys.argv[1])
