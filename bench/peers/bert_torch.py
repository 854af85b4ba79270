#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch peer of examples/bert's batch32 stage: the same masked-LM data, the
same batches in the same order, the same initial weights and optimizer, in
Hugging Face's BertForMaskedLM; it reports the validation loss to compare.

  build/release/examples/bert --steps 600 --save-init /tmp/bert_init --json > snug.json
  python3 bench/peers/bert_torch.py --init /tmp/bert_init --steps 600 --json

The data follow examples/bert/mlm_data.h exactly: a text's non-empty lines
(trailing whitespace removed), one character per token, [PAD] 0 [CLS] 1
[SEP] 2 [MASK] 3 and the sorted characters from 4; the last tenth of the
lines is the validation set; masks and the order come from splitmix64's
finalizer (mix) of the seed. Needs torch and transformers (not used by CI).
"""
import argparse
import json
import math
import os
import sys
import time

M64 = (1 << 64) - 1
PAD, CLS, SEP, MASK, FIRST = 0, 1, 2, 3, 4


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def unit(h):
    return (h >> 11) * 2.0 ** -53


def read_corpus(path, max_len):
    text = open(path, "rb").read()
    lines = [l.rstrip(b" \t\r\f\v") for l in text.split(b"\n")]
    lines = [l for l in lines if l]
    chars = sorted(set(b"".join(lines)))
    of = {c: FIRST + i for i, c in enumerate(chars)}
    n_val = len(lines) // 10
    seqs = [[CLS] + [of[c] for c in l[: max_len - 2]] + [SEP] for l in lines]
    return seqs[: len(seqs) - n_val], seqs[len(seqs) - n_val:], FIRST + len(chars)


def mask_line(ids, seed, split, index, vocab):
    inp, lab = list(ids), [-100] * len(ids)
    for p in range(1, len(ids) - 1):
        h1 = mix((seed ^ (split << 62) ^ (index << 20) ^ p) & M64)
        if unit(h1) >= 0.15:
            continue
        lab[p] = ids[p]
        h2 = mix(h1)
        v = unit(h2)
        if v < 0.8:
            inp[p] = MASK
        elif v < 0.9:
            inp[p] = FIRST + mix(h2) % (vocab - FIRST)
    return inp, lab


def order(n, seed, batch, epoch):
    o = list(range(n))
    base = mix((seed + 1000 + epoch) & M64)
    for i in range(n - 1, 0, -1):
        j = mix((base + i) & M64) % (i + 1)
        o[i], o[j] = o[j], o[i]
    return o[: n // batch * batch]


def collate(samples, torch):
    L = max(len(s[0]) for s in samples)
    ids = torch.full((len(samples), L), PAD, dtype=torch.long)
    lab = torch.full((len(samples), L), -100, dtype=torch.long)
    att = torch.zeros((len(samples), L), dtype=torch.long)
    for b, (i, l) in enumerate(samples):
        ids[b, : len(i)] = torch.tensor(i)
        lab[b, : len(l)] = torch.tensor(l)
        att[b, : len(i)] = 1
    return ids, lab, att


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--init", required=True, help="the directory examples/bert --save-init wrote")
    ap.add_argument("--data", default=os.path.join(here, "..", "..", "..", "shared", "data", "tinyshakespeare.txt"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import torch
    from transformers import BertForMaskedLM

    torch.set_num_threads(a.threads)
    train, val, vocab = read_corpus(a.data, a.max_len)
    model = BertForMaskedLM.from_pretrained(a.init, attn_implementation="eager")
    if model.config.vocab_size != vocab:
        sys.exit(f"bert_torch: --init has vocabulary {model.config.vocab_size}, the corpus {vocab}")
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay)
    model.train()
    step, epoch, losses, ms = 0, 0, [], []
    while step < a.steps:
        o = order(len(train), a.seed, a.batch, epoch)
        for k in range(0, len(o), a.batch):
            ids, lab, att = collate([mask_line(train[i], a.seed, 0, i, vocab) for i in o[k: k + a.batch]], torch)
            t0 = time.perf_counter()
            loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            ms.append((time.perf_counter() - t0) * 1e3)
            losses.append(loss.item())
            step += 1
            if step >= a.steps:
                break
        epoch += 1
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for k in range(0, len(val), 64):
            ids, lab, att = collate([mask_line(val[i], a.seed, 1, i, vocab) for i in range(k, min(k + 64, len(val)))],
                                    torch)
            logits = model(input_ids=ids, attention_mask=att).logits
            total += torch.nn.functional.cross_entropy(logits.view(-1, vocab), lab.view(-1), ignore_index=-100,
                                                       reduction="sum").item()
            count += int((lab != -100).sum())
    ms_sorted = sorted(ms[2:]) if len(ms) > 2 else sorted(ms)
    out = {"peer": "bert_torch", "torch": torch.__version__, "steps": a.steps, "batch": a.batch,
           "loss": losses[-1], "val_loss": total / max(count, 1), "step_ms": ms_sorted[len(ms_sorted) // 2]}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"bert_torch: {a.steps} steps, last loss {out['loss']:.4f}, val loss {out['val_loss']:.4f}, "
              f"{out['step_ms']:.2f} ms/step")
    return 0 if math.isfinite(out["val_loss"]) else 1


if __name__ == "__main__":
    sys.exit(main())
