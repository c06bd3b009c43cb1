"""check_apps.py — weights of keras.applications models move both ways
between mxu and Keras: for each app JSON in tests/keras_apps/,

  1. weights mxu trained (`mxu train ... --save-weights W.h5`, given as
     MXU_WEIGHTS_DIR/apps_<Model>_<tf2|k3>.h5) load into Keras (tf_keras for
     the tf.keras 2 JSON, Keras 3 for the Keras 3 JSON) and predict what
     mxu predicts from them;
  2. those weights changed by Keras (each times 1 + 1% noise) and saved by
     Keras load into mxu and predict what Keras predicts.

mxu's side is apps_predict.c, built here against build/libmxu.so.
Keras is never a dependency of mxu: this is a check to run by hand.
  /tmp/kenv/bin/python tests/keras/check_apps.py /tmp
"""
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tf_keras  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 4


def mxu_predict(tool, json_path, weights, x, work):
    x.astype("<f4").tofile(os.path.join(work, "x.f32"))
    out = os.path.join(work, "y.f32")
    subprocess.run([tool, json_path, weights, str(N),
                    os.path.join(work, "x.f32"), out], check=True)
    return np.fromfile(out, "<f4").reshape(N, -1)


def main(work):
    tool = os.path.join(work, "apps_predict")
    subprocess.run(["gcc", "-O1", "-I", os.path.join(ROOT, "include"),
                    os.path.join(ROOT, "tests/keras/apps_predict.c"), "-o", tool,
                    os.path.join(ROOT, "build/libmxu.so"),
                    "-Wl,-rpath," + os.path.join(ROOT, "build")], check=True)
    rng = np.random.RandomState(0)
    x = rng.rand(N, 32, 32, 3).astype(np.float32)
    for name in ["ResNet50", "DenseNet121", "VGG16"]:
        for dialect, K in [("tf2", tf_keras), ("k3", keras)]:
            json_path = os.path.join(ROOT, "tests/keras_apps",
                                     f"{name}_32.{dialect}.json")
            model = K.models.model_from_json(open(json_path).read())
            trained = os.path.join(work, f"apps_{name}_{dialect}.h5")
            model.load_weights(trained)
            a = np.abs(model.predict(x, verbose=0) -
                       mxu_predict(tool, json_path, trained, x, work)).max()
            # Keras' own change to every weight (a step of training would
            # saturate the softmax of these barely trained nets, whose BN
            # statistics are near their initial values, and prove little).
            model.set_weights([w * (1 + 0.01 * rng.standard_normal(w.shape))
                               for w in model.get_weights()])
            # Keras 3 saves only to .weights.h5 (its own layout).
            suffix = ".weights.h5" if dialect == "k3" else ".h5"
            saved = os.path.join(work, f"keras_{name}_{dialect}{suffix}")
            model.save_weights(saved)
            b = np.abs(model.predict(x, verbose=0) -
                       mxu_predict(tool, json_path, saved, x, work)).max()
            print(f"{name} {dialect}: mxu -> Keras {a:.2e}, Keras -> mxu {b:.2e}")


if __name__ == "__main__":
    main(sys.argv[1])
