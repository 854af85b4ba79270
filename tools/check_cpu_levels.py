#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that no instruction beyond a function's CPU level can run on a CPU without it.

NOTE [ CPU levels ] (core/cpu/level.h): libsnug compiles core/cpu/ once per
level, each level's code in its own namespace (snug::avx2, snug::avx512); all
other code must run on any x86-64 CPU. An escape happens when an inline
function or template outside those namespaces (the standard library's, a
snug header's) is compiled inside a level's file with that level's flags and
the linker keeps that copy for callers of a lower level. Such an escape is a
SIGILL on an older CPU, found only there; this check finds it in the linked
binary.

  tools/check_cpu_levels.py build/release/libsnug.so [more binaries...]

From `objdump -d -C`, each function (by address) gets
  * the level it needs: avx512 if it touches AVX-512 (zmm, mask registers,
    xmm16-31 / ymm16-31, embedded broadcasts), avx2 if it has any VEX
    instruction, ymm, or BMI1/BMI2/LZCNT/POPCNT/MOVBE (not tzcnt: below), else baseline;
  * the level it may use: its namespace's (snug::avx512::, snug::avx2::)
    when its name is in one; otherwise the lowest level among its direct
    callers (calls, tail jumps, calls through the PLT, and code that takes its address), or baseline when
    nothing does (exported, or reached through a table of pointers).
A function that needs more than it may use is an escape. A level's inline
copy called only from that level's code is therefore fine (GCC's local
clones, a std:: template only that level instantiates out of line), and one
that baseline code calls is not. Exits 1 listing the escapes, 0 when clean;
a binary of another architecture is reported and skipped. A GCC clone
("[clone .isra.0]") that nothing references is dead code and not counted.
"""
import re
import subprocess
import sys

AVX512_ONLY = re.compile(r"%zmm\d|%k[0-7]\b|%[xy]mm(1[6-9]|2\d|3[01])\b|\{%k|\{1to")
# Not tzcnt: its encoding is rep bsf, which a CPU without BMI1 runs as bsf,
# the same result for a nonzero source; GCC emits it at the baseline for a
# count of trailing zeros whose source is nonzero (__builtin_ctz, or the de
# Bruijn idiom it recognizes), never relying on tzcnt's answer for zero.
BEYOND_V1 = {"andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "pdep", "pext", "mulx", "rorx", "sarx", "shlx",
             "shrx", "lzcnt", "popcnt", "movbe"}
LEVELS = ["baseline", "avx2", "avx512"]
RANK = {l: i for i, l in enumerate(LEVELS)}
FUNC = re.compile(r"^([0-9a-f]+) <(.*)>:$")
CALL = re.compile(r"^([0-9a-f]+) <(.*)>$")


def named_level(name):
    if "snug::avx512::" in name:
        return "avx512"
    if "snug::avx2::" in name:
        return "avx2"
    return None


def needs(mnemonic, operands):
    if AVX512_ONLY.search(operands):
        return "avx512"
    if (mnemonic.startswith("v") and mnemonic not in ("verr", "verw")) or "%ymm" in operands or mnemonic in BEYOND_V1:
        return "avx2"
    return "baseline"


def check(path):
    head = subprocess.run(["objdump", "-f", path], capture_output=True, text=True)
    if head.returncode != 0:
        sys.exit(f"check_cpu_levels: objdump cannot read {path}: {head.stderr.strip()}")
    if "x86-64" not in head.stdout:
        print(f"check_cpu_levels: {path} is not an x86-64 binary; nothing to check")
        return [], 0
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", path], capture_output=True, text=True,
                         check=True).stdout
    names, need, example, calls = {}, {}, {}, []  # by function address
    fn = None
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            fn = int(m.group(1), 16)
            names[fn], need[fn] = m.group(2), "baseline"
            continue
        parts = line.split("\t")
        if fn is None or len(parts) < 2 or not parts[0].rstrip().endswith(":"):
            continue
        insn = parts[1].strip().split(None, 1)
        if not insn:
            continue
        mnemonic = insn[0]
        if mnemonic in ("rep", "repz", "repnz", "lock", "notrack", "bnd", "data16") and len(insn) > 1:
            insn = insn[1].split(None, 1)
            mnemonic = insn[0]
        operands = insn[1] if len(insn) > 1 else ""
        n = needs(mnemonic, operands)
        if RANK[n] > RANK[need[fn]]:
            need[fn], example[fn] = n, f"{mnemonic} {operands}"
        if mnemonic.startswith(("call", "j")):  # calls, tail jumps, jumps into a .cold part
            c = CALL.match(operands.strip())
            if c:
                calls.append((fn, int(c.group(1), 16), c.group(2)))
        elif "#" in operands:  # an address taken (lea ...(%rip)  # addr <name>): the taker is the user
            c = CALL.match(operands.split("#", 1)[1].strip())
            if c:
                calls.append((fn, int(c.group(1), 16), c.group(2)))
    # Callees: by address, or by name through the PLT (an exported function).
    by_name = {}
    for a, nm in names.items():
        by_name.setdefault(nm, []).append(a)
    callers = {}
    for src, dst, label in calls:
        if label.endswith("@plt"):
            targets = by_name.get(label[:-4], [])
            dst = targets[0] if len(targets) == 1 else None
        elif dst not in names:
            dst = None
        if dst is not None and dst != src:
            callers.setdefault(dst, set()).add(src)
    # The level each function may use: its namespace's, else its callers' lowest (a fixpoint from the top).
    may = {a: named_level(nm) or ("avx512" if a in callers else "baseline") for a, nm in names.items()}
    changed = True
    while changed:
        changed = False
        for a, nm in names.items():
            if named_level(nm) or a not in callers:
                continue
            low = min((may[c] for c in callers[a]), key=RANK.get)
            if RANK[low] < RANK[may[a]]:
                may[a], changed = low, True
    # A GCC clone (.isra, .constprop, .part, .cold) has a changed signature and
    # is never called through a pointer: one that nothing references is dead.
    dead = {a for a, nm in names.items() if a not in callers and "[clone ." in nm}
    bad = [f"{path}: {names[a]}: needs {need[a]} ({example[a]}) but is reached from {may[a]} code"
           for a in names if RANK[need[a]] > RANK[may[a]] and a not in dead]
    return bad, len(names)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    failures = []
    for path in sys.argv[1:]:
        bad, n = check(path)
        failures += bad
        print(f"check_cpu_levels: {path}: {n} functions, {len(bad)} escapes beyond their level")
    for b in failures[:50]:
        print(b)
    if len(failures) > 50:
        print(f"... and {len(failures) - 50} more")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
