#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs alloc_lab and checks what it writes (the ctest example_alloc_lab).

    check_outputs.py --traces DIR [--timeline tools/memory_timeline.py] -- ALLOC_LAB [flags...]

Adds --json --chart and --timelines to the command, then checks:
- one JSON line per trace (each device with events in each DIR/*.json) and
  policy, every policy on every trace, with a ratio of at least 1 for snug's
  policies (reserved memory covers what was requested) and positive timings;
- the chart is a valid PNG (memory_tour's check_png);
- the variable-length trace's worst and best replays are snapshots, and
  tools/memory_timeline.py draws them side by side (when --timeline is given).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "memory_tour"))
from check_outputs import check_png, fail  # noqa: E402  (the PNG check both examples share)

POLICIES = ["best_fit", "first_fit", "size_class", "buddy", "expandable", "planned", "planned:expandable", "malloc"]


def trace_names(folder):
    names = []
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".json"):
            continue
        devices = [d["device"] for d in json.load(open(os.path.join(folder, f)))["devices"] if d.get("events")]
        stem = f[:-5]
        names += [stem] if len(devices) == 1 else [f"{stem}:{d}" for d in devices]
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", required=True)
    ap.add_argument("--timeline", help="tools/memory_timeline.py, to draw the varlen timelines")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    with tempfile.TemporaryDirectory() as d:
        png, tl, page = os.path.join(d, "lab.png"), os.path.join(d, "timelines"), os.path.join(d, "varlen.html")
        r = subprocess.run(cmd + ["--traces", a.traces, "--json", "--chart", png, "--timelines", tl],
                           capture_output=True, text=True)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited {r.returncode}")
        rows = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
        got = {(x["trace"], x["policy"]) for x in rows}
        want = {(t, p) for t in trace_names(a.traces) for p in POLICIES}
        if got != want:
            fail(f"rows missing: {sorted(want - got)[:5]}, unexpected: {sorted(got - want)[:5]}")
        for x in rows:
            if x["policy"] != "malloc" and x["reserved_over_requested"] < 1.0:
                fail(f"{x['trace']} {x['policy']}: reserved below requested ({x['reserved_over_requested']})")
            if not x["ns_per_alloc_free"] > 0:
                fail(f"{x['trace']} {x['policy']}: no timing")
        w, h = check_png(png)
        for f in ("varlen_worst.json", "varlen_best.json"):
            snap = json.load(open(os.path.join(tl, f)))
            if snap.get("format") != "snug-memory-snapshot" or not snap["devices"][0]["events"]:
                fail(f"{f}: not a snapshot with events")
        if a.timeline:
            subprocess.run([sys.executable, a.timeline, os.path.join(tl, "varlen_worst.json"),
                            os.path.join(tl, "varlen_best.json"), "-o", page], check=True)
            if os.path.getsize(page) < 1000:
                fail(f"{page}: the timeline is empty")
    print(f"ok: {len(rows)} rows ({len(want) // len(POLICIES)} traces x {len(POLICIES)} policies), chart {w}x{h}")


if __name__ == "__main__":
    main()
