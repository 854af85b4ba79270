#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of examples/charlm: the same W-GPT model, initialisation,
optimizer (AdamW, weight decay on matrices only), schedule (linear warmup then
cosine to lr/10), 90/10 split and validation (mean loss over 50 batches).
Batches come from PyTorch's own RNG, so the runs are statistically, not
bitwise, comparable; compare validation losses at equal steps.

  python3 bench/peers/charlm_torch.py --steps 3000 --seed 1337 --json
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, embd, heads, gelu="none"):
        super().__init__()
        self.gelu = gelu  # "none" (erf) or "tanh" (GPT-2's approximation)
        self.ln_1 = nn.LayerNorm(embd)
        self.qkv = nn.Linear(embd, 3 * embd)
        self.proj = nn.Linear(embd, embd)
        self.ln_2 = nn.LayerNorm(embd)
        self.fc = nn.Linear(embd, 4 * embd)
        self.fc_proj = nn.Linear(4 * embd, embd)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch 1.x (Debian's 1.13): the same math, written out
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            mask = torch.ones(T, T, dtype=torch.bool).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate=self.gelu))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, embd, gelu="none"):
        super().__init__()
        self.wte = nn.Embedding(vocab, embd)
        self.wpe = nn.Embedding(block, embd)
        self.blocks = nn.ModuleList([Block(embd, heads, gelu) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embd)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0, 0.02)
        for b in self.blocks:
            nn.init.normal_(b.proj.weight, 0, 0.02 / math.sqrt(2 * layers))
            nn.init.normal_(b.fc_proj.weight, 0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="examples/charlm/data/tinyshakespeare.txt")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-batches", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    text = open(a.data, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(len(data) * 0.9)
    train, val = data[:n], data[n:]

    def batch(d, gen):
        ix = torch.randint(len(d) - a.block - 1, (a.batch,), generator=gen)
        x = torch.stack([d[i:i + a.block] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + a.block] for i in ix])
        return x, y

    model = GPT(len(chars), a.block, a.layers, a.heads, a.embd)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    warmup = min(100, a.steps)

    def lr_at(s):
        if s < warmup:
            return a.lr * (s + 1) / warmup
        p = (s - warmup) / max(a.steps - warmup, 1)
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    gen = torch.Generator().manual_seed(a.seed + 1000)
    times = []
    loss = None
    for s in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        x, y = batch(train, gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1))
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1000)
        if not a.json and (s + 1) % 100 == 0:
            print(f"step {s + 1} loss {loss.item():.4f}", flush=True)
    model.eval()
    egen = torch.Generator().manual_seed(a.seed + 2000)
    with torch.no_grad():
        vl = sum(F.cross_entropy(model(x).view(-1, len(chars)), y.view(-1)).item()
                 for x, y in (batch(val, egen) for _ in range(a.eval_batches))) / a.eval_batches
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"val_loss": vl, "train_loss": loss.item(), "ms_per_step": med,
                      "tokens_per_s": a.batch * a.block / (med / 1000), "steps": a.steps, "seed": a.seed,
                      "torch": torch.__version__, "threads": a.threads}))


if __name__ == "__main__":
    main()
