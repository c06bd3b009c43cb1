"""make_outputs.py — a one-step golden test of a model of several outputs,
compiled with a loss, a loss weight and metrics per output (dicts keyed by
output name), one of whose outputs is also read by another layer:

  x (6,) -> Dense(8, relu) "trunk"
  trunk -> Dense(3, softmax) "cls"                        output 0
  trunk -> Dense(2) "reg"                                 output 1
  Concatenate([trunk, reg]) "both" -> Dense(1) "flag"     output 2 (logits)
  Model(x, [cls, reg, flag], name="multi")

Both dialects, built from the same function with the same layer names:
SGD(0.1);
  loss = {"cls": "sparse_categorical_crossentropy", "reg": "mse",
          "flag": BinaryCrossentropy(from_logits=True, label_smoothing=0.1)}
  loss_weights = {"cls": 1.0, "reg": 0.5, "flag": 2.0}
  metrics = {"cls": ["accuracy"], "reg": ["mae"], "flag": ["accuracy"]}
(tf_keras and Keras 3 both take these forms as they are. model.h5's
training_config lists the metrics per output as tf_keras resolved them
when it saved: before any step it builds them on the model's outputs as
labels, so cls's "accuracy" is written as categorical_accuracy, though the
int labels of a step make it sparse_categorical_accuracy.)
tf_keras (tf.keras 2) Functional, tf_keras.utils.set_random_seed(21),
default initializers; the Keras 3 model gets those initial weights layer by
layer. Batch: np.random.seed(22); x = 2 rand(8, 6) - 1 float32, y_cls =
randint(0, 3, 8) int32, y_reg = rand(8, 2) float32, y_flag = randint(0, 2,
(8, 1)) float32.

Writes into OUTDIR (tests/golden/outputs/):
  model.tf2.json, model.k3.json  to_json(indent=1) of each dialect
  initial.h5, after_step.h5      tf_keras save_weights before and after one
                                 train_on_batch of the whole batch
  batch.h5    x; y_0 (int32 (8,)), y_1 (float32 (8, 2)), y_2 (float32
              (8, 1)); loss (the step's total, before the update), loss_0..2
              (each output's unweighted loss: cls_loss, reg_loss,
              flag_loss), metric_0..2 (cls_accuracy, reg_mae,
              flag_accuracy), all float64 scalars; predict_before_0..2 and
              predict_after_0..2 (model.predict before and after the step)
  model.keras Keras 3's archive with the initial weights, compiled as above
              (config.json's compile_config carries the dicts)
  model.h5    tf_keras model.save of a fresh model (same seed) compiled as
              above, before any step (training_config carries the dicts)
  logs.txt    per dialect: sorted(history.history.keys()) of fit(x, y,
              epochs=1, batch_size=4, validation_split=0.25, verbose=0) on a
              fresh model; the last line verbose=1's progress bar prints for
              that epoch (stdout captured, Keras 3's ANSI colour codes
              taken out; its timings vary from run to run); evaluate(x, y,
              return_dict=True)'s keys in their order. Keras 3 logs the
              epoch's <output>_loss as the mean over its batches, not its
              samples (tf_keras: samples; "loss" and the metrics: samples in
              both), so with a short last batch its progress bar's output
              losses differ from tf_keras's and don't add up to its "loss"

Checks (assert) that each dialect's total loss is loss_0 + 0.5 loss_1 +
2 loss_2 (1e-5 relative) and prints how far Keras 3's one-step weights are
from tf_keras's.

Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_outputs.py tests/golden/outputs
"""
import contextlib
import io
import json
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

SEED = 21
OUTPUTS = ("cls", "reg", "flag")
WEIGHTS = {"cls": 1.0, "reg": 0.5, "flag": 2.0}
METRICS = ("cls_accuracy", "reg_mae", "flag_accuracy")


def build(K):
    L = K.layers
    x = K.Input((6,), name="x")
    trunk = L.Dense(8, activation="relu", name="trunk")(x)
    cls = L.Dense(3, activation="softmax", name="cls")(trunk)
    reg = L.Dense(2, name="reg")(trunk)
    both = L.Concatenate(name="both")([trunk, reg])
    flag = L.Dense(1, name="flag")(both)
    return K.Model(x, [cls, reg, flag], name="multi")


def compile_(K, model):
    model.compile(
        optimizer=K.optimizers.SGD(0.1),
        loss={"cls": "sparse_categorical_crossentropy", "reg": "mse",
              "flag": K.losses.BinaryCrossentropy(from_logits=True,
                                                  label_smoothing=0.1)},
        loss_weights=dict(WEIGHTS),
        metrics={"cls": ["accuracy"], "reg": ["mae"], "flag": ["accuracy"]})
    return model


def tf2_model():
    tf_keras.utils.set_random_seed(SEED)
    return compile_(tf_keras, build(tf_keras))


def k3_model():
    """Keras 3's model with tf_keras's initial weights of SEED. Layer by
    layer: the two Kerases may list a graph's layers in different orders."""
    k3 = build(keras)
    tf_keras.utils.set_random_seed(SEED)
    initial = build(tf_keras)
    for layer in k3.layers:
        layer.set_weights(initial.get_layer(layer.name).get_weights())
    return compile_(keras, k3)


def check_total(name, logs):
    total = sum(WEIGHTS[o] * logs[f"{o}_loss"] for o in OUTPUTS)
    print(name, "loss", logs["loss"], "=", " + ".join(
        f"{WEIGHTS[o]} * {logs[o + '_loss']}" for o in OUTPUTS), "=", total)
    assert abs(total - logs["loss"]) <= 1e-5 * abs(logs["loss"]), (name, logs)


def weights(model, names):
    return [w for n in names for w in model.get_layer(n).get_weights()]


def fit_logs(name, make, x, y):
    """The log lines of fit and evaluate on fresh models of one dialect."""
    fit = dict(epochs=1, batch_size=4, validation_split=0.25)
    keras.utils.set_random_seed(SEED)
    keys = sorted(make().fit(x, y, verbose=0, **fit).history.keys())
    keras.utils.set_random_seed(SEED)
    model = make()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        history = model.fit(x, y, verbose=1, **fit)
    assert sorted(history.history.keys()) == keys, (name, history.history)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # Keras 3's colours
    lines = [s.strip() for s in text.replace("\r", "\n").split("\n")
             if s.strip()]
    evaluated = model.evaluate(x, y, return_dict=True, verbose=0)
    return [f"{name}: " + " ".join(keys),
            f"{name} progbar: " + lines[-1],
            f"{name} evaluate: " + " ".join(evaluated)]


def main(out):
    os.makedirs(out, exist_ok=True)
    np.random.seed(22)
    x = (2 * np.random.rand(8, 6) - 1).astype(np.float32)
    y = [np.random.randint(0, 3, 8).astype(np.int32),
         np.random.rand(8, 2).astype(np.float32),
         np.random.randint(0, 2, (8, 1)).astype(np.float32)]

    # tf_keras's step.
    model = tf2_model()
    with open(os.path.join(out, "model.tf2.json"), "w") as f:
        f.write(model.to_json(indent=1))
    model.save_weights(os.path.join(out, "initial.h5"))
    before = model.predict(x, verbose=0)
    logs = model.train_on_batch(x, y, return_dict=True)
    after = model.predict(x, verbose=0)
    model.save_weights(os.path.join(out, "after_step.h5"))
    check_total("tf2", logs)
    print("tf2", logs)
    with h5py.File(os.path.join(out, "batch.h5"), "w") as f:
        f["x"] = x
        for k, (o, metric) in enumerate(zip(OUTPUTS, METRICS)):
            f[f"y_{k}"] = y[k]
            f[f"loss_{k}"] = float(logs[f"{o}_loss"])
            f[f"metric_{k}"] = float(logs[metric])
            f[f"predict_before_{k}"] = before[k]
            f[f"predict_after_{k}"] = after[k]
        f["loss"] = float(logs["loss"])

    # The same initial model, whole, in each dialect's file.
    fresh = tf2_model()
    assert all(np.array_equal(a, b) for a, b in
               zip(fresh.predict(x, verbose=0), before))
    fresh.save(os.path.join(out, "model.h5"))
    k3 = k3_model()
    with open(os.path.join(out, "model.k3.json"), "w") as f:
        f.write(k3.to_json(indent=1))
    k3.save(os.path.join(out, "model.keras"))

    # Keras 3's step from those weights.
    k3_before = k3.predict(x, verbose=0)
    k3_logs = k3.train_on_batch(x, y, return_dict=True)
    check_total("k3", k3_logs)
    print("k3", k3_logs)
    names = [layer.name for layer in model.layers]
    print("max |k3 - tf2| predict before",
          max(np.abs(a - b).max() for a, b in zip(k3_before, before)),
          "weights after step", max(np.abs(a - b).max() for a, b in
                                    zip(weights(k3, names),
                                        weights(model, names))))

    lines = (fit_logs("tf2", tf2_model, x, y)
             + fit_logs("k3", k3_model, x, y))
    with open(os.path.join(out, "logs.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    with h5py.File(os.path.join(out, "model.h5")) as f:
        print("tf2 training_config", json.dumps(
            json.loads(f.attrs["training_config"]), indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
