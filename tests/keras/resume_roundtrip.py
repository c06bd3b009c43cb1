#!/usr/bin/env python3
"""resume_roundtrip.py — issue 19's round trips with Keras itself, run by
hand in a throwaway venv (tensorflow-cpu, tf_keras, keras 3, h5py); Keras
is never a test dependency. From the repository's root:

  /tmp/kenv/bin/python tests/keras/resume_roundtrip.py OUT_DIR

1. Keras writes a trained model (Conv2D, MaxPooling2D, Dense; Adam) three
   ways: Keras 3 .keras, Keras 3 .h5, tf.keras 2 .h5. Each is loaded back
   by Keras and trained on 3 more batches (one batch an epoch, so every
   epoch's loss is one step's); `mxu train FILE` does the same from the
   file alone (its weights and optimizer state). The losses must agree.
2. mxu trains the same architecture and saves m.keras; Keras 3 loads it,
   evaluates (against mxu's own evaluate) and goes on training from the
   saved iteration.
"""
import gzip
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np

OUT = sys.argv[1]
MXU = os.path.abspath("build/mxu")
DATA = "/usr/share/datasets/fashion-mnist"


def idx(name, header):
    with gzip.open(f"{DATA}/{name}.gz") as f:
        return np.frombuffer(f.read()[header:], np.uint8)


x = idx("train-images-idx3-ubyte", 16).reshape(-1, 28, 28, 1)
y = idx("train-labels-idx1-ubyte", 8)
xt = idx("t10k-images-idx3-ubyte", 16).reshape(-1, 28, 28, 1)[:1000]
yt = idx("t10k-labels-idx1-ubyte", 8)[:1000]
xf, xtf = x.astype("float32") / 255, xt.astype("float32") / 255
# What the resumed runs train on: one batch of 100, three epochs.
npz = f"{OUT}/resume.npz"
np.savez(npz, x_train=xf[1000:1100], y_train=y[1000:1100], x_test=xtf,
         y_test=yt)


def build(keras):
    m = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(10, activation="softmax")])
    m.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def keras_side(which):
    if which == "tf2":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tf_keras as keras
    else:
        import keras
    m = build(keras)
    m.fit(xf[:1000], y[:1000], batch_size=100, epochs=2, shuffle=False,
          verbose=0)
    # The .keras first: Keras 3's legacy .h5 save leaves the model's
    # compile_config without its optimizer, so a .keras saved after it
    # reloads with RMSprop and skips the Adam state.
    paths = ([f"{OUT}/k3.keras"] if which == "k3" else []) + [
        f"{OUT}/{which}.h5"]
    out = {}
    for p in paths:
        m.save(p)
        again = keras.models.load_model(p)
        try:
            h = again.fit(xf[1000:1100], y[1000:1100], batch_size=100,
                          epochs=3, shuffle=False, verbose=0)
            out[p] = h.history["loss"]
        except ValueError as e:  # Keras 3 cannot always resume its .h5
            out[p] = str(e).splitlines()[0]
    return out


def mxu_side(path):
    report = path + ".report.json"
    subprocess.run([MXU, "train", path, "--data", npz, "--epochs", "3",
                    "--batch-size", "100", "--verbose", "0", "--report",
                    report], check=True)
    with open(report) as f:
        return [e["loss"] for e in json.load(f)["epochs"]]


if __name__ == "__main__":
    side = sys.argv[2] if len(sys.argv) > 2 else None
    if side == "load":
        import keras
        m = keras.models.load_model(sys.argv[3])
        at = int(m.optimizer.iterations.numpy())
        loss, acc = m.evaluate(xtf, yt, batch_size=100, verbose=0)
        h = m.fit(xf[1000:1100], y[1000:1100], batch_size=100, epochs=3,
                  shuffle=False, verbose=0)
        print(f"iterations {at}, test loss {loss:.6f} - test accuracy "
              f"{acc:.4f}; next 3 steps {h.history['loss']} (iterations "
              f"{int(m.optimizer.iterations.numpy())})")
        sys.exit(0)
    if side in ("k3", "tf2"):  # one Keras per process
        print(json.dumps(keras_side(side)))
        sys.exit(0)
    results = {}
    for which in ("k3", "tf2"):
        text = subprocess.run([sys.executable, __file__, OUT, which],
                              check=True, capture_output=True,
                              text=True).stdout
        results.update(json.loads(text.strip().splitlines()[-1]))
    worst = 0.0
    for path, keras_losses in results.items():
        mxu_losses = mxu_side(path)
        if isinstance(keras_losses, str):
            print(f"{os.path.basename(path)}: Keras fails to resume it "
                  f"({keras_losses}); mxu {mxu_losses}")
            continue
        diff = max(abs(a - b) for a, b in zip(keras_losses, mxu_losses))
        worst = max(worst, diff)
        print(f"{os.path.basename(path)}: Keras {keras_losses}\n"
              f"{' ' * len(os.path.basename(path))}  mxu   {mxu_losses}  "
              f"max |diff| {diff:.2e}")
    print(f"worst difference of the first 3 resumed steps: {worst:.2e}")
    # mxu's own .keras into Keras 3: evaluate, then one more step each.
    saved = f"{OUT}/mxu.keras"
    run = subprocess.run([MXU, "train", f"{OUT}/k3.keras", "--data", npz,
                          "--epochs", "3", "--batch-size", "100", "--verbose",
                          "0", "--save-model", saved], check=True,
                         capture_output=True, text=True).stdout
    mxu_test = run.strip().splitlines()[-1]
    on = mxu_side(saved)
    text = subprocess.run([sys.executable, __file__, OUT, "load", saved],
                          check=True, capture_output=True, text=True).stdout
    print(f"mxu.keras: mxu {mxu_test}; Keras 3 load_model: "
          f"{text.strip().splitlines()[-1]}")
    print(f"mxu.keras: next 3 steps, mxu {on}")
