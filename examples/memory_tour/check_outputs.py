#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs memory_tour and checks what it writes (the ctest example_memory_tour).

    check_outputs.py [--timeline tools/memory_timeline.py] -- MEMORY_TOUR [flags...]

Adds --json --chart and --snapshot to the command, then checks:
- the JSON line names every strategy, in order, each with its figures, and the
  relations that hold by construction (no_grad below baseline, accumulation's
  and checkpointing's activations below baseline's, 8-bit state below f32 state,
  fewer parameters after pruning, fewer model bytes in int8);
- the chart is a valid PNG: the signature, every chunk's CRC, an 8-bit RGB
  IHDR, an IDAT that inflates to height x (1 + 3 x width) bytes with filter 0
  on every row, and not a blank image;
- the snapshot is drawn by tools/memory_timeline.py (when --timeline is given).
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import zlib

STRATEGIES = ["baseline", "no_grad", "accum", "amp", "checkpoint", "adamw8bit", "pruned", "int8"]
FIELDS = ["peak_allocated_bytes", "peak_reserved_bytes", "step_ms", "loss", "tag_peak_bytes", "params", "model_bytes"]


def fail(msg):
    sys.exit(f"check_outputs: {msg}")


def check_json(stdout):
    lines = [l for l in stdout.splitlines() if l.strip()]
    if len(lines) != 1:
        fail(f"expected one JSON line on stdout, got {len(lines)}")
    doc = json.loads(lines[0])
    got = [s["name"] for s in doc["strategies"]]
    if got != STRATEGIES:
        fail(f"strategies {got}, expected {STRATEGIES}")
    by = {}
    for s in doc["strategies"]:
        for k in FIELDS:
            if k not in s:
                fail(f"{s['name']}: no \"{k}\"")
        if not (0 < s["peak_allocated_bytes"] <= s["peak_reserved_bytes"]):
            fail(f"{s['name']}: peak allocated {s['peak_allocated_bytes']}, reserved {s['peak_reserved_bytes']}")
        if not (s["step_ms"] > 0 and math.isfinite(s["loss"]) and s["loss"] > 0):
            fail(f"{s['name']}: step_ms {s['step_ms']}, loss {s['loss']}")
        by[s["name"]] = s
    act = lambda n: by[n]["tag_peak_bytes"]["activation"]
    checks = [
        ("no_grad peak < baseline peak", by["no_grad"]["peak_allocated_bytes"] < by["baseline"]["peak_allocated_bytes"]),
        ("accum activations < baseline's", act("accum") < act("baseline")),
        ("checkpoint activations < baseline's", act("checkpoint") < act("baseline")),
        ("adamw8bit state < AdamW's", by["adamw8bit"]["tag_peak_bytes"]["optimizer_state"]
         < by["baseline"]["tag_peak_bytes"]["optimizer_state"]),
        ("pruned parameters < baseline's", by["pruned"]["params"] < by["baseline"]["params"]),
        ("int8 model bytes < baseline's", by["int8"]["model_bytes"] < by["baseline"]["model_bytes"]),
    ]
    for what, ok in checks:
        if not ok:
            fail(what + " does not hold")
    return doc


def check_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path}: no PNG signature")
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if zlib.crc32(kind + body) != crc:
            fail(f"{path}: bad CRC in chunk {kind!r}")
        chunks.append((kind, body))
        pos += 12 + n
    if [k for k, _ in chunks] != [b"IHDR", b"IDAT", b"IEND"]:
        fail(f"{path}: chunks {[k for k, _ in chunks]}")
    w, h, depth, colour, comp, filt, lace = struct.unpack(">IIBBBBB", chunks[0][1])
    if (depth, colour, comp, filt, lace) != (8, 2, 0, 0, 0) or w < 100 or h < 100:
        fail(f"{path}: IHDR {w}x{h} depth {depth} colour {colour}")
    raw = zlib.decompress(chunks[1][1])
    row = 1 + 3 * w
    if len(raw) != h * row or any(raw[y * row] != 0 for y in range(h)):
        fail(f"{path}: IDAT inflates to {len(raw)} bytes, expected {h * row} with filter 0 rows")
    if all(b == 255 for y in range(h) for b in raw[y * row + 1:(y + 1) * row]):
        fail(f"{path}: the image is blank")
    return w, h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeline", help="tools/memory_timeline.py, to draw the snapshot")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    with tempfile.TemporaryDirectory() as d:
        png, snap, page = (os.path.join(d, n) for n in ("chart.png", "snapshot.json", "timeline.html"))
        r = subprocess.run(cmd + ["--json", "--chart", png, "--snapshot", snap], capture_output=True, text=True)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited {r.returncode}")
        doc = check_json(r.stdout)
        w, h = check_png(png)
        if a.timeline:
            subprocess.run([sys.executable, a.timeline, snap, "-o", page], check=True)
            if os.path.getsize(page) < 1000:
                fail(f"{page}: the timeline is empty")
    print(f"ok: {len(doc['strategies'])} strategies, chart {w}x{h}")


if __name__ == "__main__":
    main()
