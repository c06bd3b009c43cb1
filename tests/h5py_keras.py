"""h5py_keras.py — an implementation of Keras' weights files independent of
mxu's, for test_hdf5: h5py writes the fashion model's weights in the
layouts of tf.keras 2.x and Keras 3 following their saving code, and reads
the files mxu wrote the way their loaders do. The weights are a formula of
(weight index, element index) that test_hdf5.c computes too.

Run with Debian's interpreter and python3-h5py:
  /usr/bin/python3 -I tests/h5py_keras.py write DIR
  /usr/bin/python3 -I tests/h5py_keras.py check FILE.h5 FILE.weights.h5
Exit status 0 when every check passed."""
import json
import os
import sys

import h5py
import numpy as np

# models/fashion_mnist.json: each layer's name, class and weights.
LAYERS = [
    ("conv2d", "Conv2D", [("kernel", (3, 3, 1, 64)), ("bias", (64,))]),
    ("max_pooling2d", "MaxPooling2D", []),
    ("activation", "Activation", []),
    ("flatten", "Flatten", []),
    ("dense", "Dense", [("kernel", (10816, 10)), ("bias", (10,))]),
    ("activation_1", "Activation", []),
]
SNAKE = {"Conv2D": "conv2d", "MaxPooling2D": "max_pooling2d",
         "Activation": "activation", "Flatten": "flatten", "Dense": "dense"}
SCALES = [0.05, 0.1, 0.01, 0.1]  # per weight, in model order
HEADER_LIMIT = 64512  # Keras' HDF5_OBJECT_HEADER_LIMIT


def formula(k, shape):
    """Weight k of the model (0-based, model order); test_hdf5.c's too."""
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    v = ((i * 7919 + k * 104729) % 2001 - 1000) / 1000.0 * SCALES[k]
    return v.astype(np.float32).reshape(shape)


def weights_by_layer():
    """{layer name: [(weight name, values)]}, numbered in model order."""
    out, k = {}, 0
    for name, _, weights in LAYERS:
        out[name] = []
        for weight, shape in weights:
            out[name].append((weight, formula(k, shape)))
            k += 1
    return out


def keras3_groups():
    """Keras 3's _save_container_state names: snake_case class, _1, ..."""
    used, out = {}, []
    for name, cls, _ in LAYERS:
        base = SNAKE[cls]
        if base in used:
            used[base] += 1
            base = "%s_%d" % (base, used[base])
        else:
            used[base] = 0
        out.append((name, "layers/" + base))
    return out


# ---- writing, as tf.keras 2.15's hdf5_format does ------------------------

def save_attributes(group, name, data):
    """save_attributes_to_hdf5_group, chunking included."""
    data_npy = np.asarray(data)
    num_chunks = 1
    chunked = np.array_split(data_npy, num_chunks)
    while any(x.nbytes > HEADER_LIMIT for x in chunked):
        num_chunks += 1
        chunked = np.array_split(data_npy, num_chunks)
    if num_chunks > 1:
        for chunk_id, chunk in enumerate(chunked):
            group.attrs["%s%d" % (name, chunk_id)] = chunk
    else:
        group.attrs[name] = data


def write_keras2_tree(f):
    """save_weights_to_hdf5_group."""
    save_attributes(f, "layer_names", [n.encode("utf8") for n, _, _ in LAYERS])
    f.attrs["backend"] = "tensorflow".encode("utf8")
    f.attrs["keras_version"] = "2.15.0".encode("utf8")
    values = weights_by_layer()
    for name in sorted(values):
        g = f.create_group(name)
        names = [("%s/%s:0" % (name, w)).encode("utf8") for w, _ in values[name]]
        save_attributes(g, "weight_names", names)
        for wname, (_, val) in zip(names, values[name]):
            dset = g.create_dataset(wname, val.shape, dtype=val.dtype)
            dset[:] = val
    g = f.create_group("top_level_model_weights")
    save_attributes(g, "weight_names", [])


def write_keras2_full(f):
    """model.save("m.h5"): the same tree under model_weights."""
    config = {"class_name": "Sequential", "config": {"name": "sequential"}}
    f.attrs["model_config"] = json.dumps(config).encode("utf8")
    f.attrs["training_config"] = json.dumps({"loss": "x"}).encode("utf8")
    write_keras2_tree(f.create_group("model_weights"))
    f.create_group("optimizer_weights")


def write_keras3(f, minimal):
    """saving_lib with H5IOStore; minimal leaves out the optional pieces:
    name attributes, empty vars groups, the model's vars, the optimizer."""
    values = weights_by_layer()
    if not minimal:
        f.create_group("vars").attrs["name"] = "sequential"
    for name, group in keras3_groups():
        if minimal and not values[name]:
            continue
        vars_group = f.create_group(group).create_group("vars")
        if not minimal:
            vars_group.attrs["name"] = name
        for i, (_, val) in enumerate(values[name]):
            vars_group[str(i)] = val
    if not minimal:
        opt = f.create_group("optimizer").create_group("vars")
        opt.attrs["name"] = "adam"
        opt["0"] = np.int64(3)
        opt["1"] = np.float32(0.001)


def write_all(directory):
    with h5py.File(os.path.join(directory, "keras2.h5"), "w") as f:
        write_keras2_tree(f)
    with h5py.File(os.path.join(directory, "keras2_full.h5"), "w") as f:
        write_keras2_full(f)
    with h5py.File(os.path.join(directory, "keras3.weights.h5"), "w") as f:
        write_keras3(f, minimal=False)
    with h5py.File(os.path.join(directory, "keras3_min.weights.h5"), "w") as f:
        write_keras3(f, minimal=True)


# ---- reading, as the Keras loaders do -------------------------------------

def load_attributes(group, name):
    """load_attributes_from_hdf5_group."""
    if name in group.attrs:
        return [n.decode("utf8") if hasattr(n, "decode") else n
                for n in group.attrs[name]]
    data, chunk_id = [], 0
    while "%s%d" % (name, chunk_id) in group.attrs:
        data.extend([n.decode("utf8") if hasattr(n, "decode") else n
                     for n in group.attrs["%s%d" % (name, chunk_id)]])
        chunk_id += 1
    return data


def same(problems, what, got, want):
    if got.dtype != np.float32 or got.shape != want.shape:
        problems.append("%s: %s %s, want float32 %s"
                        % (what, got.dtype, got.shape, want.shape))
    elif not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        problems.append("%s: values differ from the formula" % what)


def check_keras2(path, problems):
    values = weights_by_layer()
    with h5py.File(path, "r") as f:
        names = load_attributes(f, "layer_names")
        if names != [n for n, _, _ in LAYERS]:
            problems.append("layer_names %r" % names)
        for name in names:
            weight_names = load_attributes(f[name], "weight_names")
            want = ["%s/%s:0" % (name, w) for w, _ in values.get(name, [])]
            if weight_names != want:
                problems.append("%s: weight_names %r" % (name, weight_names))
                continue
            for wname, (_, val) in zip(weight_names, values[name]):
                same(problems, wname, np.asarray(f[name][wname]), val)


def check_keras3(path, problems):
    values = weights_by_layer()
    with h5py.File(path, "r") as f:
        for name, group in keras3_groups():
            vars_group = f[group]["vars"]
            if vars_group.attrs.get("name") != name:
                problems.append("%s/vars: name %r" % (group, vars_group.attrs.get("name")))
            if len(vars_group) != len(values[name]):
                problems.append("%s/vars: %d values" % (group, len(vars_group)))
                continue
            for i, (_, val) in enumerate(values[name]):
                same(problems, "%s/vars/%d" % (group, i),
                     np.asarray(vars_group[str(i)]), val)


def main(argv):
    if len(argv) == 3 and argv[1] == "write":
        write_all(argv[2])
        return 0
    if len(argv) == 4 and argv[1] == "check":
        problems = []
        check_keras2(argv[2], problems)
        check_keras3(argv[3], problems)
        for p in problems:
            print("h5py_keras.py: " + p, file=sys.stderr)
        return 1 if problems else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
