"""make_volume.py — a one-step golden test of the layers of volumes
(depth, height, width, channels), as the CT-scan and video models of
keras.io build them:

  x (4, 6, 6, 1)
  -> Conv3D(4, 3, strides (2, 1, 1), same)          (2, 6, 6, 4)
  -> BatchNormalization -> Activation(relu)
  -> MaxPooling3D((1, 2, 2))                        (2, 3, 3, 4)  "pool"
  -> Conv3D(3, 2, tanh)                             (1, 2, 2, 3)  "conv2"
  -> AveragePooling3D((1, 2, 2), same) -> Flatten   (3,)
  and GlobalAveragePooling3D of "pool"             (4,)
  and GlobalMaxPooling3D of "conv2"                (3,)
  and "conv2" -> Conv3DTranspose(2, (2, 3, 2), strides (2, 1, 2), relu)
                                                    (2, 4, 4, 2)
  -> Conv3DTranspose(3, 2, same)                    (2, 4, 4, 3)
  -> UpSampling3D((2, 1, 1))                        (4, 4, 4, 3)
  -> ZeroPadding3D(((0, 1), (1, 1), (0, 0)))       (5, 6, 4, 3)
  -> Cropping3D(((1, 0), (0, 2), (0, 1))) -> Flatten (4 x 4 x 3 x 3,)
  -> Concatenate -> Dense(3, softmax)
tf_keras (tf.keras 2) Functional, tf_keras.utils.set_random_seed(50),
default initializers; SGD(0.1), sparse_categorical_crossentropy. Batch:
np.random.seed(51); x = 2 rand(6, 4, 6, 6, 1) - 1 float32; y =
randint(0, 3, 6). (TensorFlow's CPU kernels have no dilated or grouped
Conv3D: mxu's are checked against finite differences in test_graph. The
relu after the normalization: TensorFlow's CPU MaxPool3DGrad gives every
tied maximum the whole gradient, XLA's (a TPU's) and mxu's one of them;
ties after the relu are zeros, whose gradient the relu stops.)

Writes into OUTDIR (tests/golden/volume/) what golden_step.py writes,
model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_volume.py tests/golden/volume
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
    x = K.Input(shape=(4, 6, 6, 1), name="x")
    h = L.Conv3D(4, 3, strides=(2, 1, 1), padding="same", name="conv1")(x)
    h = L.BatchNormalization(name="bn")(h)
    h = L.Activation("relu", name="relu")(h)
    p = L.MaxPooling3D((1, 2, 2), name="pool")(h)
    c = L.Conv3D(3, 2, activation="tanh", name="conv2")(p)
    a = L.AveragePooling3D((1, 2, 2), padding="same", name="avg")(c)
    a = L.Flatten(name="flat")(a)
    b = L.GlobalAveragePooling3D(name="gap")(p)
    m = L.GlobalMaxPooling3D(name="gmp")(c)
    u = L.Conv3DTranspose(2, (2, 3, 2), strides=(2, 1, 2), activation="relu",
                          name="transposed")(c)
    u = L.Conv3DTranspose(3, 2, padding="same", name="same_transposed")(u)
    u = L.UpSampling3D((2, 1, 1), name="up")(u)
    u = L.ZeroPadding3D(((0, 1), (1, 1), (0, 0)), name="pad")(u)
    u = L.Cropping3D(((1, 0), (0, 2), (0, 1)), name="crop")(u)
    u = L.Flatten(name="flat_u")(u)
    y = L.Concatenate(name="concat")([a, b, m, u])
    y = L.Dense(3, activation="softmax", name="out")(y)
    return K.Model(x, y, name="volume")


def main(out):
    np.random.seed(51)
    x = (2 * np.random.rand(6, 4, 6, 6, 1) - 1).astype(np.float32)
    y = np.random.randint(0, 3, size=6)
    golden_step.write_dialects(build, tf_keras, keras, 50, x, y, out)


if __name__ == "__main__":
    main(sys.argv[1])
