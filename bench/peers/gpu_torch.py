#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of `snug-bench cuda_gemm` and `snug-bench cuda_gpt`, run side by
side with them by tools/gpu_check.sh on the GPU machine. Prints one JSON line.

  python3 bench/peers/gpu_torch.py gemm --n 8192 --dtype bf16
  python3 bench/peers/gpu_torch.py gpt --layers 12 --embd 768 --heads 12 --block 1024 --batch 8 --amp bf16
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from charlm_torch import GPT  # noqa: E402  (the same W-GPT module as the CPU peers)


def gemm(a):
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    x = torch.randn(a.n, a.n, device="cuda", dtype=dt)
    y = torch.randn(a.n, a.n, device="cuda", dtype=dt)
    for _ in range(2):
        torch.matmul(x, y)
    torch.cuda.synchronize()
    s = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        torch.matmul(x, y)
        torch.cuda.synchronize()
        s.append(time.perf_counter() - t0)
    med = statistics.median(s)
    return {"bench": "torch_gemm", "n": a.n, "dtype": a.dtype, "tf32": a.tf32, "tflops": 2 * a.n ** 3 / med / 1e12,
            "ms": med * 1e3}


def gpt(a):
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    V, T, B = a.vocab, a.block, a.batch
    net = GPT(V, T, a.layers, a.heads, a.embd, a.gelu).cuda()
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    amp = {"none": None, "bf16": torch.bfloat16, "f16": torch.float16}[a.amp]
    torch.cuda.reset_peak_memory_stats()
    ms, losses = [], []
    for s in range(a.warmup + a.steps):
        seq = torch.randint(0, V, (B, T + 1), device="cuda")
        x, y = seq[:, :T].contiguous(), seq[:, 1:].contiguous()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            loss = F.cross_entropy(net(x).view(-1, V).float(), y.view(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if s >= a.warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(ms)
    # Model FLOPs utilisation counted as snug-bench cuda_gpt counts it: 6 N + 12 L C T a token.
    params = sum(p.numel() for p in net.parameters())
    flops_per_token = 6 * params + 12 * a.layers * a.embd * T
    name = torch.cuda.get_device_name(0)
    peak = a.peak_tflops
    if peak == 0 and ("H100" in name or "H200" in name):
        peak = 989.4 if amp is not None else (494.7 if a.tf32 else 66.9)
    tokens_per_s = B * T / (med / 1e3)
    return {"bench": "torch_gpt", "layers": a.layers, "embd": a.embd, "block": T, "batch": B, "vocab": V,
            "gelu": a.gelu, "amp": a.amp, "ms_per_step": med, "tokens_per_s": tokens_per_s, "params": params,
            "flops_per_token": flops_per_token, "peak_tflops": peak,
            "mfu": tokens_per_s * flops_per_token / (peak * 1e12) if peak > 0 else -1, "gpu": name,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(), "loss_first": losses[0],
            "loss_last": losses[-1], "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench", choices=["gemm", "gpt"])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=65)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--amp", default="none", choices=["none", "bf16", "f16"])
    ap.add_argument("--gelu", default="none", choices=["none", "tanh"])
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "torch_" + a.bench, "skipped": "torch.cuda.is_available() is False"}))
        return
    print(json.dumps(gemm(a) if a.bench == "gemm" else gpt(a)))


if __name__ == "__main__":
    main()
