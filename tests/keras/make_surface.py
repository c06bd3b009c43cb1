"""make_surface.py — a one-step golden test for the Keras surface of image
models (issue 18): the layers and activations keras.applications'
mobile nets use, and the others mxu reads, in one Functional net.

  x (8,8,3) -> Rescaling(0.5, -0.25) -> Normalization (adapted)
  -> Resizing(7, 9) (bilinear) -> CenterCrop(6, 7)
  -> Conv2D(4, 3, same, gelu) -> DepthwiseConv2D(3, multiplier 2, same,
  relu6) -> Conv2D(8, 3, same, dilation 2, swish) -> BatchNormalization
  -> Activation('swish') (which mxu fuses into the BatchNormalization)
  -> a = LeakyReLU(0.1)
  se = Conv2D(8, 1, sigmoid)(GlobalAveragePooling2D(keepdims)(a))
  b = PReLU(shared_axes [1, 2])(Multiply([a, se]))     squeeze-excitation
  c = Conv2D(8, 3, same, groups 2, elu)(b) -> GroupNormalization(4)
      -> ELU(0.7) -> Conv2DTranspose(5, 3, strides 2, same, relu)
      -> Conv2DTranspose(4, (2, 3), strides (1, 2), valid, tanh)
      -> UpSampling2D(2, bilinear) -> Cropping2D(((1, 2), (3, 0)))
      -> Permute((2, 1, 3)) -> SeparableConv2D(6, 3, multiplier 2, same,
      tanh) -> UpSampling2D((1, 2))
  d = Dense(6, mish) -> LayerNormalization -> Dense(6, softplus)
      -> Dense(6, softsign) -> Dense(6, selu) -> Dense(6, exponential)
      (on UnitNormalization(GAP(c)))
  out = Softmax()(Dense(5)(d))
Dropout and the Gaussian noise layers are left out: Keras' draws are not
mxu's. hard_sigmoid too: tf.keras 2 and Keras 3 give it different slopes
(both tested by hand). A bias summed over many equal terms (a linear layer
before a pooling) is avoided: TensorFlow's float32 sums of it stray 1e-5.
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(3),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(2); x = rand(6, 8, 8, 3) float32; y = randint(0, 5, 6);
Normalization adapted on np.random.seed(5); rand(32, 8, 8, 3).

Writes into OUTDIR (tests/golden/surface/) what golden_step.py writes, and
model.k3.json (the same model built in Keras 3).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_surface.py tests/golden/surface
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

import golden_step  # noqa: E402


def build(K, adapt_on=None):
    L = K.layers
    x = K.Input(shape=(8, 8, 3), name="input")
    norm = L.Normalization(name="norm")
    if adapt_on is not None:
        norm.adapt(adapt_on)
    h = norm(L.Rescaling(0.5, offset=-0.25, name="rescale")(x))
    h = L.Resizing(7, 9, name="resize")(h)
    h = L.CenterCrop(6, 7, name="center")(h)
    h = L.Conv2D(4, 3, padding="same", activation="gelu", name="conv_gelu")(h)
    h = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same",
                          activation="relu6", name="depthwise")(h)
    h = L.Conv2D(8, 3, padding="same", dilation_rate=2, activation="swish",
                 name="dilated")(h)
    h = L.BatchNormalization(name="bn")(h)
    h = L.Activation("swish", name="bn_swish")(h)
    a = L.LeakyReLU(0.1, name="leaky")(h)
    se = L.GlobalAveragePooling2D(keepdims=True, name="squeeze")(a)
    se = L.Conv2D(8, 1, activation="sigmoid", name="excite")(se)
    b = L.PReLU(shared_axes=[1, 2], name="prelu")(
        L.Multiply(name="scale")([a, se]))
    c = L.Conv2D(8, 3, padding="same", groups=2, activation="elu",
                 name="grouped")(b)
    c = L.ELU(0.7, name="elu")(L.GroupNormalization(4, name="group_norm")(c))
    c = L.Conv2DTranspose(5, 3, strides=2, padding="same", activation="relu",
                          name="transpose_same")(c)
    c = L.Conv2DTranspose(4, (2, 3), strides=(1, 2), activation="tanh",
                          name="transpose_valid")(c)
    c = L.UpSampling2D(2, interpolation="bilinear", name="up_bilinear")(c)
    c = L.Cropping2D(((1, 2), (3, 0)), name="crop")(c)
    c = L.Permute((2, 1, 3), name="transpose")(c)
    c = L.SeparableConv2D(6, 3, depth_multiplier=2, padding="same",
                          activation="tanh", name="separable")(c)
    c = L.UpSampling2D((1, 2), name="up_nearest")(c)

    d = L.UnitNormalization(name="unit")(L.GlobalAveragePooling2D(name="gap")(c))
    for act in ["mish", "softplus", "softsign", "selu", "exponential"]:
        d = L.Dense(6, activation=act, name="dense_" + act)(d)
        if act == "mish":
            d = L.LayerNormalization(name="layer_norm")(d)
    out = L.Softmax(name="probs")(L.Dense(5, name="logits")(d))
    return K.Model(x, out, name="surface")


def main(out):
    os.makedirs(out, exist_ok=True)
    np.random.seed(5)
    adapt_on = np.random.rand(32, 8, 8, 3).astype(np.float32) * 0.5 - 0.25
    tf_keras.utils.set_random_seed(3)
    model = build(tf_keras, adapt_on)
    model.compile(tf_keras.optimizers.SGD(0.1),
                  "sparse_categorical_crossentropy", ["accuracy"])
    np.random.seed(2)
    x = np.random.rand(6, 8, 8, 3).astype(np.float32)
    y = np.random.randint(0, 5, size=6).astype(np.int32)
    loss = golden_step.write(model, x, y, out)
    k3 = build(keras)
    with open(os.path.join(out, "model.k3.json"), "w") as f:
        f.write(k3.to_json(indent=1))
    print("loss", loss, "layers", [l.name for l in model.layers])


if __name__ == "__main__":
    main(sys.argv[1])
