#!/usr/bin/env python3
"""bench_summary.py — the ratios `make bench` reports from its results:
thread scaling, bfloat16 over float32, augmentation's cost."""
import json
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "bench/results"


def rate(name):
    with open(os.path.join(folder, name)) as f:
        return json.load(f)["images_per_second"]


print("cifar10 8 replicas, 2 threads / 1 thread: %.2fx"
      % (rate("cifar10_2threads.json") / rate("cifar10_1thread.json")))
print("cifar10 2 threads, mixed_bfloat16 / float32: %.2fx"
      % (rate("cifar10_bf16.json") / rate("cifar10_2threads.json")))
print("cifar10_augmented batch 32, augmented / plain: %.2fx"
      % (rate("cifar10_augmented_augment.json")
         / rate("cifar10_augmented_plain.json")))
