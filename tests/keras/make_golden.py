"""make_golden.py — a one-step golden test for mxu's Functional models:
"tiny_resnet", a small residual net written with tf.keras 2's Functional
API (tf_keras), and what Keras makes of one SGD step on one batch.

  input(8,8,3) -> ZeroPadding2D(1) -> Conv2D(4,3,no bias) -> BN -> ReLU = a
  b = Conv2D(4,3,same) -> BN -> ReLU -> Conv2D(4,3,same) (on a)
  c = Activation('relu')(Add()([a, b]))
  s = Conv2D(8,1,strides 2)(c)                           shortcut, 4x4x8
  m = ReLU(BN(Conv2D(8,3,strides 2,same)(c)))            main,     4x4x8
  p = MaxPooling2D(2)(Concatenate()([s, m]))             2x2x16
  g = GlobalAveragePooling2D()(p)                        16
  t = Dense(16, sigmoid)(g)                              gate
  h = Subtract()([g, Multiply()([g, t])])                g * (1 - t)
  out = Dense(5, softmax)(Flatten()(Reshape((4, 4))(h)))
Default initializers (glorot_uniform kernels, zero biases), no regularizers;
every layer is named explicitly so that both dialects name layers alike.
compile: SGD(learning_rate=0.1), sparse_categorical_crossentropy, ['accuracy'].
Weights: tf_keras.utils.set_random_seed(1) before the model is built.
Batch: np.random.seed(0); x = np.random.rand(8, 8, 8, 3).astype(float32);
       y = np.random.randint(0, 5, size=8).astype(int32) (drawn right after x).

Writes into OUTDIR (tests/golden/ in the repository):
  tiny_resnet.tf2.json  tf_keras model.to_json() (tf.keras 2 dialect)
  tiny_resnet.k3.json   the same architecture built in Keras 3, to_json()
  initial.h5            tf_keras model.save_weights() before training
                        (tf.keras 2 HDF5 layout)
  after_step.h5         the same after exactly one train_on_batch(x, y): one
                        SGD step, BN in training mode, moving statistics updated
  batch.h5              h5py: x (8,8,8,3) float32, y (8,) int32,
                        loss () float64 = the loss train_on_batch reported
                        (computed before the update), accuracy () float64 idem,
                        predict_before / predict_after (8,5) float32 =
                        model.predict(x) (inference mode) before / after the step
It also loads initial.h5 into the Keras 3 model and prints the largest
difference between its predictions and tf_keras' (should be ~1e-7).

Keras is never a dependency of mxu: this script only regenerates the files.
  python3 -m venv /tmp/kenv
  /tmp/kenv/bin/pip install tensorflow-cpu tf_keras h5py numpy
  /tmp/kenv/bin/python tests/keras/make_golden.py tests/golden
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # Keras 3  # noqa: E402
import tf_keras  # tf.keras 2  # noqa: E402


def build(K):
    """tiny_resnet with K = tf_keras or keras (same layer API in both)."""
    L = K.layers
    inputs = K.Input(shape=(8, 8, 3), name="input")
    x = L.ZeroPadding2D(1, name="pad")(inputs)
    x = L.Conv2D(4, 3, use_bias=False, name="stem_conv")(x)
    x = L.BatchNormalization(name="stem_bn")(x)
    a = L.ReLU(name="stem_relu")(x)
    x = L.Conv2D(4, 3, padding="same", name="res_conv1")(a)
    x = L.BatchNormalization(name="res_bn1")(x)
    x = L.ReLU(name="res_relu1")(x)
    b = L.Conv2D(4, 3, padding="same", name="res_conv2")(x)
    x = L.Add(name="res_add")([a, b])
    c = L.Activation("relu", name="res_out")(x)
    s = L.Conv2D(8, 1, strides=2, name="short_conv")(c)
    x = L.Conv2D(8, 3, strides=2, padding="same", name="down_conv")(c)
    x = L.BatchNormalization(name="down_bn")(x)
    m = L.ReLU(name="down_relu")(x)
    x = L.Concatenate(name="concat")([s, m])
    x = L.MaxPooling2D(2, name="pool")(x)
    g = L.GlobalAveragePooling2D(name="gap")(x)
    t = L.Dense(16, activation="sigmoid", name="gate")(g)
    gated = L.Multiply(name="gated")([g, t])
    h = L.Subtract(name="ungated")([g, gated])
    x = L.Reshape((4, 4), name="reshape")(h)
    x = L.Flatten(name="flatten")(x)
    outputs = L.Dense(5, activation="softmax", name="probs")(x)
    return K.Model(inputs, outputs, name="tiny_resnet")


def compile_(K, model):
    model.compile(optimizer=K.optimizers.SGD(learning_rate=0.1),
                  loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])


def write_json(path, model):
    with open(path, "w") as f:
        json.dump(json.loads(model.to_json()), f, indent=1)
        f.write("\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_golden.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    np.random.seed(0)
    x = np.random.rand(8, 8, 8, 3).astype(np.float32)
    y = np.random.randint(0, 5, size=8).astype(np.int32)

    tf_keras.utils.set_random_seed(1)
    model = build(tf_keras)
    compile_(tf_keras, model)
    model.summary()
    write_json(os.path.join(out, "tiny_resnet.tf2.json"), model)
    initial = os.path.join(out, "initial.h5")
    model.save_weights(initial)
    before = model.predict(x, verbose=0).astype(np.float32)
    loss, acc = model.train_on_batch(x, y)
    model.save_weights(os.path.join(out, "after_step.h5"))
    after = model.predict(x, verbose=0).astype(np.float32)
    print("train_on_batch: loss %.9g accuracy %.9g" % (loss, acc))
    print("predict max |after - before|: %.3g" % np.abs(after - before).max())

    with h5py.File(os.path.join(out, "batch.h5"), "w") as f:
        f.create_dataset("x", data=x)
        f.create_dataset("y", data=y)
        f.create_dataset("loss", data=np.float64(loss))
        f.create_dataset("accuracy", data=np.float64(acc))
        f.create_dataset("predict_before", data=before)
        f.create_dataset("predict_after", data=after)

    keras.utils.set_random_seed(1)
    k3 = build(keras)
    compile_(keras, k3)
    write_json(os.path.join(out, "tiny_resnet.k3.json"), k3)
    assert [l.name for l in k3.layers] == [l.name for l in model.layers]
    k3.load_weights(initial)
    k3_before = np.asarray(k3.predict(x, verbose=0), dtype=np.float32)
    diff = np.abs(k3_before - before).max()
    print("Keras 3 with initial.h5: predict max |k3 - tf2| = %.3g" % diff)
    if not diff < 1e-5:
        sys.exit("Keras 3 disagrees with tf.keras 2 on initial.h5")


if __name__ == "__main__":
    main()
