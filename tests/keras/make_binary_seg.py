"""make_binary_seg.py — a one-step golden test for a binary segmentation
head: a sigmoid per pixel under binary_crossentropy, and Keras' BinaryIoU
of its masks beside the accuracy.

  x (5, 5, 2) -> Conv2D(4, 3, same, relu) -> Conv2D(1, 1, sigmoid)  (5, 5, 1)
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(51),
default initializers; SGD(0.1), binary_crossentropy, metrics ["accuracy",
BinaryIoU(target_class_ids=[0, 1], threshold=0.45, name="iou")]. Batch:
np.random.seed(52); x = normal (8, 5, 5, 2); y = randint(0, 2, (8, 5, 5,
1)) as floats.

Writes into OUTDIR (tests/golden/binary_seg/) what golden_step.py writes,
model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_binary_seg.py tests/golden/binary_seg
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
    x = K.Input(shape=(5, 5, 2), name="image")
    h = L.Conv2D(4, 3, padding="same", activation="relu", name="conv")(x)
    out = L.Conv2D(1, 1, activation="sigmoid", name="mask")(h)
    return K.Model(x, out, name="binary_seg")


def binary_iou(K):
    return K.metrics.BinaryIoU(target_class_ids=[0, 1], threshold=0.45,
                               name="iou")


def main(out):
    np.random.seed(52)
    x = np.random.normal(size=(8, 5, 5, 2)).astype(np.float32)
    y = np.random.randint(0, 2, size=(8, 5, 5, 1)).astype(np.float32)
    golden_step.write_dialects(build, tf_keras, keras, 51, x, y, out,
                               loss="binary_crossentropy",
                               iou=(binary_iou,
                                    "iou=binary_iou(threshold=0.45)"))


if __name__ == "__main__":
    main(sys.argv[1])
