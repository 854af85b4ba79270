#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hugging Face parity for snug's GPT-2 and BERT loaders and its byte-level BPE.

  cmake --build --preset release --target snug-hf snug-tokenize
  python3 tools/hf_parity.py --build build/release

Needs pip's transformers, torch, safetensors and tokenizers (nothing is
downloaded but the packages: every model is randomly initialised here). Not
run in CI. For each case it builds a small model with transformers
(GPT2LMHeadModel; BertForMaskedLM; BertForSequenceClassification), saves it
with save_pretrained (config.json + model.safetensors) into a temporary
directory, runs it in eval mode in f32 on seeded random ids (BERT: random
token types, and rows padded at the end, with attention_mask 1 at real
tokens, given to snug as padding_mask = not attention_mask), runs
`snug-hf gpt2|bert` on the same directory and ids, and compares every output
at every position (padded ones too): max |snug - HF| / max |HF| <= 1e-4.
Then it trains a byte-level BPE with tokenizers on README.md and docs/*.md
(tools/bpe_parity.py's helpers) and checks that snug-tokenize gives the same
ids on README.md, every docs/*.md and bpe_parity's hard cases (with the
reference's encode_special_tokens on: snug does not search text for added
tokens, docs/data.md).

Prints a table and exits 0 when every row matches, 1 otherwise (a row whose
program is missing says "not built").

  python3 tools/hf_parity.py --smoke build/release/examples/snug-hf

needs no Python packages: a GPT-2 checkpoint written by hand (random
embeddings, blocks that add nothing) whose logits are worked out here, and a
misspelt input name. ctest runs it (example_snug_hf).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bpe_parity  # noqa: E402  (run_snug, HARD_CASES, first_difference)

TOLERANCE = 1e-4

# name, GPT2Config fields, (batch, length)
GPT2_CASES = [
    ("tiny", dict(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=128), (3, 40)),
    ("small", dict(n_layer=4, n_embd=128, n_head=4, vocab_size=5000, n_positions=128), (2, 128)),
    ("tiny, gelu, n_inner 2x", dict(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=128, n_inner=128,
                                    activation_function="gelu", layer_norm_epsilon=1e-6), (2, 33)),
]
# name, BertConfig fields, (batch, length), labels (0: BertForMaskedLM)
BERT_CASES = [
    ("tiny", dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=256, vocab_size=1000,
                  max_position_embeddings=128), (3, 40), 0),
    ("small", dict(num_hidden_layers=4, hidden_size=128, num_attention_heads=4, intermediate_size=512,
                   vocab_size=5000, max_position_embeddings=128), (2, 128), 0),
    ("tiny, classifier", dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=256,
                              vocab_size=1000, max_position_embeddings=128), (3, 40), 3),
]


class Row:
    def __init__(self, check, case, output="", shape="", diff=None, ref=None, status=""):
        self.check, self.case, self.output, self.shape = check, case, output, shape
        self.diff, self.ref, self.status = diff, ref, status

    @property
    def ok(self):
        return self.status == "match"


def compare(check, case, name, got, want):
    diff = float((got - want).abs().max())
    ref = float(want.abs().max())
    rel = diff / ref if ref > 0 else diff
    status = "match" if tuple(got.shape) == tuple(want.shape) and rel <= TOLERANCE else "DIFFERS"
    return Row(check, case, name, "x".join(str(s) for s in want.shape), diff, ref, status)


def save_pretrained(model, folder):
    try:
        model.save_pretrained(folder, safe_serialization=True)
    except TypeError:  # transformers versions that always write safetensors and dropped the flag
        model.save_pretrained(folder)


def run_snug_hf(binary, sub, folder, inputs, out):
    cmd = [binary, sub, "--model", folder, "--ids", inputs, "--out", out, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    lines = p.stdout.strip().splitlines()
    if len(lines) != 1:
        raise RuntimeError(f"{' '.join(cmd)}: expected one JSON line on stdout, got {len(lines)}")
    json.loads(lines[0])
    from safetensors.torch import load_file
    return load_file(out)


def quiet_init(torch, transformers, seed):
    torch.manual_seed(seed)
    transformers.logging.set_verbosity_error()


def gpt2_rows(binary, work, torch, transformers):
    from safetensors.torch import save_file
    rows = []
    for i, (case, fields, (B, T)) in enumerate(GPT2_CASES):
        quiet_init(torch, transformers, 100 + i)
        config = transformers.GPT2Config(**fields)
        model = transformers.GPT2LMHeadModel(config).eval()
        folder = os.path.join(work, f"gpt2_{i}")
        save_pretrained(model, folder)
        ids = torch.randint(0, config.vocab_size, (B, T), dtype=torch.int64)
        inputs = os.path.join(folder, "inputs.safetensors")
        save_file({"ids": ids}, inputs)
        with torch.no_grad():
            want = model(input_ids=ids).logits.float()
        if binary is None:
            rows.append(Row("gpt2", case, "logits", status="not built"))
            continue
        got = run_snug_hf(binary, "gpt2", folder, inputs, os.path.join(folder, "snug.safetensors"))
        rows.append(compare("gpt2", case, "logits", got["logits"], want))
    return rows


def bert_rows(binary, work, torch, transformers):
    from safetensors.torch import save_file
    rows = []
    for i, (case, fields, (B, T), labels) in enumerate(BERT_CASES):
        quiet_init(torch, transformers, 200 + i)
        config = transformers.BertConfig(**fields)
        if labels:
            config.num_labels = labels
            model = transformers.BertForSequenceClassification(config).eval()
        else:
            model = transformers.BertForMaskedLM(config).eval()
        folder = os.path.join(work, f"bert_{i}")
        save_pretrained(model, folder)
        ids = torch.randint(1, config.vocab_size, (B, T), dtype=torch.int64)
        token_types = torch.randint(0, 2, (B, T), dtype=torch.int64)
        # Row 0 is whole; the others end in padding (pad id 0, token type 0).
        attention_mask = torch.ones(B, T, dtype=torch.int64)
        for b in range(1, B):
            n = int(torch.randint(T // 4, T - 1, (1,)))
            attention_mask[b, n:] = 0
        ids = ids * attention_mask
        token_types = token_types * attention_mask
        inputs = os.path.join(folder, "inputs.safetensors")
        save_file({"ids": ids, "token_types": token_types, "padding_mask": attention_mask == 0}, inputs)
        with torch.no_grad():
            out = model(input_ids=ids, token_type_ids=token_types, attention_mask=attention_mask,
                        output_hidden_states=True)
        wants = {"hidden": out.hidden_states[-1].float()}
        wants["class_logits" if labels else "logits"] = out.logits.float()
        if binary is None:
            rows.extend(Row("bert", case, name, status="not built") for name in wants)
            continue
        try:
            got = run_snug_hf(binary, "bert", folder, inputs, os.path.join(folder, "snug.safetensors"))
        except RuntimeError as e:
            print(f"hf_parity: {e}", file=sys.stderr)
            rows.extend(Row("bert", case, name, status="FAILED") for name in wants)
            continue
        for name, want in wants.items():
            if name not in got:
                rows.append(Row("bert", case, name, status="MISSING"))
            else:
                rows.append(compare("bert", case, name, got[name], want))
    return rows


def tokenizer_rows(binary, work):
    from tokenizers import ByteLevelBPETokenizer, Tokenizer
    readme = os.path.join(ROOT, "README.md")
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    hard = os.path.join(work, "hard_cases.txt")
    with open(hard, "w", encoding="utf-8", newline="") as f:
        f.write(bpe_parity.HARD_CASES)
    folder = os.path.join(work, "bpe")
    os.makedirs(folder)
    hf = ByteLevelBPETokenizer(add_prefix_space=False)
    hf.train(files=[readme] + docs, vocab_size=8000, min_frequency=2, special_tokens=["<|endoftext|>"],
             show_progress=False)
    hf.save_model(folder)
    tj = os.path.join(folder, "tokenizer.json")
    hf.save(tj)
    reference = Tokenizer.from_file(tj)
    # snug's BPE does not search text for added tokens (docs/data.md: "<|endoftext|>" in a text is
    # encoded as its characters), and docs/data.md holds that string: the reference is told to do the
    # same, so that this row compares the BPE itself. bpe_parity.py compares tokenizers' default.
    reference.encode_special_tokens = True
    source = ["--vocab", os.path.join(folder, "vocab.json"), "--merges", os.path.join(folder, "merges.txt")]
    texts = [readme] + docs + [hard]
    n_ids, bad = 0, []
    for path in texts:
        with open(path, encoding="utf-8", newline="") as f:
            want = reference.encode(f.read(), add_special_tokens=False).ids
        n_ids += len(want)
        if binary is None:
            continue
        got = bpe_parity.run_snug(binary, source, path)
        if got != want:
            i = bpe_parity.first_difference(got, want)
            bad.append(path)
            print(f"hf_parity: {os.path.relpath(path, ROOT) if path != hard else 'hard cases'}: ids differ at {i} "
                  f"(snug {got[i:i + 5]}, HF {want[i:i + 5]}; {len(got)} vs {len(want)} ids)", file=sys.stderr)
    status = "not built" if binary is None else ("match" if not bad else f"{len(bad)} texts DIFFER")
    case = f"{reference.get_vocab_size()} tokens, {len(texts)} texts"
    return [Row("bpe", case, "ids", str(n_ids), status=status)]


# ---- --smoke: no Python packages needed (ctest example_snug_hf) ------------------------------

def write_safetensors(path, tensors):
    """name -> (dtype "F32" | "I64" | "BOOL", shape, flat list), in the file format, by hand."""
    import struct
    fmt = {"F32": ("<f", 4), "I64": ("<q", 8), "BOOL": ("<?", 1)}
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, values) in tensors.items():
        code, size = fmt[dtype]
        blob = b"".join(struct.pack(code, v) for v in values)
        assert len(blob) == size * (len(values))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    import struct
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", h
        a, b = h["data_offsets"]
        raw = data[8 + n + a:8 + n + b]
        out[name] = (h["shape"], list(struct.unpack(f"<{len(raw) // 4}f", raw)))
    return out


def smoke(binary):
    """GPT-2 with random embeddings and zero blocks: logits = LN(wte[id] + wpe[t]) . wte, by hand;
    and the input file's checks."""
    import math
    import random
    rng = random.Random(5)
    V, P, C, L, B, T = 11, 6, 8, 2, 2, 5
    ok = True
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2", "vocab_size": V, "n_positions": P, "n_embd": C, "n_layer": L,
                       "n_head": 2, "n_inner": None, "activation_function": "gelu_new",
                       "layer_norm_epsilon": 1e-5}, f)
        wte = [rng.gauss(0, 1) for _ in range(V * C)]
        wpe = [rng.gauss(0, 1) for _ in range(P * C)]
        t = {"wte.weight": ("F32", (V, C), wte), "wpe.weight": ("F32", (P, C), wpe),
             "ln_f.weight": ("F32", (C,), [1.0] * C), "ln_f.bias": ("F32", (C,), [0.0] * C)}
        shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,),
                  "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C),
                  "attn.c_proj.bias": (C,), "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,),
                  "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,)}
        for i in range(L):
            for name, shape in shapes.items():
                n = math.prod(shape)
                t[f"h.{i}.{name}"] = ("F32", shape, [1.0 if name.startswith("ln") and "weight" in name else 0.0] * n)
        write_safetensors(os.path.join(d, "model.safetensors"), t)
        ids = [rng.randrange(V) for _ in range(B * T)]
        inputs = os.path.join(d, "in.safetensors")
        write_safetensors(inputs, {"ids": ("I64", (B, T), ids)})
        got = read_safetensors_after(binary, "gpt2", d, inputs)
        shape, logits = got["logits"]
        worst = 0.0
        for b in range(B):
            for p in range(T):
                x = [wte[ids[b * T + p] * C + c] + wpe[p * C + c] for c in range(C)]
                m = sum(x) / C
                var = sum((v - m) ** 2 for v in x) / C
                y = [(v - m) / math.sqrt(var + 1e-5) for v in x]
                for v in range(V):
                    want = sum(y[c] * wte[v * C + c] for c in range(C))
                    worst = max(worst, abs(logits[(b * T + p) * V + v] - want))
        if shape != [B, T, V] or worst > 1e-4:
            print(f"hf_parity --smoke: gpt2 logits {shape}, max |diff| {worst:.3e} from the hand-computed ones",
                  file=sys.stderr)
            ok = False
        # A misspelt input name is an error that names it (exit 1).
        bad = os.path.join(d, "bad.safetensors")
        write_safetensors(bad, {"ids": ("I64", (B, T), ids), "token_typez": ("I64", (B, T), ids)})
        p = subprocess.run([binary, "gpt2", "--model", d, "--ids", bad, "--out", os.path.join(d, "o.safetensors")],
                           capture_output=True, text=True)
        if p.returncode != 1 or "token_typez" not in p.stderr:
            print(f"hf_parity --smoke: a misspelt input gave exit {p.returncode}: {p.stderr.strip()}", file=sys.stderr)
            ok = False
    print(f"hf_parity --smoke: snug-hf gpt2 on a hand-made checkpoint: {'match' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def read_safetensors_after(binary, sub, folder, inputs):
    out = os.path.join(folder, "out.safetensors")
    cmd = [binary, sub, "--model", folder, "--ids", inputs, "--out", out, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    line = json.loads(p.stdout)
    if line.get("model") != sub:
        raise RuntimeError(f"{' '.join(cmd)}: unexpected JSON line {p.stdout.strip()}")
    return read_safetensors(out)


def print_table(rows):
    header = ("check", "case", "output", "shape", "max|diff|", "max|ref|", "diff/ref", "result")
    table = [header]
    for r in rows:
        num = lambda v: "" if v is None else f"{v:.3e}"  # noqa: E731
        rel = "" if r.diff is None else num(r.diff / r.ref if r.ref else r.diff)
        table.append((r.check, r.case, r.output, r.shape, num(r.diff), num(r.ref), rel, r.status))
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    for k, row in enumerate(table):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"),
                    help="the build folder with examples/snug-hf and examples/snug-tokenize")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--smoke", metavar="SNUG_HF", help="only a hand-made GPT-2 checkpoint through this snug-hf; "
                    "needs no Python packages (ctest example_snug_hf)")
    args = ap.parse_args()
    if args.smoke:
        try:
            return smoke(args.smoke)
        except RuntimeError as e:
            print(f"hf_parity: {e}", file=sys.stderr)
            return 1
    try:
        import torch
        import transformers
        import tokenizers
        import safetensors  # noqa: F401
    except ImportError as e:
        print(f"hf_parity: needs transformers, torch, tokenizers and safetensors (pip install ...): {e}",
              file=sys.stderr)
        return 1
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    def program(name):
        path = os.path.join(args.build, "examples", name)
        if os.path.exists(path):
            return path
        print(f"hf_parity: no {path} (cmake --build --preset release --target {name})", file=sys.stderr)
        return None

    snug_hf, snug_tokenize = program("snug-hf"), program("snug-tokenize")
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            rows += gpt2_rows(snug_hf, work, torch, transformers)
            rows += bert_rows(snug_hf, work, torch, transformers)
            rows += tokenizer_rows(snug_tokenize, work)
    except RuntimeError as e:
        print(f"hf_parity: {e}", file=sys.stderr)
        return 1
    print(f"hf_parity: transformers {transformers.__version__}, torch {torch.__version__}, tokenizers "
          f"{tokenizers.__version__}; tolerance max|diff| / max|ref| <= {TOLERANCE:g}")
    print_table(rows)
    ok = all(r.ok for r in rows)
    print(f"hf_parity: {sum(r.ok for r in rows)}/{len(rows)} rows match: {'all match' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
