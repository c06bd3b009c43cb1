"""make_apps_layers.py — a one-step golden test for what keras.applications'
newer models add to the Keras surface: Normalization with its statistics in
the config (EfficientNetV2, ConvNeXt), ops on tensors that Keras records as
layers (MobileNetV3's hard sigmoid x + 3, * 1/6; ConvNeXt's residual a + b;
a number minus a tensor; a division by a number; an activation op; a
concat and a reshape),
ConvNeXt's LayerScale and InceptionResNetV2's CustomScaleLayer.

  x (8,8,3) -> Normalization(mean, variance given) -> h = Conv2D(8, 3, same)
  hs = ReLU(6)(h + 3.0) * (1 / 6)        (ops: a number each)
  a = LayerScale(0.5, 8)(Multiply()([h, 1.25 - hs]) / 1.5)
  b = silu(Conv2D(8, 1)(a))                (tf.nn.silu / keras.ops.silu)
  c = CustomScaleLayer(0.17)([a, b]) + b   (the + an op on two tensors)
  g = GlobalAveragePooling2D()(c)
  g = reshape(concat([g, g * 0.5], axis=-1), [-1, 4, 4])   (ops)
  out = Dense(5, softmax)(Flatten()(g))
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(4),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(6); x = rand(6, 8, 8, 3) float32; y = randint(0, 5, 6).

Writes into OUTDIR (tests/golden/apps_layers/) what golden_step.py writes,
and model.k3.json (the same model built in Keras 3).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_apps_layers.py tests/golden/apps_layers
"""
import importlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import golden_step  # noqa: E402


def build(K, package):
    L = K.layers
    apps = package + ".src.applications."
    LayerScale = importlib.import_module(apps + "convnext").LayerScale
    CustomScale = importlib.import_module(
        apps + "inception_resnet_v2").CustomScaleLayer
    x = K.Input(shape=(8, 8, 3), name="input")
    h = L.Normalization(mean=[0.5, 0.4, 0.3], variance=[0.04, 0.09, 0.16],
                        name="norm")(x)
    h = L.Conv2D(8, 3, padding="same", name="conv")(h)
    hs = L.ReLU(6.0, name="relu6")(h + 3.0) * (1.0 / 6.0)
    a = L.Multiply(name="hard_swish")([h, 1.25 - hs]) / 1.5
    a = LayerScale(0.5, 8, name="layer_scale")(a)
    b = L.Conv2D(8, 1, name="pointwise")(a)
    # an activation op: tf.nn.silu(b) in tf.keras 2, keras.ops.silu(b)
    b = tf.nn.silu(b) if package == "tf_keras" else K.ops.silu(b)
    c = CustomScale(0.17, name="custom_scale")([a, b]) + b
    g = L.GlobalAveragePooling2D(name="gap")(c)
    # ops joining and reshaping tensors
    if package == "tf_keras":
        g = tf.reshape(tf.concat([g, g * 0.5], axis=-1), [-1, 4, 4])
    else:
        g = K.ops.reshape(K.ops.concatenate([g, g * 0.5], axis=-1), (-1, 4, 4))
    out = L.Dense(5, activation="softmax", name="probs")(
        L.Flatten(name="flatten")(g))
    return K.Model(x, out, name="apps_layers")


def main(out):
    os.makedirs(out, exist_ok=True)
    tf_keras.utils.set_random_seed(4)
    model = build(tf_keras, "tf_keras")
    model.compile(tf_keras.optimizers.SGD(0.1),
                  "sparse_categorical_crossentropy", ["accuracy"])
    np.random.seed(6)
    x = np.random.rand(6, 8, 8, 3).astype(np.float32)
    y = np.random.randint(0, 5, size=6).astype(np.int32)
    loss = golden_step.write(model, x, y, out)
    k3 = build(keras, "keras")
    with open(os.path.join(out, "model.k3.json"), "w") as f:
        f.write(k3.to_json(indent=1))
    print("loss", loss, "layers", [l.name for l in model.layers])


if __name__ == "__main__":
    main(sys.argv[1])
