"""check_apps.py — weights of keras.applications models move both ways
between mxu and Keras: for each app JSON in tests/keras_apps/ (tf_keras for
the tf.keras 2 JSON, Keras 3 for the Keras 3 JSON),

  1. Keras builds the model, sets BatchNormalization's moving statistics to
     a batch's (a fresh net's are its initial ones, under which deep nets
     predict one constant), moves every weight by 1% noise (see NOISE) and saves it;
     mxu loads that file and predicts what Keras predicts;
  2. mxu trains a few steps from it (`mxu train --initial-weights`, cifar-10
     from ../shared/data) and saves; Keras loads mxu's file and predicts
     what mxu predicts from it;
  3. Keras' load_model reads mxu's whole model file of that training (.h5
     for tf.keras 2, .keras for Keras 3: mxu's JSON and weights) and
     predicts the same.

mxu's side is apps_predict.c, built here against build/libmxu.so.
Keras is never a dependency of mxu: this is a check to run by hand.
  /tmp/kenv/bin/python tests/keras/check_apps.py /tmp [NAME...]
  MXU_APPS_SIZE=224 /tmp/kenv/bin/python tests/keras/check_apps.py /tmp ...
"""
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 4
# The relative noise on every weight. EfficientNetV2B0 at 32x32 amplifies
# 1% to activations of ~700 by block 6 (in Keras alone), its softmax one-hot
# and its argmax decided by rounding; 0.1% keeps them near 5.
NOISE = {"EfficientNetV2B0": 0.001}
# MXU_APPS_SIZE=224: the apps built for 224x224 images (trained on random
# ones) instead of 32x32 (trained on cifar-10).
SIZE = int(os.environ.get("MXU_APPS_SIZE", "32"))


def mxu_predict(tool, json_path, weights, x, work):
    x.astype("<f4").tofile(os.path.join(work, "x.f32"))
    out = os.path.join(work, "y.f32")
    subprocess.run([tool, json_path, weights, str(N),
                    os.path.join(work, "x.f32"), out], check=True)
    return np.fromfile(out, "<f4").reshape(N, -1)


def main(work, names):
    tool = os.path.join(work, "apps_predict")
    subprocess.run(["gcc", "-O1", "-I", os.path.join(ROOT, "include"),
                    os.path.join(ROOT, "tests/keras/apps_predict.c"), "-o", tool,
                    os.path.join(ROOT, "build/libmxu.so"),
                    "-Wl,-rpath," + os.path.join(ROOT, "build")], check=True)
    rng = np.random.RandomState(0)
    x = rng.rand(N, SIZE, SIZE, 3).astype(np.float32)
    data = os.path.join(ROOT, "../shared/data/cifar-10")
    if SIZE != 32:  # 16 random images of the size to train on
        data = os.path.join(work, f"images_{SIZE}.npz")
        images = rng.rand(16, SIZE, SIZE, 3).astype("float32")
        np.savez(data, x_train=images, y_train=np.arange(16) % 10,
                 x_test=images[:8], y_test=np.arange(8))
    # tf_keras registers ConvNeXt's LayerScale under no name it looks up,
    # so even its own files need it given.
    from tf_keras.src.applications.convnext import LayerScale
    custom = {"tf2": {"LayerScale": LayerScale}, "k3": None}
    for name in names:
        for dialect, K in [("tf2", tf_keras), ("k3", keras)]:
            json_path = os.path.join(ROOT, "tests/keras_apps",
                                     f"{name}_32.{dialect}.json")
            if SIZE != 32:  # the same model, built for SIZE x SIZE images
                text = json.dumps(json.load(open(json_path)))
                json_path = os.path.join(work, f"{name}_{SIZE}.{dialect}.json")
                open(json_path, "w").write(
                    text.replace("32, 32, 3]", f"{SIZE}, {SIZE}, 3]"))
            model = K.models.model_from_json(open(json_path).read(),
                                             custom_objects=custom[dialect])
            calibrate(K, model, rng)
            noise = NOISE.get(name, 0.01)
            model.set_weights([w * (1 + noise * rng.standard_normal(w.shape))
                               for w in model.get_weights()])
            # Keras 3 saves only to .weights.h5 (its own layout).
            suffix = ".weights.h5" if dialect == "k3" else ".h5"
            saved = os.path.join(work, f"keras_{name}_{dialect}{suffix}")
            model.save_weights(saved)
            # Each file is read into a fresh model: Keras 3's Normalization
            # computes with the statistics it had when built or loaded, not
            # with what set_weights gave it since.
            model = K.models.model_from_json(open(json_path).read(),
                                             custom_objects=custom[dialect])
            model.load_weights(saved)
            y = model.predict(x, verbose=0)
            b = np.abs(y - mxu_predict(tool, json_path, saved, x, work)).max()
            trained = os.path.join(work, f"mxu_{name}_{dialect}{suffix}")
            whole = os.path.join(work, f"mxu_{name}_{dialect}" +
                                 (".keras" if dialect == "k3" else ".h5"))
            subprocess.run([os.path.join(ROOT, "build/mxu"), "train", json_path,
                            "--data", data,
                            "--rescale", "1/255" if SIZE == 32 else "1",
                            "--epochs", "1",
                            "--steps-per-epoch", "3" if SIZE == 32 else "2",
                            "--batch-size", "16" if SIZE == 32 else "8",
                            "--learning-rate", "1e-4", "--initial-weights",
                            saved, "--save-weights", trained,
                            "--save-model", whole],
                           check=True, stdout=subprocess.DEVNULL)
            model = K.models.model_from_json(open(json_path).read(),
                                             custom_objects=custom[dialect])
            model.load_weights(trained)
            mine = mxu_predict(tool, json_path, trained, x, work)
            a = np.abs(model.predict(x, verbose=0) - mine).max()
            # mxu's whole model file: its own JSON (Keras' ops written back
            # as ops), its weights, as Keras' load_model reads them.
            model = K.models.load_model(whole, compile=False,
                                        custom_objects=custom[dialect])
            w = np.abs(model.predict(x, verbose=0) - mine).max()
            print(f"{name} {dialect}: Keras -> mxu {b:.2e}, mxu -> Keras "
                  f"{a:.2e}, mxu's model file -> Keras {w:.2e} (predictions' "
                  f"spread over samples {y.std(axis=0).max():.2e})", flush=True)


def calibrate(K, model, rng):
    """BatchNormalization's moving statistics := one batch's."""
    bns = [l for l in model.layers
           if isinstance(l, K.layers.BatchNormalization)]
    for layer in bns:
        layer.momentum = 0.0
    model(rng.rand(16 if SIZE > 32 else 64, SIZE, SIZE,
                   3).astype(np.float32), training=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["ResNet50", "DenseNet121", "VGG16",
                                        "MobileNetV2", "EfficientNetB0"])
