"""make_apps.py — Keras-made reference files for mxu's Functional models:
keras.applications ResNet50, DenseNet121, VGG16, MobileNetV2,
EfficientNetB0, and the newer MobileNetV3Small (ops recorded as layers),
EfficientNetV2B0 (Normalization with its statistics in the config) and
ConvNeXtTiny (LayerScale, LayerNormalization, models used as layers)
(weights=None, classes=10) in both JSON dialects, and Keras' own parameter
counts.

Writes into OUTDIR (tests/keras_apps/ in the repository):
  NAME_32.tf2.json  tf.keras 2 (tf_keras.applications) model.to_json(), 32x32x3
  NAME_32.k3.json   Keras 3 (keras.applications) model.to_json(), 32x32x3
  counts.json       for each NAME, input size 32 and 224 and dialect tf2/k3:
                    total, trainable and non-trainable parameter counts (Keras'
                    count_params over model.weights / trainable_weights /
                    non_trainable_weights) and len(model.layers)
The 224x224x3 models are built only to count them; their JSON is not kept.

Keras is never a dependency of mxu: this script only regenerates the files.
  python3 -m venv /tmp/kenv
  /tmp/kenv/bin/pip install tensorflow-cpu tf_keras h5py numpy
  /tmp/kenv/bin/python tests/keras/make_apps.py tests/keras_apps
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # Keras 3  # noqa: E402
import tf_keras  # tf.keras 2  # noqa: E402
from keras.src.utils.summary_utils import count_params as k3_count  # noqa: E402
from tf_keras.src.utils.layer_utils import count_params as tf2_count  # noqa: E402

APPS = ["ResNet50", "DenseNet121", "VGG16", "MobileNetV2", "EfficientNetB0",
        "MobileNetV3Small", "EfficientNetV2B0", "ConvNeXtTiny"]
SIZES = [32, 224]


def build(K, name, size):
    fn = getattr(K.applications, name)
    K.backend.clear_session()
    return fn(weights=None, classes=10, input_shape=(size, size, 3))


def counts(model, dialect):
    count = tf2_count if dialect == "tf2" else k3_count
    trainable = int(count(model.trainable_weights))
    non_trainable = int(count(model.non_trainable_weights))
    total = int(model.count_params())
    assert total == trainable + non_trainable, (total, trainable, non_trainable)
    return {"total": total, "trainable": trainable,
            "non_trainable": non_trainable, "layers": len(model.layers)}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_apps.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    result = {"keras_versions": {"tf2": tf_keras.__version__,
                                 "k3": keras.__version__}}
    for name in APPS:
        result[name] = {}
        for size in SIZES:
            key = "%dx%dx3" % (size, size)
            result[name][key] = {}
            for dialect, K in (("tf2", tf_keras), ("k3", keras)):
                model = build(K, name, size)
                result[name][key][dialect] = counts(model, dialect)
                print(name, key, dialect, result[name][key][dialect], flush=True)
                if size == 32:
                    path = os.path.join(out, "%s_32.%s.json" % (name, dialect))
                    with open(path, "w") as f:
                        json.dump(json.loads(model.to_json()), f, indent=1)
                        f.write("\n")
                del model
    with open(os.path.join(out, "counts.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
