#!/usr/bin/env python3
"""make_resume_files.py — tests/golden/resume: whole models with optimizer
state as Keras writes them, for test_keras_file's resumes (and the fuzz
corpus). Run by hand from the repository's root in a throwaway venv with
tensorflow-cpu, tf_keras and keras 3; output committed (Keras is never a
test dependency):

  /tmp/kenv/bin/python tests/keras/make_resume_files.py

A Dense(3, relu) -> Dense(2, softmax) model on 4 inputs, Adam(0.01),
trained 5 steps of 4 samples on fixed data, saved as
  k3.keras   Keras 3's archive: optimizer/vars 0..9 (iteration,
             learning_rate, then each weight's momentum and velocity)
  k3.h5      Keras 3's legacy h5 of the same model: optimizer_weights
             named adam/iteration, adam/learning_rate, ...
  tf2.h5     tf.keras 2's h5 of a model trained the same way:
             optimizer_weights iteration:0, Adam/m/dense/kernel:0, ...
"""
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
OUT = "tests/golden/resume"


def save(which):
    if which == "tf2":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as keras
    else:
        import keras
    import numpy as np
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((4,)),
                          keras.layers.Dense(3, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
    m.compile(optimizer=keras.optimizers.Adam(0.01),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x = np.linspace(-1, 1, 80, dtype="float32").reshape(20, 4)
    y = np.arange(20) % 2
    m.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    if which == "k3":
        m.save(f"{OUT}/k3.keras")  # first: the .h5 save drops the optimizer
    m.save(f"{OUT}/{which}.h5")    # from the model's compile_config


if __name__ == "__main__":
    if len(sys.argv) > 1:
        save(sys.argv[1])
        sys.exit(0)
    for which in ("k3", "tf2"):  # one Keras per process
        subprocess.run([sys.executable, __file__, which], check=True)
