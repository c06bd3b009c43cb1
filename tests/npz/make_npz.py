#!/usr/bin/env python3
"""make_npz.py — the NumPy fixtures test_npz reads, written by NumPy itself
(Debian's python3-numpy; run from the repository's root, output committed):

  mnist_small.npz   the first 2000 train and 500 test MNIST digits, uint8
                    (28, 28) and uint8 labels, np.savez_compressed, as
                    keras.datasets.mnist.load_data() returns them
  dtypes.npz        x and y: the same 6 samples of 2x3 values in every
                    dtype mxu reads (x_<dtype>), one-hot labels (y_onehot)
  v2.npy, v3.npy    format versions 2.0 and 3.0 of arange(12).reshape(2, 6)
  labels6.npy, labels2.npy   uint8 and int32 labels for those
  fortran.npy, big.npy, text.npy, floaty.npy   what mxu must refuse
"""
import gzip
import io
import zipfile

import numpy as np

DATA = "../shared/data/mnist"
OUT = "tests/npz"


def idx(name, header):
    with gzip.open(f"{DATA}/{name}.gz", "rb") as f:
        return np.frombuffer(f.read()[header:], dtype=np.uint8)


def mnist():
    x_train = idx("train-images-idx3-ubyte", 16).reshape(-1, 28, 28)[:2000]
    y_train = idx("train-labels-idx1-ubyte", 8)[:2000]
    x_test = idx("t10k-images-idx3-ubyte", 16).reshape(-1, 28, 28)[:500]
    y_test = idx("t10k-labels-idx1-ubyte", 8)[:500]
    np.savez_compressed(f"{OUT}/mnist_small.npz", x_train=x_train,
                        y_train=y_train, x_test=x_test, y_test=y_test)


def dtypes():
    values = np.arange(-3, 33, dtype=np.float64).reshape(6, 2, 3) / 2
    arrays = {}
    for dtype in ["u1", "i1", "u2", "i2", "i4", "u4", "i8", "u8", "f2", "f4",
                  "f8", "b1"]:
        v = values if dtype[0] == "f" else np.abs(np.round(values)) if dtype[0] in "ub" else np.round(values)
        arrays["x_" + dtype] = v.astype("<" + dtype if dtype[1] != "1" else "|" + dtype)
    labels = np.array([0, 2, 1, 2, 0, 1], dtype=np.int64)
    arrays["y"] = labels
    arrays["y_onehot"] = np.eye(3, dtype=np.float32)[labels]
    arrays["x"] = values.astype(np.float32)
    np.savez(f"{OUT}/dtypes.npz", **arrays)


def versions():
    a = np.arange(12, dtype="<f4").reshape(2, 6)
    for major in (2, 3):
        with open(f"{OUT}/v{major}.npy", "wb") as f:
            np.lib.format.write_array(f, a, version=(major, 0))
    np.save(f"{OUT}/fortran.npy", np.asfortranarray(a))
    np.save(f"{OUT}/big.npy", a.astype(">f4"))
    np.save(f"{OUT}/text.npy", np.array(["a", "b"]))
    np.save(f"{OUT}/floaty.npy", np.array([0.5, 1.0], dtype=np.float32))
    np.save(f"{OUT}/labels6.npy", np.array([0, 2, 1, 2, 0, 1], dtype=np.uint8))
    np.save(f"{OUT}/labels2.npy", np.array([1, 0], dtype=np.int32))


mnist()
dtypes()
versions()
