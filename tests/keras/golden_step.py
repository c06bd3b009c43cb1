"""golden_step.py — what make_shared.py and make_nested.py share: one SGD
step of a tf_keras model on one batch, written as test_golden reads it
(model.tf2.json, initial.h5, after_step.h5, batch.h5 with x, y, the loss
and the predictions before and after the step). Not run on its own."""
import os

import h5py


def write(model, x, y, out):
    """model is compiled; returns the loss of the step."""
    with open(os.path.join(out, "model.tf2.json"), "w") as f:
        f.write(model.to_json(indent=1))
    model.save_weights(os.path.join(out, "initial.h5"))
    before = model.predict(x, verbose=0)
    loss, _ = model.train_on_batch(x, y)
    after = model.predict(x, verbose=0)
    model.save_weights(os.path.join(out, "after_step.h5"))
    with h5py.File(os.path.join(out, "batch.h5"), "w") as f:
        f["x"], f["y"], f["loss"] = x, y, float(loss)
        f["predict_before"], f["predict_after"] = before, after
    return loss
