#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Measures charlm's activation checkpointing: sqrt vs none, and a planner budget sweep.

    python3 tools/checkpoint_sweep.py --charlm build/release/examples/charlm [--repeats 3] [--steps 6]

Prints two markdown tables (the ones in docs/checkpointing.md). Timings on a
shared machine are noisy, so every configuration runs --repeats times,
interleaved with a --checkpoint none run (paired), and the tables show medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MiB = 1 << 20


def run(charlm, args, extra):
    cmd = [charlm, "--layers", "16", "--embd", "128", "--block", "128", "--batch", "16", "--steps", str(args.steps),
           "--eval-every", "0", "--eval-batches", "1", "--generate", "0", "--threads", str(args.threads), "--json"] + extra
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    return json.loads(line)


def med(xs):
    return statistics.median(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--charlm", default="build/release/examples/charlm")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--points", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-sqrt", action="store_true")
    ap.add_argument("--only", type=int, nargs="*", help="rerun only these sweep points (0-based indices)")
    args = ap.parse_args()

    if not args.skip_sqrt:
        rows = []
        for r in range(args.repeats):
            none = run(args.charlm, args, ["--checkpoint", "none"])
            sq = run(args.charlm, args, ["--checkpoint", "sqrt"])
            rows.append((none, sq))
            print(f"# repeat {r}: none {none['ms_per_step']:.0f} ms, sqrt {sq['ms_per_step']:.0f} ms", file=sys.stderr)
        act_ratio = med([s["peak_activation_bytes"] / n["peak_activation_bytes"] for n, s in rows])
        at_peak_ratio = med([s["activation_bytes_at_peak"] / n["activation_bytes_at_peak"] for n, s in rows])
        time_ratio = med([s["ms_per_step"] / n["ms_per_step"] for n, s in rows])
        n0, s0 = rows[0]
        print("| run | peak_activation_bytes | activation bytes at the peak | peak_allocated_bytes | ms/step (median) | recompute ms/step |")
        print("|---|---|---|---|---|---|")
        for name, key in (("none", 0), ("sqrt", 1)):
            print(f"| {name} | {rows[0][key]['peak_activation_bytes'] / MiB:.1f} MiB | "
                  f"{rows[0][key]['activation_bytes_at_peak'] / MiB:.1f} MiB | {rows[0][key]['peak_allocated_bytes'] / MiB:.1f} MiB | "
                  f"{med([r[key]['ms_per_step'] for r in rows]):.0f} | {med([r[key]['recompute_ms_per_step'] for r in rows]):.0f} |")
        print(f"\nsqrt/none: peak_activation_bytes {act_ratio:.3f}, activation bytes at the peak {at_peak_ratio:.3f}, "
              f"time per step {time_ratio:.3f} (median of {args.repeats} paired ratios: "
              + ", ".join(f"{s['ms_per_step'] / n['ms_per_step']:.3f}" for n, s in rows) + ")\n")

    # The planner's range: its minimum and the unconstrained peak, from one profile.
    probe = run(args.charlm, args, ["--checkpoint", "auto", "--memory-budget", "64GiB"])
    lo, hi = probe["minimum_budget_bytes"], probe["predicted_peak_bytes"]
    budgets = [lo + (hi - lo) * k // (args.points - 1) for k in range(args.points)]
    print(f"planner minimum {lo} bytes ({lo / MiB:.1f} MiB), unconstrained predicted peak {hi} bytes ({hi / MiB:.1f} MiB)\n")
    print("Each budget: --repeats runs of `--checkpoint auto --memory-budget B`, each paired with a `--checkpoint none` "
          "run. Each auto run profiles and plans on its own, so plans can differ between repeats (the layers are "
          "identical and their measured times differ by noise); predictions are compared with the same run's "
          "measurements, then the median is shown.\n")
    print("| budget | predicted peak | measured peak_allocated (max) | all runs fit | measured − predicted (max) "
          "| predicted recompute ms | measured recompute ms | recompute error (median) | step ms none → auto "
          "| extra step ms (median of pairs) | extra vs predicted | recomputed layers |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, b in enumerate(budgets):
        if args.only and i not in args.only:
            continue
        res = []
        for r in range(args.repeats):
            none = run(args.charlm, args, ["--checkpoint", "none"])
            auto = run(args.charlm, args, ["--checkpoint", "auto", "--memory-budget", str(b)])
            res.append((none, auto))
        autos = [a for _, a in res]
        peak = max(a["peak_allocated_bytes"] for a in autos)
        over = max(a["peak_allocated_bytes"] - a["predicted_peak_bytes"] for a in autos)
        pred_ms = med([a["predicted_recompute_ms"] for a in autos])
        meas_ms = med([a["recompute_ms_per_step"] for a in autos])
        errs = [(a["recompute_ms_per_step"] - a["predicted_recompute_ms"]) / a["predicted_recompute_ms"] * 100
                for a in autos if a["predicted_recompute_ms"] > 0]
        extra = med([a["ms_per_step"] - n["ms_per_step"] for n, a in res])
        extra_vs = f"{(extra - pred_ms) / pred_ms * 100:+.0f}%" if pred_ms > 0 else "n/a"
        layers = sorted(set(a["checkpointed_layers"] for a in autos))
        preds = sorted(set(round(a["predicted_peak_bytes"] / MiB, 1) for a in autos))
        print(f"| {b / MiB:.1f} MiB | {'/'.join(str(p) for p in preds)} MiB | {peak / MiB:.1f} MiB | "
              f"{'yes' if all(a['peak_allocated_bytes'] <= b for a in autos) else 'NO'} | {over / MiB:+.1f} MiB | "
              f"{pred_ms:.0f} | {meas_ms:.0f} | {(med(errs) if errs else 0):+.0f}% | "
              f"{med([n['ms_per_step'] for n, _ in res]):.0f} → {med([a['ms_per_step'] for a in autos]):.0f} | "
              f"{extra:+.0f} | {extra_vs} | {'/'.join(str(l) for l in layers)} |", flush=True)


if __name__ == "__main__":
    main()
