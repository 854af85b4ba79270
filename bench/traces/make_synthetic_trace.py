#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes synthetic_gpt_step.json: a SYNTHETIC memory trace shaped like two
training steps of a small GPT (parameters, AdamW state, per-layer activations
kept for backward, temporaries, gradients), in the snapshot format that
memory::dump_snapshot writes. It is not a recording of a real run; it exists
so the replay bench and its tests have a stable input until nn/ can record a
real one.  Usage: python3 make_synthetic_trace.py [OUT.json]"""
import json
import random
import sys

ROUND = 512
rng = random.Random(1234)
events = []
t = 0
next_addr = 1 << 40
live = {}


def alloc(n, tag, op):
    global t, next_addr
    t += rng.randint(200, 3000)
    size = max(ROUND, (n + ROUND - 1) // ROUND * ROUND)
    addr = next_addr
    next_addr += size  # fake, unique addresses: replay only needs identity
    live[addr] = (size, n, tag, op)
    events.append({"action": "alloc", "time_ns": t, "address": addr, "size": size, "requested": n,
                   "stream": 0, "tag": tag, "op": op})
    return addr


def free(addr):
    global t
    t += rng.randint(100, 1000)
    size, n, tag, op = live.pop(addr)
    events.append({"action": "free", "time_ns": t, "address": addr, "size": size, "requested": n,
                   "stream": 0, "tag": tag, "op": op})


# Model: vocab 8192, d=512, 6 layers, batch 16 x seq 256, f32.
V, D, L, B, T = 8192, 512, 6, 16, 256
F = 4
tok = B * T
params = [alloc(V * D * 4, "parameter", "init")]
for _ in range(L):
    for n in (D * 3 * D, 3 * D, D * D, D, D * F * D, F * D, F * D * D, D, D, D, D, D):
        params.append(alloc(n * 4, "parameter", "init"))
state = []
for _ in range(2):
    for p in params:
        state.append(alloc(live[p][1], "optimizer_state", "adamw"))

for step in range(2):
    batch = alloc(tok * 8, "data", "collate")
    acts = []
    x = alloc(tok * D * 4, "activation", "embedding")
    acts.append(x)
    for layer in range(L):
        for op, n in (("layer_norm", tok * D), ("linear", tok * 3 * D), ("softmax", B * 8 * T * T),
                      ("matmul", tok * D), ("linear", tok * D), ("layer_norm", tok * D),
                      ("linear", tok * F * D), ("gelu", tok * F * D), ("linear", tok * D)):
            tmp = alloc(n * 2, "temporary", op) if rng.random() < 0.5 else None
            acts.append(alloc(n * 4, "activation", op))
            if tmp:
                free(tmp)
    logits = alloc(tok * V * 4, "activation", "lm_head")
    loss = alloc(4, "activation", "cross_entropy")
    grads = []
    g = alloc(tok * V * 4, "gradient", "cross_entropy_backward")
    free(logits)
    for a in reversed(acts):
        ga = alloc(live[a][1], "gradient", live[a][3] + "_backward")
        free(a)
        free(g)
        g = ga
        if rng.random() < 0.15:
            grads.append(alloc(live[params[rng.randrange(len(params))]][1], "gradient", "accumulate"))
    free(g)
    free(loss)
    free(batch)
    for p in params:
        w = alloc(live[p][1], "workspace", "adamw_step")
        free(w)
    for gr in grads:
        free(gr)

for a in list(live):
    free(a)

settings = ("round=512,small_threshold=1048576,small_segment=2097152,large_segment=20971520,"
            "large_threshold=10485760,large_round=2097152,max_split_size=none,max_split_tolerance=20971520,fit=best")
snap = {"format": "snug-memory-snapshot", "version": 1, "synthetic": True,
        "note": "SYNTHETIC trace from bench/traces/make_synthetic_trace.py, not a recording",
        "devices": [{"device": "cuda:0", "backend": "synthetic", "settings": settings, "capacity": None,
                     "segments": [], "events": events}]}
out = sys.argv[1] if len(sys.argv) > 1 else "synthetic_gpt_step.json"
with open(out, "w") as f:
    json.dump(snap, f, separators=(",", ":"))
print(f"wrote {out}: {len(events)} events")
