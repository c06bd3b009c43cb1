"""make_transformer.py — models/fashion_rows_transformer.json: a
Transformer encoder over Fashion-MNIST's 28 rows of 28 pixels, written by
Keras 3 (to_json, with the compile config Keras 3 keeps in model.keras).

  x (28, 28) / 255 -> Conv1D(64, 3, same) embedding of each row (and its
  neighbours: the positions' only order) -> 2 x [MultiHeadAttention(4
  heads of 16), dropout 0.1, + residual, LayerNormalization; Dense(128,
  relu) -> Dense(64), + residual, LayerNormalization] ->
  GlobalAveragePooling1D -> Dropout(0.1) -> Dense(10, softmax); Adam(1e-3),
  sparse_categorical_crossentropy, accuracy.

Keras is never a dependency of mxu: this script only regenerates the file.
  /tmp/kenv/bin/python tests/keras/make_transformer.py models
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402


def block(x, i):
    L = keras.layers
    a = L.MultiHeadAttention(4, 16, dropout=0.1, name=f"attention_{i}")(x, x)
    x = L.LayerNormalization(name=f"norm_{i}a")(L.Add(name=f"add_{i}a")([x, a]))
    f = L.Dense(128, activation="relu", name=f"ff_{i}")(x)
    f = L.Dense(64, name=f"ff_out_{i}")(f)
    return L.LayerNormalization(name=f"norm_{i}b")(
        L.Add(name=f"add_{i}b")([x, f]))


def build():
    L = keras.layers
    x = keras.Input((28, 28), name="rows")
    h = L.Rescaling(1 / 255.0, name="scale")(x)
    h = L.Conv1D(64, 3, padding="same", name="embed")(h)
    for i in range(2):
        h = block(h, i)
    h = L.GlobalAveragePooling1D(name="pool")(h)
    h = L.Dropout(0.1, name="drop")(h)
    out = L.Dense(10, activation="softmax", name="probs")(h)
    return keras.Model(x, out, name="fashion_rows_transformer")


def main(out):
    model = build()
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    d = json.loads(model.to_json())
    d["compile_config"] = model.get_compile_config()
    path = os.path.join(out, "fashion_rows_transformer.json")
    with open(path, "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")
    print(path, model.count_params(), "parameters")


if __name__ == "__main__":
    main(sys.argv[1])
