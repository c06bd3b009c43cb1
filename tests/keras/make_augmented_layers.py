"""make_augmented_layers.py — models/cifar10_augmented_layers.json: the
cifar-augmented recipe (models/cifar10_augmented.json) with its
augmentation inside the model, as Keras users now write it, instead of
ImageDataGenerator's flags:

  RandomFlip("horizontal"), RandomTranslation(0.2, 0.2),
  RandomRotation(20 / 360)   (ImageDataGenerator's rotation_range=20,
                              width/height_shift_range=0.2,
                              horizontal_flip=True)

then the recipe's layers, built with tf_keras (the dialect of the recipe's
file), compile_config copied from it.

Keras is never a dependency of mxu: this script only regenerates the file.
  /tmp/kenv/bin/python tests/keras/make_augmented_layers.py
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tf_keras  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    recipe = json.load(open(os.path.join(ROOT, "models/cifar10_augmented.json")))
    L = tf_keras.layers
    base = tf_keras.models.model_from_json(json.dumps(
        {k: v for k, v in recipe.items() if k != "compile_config"}))
    model = tf_keras.Sequential(name="cifar10_augmented_layers")
    model.add(L.InputLayer(input_shape=(32, 32, 3)))
    model.add(L.RandomFlip("horizontal", name="flip"))
    model.add(L.RandomTranslation(0.2, 0.2, name="shift"))
    model.add(L.RandomRotation(20 / 360, name="rotate"))
    for layer in base.layers:
        model.add(layer.__class__.from_config(layer.get_config()))
    out = json.loads(model.to_json())
    out["compile_config"] = recipe["compile_config"]
    with open(os.path.join(ROOT, "models/cifar10_augmented_layers.json"),
              "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
