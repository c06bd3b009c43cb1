"""make_models.py — two Functional model files for mxu's models/, written by
tf.keras 2 (tf_keras) model.to_json():

  resnet20.json            ResNet-20 v1 for CIFAR-10, as the classic Keras
                           example cifar10_resnet.py writes resnet_v1(depth=20):
                           resnet_layer = Conv2D(3x3, same) -> BN -> Activation;
                           3 stages x 3 blocks of 16/32/64 filters, the first
                           block of stages 2 and 3 with strides 2 and a 1x1
                           Conv2D projection shortcut (no BN), add ->
                           Activation('relu'); AveragePooling2D(8) -> Flatten ->
                           Dense(10, softmax). Unlike the example: default
                           initializers (glorot_uniform, zeros) and no
                           kernel_regularizer. Model name "resnet20".
  cifar10_functional.json  models/cifar10.json (a Sequential model) rebuilt with
                           the Functional API: Input(shape=(32,32,3)) ... Model,
                           each layer deserialized from that file's config, so
                           layer names and configs are the same and weights
                           files are interchangeable (the input is named
                           "batch_normalization_input" as there).

Both get models/cifar10.json's "compile_config" (Adam 1e-3, sparse
categorical crossentropy, the optimizer the Keras example uses too), which
to_json() does not write; everything else is to_json()'s.
The script checks that cifar10_functional has the Sequential model's
parameter counts and layer configs, and prints Keras' counts.

Keras is never a dependency of mxu: this script only regenerates the files.
  python3 -m venv /tmp/kenv
  /tmp/kenv/bin/pip install tensorflow-cpu tf_keras h5py numpy
  /tmp/kenv/bin/python tests/keras/make_models.py models
"""
import copy
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_keras as keras  # tf.keras 2  # noqa: E402
from tf_keras import layers as L  # noqa: E402
from tf_keras.src.utils.layer_utils import count_params  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CIFAR10 = os.path.join(HERE, "..", "..", "models", "cifar10.json")


def resnet_layer(inputs, num_filters=16, kernel_size=3, strides=1,
                 activation="relu", batch_normalization=True):
    """cifar10_resnet.py's resnet_layer (conv_first=True), without
    kernel_initializer='he_normal' and kernel_regularizer=l2(1e-4)."""
    x = L.Conv2D(num_filters, kernel_size=kernel_size, strides=strides,
                 padding="same")(inputs)
    if batch_normalization:
        x = L.BatchNormalization()(x)
    if activation is not None:
        x = L.Activation(activation)(x)
    return x


def resnet_v1(input_shape, depth, num_classes=10):
    num_filters = 16
    num_res_blocks = (depth - 2) // 6
    inputs = keras.Input(shape=input_shape)
    x = resnet_layer(inputs)
    for stack in range(3):
        for res_block in range(num_res_blocks):
            strides = 2 if stack > 0 and res_block == 0 else 1
            y = resnet_layer(x, num_filters=num_filters, strides=strides)
            y = resnet_layer(y, num_filters=num_filters, activation=None)
            if stack > 0 and res_block == 0:
                x = resnet_layer(x, num_filters=num_filters, kernel_size=1,
                                 strides=strides, activation=None,
                                 batch_normalization=False)
            x = L.add([x, y])
            x = L.Activation("relu")(x)
        num_filters *= 2
    x = L.AveragePooling2D(pool_size=8)(x)
    y = L.Flatten()(x)
    outputs = L.Dense(num_classes, activation="softmax")(y)
    return keras.Model(inputs, outputs, name="resnet%d" % depth)


def cifar10_functional(seq_json):
    layers = seq_json["config"]["layers"]
    assert layers[0]["class_name"] == "InputLayer"
    shape = layers[0]["config"]["batch_input_shape"][1:]
    inputs = keras.Input(shape=shape, name=layers[0]["config"]["name"])
    x = inputs
    for entry in layers[1:]:
        entry = copy.deepcopy(entry)
        entry["config"].pop("batch_input_shape", None)
        x = L.deserialize(entry)(x)
    return keras.Model(inputs, x, name="cifar10_functional")


def counts(model):
    t = int(count_params(model.trainable_weights))
    n = int(count_params(model.non_trainable_weights))
    return {"total": int(model.count_params()), "trainable": t,
            "non_trainable": n, "layers": len(model.layers)}


def write(path, model, compile_config):
    d = json.loads(model.to_json())
    d["compile_config"] = compile_config
    with open(path, "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with open(CIFAR10) as f:
        seq_json = json.load(f)
    compile_config = seq_json["compile_config"]

    keras.backend.clear_session()
    resnet = resnet_v1((32, 32, 3), 20)
    write(os.path.join(out, "resnet20.json"), resnet, compile_config)
    print("resnet20", counts(resnet))

    keras.backend.clear_session()
    seq = keras.models.model_from_json(json.dumps(seq_json))
    func = cifar10_functional(seq_json)
    cs, cf = counts(seq), counts(func)
    print("cifar10 (Sequential)", cs)
    print("cifar10_functional  ", cf)
    assert {k: cs[k] for k in cs if k != "layers"} == \
        {k: cf[k] for k in cf if k != "layers"}
    # model.layers: the Sequential model's omits its InputLayer.
    assert [l.name for l in seq.layers] == [l.name for l in func.layers[1:]]
    for a, b in zip(seq.layers, func.layers[1:]):
        ca, cb = a.get_config(), b.get_config()
        ca.pop("batch_input_shape", None)
        assert ca == cb, (a.name, ca, cb)
    write(os.path.join(out, "cifar10_functional.json"), func, compile_config)


if __name__ == "__main__":
    main()
