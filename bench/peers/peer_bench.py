#!/usr/bin/env python3
"""peer_bench.py — the training speed of the models `mxu bench` times, in
PyTorch or in TF-Keras, on the same batch, thread count and kind of data, so
that `make bench` can set mxu's images/s beside a peer's.

Times full training steps (forward, backward, Adam update; the recipes'
sparse categorical cross-entropy) on random in-memory data: uint8-range
float images and random labels, as mxu bench does. Two warm-up steps first
(the first also traces the Keras step function), one more before them when
torch.compile or XLA compiles, then REPEATS runs of STEPS steps each; the
median images/s of the repeats is reported.

usage: peer_bench.py --framework torch|keras
                     --model fashion|cifar|resnet20|mobilenetv2|resnet50|
                             rows_conv1d|rows_rnn|rows_transformer (keras)
                     --batch-size B --threads T
                     [--precision float32|mixed_bfloat16]
                     [--compile] [--xla] [--steps N] [--repeats R]
                     [--report OUT.json]

--compile is torch.compile (torch only), --xla is Keras' jit_compile=True
(keras only). Keras builds the model from the same JSON file mxu reads; torch
builds an equivalent nn.Module (see torch_model() for where it differs).

Not a dependency of mxu's build or tests: run by bench/peers/run_peers.sh."""
import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# model name -> (the Keras JSON mxu bench reads, input shape HWC)
MODELS = {
    "fashion": ("models/fashion_mnist.json", (28, 28, 1)),
    "cifar": ("models/cifar10.json", (32, 32, 3)),
    "resnet20": ("models/resnet20.json", (32, 32, 3)),
    "mobilenetv2": ("tests/keras_apps/MobileNetV2_32.k3.json", (32, 32, 3)),
    "resnet50": ("tests/keras_apps/ResNet50_32.k3.json", (32, 32, 3)),
    # Fashion-MNIST's 28 rows of 28 pixels: Keras only (no torch module).
    "rows_conv1d": ("models/fashion_rows_conv1d.json", (28, 28)),
    "rows_rnn": ("models/fashion_rows_rnn.json", (28, 28)),
    "rows_transformer": ("models/fashion_rows_transformer.json", (28, 28)),
}
KERAS_ONLY = ("rows_conv1d", "rows_rnn", "rows_transformer")
CLASSES = 10
WARMUP_STEPS = 2


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", required=True, choices=["torch", "keras"])
    p.add_argument("--model", required=True, choices=sorted(MODELS))
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="float32",
                   choices=["float32", "mixed_bfloat16"])
    p.add_argument("--compile", action="store_true", help="torch.compile (torch)")
    p.add_argument("--xla", action="store_true", help="jit_compile=True (keras)")
    p.add_argument("--keras", default="auto", choices=["auto", "keras", "tf_keras"],
                   help="Keras package: auto tries Keras 3, then tf_keras")
    p.add_argument("--steps", type=int, default=10, help="timed steps per repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--report", help="write a JSON report here")
    a = p.parse_args()
    if a.compile and a.framework != "torch":
        p.error("--compile is for --framework torch (use --xla for keras)")
    if a.xla and a.framework != "keras":
        p.error("--xla is for --framework keras (use --compile for torch)")
    if a.framework == "torch" and a.model in KERAS_ONLY:
        p.error("--model %s has no torch module: use --framework keras" % a.model)
    return a


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def random_batch(np, batch, shape):
    """Images of whole numbers 0..255 as float32 (the recipes feed raw pixels),
    labels 0..9; the same batch every step, as the timing is of the steps."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(batch,) + shape).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(batch,)).astype(np.int64)
    return x, y


def time_repeats(step, sync, a):
    """The first step alone (for its time: it traces, and compiles with
    --compile / --xla), the rest of the warm-up, then `a.repeats` timings of
    `a.steps` steps. Returns (images/s of each repeat, first step's seconds,
    warm-up steps in all)."""
    warmup = WARMUP_STEPS + (1 if a.compile or a.xla else 0)
    start = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        step()
    sync()
    batch, steps, repeats = a.batch_size, a.steps, a.repeats
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        rates.append(batch * steps / (time.perf_counter() - start))
    return rates, first, warmup


# ---------------------------------------------------------------- PyTorch

def torch_model(name):
    """The Keras model as an nn.Module, channels_last like Keras' NHWC.

    Everywhere: the Keras models end in softmax and train on
    sparse_categorical_crossentropy; here the softmax is left out and
    CrossEntropyLoss takes the logits (the same loss; Keras also computes it
    from the logits it finds under the softmax). Kernels glorot_uniform and
    biases zero as in Keras; BatchNormalization with Keras' epsilon and
    momentum (torch's momentum is 1 - Keras')."""
    import torch.nn as nn

    def bn(c, keras_momentum=0.99):
        return nn.BatchNorm2d(c, eps=1e-3, momentum=1.0 - keras_momentum)

    class FlattenHWC(nn.Module):
        # Keras' Flatten takes NHWC rows; on a channels_last tensor this
        # permute is a view, where nn.Flatten (NCHW order) would copy.
        def forward(self, x):
            return x.permute(0, 2, 3, 1).flatten(1)

    if name == "fashion":
        # models/fashion_mnist.json: Conv2D(64, 3x3 valid) -> MaxPooling2D(2)
        # -> relu -> Flatten -> Dense(10) -> softmax. Exact.
        net = nn.Sequential(
            nn.Conv2d(1, 64, 3), nn.MaxPool2d(2), nn.ReLU(),
            FlattenHWC(), nn.Linear(13 * 13 * 64, CLASSES))
    elif name == "cifar":
        # models/cifar10.json, as bench/peers/cifar_torch.py (exact), but
        # flattening in Keras' NHWC order as a view (FlattenHWC), where
        # cifar_torch.py's nn.Flatten copies a channels_last tensor.
        net = nn.Sequential(
            bn(3),
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.25),
            bn(32),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3), nn.ReLU(),
            nn.MaxPool2d(2), nn.Dropout(0.25),
            FlattenHWC(), nn.Linear(7 * 7 * 64, 512), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(512, CLASSES))
    elif name == "resnet20":
        net = ResNet20(nn, bn)
    elif name == "mobilenetv2":
        # tests/keras_apps/MobileNetV2_32.k3.json is keras.applications
        # MobileNetV2(alpha 1, input 32x32x3, include_top, 10 classes): the
        # same [t, c, n, s] table, ReLU6, bias-free convolutions as
        # torchvision's, and the stem keeps its stride 2 (Keras' Conv1 is 3x3
        # stride 2 'same'), so 32x32 -> 16x16 -> ... -> 1x1 as in Keras.
        # Differences: (1) where Keras pads a stride-2 convolution on the
        # bottom/right only (Conv1 'same', ZeroPadding2D((0,1),(0,1)) before
        # each stride-2 depthwise), torchvision pads 1 on every side: the same
        # shapes and FLOPs, windows shifted by one pixel, and no separate
        # padding copy; (2) torchvision's Dropout(0.2) before the classifier
        # is removed, as Keras has none.
        from functools import partial
        import torchvision
        net = torchvision.models.mobilenet_v2(
            num_classes=CLASSES,
            norm_layer=partial(nn.BatchNorm2d, eps=1e-3, momentum=0.001))
        net.classifier = nn.Linear(1280, CLASSES)
    elif name == "resnet50":
        # tests/keras_apps/ResNet50_32.k3.json is keras.applications
        # ResNet50(input 32x32x3, include_top, 10 classes): torchvision's
        # resnet50 has the same stages (7x7/2 stem, 3x3/2 max pooling,
        # bottlenecks [3, 4, 6, 3], stride on the 3x3 as Keras' v1.5 puts it
        # on the first 1x1 — the same shapes and FLOPs but for that 1x1),
        # so 32x32 -> 16 -> 8 -> ... -> 1x1 as in Keras. Differences: its
        # convolutions have no bias (Keras' have), BatchNormalization
        # epsilon 1.001e-5 as Keras'.
        from functools import partial
        import torchvision
        net = torchvision.models.resnet50(
            num_classes=CLASSES,
            norm_layer=partial(nn.BatchNorm2d, eps=1.001e-5, momentum=0.01))
    else:
        raise ValueError(name)

    def keras_init(m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)  # glorot_uniform, same fans
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    net.apply(keras_init)
    return net


def ResNet20(nn, bn):
    """models/resnet20.json: the Keras examples' ResNet v1, depth 20. Each
    block conv-BN-relu-conv-BN, + shortcut, relu; at a stage's first block
    the shortcut is a 1x1 stride-2 conv with bias and no BN. All convs have
    biases. AveragePooling2D(8) -> Flatten -> Dense(10, softmax).
    Difference: Keras' 3x3 stride-2 'same' pads bottom/right only (0, 1);
    padding=1 here pads both sides: same shapes and FLOPs, windows shifted by
    one pixel."""
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, padding=1)
            self.bn1 = bn(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
            self.bn2 = bn(cout)
            self.shortcut = (nn.Conv2d(cin, cout, 1, stride)
                             if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return F.relu(self.shortcut(x) + y)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), bn(16), nn.ReLU())
            blocks, cin = [], 16
            for stage, cout in enumerate((16, 32, 64)):
                for b in range(3):
                    blocks.append(Block(cin, cout, 2 if stage > 0 and b == 0 else 1))
                    cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AvgPool2d(8)
            self.fc = nn.Linear(64, CLASSES)

        def forward(self, x):
            x = self.pool(self.blocks(self.stem(x)))
            return self.fc(x.flatten(1))  # 1x1 spatial: HWC = CHW order

    return Net()


def run_torch(a, shape):
    import contextlib
    import numpy as np
    import torch
    import torch.nn as nn

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only allowed before the first parallel work
        pass
    torch.manual_seed(1)

    net = torch_model(a.model).to(memory_format=torch.channels_last)
    net.train()  # Dropout and BatchNormalization in training mode, as in fit
    params = list(net.parameters())
    # The fused CPU Adam (torch >= 2.4) is torch's fastest; Keras' epsilon.
    try:
        opt = torch.optim.Adam(params, lr=1e-3, eps=1e-7, fused=True)
        optimizer = "Adam(fused)"
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.Adam(params, lr=1e-3, eps=1e-7)
        optimizer = "Adam"
    loss_fn = nn.CrossEntropyLoss()
    model = torch.compile(net) if a.compile else net

    xn, yn = random_batch(np, a.batch_size, shape)
    # NHWC data seen as an NCHW tensor in channels_last memory: no copy.
    x = torch.from_numpy(xn).permute(0, 3, 1, 2)
    assert x.is_contiguous(memory_format=torch.channels_last)
    y = torch.from_numpy(yn)

    def autocast():
        if a.precision == "mixed_bfloat16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    last = {}

    def step():
        with autocast():
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last["loss"] = loss

    def sync():  # CPU eager is synchronous; read the loss all the same
        last["loss"].item()

    rates, first_step, warmup = time_repeats(step, sync, a)

    versions = {"torch": torch.__version__}
    try:  # only mobilenetv2 and resnet50 need torchvision
        import torchvision
        versions["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    return rates, versions, {"optimizer": optimizer,
                             "warmup_steps": warmup,
                             "first_step_seconds": first_step,
                             "compiler": "torch.compile" if a.compile else None}


# ------------------------------------------------------------------ Keras

def keras_config(path, precision):
    """The model JSON; for mixed_bfloat16 each layer's own dtype is dropped
    (the files name float32 on every layer, which would override the global
    policy) so that the layers take the global mixed_bfloat16 policy."""
    with open(path) as f:
        config = json.load(f)
    if precision == "mixed_bfloat16":
        for layer in config["config"]["layers"]:
            if layer["class_name"] != "InputLayer":
                layer["config"].pop("dtype", None)
    return json.dumps(config)


def load_keras(a, path):
    """(keras module, model): Keras 3 first, which reads the Keras 3 JSON;
    the Keras 2 JSON (models/*.json) it cannot deserialize, so tf_keras."""
    text = keras_config(path, a.precision)
    errors = []
    for name in (["keras", "tf_keras"] if a.keras == "auto" else [a.keras]):
        try:
            module = __import__(name)
            if name == "keras" and not module.__version__.startswith("3"):
                raise ImportError("keras %s is not Keras 3" % module.__version__)
            module.mixed_precision.set_global_policy(
                "mixed_bfloat16" if a.precision == "mixed_bfloat16" else "float32")
            return module, module.models.model_from_json(text)
        except Exception as e:  # noqa: BLE001 — report each and try the next
            errors.append("%s: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0][:200]))
    sys.exit("peer_bench: cannot load %s with Keras:\n  %s" % (path, "\n  ".join(errors)))


def run_keras(a, path, shape):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    # Before any op runs; inter-op 1 as mxu runs one op at a time.
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.random.set_seed(1)

    keras, model = load_keras(a, path)
    # The recipes' compile (models/*.json's compile_config). jit_compile is
    # given either way: Keras 3's default "auto" would pick XLA by itself.
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-7),
                  loss="sparse_categorical_crossentropy",
                  metrics=["sparse_categorical_accuracy"],
                  jit_compile=bool(a.xla))

    xn, yn = random_batch(np, a.batch_size, shape)
    x, y = tf.constant(xn), tf.constant(yn)

    # One train_on_batch is one step of fit's compiled train function on an
    # in-memory batch; it returns the loss as a number, so each step has
    # finished when it returns.
    def step():
        model.train_on_batch(x, y)

    rates, first_step, warmup = time_repeats(step, lambda: None, a)

    versions = {"tensorflow": tf.__version__,
                keras.__name__: keras.__version__}
    return rates, versions, {"optimizer": "Adam",
                             "keras_package": keras.__name__,
                             "warmup_steps": warmup,
                             "first_step_seconds": first_step,
                             "compiler": "xla" if a.xla else None}


def main():
    a = parse_args()
    # Thread pools size themselves from these when the framework loads.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    path, shape = MODELS[a.model]
    path = os.path.join(ROOT, path)

    if a.framework == "torch":
        rates, versions, extra = run_torch(a, shape)
    else:
        rates, versions, extra = run_keras(a, path, shape)
    versions["python"] = platform.python_version()

    median = statistics.median(rates)
    compiled = a.compile or a.xla
    label = " torch.compile" if a.compile else " xla" if a.xla else ""
    print("peer %s %s %s%s %d thread%s: %.1f images/s (median of %d)"
          % (a.framework, a.model, a.precision, label, a.threads,
             "" if a.threads == 1 else "s", median, len(rates)))
    sys.stdout.flush()

    if a.report:
        report = {
            "framework": a.framework,
            "model": a.model,
            "model_file": os.path.relpath(path, ROOT),
            "batch_size": a.batch_size,
            "threads": a.threads,
            "precision": a.precision,
            "compiled": compiled,
            "compiler": extra.pop("compiler"),
            "steps": a.steps,
            "images_per_second": median,
            "ms_per_step": 1000.0 * a.batch_size / median,
            "repeats": rates,
            "versions": versions,
            "cpu": cpu_name(),
        }
        report.update(extra)
        os.makedirs(os.path.dirname(os.path.abspath(a.report)), exist_ok=True)
        with open(a.report, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
