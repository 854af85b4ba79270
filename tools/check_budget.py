#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs a program that takes --memory-budget and --json, and checks that the peak it
measured is within the budget it was given (its JSON's peak_allocated_bytes <= memory_budget).

    python3 tools/check_budget.py -- build/release/examples/charlm --memory-budget 20MiB --json ...

Exits 1, printing both figures and what held memory at the peak, when the peak is over.
"""
import json
import subprocess
import sys


def main():
    if "--" not in sys.argv:
        sys.exit("usage: check_budget.py -- PROGRAM ARGS... (with --memory-budget and --json)")
    cmd = sys.argv[sys.argv.index("--") + 1:]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited with {p.returncode}:\n{p.stderr[-2000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    peak, budget = r["peak_allocated_bytes"], r["memory_budget"]
    print(json.dumps({"peak_allocated_bytes": peak, "memory_budget": budget,
                      "predicted_peak_bytes": r.get("predicted_peak_bytes"),
                      "bytes_at_peak_by_tag": r.get("bytes_at_peak_by_tag")}))
    if budget <= 0:
        sys.exit("FAIL: no --memory-budget in the run")
    if peak > budget:
        sys.exit(f"FAIL: the peak {peak} bytes is over the budget {budget}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
