"""make_tagging.py — a one-step golden test for a class per step (token
tagging): sparse_categorical_crossentropy and its accuracy over every
position of a (steps, classes) softmax, the labels (count, steps).

  ids (7) int32 -> Embedding(12, 5) -> Bidirectional(GRU(3, sequences))
  -> Conv1D(4, 3, same, relu) -> Dense(4, softmax)                 (7, 4)
With --masked (tests/golden/tagging_masked/): Embedding(mask_zero), no
Conv1D (it would drop the mask), the ids padded with 0 after, before and
inside: Keras' loss is then the unmasked positions' mean.
With --ignore (tests/golden/tagging_ignore/, or with --masked too
tests/golden/tagging_masked_ignore/): SparseCategoricalCrossentropy(
ignore_class=-1), the labels -1 at some positions and at every position of
sample 3: Keras' loss is the mean over the others (of those unmasked), its
accuracy still counts them; and MeanIoU(4, ignore_class=-1,
sparse_y_pred=False, name="iou").
tf_keras (tf.keras 2) Functional API, tf_keras.utils.set_random_seed(14),
default initializers; SGD(0.1), sparse_categorical_crossentropy.
Batch: np.random.seed(15); ids = randint(0, 12, (6, 7)); y = randint(0,
4, (6, 7)).

Writes into OUTDIR (tests/golden/tagging/) what golden_step.py writes,
model.k3.json and model.keras.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_tagging.py tests/golden/tagging
  /tmp/kenv/bin/python tests/keras/make_tagging.py \
      tests/golden/tagging_masked --masked
  /tmp/kenv/bin/python tests/keras/make_tagging.py \
      tests/golden/tagging_ignore --ignore
  /tmp/kenv/bin/python tests/keras/make_tagging.py \
      tests/golden/tagging_masked_ignore --masked --ignore
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

import golden_step  # noqa: E402


MASKED = "--masked" in sys.argv
IGNORE = "--ignore" in sys.argv
SPEC = "iou=mean_iou(num_classes=4,ignore_class=-1)"


def MEAN_IOU(K):
    return K.metrics.MeanIoU(4, name="iou", ignore_class=-1,
                             sparse_y_pred=False)


def build(K):
    L = K.layers
    ids = K.Input(shape=(7,), dtype="int32", name="ids")
    e = L.Embedding(12, 5, mask_zero=MASKED, name="embed")(ids)
    s = L.Bidirectional(L.GRU(3, return_sequences=True, name="gru"),
                        name="bi")(e)
    if not MASKED:
        s = L.Conv1D(4, 3, padding="same", activation="relu", name="conv")(s)
    out = L.Dense(4, activation="softmax", name="tags")(s)
    return K.Model(ids, out, name="tagging")


def main(out):
    np.random.seed(15)
    x = np.random.randint(0, 12, size=(6, 7)).astype(np.int32)
    y = np.random.randint(0, 4, size=(6, 7)).astype(np.int32)
    if MASKED:
        x[x == 0] = 1
        x[0, 4:] = 0      # padded after
        x[1, :2] = 0      # padded before
        x[2, 3] = 0       # inside
    if IGNORE:
        y[0, 1] = y[2, 3] = y[4, 0] = y[4, 6] = y[5, 2] = -1
        y[3, :] = -1
    golden_step.write_dialects(build, tf_keras, keras, 14, x, y, out,
                               ignore_class=-1 if IGNORE else None,
                               iou=(MEAN_IOU, SPEC) if IGNORE else None)


if __name__ == "__main__":
    main(sys.argv[1])
