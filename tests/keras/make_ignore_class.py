"""make_ignore_class.py — a one-step golden test for the sparse
cross-entropy's ignore_class over one label a sample: the samples of the
ignored class add no loss and no gradient, the loss means over the others,
the accuracy still counts every sample (as Keras'); and MeanIoU(3,
ignore_class=0, sparse_y_pred=False, name="iou").

  x (6) -> Dense(8, relu) -> Dense(3, softmax)
tf_keras (tf.keras 2) Sequential, tf_keras.utils.set_random_seed(21),
default initializers; SGD(0.1), SparseCategoricalCrossentropy(
ignore_class=0). Batch: np.random.seed(22); x = normal (8, 6); y =
randint(0, 3, 8) with samples 2 and 5 set to 0 (so at least two).

Writes into OUTDIR (tests/golden/ignore_class/) what golden_step.py
writes, model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_ignore_class.py \
      tests/golden/ignore_class
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
    return K.Sequential([K.Input(shape=(6,)),
                         L.Dense(8, activation="relu", name="hidden"),
                         L.Dense(3, activation="softmax", name="out")],
                        name="ignore_class")


def main(out):
    np.random.seed(22)
    x = np.random.normal(size=(8, 6)).astype(np.float32)
    y = np.random.randint(0, 3, size=(8,)).astype(np.int32)
    y[2] = y[5] = 0
    golden_step.write_dialects(build, tf_keras, keras, 21, x, y, out,
                               ignore_class=0,
                               iou=(lambda K: K.metrics.MeanIoU(
                                   3, name="iou", ignore_class=0,
                                   sparse_y_pred=False),
                                    "iou=mean_iou(num_classes=3,"
                                    "ignore_class=0)"))


if __name__ == "__main__":
    main(sys.argv[1])
