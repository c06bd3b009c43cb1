"""make_two_inputs.py — a Keras model of two inputs and its data, for the
mxu command's reading of an .npz keyed by input name (test_npz):

  series (None, 3) -> LSTM(8) \
                               Concatenate -> Dense(3, softmax)
  extra (2,) -> Dense(8, relu) /

The class is the argmax of the series' mean over its steps (scaled to
unit variance) plus (extra[0], extra[1], 0): neither input alone tells
it.

Writes into tests/npz/: two_inputs.k3.json (Keras 3) and two_inputs.tf2.json
(tf.keras 2), two_inputs.npz (series, extra, y: np.savez of 600 samples of
6 steps) and two_inputs_split.npz (series_train, extra_train, y_train of
500 and series_test, extra_test, y_test of 100; 8 steps).

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_two_inputs.py
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

OUT = "tests/npz"


def build(K):
    L = K.layers
    series = K.Input(shape=(None, 3), name="series")
    extra = K.Input(shape=(2,), name="extra")
    h = L.LSTM(8, name="lstm")(series)
    d = L.Dense(8, activation="relu", name="from_extra")(extra)
    both = L.Concatenate(name="both")([h, d])
    out = L.Dense(3, activation="softmax", name="classes")(both)
    return K.Model([series, extra], out, name="two_inputs")


def data(rng, count, steps):
    series = rng.normal(size=(count, steps, 3)).astype(np.float32)
    extra = rng.normal(size=(count, 2)).astype(np.float32)
    score = series.mean(axis=1) * np.sqrt(steps)
    score[:, :2] += extra
    y = score.argmax(axis=1)
    return series, extra, y.astype(np.int64)


def main():
    for K, name in ((keras, "k3"), (tf_keras, "tf2")):
        model = build(K)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        with open(f"{OUT}/two_inputs.{name}.json", "w") as f:
            f.write(model.to_json())
    rng = np.random.default_rng(21)
    s, e, y = data(rng, 600, 6)
    np.savez(f"{OUT}/two_inputs.npz", series=s, extra=e, y=y)
    s, e, y = data(rng, 500, 8)
    ts, te, ty = data(rng, 100, 8)
    np.savez(f"{OUT}/two_inputs_split.npz", series_train=s, extra_train=e,
             y_train=y, series_test=ts, extra_test=te, y_test=ty)


if __name__ == "__main__":
    main()
