"""make_iou.py — golden values of Keras 3's MeanIoU and OneHotMeanIoU
(sparse_y_pred=False: the output's argmax) over one fixed batch, for
test_metrics.

Batch: np.random.seed(41); 40 rows of 4 class scores y = softmax(normal);
labels = randint(0, 4), then rows 3, 11 and 30 set to -1 and rows 7 and 19
to 255 (no class: Keras' bounds mask leaves them out); weights = randint(0,
4) (integers: Keras counts in int by default); y5 = y with a fifth score 0
(a class never predicted nor true). Values written (iou.h5):
  plain      MeanIoU(4)                          labels
  ignore2    MeanIoU(4, ignore_class=2)          labels
  ignore255  MeanIoU(4, ignore_class=255)        labels
  weighted   MeanIoU(4)                          labels, sample_weight
  absent     MeanIoU(5)                          labels, y5
  onehot_iou OneHotMeanIoU(4, ignore_class=1)    one-hot of labels % 4
             (labels -1 and 255 as classes 3 and 3)
each with sparse_y_pred=False; and BinaryIoU over b = rand(40, 3) against
targets bt = randint(0, 2, (40, 3)) with bt[0, 0] = 0.7, bt[1, 1] = 1.5
(truncated to 0 and 1, as Keras' int cast) and bt[2, 2] = 2, bt[3, 0] = -1
(no class, left out):
  binary     BinaryIoU()                          b, bt
  binary1    BinaryIoU([1], threshold=0.3)         b, bt
  binary0w   BinaryIoU([0]) of the first column    sample_weight

Keras is never a dependency of mxu: this script only regenerates the file.
  /tmp/kenv/bin/python tests/keras/make_iou.py tests/golden/iou.h5
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # noqa: E402


def value(metric, y_true, y_pred, weights=None):
    metric.update_state(y_true, y_pred, sample_weight=weights)
    return float(metric.result())


def main(out):
    np.random.seed(41)
    z = np.random.normal(size=(40, 4))
    y = (np.exp(z) / np.exp(z).sum(1, keepdims=True)).astype(np.float32)
    labels = np.random.randint(0, 4, size=40).astype(np.int32)
    labels[[3, 11, 30]] = -1
    labels[[7, 19]] = 255
    weights = np.random.randint(0, 4, size=40).astype(np.float32)
    y5 = np.concatenate([y, np.zeros((40, 1), np.float32)], 1)
    onehot = np.eye(4, dtype=np.float32)[labels % 4]
    b = np.random.rand(40, 3).astype(np.float32)
    bt = np.random.randint(0, 2, size=(40, 3)).astype(np.float32)
    bt[0, 0], bt[1, 1], bt[2, 2], bt[3, 0] = 0.7, 1.5, 2.0, -1.0
    M = keras.metrics
    values = {
        "plain": value(M.MeanIoU(4, sparse_y_pred=False), labels, y),
        "ignore2": value(M.MeanIoU(4, ignore_class=2, sparse_y_pred=False),
                         labels, y),
        "ignore255": value(M.MeanIoU(4, ignore_class=255,
                                     sparse_y_pred=False), labels, y),
        "weighted": value(M.MeanIoU(4, sparse_y_pred=False), labels, y,
                          weights),
        "absent": value(M.MeanIoU(5, sparse_y_pred=False), labels, y5),
        "onehot_iou": value(M.OneHotMeanIoU(4, ignore_class=1), onehot, y),
        "binary": value(M.BinaryIoU(), bt, b),
        "binary1": value(M.BinaryIoU([1], threshold=0.3), bt, b),
        "binary0w": value(M.BinaryIoU([0]), bt[:, :1], b[:, :1], weights),
    }
    with h5py.File(out, "w") as f:
        f["y"], f["labels"], f["weights"] = y, labels, weights
        f["y5"], f["onehot"] = y5, onehot
        f["b"], f["bt"] = b, bt
        for name, v in values.items():
            f[name] = v
    print(values)


if __name__ == "__main__":
    main(sys.argv[1])
