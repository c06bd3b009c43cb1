"""make_metrics.py — golden values of several metrics an output, counted
over batches of which the last is short, from Keras itself:

  x (5,) -> Dense(8, relu) "trunk"
  trunk -> Dense(3, softmax) "cls"    categorical CE, one-hot targets
  trunk -> Dense(2) "reg"             mse
  trunk -> Dense(1, sigmoid) "flag"   binary CE
  Model(x, [cls, reg, flag], name="metrics")
  metrics = {"cls": ["accuracy", "top_k_categorical_accuracy",
                     Precision(name="precision"), Recall(name="recall"),
                     AUC(name="auc"), F1Score(average="macro", name="f1"),
                     FBetaScore(average="weighted", beta=2.0,
                                threshold=0.4, name="f2")],
             "reg": ["mae", "mse", RootMeanSquaredError(name="rmse")],
             "flag": ["accuracy", Precision(name="p"),
                      Recall(name="recall"), AUC(name="roc"),
                      F1Score(average="micro", threshold=0.5, name="f1")]}

(tf.keras 2 writes the flag's "p" as "flag_p" in its training_config),
and a model of one output, "binary": x (5,) -> Dense(8, relu) -> Dense(1,
sigmoid) "out", binary CE, the metrics of Keras' imbalanced-data tutorial
under its names: BinaryCrossentropy "cross entropy", MeanSquaredError
"Brier score", TruePositives "tp", FalsePositives "fp", TrueNegatives
"tn", FalseNegatives "fn", BinaryAccuracy "accuracy", Precision
"precision", Recall "recall", AUC "auc", AUC(curve="PR") "prc"; then
RootMeanSquaredError "root_mean_squared_error" (all by explicit names:
Keras numbers the names of unnamed instances, precision_1, ...).
SGD(0.1) both. A third, "weighted", is binary's network compiled with
metrics ["accuracy", AUC "auc"] and weighted_metrics ["accuracy" (logged
weighted_accuracy), Precision, AUC "wauc", "mae", F1Score(average="micro",
threshold=0.5) "f1"], evaluated and fitted with sample_weight w =
0.25 + 2 rand(20). A fourth, "regress": x -> Dense(8, relu) -> Dense(2,
softplus) "out" on y_reg, loss "mape", metrics ["msle", LogCoshError
"logcosh", "poisson", MeanAbsolutePercentageError "mape"]. A fifth,
"logits": binary's network with a linear output, BinaryCrossentropy(
from_logits=True), metrics [BinaryAccuracy(threshold=0.0) "accuracy",
BinaryAccuracy(threshold=-0.3) "acc_low",
AUC(from_logits=True) "auc", AUC(from_logits=True, curve="PR") "prc",
Precision "precision", "mae"]. Four of the hinge, cosine and focal
losses: "hinge", x -> trunk -> Dense(3, tanh) on y_cls, loss
"categorical_hinge", metrics ["hinge", "squared_hinge", CategoricalHinge
"ch", "cosine_similarity"]; "cosine", a linear Dense(2) on y_reg,
CosineSimilarity() loss, metrics [CosineSimilarity "cos",
"squared_hinge"]; "focal", a sigmoid Dense(1) on y_flag,
BinaryFocalCrossentropy(apply_class_balancing=True, alpha=0.4, gamma=1.5,
label_smoothing=0.1), metrics ["accuracy", "hinge"]; "cfocal", a linear
Dense(3) on y_cls, CategoricalFocalCrossentropy(alpha=0.5, gamma=2.5,
from_logits=True, label_smoothing=0.1), metrics [CategoricalAccuracy
"accuracy", "categorical_hinge"]. "classes": a softmax Dense(3) on y_cls,
categorical CE, metrics [Precision(class_id=1) "p1", Recall(top_k=2)
"r2", Precision(thresholds=0.3) "p03", Recall(top_k=1, thresholds=0.4)
"r1", TruePositives(thresholds=0.25) "tp", FalseNegatives(thresholds=0.6)
"fn"].

tf_keras (tf.keras 2) builds each, tf_keras.utils.set_random_seed(33),
default initialisers. Data: np.random.seed(32); x = 6 rand(20, 5) - 3, y_cls
one-hot of randint(0, 3, 20), y_reg = rand(20, 2), y_flag = randint(0, 2,
(20, 1)), all float32.

Writes into OUTDIR (tests/golden/metrics/), for NAME in metrics, binary,
weighted, regress, logits, hinge, cosine, focal, cfocal, classes:
  NAME.h5        tf_keras model.save of the fresh compiled model (its
                 training_config lists the metric objects)
  NAME.keras     Keras 3's archive of the same initial weights, compiled
                 the same (its compile_config lists them)
  NAME.initial.h5  tf_keras save_weights of the initial weights
  data.h5        x, y_cls, y_reg, y_flag, w; for NAME: NAME/evaluate/KEY,
                 evaluate(batch_size=8, return_dict=True) of the initial
                 weights (20 samples: batches of 8, 8 and 4), and
                 NAME/fit/KEY, history of fit(batch_size=4, epochs=1,
                 shuffle=False) from them (5 steps, whole: mxu's fit drops
                 a short last batch): float64 scalars
  keys.txt       per model and dialect, the keys of evaluate's dict in its
                 order and of fit's history in its order, comma-separated
                 (a key may hold a space)

Checks (assert) that Keras 3's evaluate gives tf_keras's metrics (1e-6),
and for "weighted" its fit too, but for the weighted F1: tf_keras
multiplies an F-score's counts by (batch, 1, 1) weights, every sample by
every weight, so "weighted"'s values are Keras 3's (tf_keras's order of
keys still).
Keras is never a dependency of mxu: this script only regenerates the files.
  /tmp/kenv/bin/python tests/keras/make_metrics.py tests/golden/metrics
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

SEED = 33


def counts(K, precision="precision", auc="auc"):
    M = K.metrics
    return [M.Precision(name=precision), M.Recall(name="recall"),
            M.AUC(name=auc)]


def build_metrics(K):
    L, M = K.layers, K.metrics
    x = K.Input((5,), name="x")
    trunk = L.Dense(8, activation="relu", name="trunk")(x)
    cls = L.Dense(3, activation="softmax", name="cls")(trunk)
    reg = L.Dense(2, name="reg")(trunk)
    flag = L.Dense(1, activation="sigmoid", name="flag")(trunk)
    model = K.Model(x, [cls, reg, flag], name="metrics")
    model.compile(
        optimizer=K.optimizers.SGD(0.1),
        loss={"cls": "categorical_crossentropy", "reg": "mse",
              "flag": "binary_crossentropy"},
        metrics={"cls": ["accuracy", "top_k_categorical_accuracy"]
                 + counts(K) + [
                     M.F1Score(average="macro", name="f1"),
                     M.FBetaScore(average="weighted", beta=2.0,
                                  threshold=0.4, name="f2")],
                 "reg": ["mae", "mse", M.RootMeanSquaredError(name="rmse")],
                 "flag": ["accuracy"] + counts(K, "p", "roc") + [
                     M.F1Score(average="micro", threshold=0.5, name="f1")]})
    return model


def one_output(K, name, units=1, activation="sigmoid"):
    """x (5,) -> Dense(8, relu) "trunk" -> Dense(units, activation) "out"."""
    L = K.layers
    x = K.Input((5,), name="x")
    trunk = L.Dense(8, activation="relu", name="trunk")(x)
    out = L.Dense(units, activation=activation, name="out")(trunk)
    return K.Model(x, out, name=name)


def build_binary(K):
    """Keras' imbalanced-data tutorial's metrics, under its names."""
    M = K.metrics
    model = one_output(K, "binary")
    model.compile(optimizer=K.optimizers.SGD(0.1), loss="binary_crossentropy",
                  metrics=[
                      M.BinaryCrossentropy(name="cross entropy"),
                      M.MeanSquaredError(name="Brier score"),
                      M.TruePositives(name="tp"),
                      M.FalsePositives(name="fp"),
                      M.TrueNegatives(name="tn"),
                      M.FalseNegatives(name="fn"),
                      M.BinaryAccuracy(name="accuracy")] + counts(K) + [
                      M.AUC(name="prc", curve="PR"),
                      M.RootMeanSquaredError(name="root_mean_squared_error")])
    return model


def build_weighted(K):
    """weighted_metrics, evaluated and fitted with sample weights."""
    M = K.metrics
    model = one_output(K, "weighted")
    model.compile(optimizer=K.optimizers.SGD(0.1), loss="binary_crossentropy",
                  metrics=["accuracy", M.AUC(name="auc")],
                  weighted_metrics=[
                      "accuracy", M.Precision(name="precision"),
                      M.AUC(name="wauc"), "mae",
                      M.F1Score(average="micro", threshold=0.5, name="f1")])
    return model


def build_regress(K):
    """The regression losses and metrics Keras names by function."""
    M = K.metrics
    model = one_output(K, "regress", 2, "softplus")
    model.compile(optimizer=K.optimizers.SGD(0.1), loss="mape",
                  metrics=["msle", M.LogCoshError(name="logcosh"), "poisson",
                           M.MeanAbsolutePercentageError(name="mape")])
    return model


def build_logits(K):
    """A logit output: BinaryAccuracy(threshold=0) and AUC(from_logits)."""
    M = K.metrics
    model = one_output(K, "logits", 1, None)
    model.compile(optimizer=K.optimizers.SGD(0.1),
                  loss=K.losses.BinaryCrossentropy(from_logits=True),
                  metrics=[M.BinaryAccuracy(threshold=0.0, name="accuracy"),
                           M.BinaryAccuracy(threshold=-0.3, name="acc_low"),
                           M.AUC(from_logits=True, name="auc"),
                           M.AUC(from_logits=True, curve="PR", name="prc"),
                           M.Precision(name="precision"), "mae"])
    return model


def build_hinge(K):
    """The hinges and the cosine similarity as metrics; targets one-hot."""
    M = K.metrics
    model = one_output(K, "hinge", 3, "tanh")
    model.compile(optimizer=K.optimizers.SGD(0.1), loss="categorical_hinge",
                  metrics=["hinge", "squared_hinge",
                           M.CategoricalHinge(name="ch"), "cosine_similarity"])
    return model


def build_cosine(K):
    """The cosine similarity loss; the squared hinge of targets in (0, 1),
    which Keras leaves as they are."""
    M = K.metrics
    model = one_output(K, "cosine", 2, None)
    model.compile(optimizer=K.optimizers.SGD(0.1),
                  loss=K.losses.CosineSimilarity(),
                  metrics=[M.CosineSimilarity(name="cos"), "squared_hinge"])
    return model


def build_focal(K):
    """The binary focal cross-entropy, balanced, smoothed, gamma 1.5."""
    model = one_output(K, "focal")
    model.compile(optimizer=K.optimizers.SGD(0.1),
                  loss=K.losses.BinaryFocalCrossentropy(
                      apply_class_balancing=True, alpha=0.4, gamma=1.5,
                      label_smoothing=0.1),
                  metrics=["accuracy", "hinge"])
    return model


def build_cfocal(K):
    """The categorical focal cross-entropy of logits, smoothed."""
    M = K.metrics
    model = one_output(K, "cfocal", 3, None)
    model.compile(optimizer=K.optimizers.SGD(0.1),
                  loss=K.losses.CategoricalFocalCrossentropy(
                      alpha=0.5, gamma=2.5, from_logits=True,
                      label_smoothing=0.1),
                  metrics=[M.CategoricalAccuracy(name="accuracy"),
                           "categorical_hinge"])
    return model


def build_classes(K):
    """Precision and Recall of one class, of the top k, at a threshold;
    the counts at thresholds of their own."""
    M = K.metrics
    model = one_output(K, "classes", 3, "softmax")
    model.compile(optimizer=K.optimizers.SGD(0.1),
                  loss="categorical_crossentropy",
                  metrics=[M.Precision(class_id=1, name="p1"),
                           M.Recall(top_k=2, name="r2"),
                           M.Precision(thresholds=0.3, name="p03"),
                           M.Recall(top_k=1, thresholds=0.4, name="r1"),
                           M.TruePositives(thresholds=0.25, name="tp"),
                           M.FalseNegatives(thresholds=0.6, name="fn")])
    return model


def fresh(K, build):
    """K's model with tf_keras's initial weights of SEED, layer by layer."""
    tf_keras.utils.set_random_seed(SEED)
    initial = build(tf_keras)
    if K is tf_keras:
        return initial
    model = build(K)
    for layer in model.layers:
        layer.set_weights(initial.get_layer(layer.name).get_weights())
    return model


def main(out):
    os.makedirs(out, exist_ok=True)
    np.random.seed(32)
    x = (6 * np.random.rand(20, 5) - 3).astype(np.float32)
    y_cls = np.eye(3, dtype=np.float32)[np.random.randint(0, 3, 20)]
    y_reg = np.random.rand(20, 2).astype(np.float32)
    y_flag = np.random.randint(0, 2, (20, 1)).astype(np.float32)
    w = (0.25 + 2 * np.random.rand(20)).astype(np.float32)
    targets = {"metrics": [y_cls, y_reg, y_flag], "binary": y_flag,
               "weighted": y_flag, "regress": y_reg, "logits": y_flag,
               "hinge": y_cls, "cosine": y_reg, "focal": y_flag,
               "cfocal": y_cls, "classes": y_cls}
    lines = []
    with h5py.File(os.path.join(out, "data.h5"), "w") as f:
        f["x"], f["y_cls"], f["y_reg"], f["y_flag"] = x, y_cls, y_reg, y_flag
        f["w"] = w
        for name, build in (("metrics", build_metrics),
                            ("binary", build_binary),
                            ("weighted", build_weighted),
                            ("regress", build_regress),
                            ("logits", build_logits),
                            ("hinge", build_hinge),
                            ("cosine", build_cosine),
                            ("focal", build_focal),
                            ("cfocal", build_cfocal),
                            ("classes", build_classes)):
            y = targets[name]
            sw = w if name == "weighted" else None
            model = fresh(tf_keras, build)
            model.save(os.path.join(out, f"{name}.h5"))
            model.save_weights(os.path.join(out, f"{name}.initial.h5"))
            evaluated = model.evaluate(x, y, batch_size=8, return_dict=True,
                                       sample_weight=sw, verbose=0)
            history = model.fit(x, y, batch_size=4, epochs=1, shuffle=False,
                                sample_weight=sw, verbose=0).history
            lines.append(f"{name} tf2 evaluate: " + ",".join(evaluated))
            lines.append(f"{name} tf2 fit: " + ",".join(history))
            print(name, "tf2 evaluate", evaluated)
            print(name, "tf2 fit", {k: v[0] for k, v in history.items()})

            k3 = fresh(keras, build)
            k3.save(os.path.join(out, f"{name}.keras"))
            k3_evaluated = k3.evaluate(x, y, batch_size=8, return_dict=True,
                                       sample_weight=sw, verbose=0)
            k3_history = k3.fit(x, y, batch_size=4, epochs=1, shuffle=False,
                                sample_weight=sw, verbose=0).history
            lines.append(f"{name} k3 evaluate: " + ",".join(k3_evaluated))
            lines.append(f"{name} k3 fit: " + ",".join(k3_history))
            print(name, "k3 evaluate", k3_evaluated)
            print(name, "k3 fit", {k: v[0] for k, v in k3_history.items()})
            # tf.keras 2 hands an F-score weights of (batch, 1), which it
            # multiplies as (batch, 1, 1): every sample's counts by every
            # weight. Keras 3 weighs each sample by its own, and so does
            # mxu: the weighted model's values are Keras 3's.
            k3_fit = {k: v[0] for k, v in k3_history.items()}
            for tf2, k3_values in ((evaluated, k3_evaluated),
                                   ({k: v[0] for k, v in history.items()},
                                    k3_fit)):
                for key, value in tf2.items():
                    if key.endswith("loss") and name == "metrics":
                        continue  # Keras 3 means output losses over batches
                    if key == "f1" and name == "weighted":
                        continue
                    if tf2 is evaluated or name == "weighted":
                        assert abs(k3_values[key] - value) <= 1e-6, (
                            key, value, k3_values)
            if name == "weighted":
                evaluated, history = k3_evaluated, k3_history
            for key, value in evaluated.items():
                f[f"{name}/evaluate/{key}"] = float(value)
            for key, value in history.items():
                f[f"{name}/fit/{key}"] = float(value[0])
    with open(os.path.join(out, "keys.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1])
