#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws a pipeline step's schedule: one row per stage, one box per forward (F)
or backward (B) of a micro-batch, from the Chrome trace that
`snug-bench pipeline --timeline FILE` (Pipeline::write_timeline) writes.

    python3 tools/pipeline_timeline.py trace.json out.png [--title TEXT]

Needs matplotlib (pip install matplotlib); the library does not.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    with open(a.trace) as f:
        events = json.load(f)["traceEvents"]
    if not events:
        raise SystemExit("no events in " + a.trace)
    stages = sorted({e["tid"] for e in events})
    micro = sorted({int(e["name"][1:]) for e in events})
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(10, 0.7 * len(stages) + 1.2))
    for e in events:
        m = int(e["name"][1:])
        start, dur = e["ts"] / 1e3, e["dur"] / 1e3
        back = e["name"][0] == "B"
        ax.barh(e["tid"], dur, left=start, height=0.8, color=cmap(m % 10), alpha=0.55 if back else 1.0,
                edgecolor="black", hatch="//" if back else None, linewidth=0.5)
        ax.text(start + dur / 2, e["tid"], e["name"], ha="center", va="center", fontsize=7)
    ax.set_yticks(stages)
    ax.set_yticklabels([f"stage {s}" for s in stages])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the step began (F = forward, B = backward, hatched; colour = micro-batch)")
    ax.set_title(a.title or f"{len(stages)} stages, {len(micro)} micro-batches")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
