#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of `snug-bench gpt|cnn|mlp`: the W-GPT, W-CNN and W-MLP training
steps of docs/workloads.md with the same shapes, optimizers, warmup and step
counts, and the same JSON fields.

A timed step = zero the gradients, forward, cross-entropy, backward, optimizer
step; batches are random and made before the timer. `peak_rss_growth_bytes` is
the process's high-water RSS after the run minus its RSS just before the first
step (model and batches already built): the memory the steps themselves added.

  python3 bench/peers/train_torch.py gpt --steps 20 --warmup 3 --threads 2 [--amp bf16|f16] --json

--amp runs the forward pass and the loss under torch.autocast("cpu", dtype),
as snug-bench gpt --amp does; parameters, gradients and AdamW stay f32, and
f16 adds a torch.amp.GradScaler("cpu").
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from charlm_torch import GPT  # noqa: E402  (same W-GPT module as the charlm peer)


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def blas_info():
    cfg = torch.__config__.show()
    # BLAS_INFO names the BLAS the build links: mkl for PyPI's wheels, generic for
    # Debian's 1.13 (the system libblas, OpenBLAS through Debian's alternatives).
    blas = cfg.split("BLAS_INFO=", 1)[1].split(",", 1)[0] if "BLAS_INFO=" in cfg else "unknown"
    isa = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "unknown"
    return blas, isa


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench", choices=["gpt", "cnn", "mlp"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--amp", choices=["none", "bf16", "f16"], default="none")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    amp_dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(a.amp)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    n = a.steps + a.warmup
    if a.bench == "gpt":
        B, T, V = 16, 128, 65
        net = GPT(V, T, 4, 4, 128)
        opt = torch.optim.AdamW(net.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        seqs = [torch.randint(0, V, (B, T + 1)) for _ in range(n)]
        batches = [(s[:, :T].contiguous(), s[:, 1:].contiguous()) for s in seqs]
        loss_of = lambda x, y: F.cross_entropy(net(x).view(-1, V), y.view(-1))
        items, rate = B * T, "tokens_per_s"
    else:
        if a.bench == "cnn":
            B = 64
            net = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                                nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))
            shape = (B, 1, 28, 28)
        else:
            B = 128
            net = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                nn.Linear(1024, 10))
            shape = (B, 784)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        batches = [(torch.randn(shape), torch.randint(0, 10, (B,))) for _ in range(n)]
        loss_of = lambda x, y: F.cross_entropy(net(x), y)
        items, rate = B, "samples_per_s"
    params = sum(p.numel() for p in net.parameters())
    rss0 = status_kb("VmRSS")
    times, losses = [], []
    scaler = torch.amp.GradScaler("cpu", enabled=a.amp == "f16")
    for i, (x, y) in enumerate(batches):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = loss_of(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    growth = max(0, status_kb("VmHWM") - rss0) * 1024
    times.sort()
    med = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
    blas, isa = blas_info()
    out = {"bench": a.bench, "ms_per_step": med, "ms_min": times[0], "ms_max": times[-1], rate: items / (med / 1e3),
           "loss_first": losses[0], "loss_last": losses[-1], "params": params, "peak_rss_growth_bytes": growth,
           "steps": a.steps, "warmup": a.warmup, "threads": a.threads, "torch": torch.__version__, "blas": blas,
           "isa": isa, "amp": a.amp}
    print(json.dumps(out) if a.json else out)


if __name__ == "__main__":
    main()
