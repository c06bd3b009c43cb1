#!/usr/bin/env python3
"""make_keras_file.py — tests/golden/nested/model.keras, a Keras 3 .keras
archive assembled (Python's zipfile, as Keras' saving_lib writes it) from
files Keras itself wrote: model.k3.json (model.to_json(), the form
config.json has) and initial.weights.h5 (save_weights, the layout
model.weights.h5 has). Run from the repository's root; output committed.
No Keras is needed: the members are the goldens make_nested.py made."""
import json
import zipfile

DIR = "tests/golden/nested"
with open(f"{DIR}/model.k3.json") as f:
    config = f.read()
metadata = {"keras_version": json.loads(config).get("keras_version", "3"),
            "date_saved": "2026-11-25@00:00:00"}
with zipfile.ZipFile(f"{DIR}/model.keras", "w") as z:
    z.writestr("metadata.json", json.dumps(metadata))
    z.writestr("config.json", config)
    with open(f"{DIR}/initial.weights.h5", "rb") as f:
        z.writestr("model.weights.h5", f.read())
