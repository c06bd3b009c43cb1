#!/usr/bin/env python3
"""cifar_torch.py — the "cifar" reference recipe in PyTorch with Keras'
semantics (glorot_uniform kernels, zero biases, BatchNormalization momentum
0.99 / epsilon 1e-3, Adam epsilon 1e-7, raw 0..255 pixels, batch 1024, the
last partial batch dropped): an independent peer for mxu's accuracy and
speed. Reads the same CIFAR-10 binary files.

usage: cifar_torch.py DATA_DIR [EPOCHS] [SEED] [THREADS]"""
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn


def load(data_dir, names):
    xs, ys = [], []
    for name in names:
        path = os.path.join(data_dir, name)
        opener = gzip.open if not os.path.exists(path) else open
        path = path if os.path.exists(path) else path + ".gz"
        with opener(path, "rb") as f:
            raw = np.frombuffer(f.read(), dtype=np.uint8).reshape(-1, 3073)
        ys.append(raw[:, 0].astype(np.int64))
        xs.append(raw[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32))
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


def keras_init(module):
    if isinstance(module, (nn.Conv2d, nn.Linear)):
        nn.init.xavier_uniform_(module.weight)  # glorot_uniform, same fans
        nn.init.zeros_(module.bias)


def model():
    bn = lambda c: nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)
    return nn.Sequential(
        bn(3),
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Dropout(0.25),
        bn(32),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(512, 10))


def main():
    data_dir = sys.argv[1]
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 2)
    torch.manual_seed(seed)
    x, y = load(data_dir, ["data_batch_%d.bin" % i for i in range(1, 6)])
    tx, ty = load(data_dir, ["test_batch.bin"])
    net = model()
    net.apply(keras_init)
    net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    batch = 1024
    for epoch in range(epochs):
        net.train()
        order = torch.randperm(len(x))
        start, correct, total = time.time(), 0, 0
        for step in range(len(x) // batch):
            idx = order[step * batch:(step + 1) * batch]
            xb = x[idx].contiguous(memory_format=torch.channels_last)
            out = net(xb)
            loss = loss_fn(out, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += (out.argmax(1) == y[idx]).sum().item()
            total += batch
        seconds = time.time() - start
        print("epoch %d: train accuracy %.4f, %.1f s, %.0f images/s"
              % (epoch + 1, correct / total, seconds, total / seconds))
    net.eval()
    with torch.no_grad():
        pred = torch.cat([net(tx[i:i + batch]).argmax(1) for i in range(0, len(tx), batch)])
    print("test accuracy %.4f" % (pred == ty).float().mean().item())


if __name__ == "__main__":
    main()
