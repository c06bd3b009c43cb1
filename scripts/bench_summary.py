#!/usr/bin/env python3
"""bench_summary.py — the ratios `make bench` reports from its results:
thread scaling, bfloat16 over float32, augmentation's cost, a busy
machine's cost; and, where
bench/peers/run_peers.sh left peer_*.json reports, mxu against the fastest
peer (PyTorch, TF-Keras) on each model and precision."""
import glob
import json
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "bench/results"


def load(name):
    with open(os.path.join(folder, name)) as f:
        return json.load(f)


def rate(name):
    return load(name)["images_per_second"]


print("cifar10 8 replicas, 2 threads / 1 thread: %.2fx"
      % (rate("cifar10_2threads.json") / rate("cifar10_1thread.json")))
for model, f32, bf16 in (
        ("cifar10", "cifar10_2threads.json", "cifar10_bf16.json"),
        ("fashion_mnist", "fashion_mnist_2threads.json",
         "fashion_mnist_bf16.json"),
        ("resnet20", "resnet20_2threads.json", "resnet20_bf16.json"),
        ("mobilenetv2_32", "mobilenetv2_32_2threads.json",
         "mobilenetv2_32_bf16.json")):
    print("%s 2 threads, mixed_bfloat16 / float32: %.2fx"
          % (model, rate(bf16) / rate(f32)))
print("cifar10_augmented batch 32, augmented / plain: %.2fx"
      % (rate("cifar10_augmented_augment.json")
         / rate("cifar10_augmented_plain.json")))
# MobileNetV3Small as tf.keras 2 writes it (its hard swish as ops on whole
# tensors: x * relu6(x + 3) * (1/6)) against Keras 3's (one hard_silu,
# fused into the BatchNormalization before it).
if os.path.exists(os.path.join(folder, "mobilenetv3small_32_tf2_2threads.json")):
    print("mobilenetv3small 2 threads, tf.keras 2's file / Keras 3's: %.2fx"
          % (rate("mobilenetv3small_32_tf2_2threads.json")
             / rate("mobilenetv3small_32_2threads.json")))
# scripts/bench_busy.sh: beside another process's busy loop.
for level in (19, 0):
    busy = "fashion_mnist_busy_nice%d.json" % level
    if os.path.exists(os.path.join(folder, busy)):
        print("fashion_mnist beside a busy loop at nice %d / alone: %.2fx"
              " (its fair share: %s)"
              % (level, rate(busy) / rate("fashion_mnist_2threads.json"),
                 "1.00x" if level == 19 else "0.67x on 2 cores"))

# The peers' (model, precision) -> the Makefile's mxu report of the same
# configuration.
MXU_REPORTS = {
    ("cifar", "float32"): "cifar10_2threads.json",
    ("fashion", "float32"): "fashion_mnist_2threads.json",
    ("cifar", "mixed_bfloat16"): "cifar10_bf16.json",
    ("fashion", "mixed_bfloat16"): "fashion_mnist_bf16.json",
    ("resnet20", "mixed_bfloat16"): "resnet20_bf16.json",
    ("mobilenetv2", "mixed_bfloat16"): "mobilenetv2_32_bf16.json",
    ("resnet20", "float32"): "resnet20_2threads.json",
    ("mobilenetv2", "float32"): "mobilenetv2_32_2threads.json",
    ("resnet50", "float32"): "resnet50_32_2threads.json",
    ("rows_conv1d", "float32"): "fashion_rows_conv1d_2threads.json",
    ("rows_rnn", "float32"): "fashion_rows_rnn_2threads.json",
    ("rows_transformer", "float32"): "fashion_rows_transformer_2threads.json",
}


def peer_name(p):
    if p.get("compiled"):
        return {"torch": "torch.compile", "keras": "keras xla"}.get(
            p["framework"], p["framework"] + " compiled")
    return p["framework"]


peers = []
for path in sorted(glob.glob(os.path.join(folder, "peer_*.json"))):
    try:
        with open(path) as f:
            peers.append(json.load(f))
    except (OSError, ValueError) as e:
        print("peers: %s: %s" % (os.path.basename(path), e))

if peers:
    print("mxu / best peer, same batch and threads (peers: bench/peers/):")
    keys = list(MXU_REPORTS)
    keys += sorted({(p["model"], p["precision"]) for p in peers} - set(keys))
    for model, precision in keys:
        group = [p for p in peers
                 if p["model"] == model and p["precision"] == precision]
        if not group:
            continue
        best = max(group, key=lambda p: p["images_per_second"])
        mxu_file = MXU_REPORTS.get((model, precision))
        mxu = None
        if mxu_file and os.path.exists(os.path.join(folder, mxu_file)):
            mxu = load(mxu_file)
        if mxu:
            line = ("%s %s: mxu %.1f images/s, best peer %s %.1f -> %.2fx"
                    % (model, precision, mxu["images_per_second"],
                       peer_name(best), best["images_per_second"],
                       mxu["images_per_second"] / best["images_per_second"]))
        else:
            line = ("%s %s: no mxu result, best peer %s %.1f images/s"
                    % (model, precision, peer_name(best),
                       best["images_per_second"]))
        # Say so where a peer did not run what mxu ran.
        if mxu:
            notes = []
            for key in ("batch_size", "threads"):
                if best.get(key) != mxu.get(key):
                    notes.append("peer %s %s, mxu's %s"
                                 % (key.replace("_", " "), best.get(key), mxu.get(key)))
            if best.get("cpu") != mxu.get("cpu"):
                notes.append("another CPU: %s" % best.get("cpu"))
            if notes:
                line += " [" + "; ".join(notes) + "]"
        print(line)
        print("  " + ", ".join(
            "%s %.1f" % (peer_name(p), p["images_per_second"])
            for p in sorted(group, key=lambda p: -p["images_per_second"])))
