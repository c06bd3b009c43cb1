"""check_zoo.py — does mxu read every keras.applications model? Builds each
(weights=None, classes=10, at 32x32 or the smallest square input it
accepts: 75 for InceptionV3 and InceptionResNetV2, 71 for Xception, 331
for NASNetLarge, which takes no other), in tf.keras 2 and Keras 3,
writes its model.to_json() into WORK, and runs `mxu summary` on it: the
total parameter count mxu prints must be Keras'.

Keras is never a dependency of mxu: this is a check to run by hand.
  /tmp/kenv/bin/python tests/keras/check_zoo.py /tmp/zoo [NAME...]
"""
import os
import re
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tf_keras  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71,
         "NASNetLarge": 331}


def main(work, names):
    os.makedirs(work, exist_ok=True)
    names = names or [n for n in dir(keras.applications) if n[0].isupper()]
    failed = 0
    for name in names:
        size = SIZES.get(name, 32)
        for dialect, K in (("tf2", tf_keras), ("k3", keras)):
            K.backend.clear_session()
            model = getattr(K.applications, name)(
                weights=None, classes=10, input_shape=(size, size, 3))
            path = os.path.join(work, f"{name}.{dialect}.json")
            with open(path, "w") as f:
                f.write(model.to_json())
            run = subprocess.run([os.path.join(ROOT, "build/mxu"), "summary",
                                  path], capture_output=True, text=True)
            found = re.search(r"Total params: ([\d,]+)", run.stdout)
            mine = int(found.group(1).replace(",", "")) if found else None
            ok = mine == model.count_params()
            failed += not ok
            print(f"{name} {dialect} {size}x{size}: Keras "
                  f"{model.count_params():,}, mxu "
                  + (f"{mine:,}" if mine is not None else
                     run.stderr.strip()[-300:]), "" if ok else "  <- differs",
                  flush=True)
            del model
    print(f"{failed} of {2 * len(names)} differ")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
