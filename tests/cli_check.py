#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs one program and checks what the command-line convention promises
(docs/programs.md): its exact exit status, text its stdout or stderr must or
must not hold, and, with --json-lines, that every line of stdout is JSON.

    cli_check.py --exit 2 --stderr-has=--stpes -- build/release/examples/charlm --stpes 3
    cli_check.py --exit 0 --json-lines -- build/release/examples/charlm --steps 2 --json

Exits 0 when every check holds; otherwise prints what differed (with the
program's output) and exits 1. Used by the cli_* ctest cases (cmake/cli.cmake).
"""
import argparse
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exit", type=int, required=True, help="the exit status the program must return")
    ap.add_argument("--stdout-has", action="append", default=[], help="text stdout must contain (repeatable)")
    ap.add_argument("--stdout-lacks", action="append", default=[], help="text stdout must not contain (repeatable)")
    ap.add_argument("--stderr-has", action="append", default=[], help="text stderr must contain (repeatable)")
    ap.add_argument("--json-lines", action="store_true",
                    help="stdout must be one or more lines, each a JSON object")
    ap.add_argument("--timeout", type=float, default=600, help="seconds before the program counts as hung")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the program and its arguments")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command given (put it after --)")

    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    problems = []
    if p.returncode != a.exit:
        problems.append(f"exit status {p.returncode}, expected {a.exit}")
    problems += [f"stdout does not contain {s!r}" for s in a.stdout_has if s not in p.stdout]
    problems += [f"stdout contains {s!r}" for s in a.stdout_lacks if s in p.stdout]
    problems += [f"stderr does not contain {s!r}" for s in a.stderr_has if s not in p.stderr]
    if a.json_lines:
        lines = p.stdout.splitlines()
        if not lines:
            problems.append("stdout is empty, expected JSON lines")
        for n, line in enumerate(lines, 1):
            try:
                if not isinstance(json.loads(line), dict):
                    problems.append(f"stdout line {n} is JSON but not an object: {line!r}")
            except ValueError as e:
                problems.append(f"stdout line {n} is not JSON ({e}): {line!r}")
    if problems:
        print("command:", " ".join(cmd), file=sys.stderr)
        for s in problems:
            print("FAIL:", s, file=sys.stderr)
        print("---- stdout ----\n" + p.stdout[-4000:] + "\n---- stderr ----\n" + p.stderr[-4000:], file=sys.stderr)
        return 1
    print(f"ok: exit {p.returncode}; " + " ".join(cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
