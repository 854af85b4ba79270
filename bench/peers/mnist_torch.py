#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of examples/mnist for the W-CNN (docs/workloads.md): the same
layers, PyTorch's default initialisation (which snug's Conv2d/Linear follow),
inputs normalised with mean 0.1307 / std 0.3081, SGD with momentum 0.9 and a
cosine (or linear) decay of the learning rate to zero over the run, batch 64, a seeded
shuffle per epoch. The shuffle comes from PyTorch's RNG, so runs compare
statistically, not bitwise.

  python3 bench/peers/mnist_torch.py --epochs 1 --lr 0.05 --seed 1337 --json
"""
import argparse
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(dir_, train):
    stem = "train" if train else "t10k"
    x = read_idx(os.path.join(dir_, f"{stem}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(dir_, f"{stem}-labels-idx1-ubyte.gz")).astype(np.int64)
    x = (x - 0.1307) / 0.3081
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


def wcnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    # Where examples/mnist looks: datasets/mnist (scripts/get_data.sh), else ../shared/data/mnist.
    repo = os.path.join(here, "..", "..")
    default_data = os.path.join(repo, "datasets", "mnist")
    if not os.path.isdir(default_data):
        default_data = os.path.join(repo, "..", "shared", "data", "mnist")
    p.add_argument("--data", default=default_data)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--decay", choices=["cosine", "linear", "none"], default="cosine")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    xtr, ytr = load(a.data, True)
    xte, yte = load(a.data, False)
    net = wcnn()
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    n = xtr.shape[0]
    steps_per_epoch = (n + a.batch - 1) // a.batch
    total = steps_per_epoch * a.epochs
    step = 0
    t0 = time.time()
    for _ in range(a.epochs):
        order = torch.randperm(n)
        for s in range(0, n, a.batch):
            if a.decay != "none":
                frac = step / total
                f = 1 - frac if a.decay == "linear" else 0.5 * (1 + math.cos(math.pi * frac))
                for g in opt.param_groups:
                    g["lr"] = a.lr * f
            idx = order[s:s + a.batch]
            opt.zero_grad()
            loss = F.cross_entropy(net(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            step += 1
    net.eval()
    with torch.no_grad():
        acc = sum((net(xte[s:s + 500]).argmax(1) == yte[s:s + 500]).sum().item() for s in range(0, 10000, 500)) / 1e4
    out = {"test_accuracy": acc, "lr": a.lr, "decay": a.decay, "seed": a.seed, "epochs": a.epochs,
           "seconds": round(time.time() - t0, 1)}
    print(json.dumps(out) if a.json else out)


if __name__ == "__main__":
    main()
