#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hugging Face parity for snug's byte-level BPE (data/bpe.h, snug-tokenize).

  cmake --build --preset release --target snug-tokenize
  python3 tools/bpe_parity.py [--tokenize build/release/examples/snug-tokenize]

Trains small byte-level BPE tokenizers with Hugging Face `tokenizers` (pip
install tokenizers; nothing is downloaded but the package): on README.md, on
README.md and docs/, and on those and the two generated texts below; saves
each as vocab.json + merges.txt and as tokenizer.json (merges as ["a", "b"]
pairs and, rewritten, as "a b" strings), and compares the ids snug-tokenize
gives in all three forms with Hugging Face's on every docs/*.md, on a text of
hard cases (contractions, runs of spaces and newlines, digits, many scripts,
emoji) and on 20,000 seeded random characters from the ranges the pattern
treats differently. Not run in CI. Exits 0 when every id matches and every
decode gives its text back, 1 otherwise (the first difference is printed).

  python3 tools/bpe_parity.py --smoke --tokenize BIN

needs no `tokenizers`: it writes a vocabulary by hand (the 256 byte tokens and a
few merges), checks ids worked out by hand in both file formats, --json and
--decode. ctest runs it (example_snug_tokenize).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

HARD_CASES = (
    "he's don't we're I've I'm we'll I'd HE'S 'sdf ''s\n"
    "a  b   c    d\t\te \n\nf\n\n\ng   \n  h  \r\n trailing   \n"
    "12345 6789 3.14159 1,000,000 ٣٤ ½ ² Ⅷ x1y2z3\n"
    "café naïve Straße Ωmega Привет, мир! Γειά σου κόσμε\n"
    "中文字符 日本語のテキスト 한국어 עברית العربية ไทย\n"
    "emoji 😀👍🏽 ‍ symbols €£¥ — “quotes” «guillemets» … \u00a0nbsp\u3000ideographic\n"
    "code: if (x != y) { return a->b[i] + 0x1F; } // end\n"
)


def random_text(seed=1, n=20000):
    """Seeded random text from the ranges GPT-2's pattern treats differently."""
    import random
    rng = random.Random(seed)
    ranges = [(0x20, 0x20), (0x0A, 0x0A), (0x09, 0x0D), (0x61, 0x7A), (0x41, 0x5A), (0x30, 0x39), (0x21, 0x2F),
              (0x27, 0x27), (0xA0, 0x24F), (0x370, 0x4FF), (0x600, 0x6FF), (0x900, 0x97F), (0x2000, 0x206F),
              (0x2150, 0x218F), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1F64F),
              (0x10000, 0x100FF), (0x1D400, 0x1D7FF)]
    out = []
    while len(out) < n:
        lo, hi = rng.choice(ranges)
        out.extend(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6)))
    return "".join(out)


def byte_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def run_snug(binary, source_args, text_path, decode=True):
    cmd = [binary] + source_args + ["--text", text_path, "--json"] + (["--decode"] if decode else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    lines = p.stdout.strip().splitlines()
    if len(lines) != 1:
        raise RuntimeError(f"{' '.join(cmd)}: expected one JSON line on stdout, got {len(lines)}")
    out = json.loads(lines[0])
    if out["count"] != len(out["ids"]):
        raise RuntimeError(f"{' '.join(cmd)}: count {out['count']} != {len(out['ids'])} ids")
    if decode and out.get("round_trip") is not True:
        raise RuntimeError(f"{' '.join(cmd)}: decode does not give the text back")
    return out["ids"]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def smoke(binary):
    """Hand-worked ids on a vocabulary of the 256 bytes + 4 merges."""
    b2u = byte_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (b2u[32], "w")]
    for r, (a, b) in enumerate(merges):
        vocab[a + b] = 256 + r
    cases = {
        "hello": [259],
        "hello world": [259, 260, 111, 114, 108, 100],
        "a  b\n\n": [97, 32, 32, 98, 10, 10],
        "café": [99, 97, 102, 0xC3, 0xA9],
    }
    ok = True
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f)  # ensure_ascii: every non-ASCII token as \\uXXXX
        with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        sources = {"files": ["--vocab", os.path.join(d, "vocab.json"), "--merges", os.path.join(d, "merges.txt")]}
        for form, ms in (("pairs", [[a, b] for a, b in merges]), ("strings", [f"{a} {b}" for a, b in merges])):
            path = os.path.join(d, f"tokenizer_{form}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                                                                  "use_regex": True},
                           "model": {"type": "BPE", "vocab": vocab, "merges": ms}}, f, ensure_ascii=False)
            sources[form] = ["--tokenizer-json", path]
        for i, (text, want) in enumerate(cases.items()):
            tp = os.path.join(d, f"text{i}.txt")
            with open(tp, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            for form, args in sources.items():
                got = run_snug(binary, args, tp)
                if got != want:
                    print(f"bpe_parity --smoke: {form}: {text!r} -> {got}, expected {want}", file=sys.stderr)
                    ok = False
    print(f"bpe_parity --smoke: {len(cases)} texts x {len(sources)} file forms: {'match' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def parity(binary):
    try:
        from tokenizers import ByteLevelBPETokenizer, Tokenizer
        import tokenizers
    except ImportError:
        print("bpe_parity: needs Hugging Face tokenizers (pip install tokenizers)", file=sys.stderr)
        return 1
    docs = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    readme = os.path.join(ROOT, "README.md")
    ok = True
    total_ids = 0
    with tempfile.TemporaryDirectory() as d:
        hard = os.path.join(d, "hard_cases.txt")
        with open(hard, "w", encoding="utf-8", newline="") as f:
            f.write(HARD_CASES)
        rand = os.path.join(d, "random.txt")
        with open(rand, "w", encoding="utf-8", newline="") as f:
            f.write(random_text())
        texts = docs + [hard, rand]
        for name, train_files, size in (("readme", [readme], 2000), ("docs", [readme] + docs, 8000),
                                       ("docs+random", [readme] + docs + [hard, rand], 12000)):
            hf = ByteLevelBPETokenizer(add_prefix_space=False)
            hf.train(files=train_files, vocab_size=size, min_frequency=2, special_tokens=["<|endoftext|>"],
                     show_progress=False)
            folder = os.path.join(d, name)
            os.makedirs(folder)
            hf.save_model(folder)
            tj = os.path.join(folder, "tokenizer.json")
            hf.save(tj)
            with open(tj, encoding="utf-8") as f:
                spec = json.load(f)
            merges = spec["model"]["merges"]
            if merges and isinstance(merges[0], list):
                spec["model"]["merges"] = [f"{a} {b}" for a, b in merges]
            tj_strings = os.path.join(folder, "tokenizer_strings.json")
            with open(tj_strings, "w", encoding="utf-8") as f:
                json.dump(spec, f, ensure_ascii=False)
            reference = Tokenizer.from_file(tj)
            # snug does not search text for added tokens (docs/data.md): the
            # reference encodes "<|endoftext|>" in a text as ordinary bytes too.
            reference.encode_special_tokens = True
            sources = {
                "vocab.json+merges.txt": ["--vocab", os.path.join(folder, "vocab.json"), "--merges",
                                          os.path.join(folder, "merges.txt")],
                "tokenizer.json": ["--tokenizer-json", tj],
                "tokenizer.json (string merges)": ["--tokenizer-json", tj_strings],
            }
            n_match = 0
            for path in texts:
                with open(path, encoding="utf-8", newline="") as f:
                    text = f.read()
                want = reference.encode(text, add_special_tokens=False).ids
                for form, args in sources.items():
                    got = run_snug(binary, args, path)
                    if got == want:
                        n_match += 1
                        continue
                    ok = False
                    i = first_difference(got, want)
                    print(f"bpe_parity: {name} vocab, {form}, {os.path.relpath(path, d if path in (hard, rand) else ROOT)}: "
                          f"ids differ at {i} (snug {got[i:i + 5]}, HF {want[i:i + 5]}; {len(got)} vs {len(want)} ids)",
                          file=sys.stderr)
                total_ids += len(want)
            print(f"bpe_parity: vocab trained on {name} ({reference.get_vocab_size()} tokens, {len(merges)} merges): "
                  f"{n_match}/{len(texts) * len(sources)} (text, file form) pairs match")
    print(f"bpe_parity: tokenizers {tokenizers.__version__}, {len(texts)} texts, {total_ids} ids: "
          f"{'all match' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenize", default=os.path.join(ROOT, "build", "release", "examples", "snug-tokenize"),
                    help="the snug-tokenize program")
    ap.add_argument("--smoke", action="store_true", help="hand-made vocabulary only; needs no tokenizers")
    args = ap.parse_args()
    if not os.path.exists(args.tokenize):
        print(f"bpe_parity: no {args.tokenize} (cmake --build --preset release --target snug-tokenize)",
              file=sys.stderr)
        return 1
    try:
        return smoke(args.tokenize) if args.smoke else parity(args.tokenize)
    except RuntimeError as e:
        print(f"bpe_parity: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
