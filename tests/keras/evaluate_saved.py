#!/usr/bin/env python3
"""evaluate_saved.py — Keras 3 evaluates a model file mxu saved (.keras or
.h5) on Fashion-MNIST's test split, for comparing with the accuracy mxu
printed (e.g. after training on the pjrt backend). Run by hand in a
throwaway venv (tensorflow-cpu, keras 3); Keras is never a test
dependency:

  /tmp/kenv/bin/python tests/keras/evaluate_saved.py MODEL.keras

The images are the raw 0..255 values, as mxu's fashion recipe reads them,
shaped as the model's input (a sequence model's (28, 28) rows too).
"""
import gzip
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import keras

DATA = "/usr/share/datasets/fashion-mnist"


def idx(name, header):
    with gzip.open(f"{DATA}/{name}.gz") as f:
        return np.frombuffer(f.read()[header:], np.uint8)


x = idx("t10k-images-idx3-ubyte", 16).reshape(-1, 28, 28, 1).astype("float32")
y = idx("t10k-labels-idx1-ubyte", 8).astype("int32")
# Keras 3 cannot evaluate with the metrics of an .h5's training_config,
# tf.keras 2's own files' included ('str' object is not callable): compile
# such a model here.
legacy = sys.argv[1].endswith(".h5")
model = keras.models.load_model(sys.argv[1], compile=not legacy)
if legacy:
    model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
# As the model's input takes them: (28, 28, 1) images, (28, 28) rows.
x = x.reshape((-1,) + tuple(model.input_shape[1:]))
loss, accuracy = model.evaluate(x, y, batch_size=1000, verbose=0)
print(f"keras {keras.__version__}: {sys.argv[1]}: test loss {loss:.4f} - "
      f"test accuracy {accuracy:.4f}")
