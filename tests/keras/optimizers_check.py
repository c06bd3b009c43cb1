#!/usr/bin/env python3
"""optimizers_check.py — issue 18's check of the optimizers against Keras 3
itself, run by hand in a throwaway venv (Keras is never a test
dependency). For each optimizer (with clipping or weight decay in some
cases), a Dense(3, softmax) model is compiled in Keras and saved as
.keras before any step; Keras trains it 3 full-batch steps, and so does
`mxu train` from the saved file alone; the script prints both loss
trajectories and the largest weight difference. Then Keras loads mxu's
saved model (optimizer state included) and takes 2 more steps, as mxu
does from the same file; their weights after those are compared too.
With MXU_TF_KERAS=1 the same with tf.keras 2 and .h5 files. Run from a
scratch folder:
  /tmp/kenv/bin/python tests/keras/optimizers_check.py"""
import json
import os
import subprocess

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if os.environ.get("MXU_TF_KERAS"):
    import tf_keras as keras
    EXT = "h5"
else:
    import keras
    EXT = "keras"
import numpy as np

MXU = os.environ.get("MXU", os.path.abspath(
    os.path.join(os.path.dirname(__file__), "../../build/mxu")))
x = (np.arange(60, dtype="float32").reshape(12, 5) * 7 % 11) / 5 - 1
y = np.arange(12) % 3
np.savez("d.npz", x_train=x, y_train=y, x_test=x, y_test=y)
O = keras.optimizers
CASES = {
    "rmsprop": O.RMSprop(0.05, momentum=0.3),
    "rmsprop_centered": O.RMSprop(0.05, momentum=0.3, centered=True),
    "adam_amsgrad": O.Adam(0.05, amsgrad=True),
    "adamw_amsgrad": O.AdamW(0.05, weight_decay=0.1, amsgrad=True),
    "adagrad": O.Adagrad(0.05),
    "adamax": O.Adamax(0.05),
    "nadam": O.Nadam(0.05),
    "adadelta": O.Adadelta(0.5),
    "lion": O.Lion(0.01),
    "adamw": O.AdamW(0.05, weight_decay=0.1),
    "sgd_clipnorm": O.SGD(0.5, momentum=0.9, clipnorm=0.2),
    "adam_global_clipnorm": O.Adam(0.05, global_clipnorm=0.3),
    "adam_clipvalue": O.Adam(0.05, clipvalue=0.05),
    "sgd_exponential": O.SGD(O.schedules.ExponentialDecay(0.5, 2, 0.5)),
    "sgd_staircase": O.SGD(O.schedules.InverseTimeDecay(0.5, 2, 0.7,
                                                         staircase=True)),
    "adam_piecewise": O.Adam(O.schedules.PiecewiseConstantDecay(
        [1, 3], [0.05, 0.02, 0.01])),
    "adam_polynomial": O.Adam(O.schedules.PolynomialDecay(0.05, 3, 0.01,
                                                          power=2.0,
                                                          cycle=True)),
    "adam_cosine_warmup": O.Adam(O.schedules.CosineDecay(
        0.0, 4, alpha=0.1, warmup_target=0.05, warmup_steps=2)),
    "rmsprop_restarts": O.RMSprop(O.schedules.CosineDecayRestarts(
        0.05, 2, t_mul=1.5, m_mul=0.8, alpha=0.05)),
    "adam_ema": O.Adam(0.05, use_ema=True, ema_momentum=0.5),
    "sgd_ema_overwrite": O.SGD(0.5, momentum=0.9, use_ema=True,
                               ema_momentum=0.6, ema_overwrite_frequency=2),
    "rmsprop_ema": O.RMSprop(0.05, use_ema=True),
}


def mxu(model, epochs, save=None):
    args = [MXU, "train", model, "--data", "d.npz", "--epochs", str(epochs),
            "--batch-size", "12", "--report", "r.json", "--verbose", "0",
            "--save-model", save or f"unused.{EXT}"]
    subprocess.run(args, check=True, capture_output=True)
    return [e["loss"] for e in json.load(open("r.json"))["epochs"]]


worst = 0.0
for name, opt in CASES.items():
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((5,)),
                          keras.layers.Dense(3, activation="softmax")])
    m.compile(optimizer=opt, loss="sparse_categorical_crossentropy",
              metrics=["accuracy"])
    m.save(f"{name}.{EXT}")
    h = m.fit(x, y, batch_size=12, epochs=3, shuffle=False, verbose=0)
    mine = mxu(f"{name}.{EXT}", 3, save=f"{name}.mxu.{EXT}")
    k = keras.models.load_model(f"{name}.mxu.{EXT}")
    diff = max(abs(a - b).max() for a, b in zip(m.get_weights(),
                                                  k.get_weights()))
    # Both go on 2 steps from mxu's file.
    more = k.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)
    mine_more = mxu(f"{name}.mxu.{EXT}", 2, save=f"{name}.more.{EXT}")
    after = keras.models.load_model(f"{name}.more.{EXT}")
    more_diff = max(abs(a - b).max() for a, b in zip(k.get_weights(),
                                                       after.get_weights()))
    loss_diff = max(abs(a - b) for a, b in
                    zip(h.history["loss"] + more.history["loss"],
                        mine + mine_more))
    worst = max(worst, diff, loss_diff, more_diff)
    print(f"{name:22s} weights after 3 steps differ by {diff:.1e}, after 2 "
          f"more by {more_diff:.1e}; losses (3 steps, then 2 resumed by "
          f"each from mxu's .{EXT}, iteration "
          f"{int(k.optimizer.iterations.numpy()) - 2}) differ by "
          f"{loss_diff:.1e}")
print(f"worst: {worst:.1e}")
