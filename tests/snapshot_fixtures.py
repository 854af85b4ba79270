# SPDX-License-Identifier: MIT
"""What the snapshot tools' tests share (tests/memory_timeline_test.py,
tests/torch_snapshot_test.py): the repository root, the tools' paths, and the
checks, which print each failure and count them for the exit status."""
import os

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MIB = 1 << 20
failures = []


def tool(name):
    """tools/<name> in this checkout."""
    return os.path.join(ROOT, "tools", name)


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def finish(ok):
    """The exit status: 1 after the number of failed checks, else 0 after the line ok."""
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(ok)
    return 0
