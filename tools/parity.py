#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch parity for snug's W-GPT (not run in CI; needs torch and safetensors).

  build/release/examples/charlm --steps 50 --save /tmp/gpt.safetensors --json
  build/release/bench/snug-bench gpt_dump --ckpt /tmp/gpt.safetensors --out /tmp/gpt_dump.safetensors
  python3 tools/parity.py /tmp/gpt.safetensors /tmp/gpt_dump.safetensors

Loads the snug checkpoint's weights into the equivalent PyTorch model
(bench/peers/charlm_torch.py), runs the same batch, and compares logits,
loss and every parameter gradient with snug's. Exits 1 on a mismatch.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench", "peers"))
from charlm_torch import GPT  # noqa: E402


def torch_name(snug_name):
    # snug nests attention as blocks.i.attn.{qkv,proj}; the peer has them on the block.
    return snug_name.replace(".attn.", ".")


def main():
    ckpt, dump = sys.argv[1], sys.argv[2]
    with safe_open(ckpt, "pt") as f:
        md = f.metadata()
    cfg = {k: int(md["gpt." + k]) for k in ("vocab", "block", "layers", "heads", "embd")}
    model = GPT(cfg["vocab"], cfg["block"], cfg["layers"], cfg["heads"], cfg["embd"])
    weights = {k[len("model."):]: v for k, v in load_file(ckpt).items() if k.startswith("model.")}
    state = {torch_name(k): v for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert not missing, missing
    d = load_file(dump)
    x, y = d["x"], d["y"]
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, cfg["vocab"]), y.view(-1))
    loss.backward()
    report = {"logits_max_abs_diff": (logits.detach() - d["logits"]).abs().max().item(),
              "loss_snug": d["loss"].item(), "loss_torch": loss.item(),
              "loss_abs_diff": abs(d["loss"].item() - loss.item())}
    worst = 0.0
    snug_of = {torch_name(k): k for k in weights}
    for name, p in model.named_parameters():
        snug_grad = d["grad." + snug_of[name]]
        rel = ((p.grad - snug_grad).abs().max() / (p.grad.abs().max() + 1e-12)).item()
        worst = max(worst, rel)
    report["grad_max_rel_diff"] = worst
    ok = report["logits_max_abs_diff"] < 1e-4 and report["loss_abs_diff"] < 1e-5 and worst < 1e-3
    report["ok"] = ok
    print(json.dumps(report))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
