"""golden_step.py — what the make_*.py golden scripts share: one SGD step
of a tf_keras model on one batch, written as test_golden reads it
(model.tf2.json, initial.h5, after_step.h5, batch.h5 with x (a list for a
model of several inputs: x, x_1, ...), y, the loss, the accuracy (files
written before it have none) and the predictions before and after the
step); and, for a model built in
either Keras, that step with Keras 3's JSON and archive of the model too.
Not run on its own."""
import os

import h5py


def write(model, x, y, out):
    """model is compiled with "accuracy" and perhaps a MeanIoU "iou";
    returns the loss of the step."""
    with open(os.path.join(out, "model.tf2.json"), "w") as f:
        f.write(model.to_json(indent=1))
    model.save_weights(os.path.join(out, "initial.h5"))
    before = model.predict(x, verbose=0)
    loss, accuracy, *iou = model.train_on_batch(x, y)
    after = model.predict(x, verbose=0)
    model.save_weights(os.path.join(out, "after_step.h5"))
    with h5py.File(os.path.join(out, "batch.h5"), "w") as f:
        # A model of several inputs: x, then x_1, x_2, ...
        for k, array in enumerate(x if isinstance(x, list) else [x]):
            f["x" if k == 0 else f"x_{k}"] = array
        f["y"], f["loss"] = y, float(loss)
        f["accuracy"] = float(accuracy)
        if iou:
            f["iou"] = float(iou[0])
        f["predict_before"], f["predict_after"] = before, after
    return loss


def write_dialects(build, tf_keras, keras, seed, x, y, out,
                   loss="sparse_categorical_crossentropy", ignore_class=None,
                   iou=None):
    """build(K) makes the model in tf_keras or keras; tf_keras takes the
    step from the initial weights of seed. Also writes model.k3.json and
    model.keras, Keras 3's archive with those initial weights (the same
    order), whose predictions are predict_before. y: labels, or float
    targets with loss categorical_crossentropy. ignore_class: the sparse
    loss's. iou: (make, spec), an IoU metric make(K) named "iou" beside
    "accuracy" and its spec in mxu's words (batch.h5 keeps ignore_class,
    the spec and Keras' value; Keras 3's step loss must agree with
    tf.keras'). Returns the loss."""
    os.makedirs(out, exist_ok=True)

    def loss_of(K):
        if ignore_class is None:
            return loss
        return K.losses.SparseCategoricalCrossentropy(ignore_class=ignore_class)

    def metrics_of(K):
        return ["accuracy"] + ([iou[0](K)] if iou else [])

    tf_keras.utils.set_random_seed(seed)
    model = build(tf_keras)
    model.compile(tf_keras.optimizers.SGD(0.1), loss_of(tf_keras),
                  metrics_of(tf_keras))
    step_loss = write(model, x, y, out)
    if loss != "sparse_categorical_crossentropy":
        with h5py.File(os.path.join(out, "batch.h5"), "a") as f:
            f["loss_name"] = loss
    with h5py.File(os.path.join(out, "batch.h5"), "a") as f:
        if ignore_class is not None:
            f["ignore_class"] = ignore_class
        if iou:
            f["iou_spec"] = iou[1]
    k3 = build(keras)
    with open(os.path.join(out, "model.k3.json"), "w") as f:
        f.write(k3.to_json(indent=1))
    tf_keras.utils.set_random_seed(seed)
    # Layer by layer: the two Kerases may list a graph's layers (and so
    # its weights) in different orders.
    initial = build(tf_keras)
    for layer in k3.layers:
        layer.set_weights(initial.get_layer(layer.name).get_weights())
    k3.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss_of(keras),
               metrics=metrics_of(keras))
    k3.save(os.path.join(out, "model.keras"))
    if ignore_class is not None or iou:  # Keras 3's loss as tf.keras'
        again = keras.models.load_model(os.path.join(out, "model.keras"))
        k3 = again.train_on_batch(x, y, return_dict=True)
        assert abs(k3["loss"] - step_loss) <= 1e-5 * abs(step_loss), (
            k3, step_loss)
        # Under a padding mask they differ: Keras 3's MeanIoU reads no
        # mask (only its function metrics do), tf.keras 2's is masked.
        print("Keras 3's step", k3)
    print("loss", step_loss, "layers", [l.name for l in model.layers])
    return step_loss


def write_keras3(build, keras, seed, x, y, out):
    """The same files for a model only Keras 3 has (its layers are not in
    tf.keras 2): model.k3.json, model.keras with the initial weights, and
    initial.h5 / after_step.h5 as Keras 3's save_weights writes them."""
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(seed)
    model = build(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    with open(os.path.join(out, "model.k3.json"), "w") as f:
        f.write(model.to_json(indent=1))
    model.save(os.path.join(out, "model.keras"))
    weights = os.path.join(out, "w.weights.h5")
    model.save_weights(weights)
    os.replace(weights, os.path.join(out, "initial.h5"))
    before = model.predict(x, verbose=0)
    loss, _ = model.train_on_batch(x, y)
    after = model.predict(x, verbose=0)
    model.save_weights(weights)
    os.replace(weights, os.path.join(out, "after_step.h5"))
    with h5py.File(os.path.join(out, "batch.h5"), "w") as f:
        for k, array in enumerate(x if isinstance(x, list) else [x]):
            f["x" if k == 0 else f"x_{k}"] = array
        f["y"], f["loss"] = y, float(loss)
        f["predict_before"], f["predict_after"] = before, after
    print("loss", loss, "layers", [l.name for l in model.layers])
    return loss
