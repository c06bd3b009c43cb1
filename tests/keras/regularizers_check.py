#!/usr/bin/env python3
"""regularizers_check.py — issue 18's check of regularizers and constraints
against Keras 3 itself, run by hand in a throwaway venv (Keras is never a
test dependency): a Dense layer with L1L2 and L2 penalties and a MaxNorm
constraint, one SGD step in Keras and in `mxu train` from the same initial
weights; prints both losses and the largest weight difference. Run from a
scratch folder: /tmp/kenv/bin/python tests/keras/regularizers_check.py"""
import os, json, subprocess
os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"
import numpy as np, keras
MXU = os.environ.get("MXU", os.path.abspath(os.path.join(os.path.dirname(__file__), "../../build/mxu")))
x = (np.arange(60, dtype="float32").reshape(12,5) * 7 % 11) / 5 - 1
y = np.arange(12) % 3
np.savez("d.npz", x_train=x, y_train=y, x_test=x, y_test=y)
m = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3, activation="softmax",
      kernel_regularizer=keras.regularizers.L1L2(l1=0.01, l2=0.02),
      bias_regularizer=keras.regularizers.L2(0.1), bias_initializer=keras.initializers.Constant(0.3),
      kernel_constraint=keras.constraints.MaxNorm(0.4))])
m.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
open("m.json","w").write(m.to_json())
m.save_weights("w0.weights.h5")
ev = m.evaluate(x, y, verbose=0)
h = m.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
print("keras evaluate loss before", ev[0], "fit loss", h.history["loss"][0])
kw = m.get_weights()
subprocess.run([MXU, "train", "m.json", "--initial-weights", "w0.weights.h5",
   "--data", "d.npz", "--epochs", "1", "--batch-size", "12", "--optimizer", "sgd", "--learning-rate", "0.5",
   "--save-weights", "w1.weights.h5", "--report", "r.json", "--verbose", "0"], check=True, capture_output=True)
r = json.load(open("r.json"))
print("mxu fit loss", r["epochs"][0]["loss"])
m.load_weights("w1.weights.h5")
mw = m.get_weights()
print("max |weight diff| after one step:", max(np.abs(a-b).max() for a,b in zip(kw, mw)))
print("column norms", np.linalg.norm(mw[0], axis=0))

# Activity regularizers: on a hidden Dense (activity_regularizer) and an
# ActivityRegularization layer, in the loss and its gradient, 3 full-batch
# SGD steps.
m = keras.Sequential([keras.Input((5,)),
      keras.layers.Dense(4, activation="tanh",
                         activity_regularizer=keras.regularizers.L1L2(l1=0.02, l2=0.05)),
      keras.layers.ActivityRegularization(l1=0.03, l2=0.01),
      keras.layers.Dense(3, activation="softmax")])
m.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
open("a.json", "w").write(m.to_json())
m.save_weights("a0.weights.h5")
h = m.fit(x, y, batch_size=12, epochs=3, shuffle=False, verbose=0)
kw = m.get_weights()
subprocess.run([MXU, "train", "a.json", "--initial-weights", "a0.weights.h5",
   "--data", "d.npz", "--epochs", "3", "--batch-size", "12", "--optimizer", "sgd", "--learning-rate", "0.5",
   "--save-weights", "a1.weights.h5", "--report", "r.json", "--verbose", "0"], check=True, capture_output=True)
r = json.load(open("r.json"))
print("activity: keras fit losses", h.history["loss"], "mxu", [e["loss"] for e in r["epochs"]])
m.load_weights("a1.weights.h5")
print("activity: max |weight diff| after 3 steps:", max(np.abs(a-b).max() for a,b in zip(kw, m.get_weights())))
