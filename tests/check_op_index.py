#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the op index of docs/architecture.md against the code.

The table under `## Op index` has one row per public op:
`| op | autograd file | raw entry | CPU kernel file | CUDA kernel file |`.

- Every public op has a row, and every row is a public op. The public ops are
  parsed from their declarations (OP_SOURCES below): the free functions of
  namespace snug in autograd/ops.h (operators are spellings of named ops),
  of snug::nn::functional in nn/functional.h and nn/fused.h, and the Tensor
  methods of the views, conversion and in-place sections of core/tensor.h.
- Any other library file that records autograd nodes (includes autograd/node.h
  and calls record(...)) must
  be the autograd file of some row: a differentiable op added elsewhere
  (quant::fake_quantize is one) cannot go unlisted.
- The autograd file of a row defines the op (`Tensor name(` or `Tensor::name(`).
- Every `raw::name` in the raw entry column is declared in core/raw_ops.h.
- Every path in the table exists; the CPU column names core/ or quant/ files,
  the CUDA column cuda/ files (or says `—`).

  python3 tests/check_op_index.py [REPO_ROOT]      (exit 1 and a list on failure)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
PAGE = "docs/architecture.md"
SECTION = "## Op index"
LIBRARY_DIRS = ("autograd", "core", "nn", "data", "prune", "quant", "parallel", "distributed", "memory")
RETURNS = r"(?:Tensor&?|std::vector<Tensor>|std::array<Tensor, \d+>|ValuesIndices)"
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w.-]+\.(?:h|cpp|cu|cuh))(?![\w/])")
# A call of autograd::record (not its definition, not a GradModeGuard named record).
RECORD_CALL = re.compile(r"(?<![\w:])(?:autograd::)?record\((?!\s*(?:true|false)\b)(?!const )")


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def free_functions(rel, prefix):
    """Names of the functions declared at the start of a line in a header."""
    names = set()
    for m in re.finditer(rf"^{RETURNS}\s+(\w+)\s*\(", strip_comments(read(rel)), re.M):
        if not m.group(1).startswith("operator"):
            names.add(prefix + m.group(1))
    return names


def tensor_methods(rel, sections):
    """Tensor methods declared under the `// ---- <section>` comments named."""
    body = read(rel)
    start = body.index("class Tensor {")
    body = body[start: body.index("\n};", start)]
    names, current = set(), None
    for line in body.split("\n"):
        head = re.match(r"\s*// ---- (\w[\w -]*?)\s*(?:\(|-{3,}|$)", line)
        if head:
            current = head.group(1).strip()
            continue
        m = re.match(rf"\s*{RETURNS}\s+(\w+)\s*\(", strip_comments(line))
        if m and current in sections:
            names.add("Tensor::" + m.group(1))
    return names


# (header, what to parse, the prefix the table's op column uses)
OP_SOURCES = [
    ("autograd/ops.h", "free", ""),
    ("nn/functional.h", "free", "nn::functional::"),
    ("nn/fused.h", "free", "nn::functional::"),
    ("core/tensor.h", ("views", "conversion", "in-place"), ""),
]


def public_ops(problems):
    ops = set()
    for rel, what, prefix in OP_SOURCES:
        found = free_functions(rel, prefix) if what == "free" else tensor_methods(rel, what)
        if not found:
            problems.append(f"{rel}: no public op declarations found (has the header's layout changed?)")
        ops |= found
    return ops


def table_rows(problems):
    lines = read(PAGE).split("\n")
    try:
        i = next(n for n, l in enumerate(lines) if l.strip() == SECTION)
    except StopIteration:
        problems.append(f"{PAGE}: no `{SECTION}` section")
        return []
    rows, in_table = [], False
    for n in range(i + 1, len(lines)):
        line = lines[n].strip()
        if line.startswith("## "):
            break
        if line.startswith("|"):
            in_table = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?", c) for c in cells) or cells[0].lower() == "op":
                continue
            rows.append((n + 1, cells))
        elif in_table:
            break  # the first table of the section is the index
    if not rows:
        problems.append(f"{PAGE}: the `{SECTION}` section has no table rows")
    return rows


def defines(rel, op):
    name = op.split("::")[-1]
    method = op.startswith("Tensor::")
    pat = rf"^[\w:<>&]+[ &]+Tensor::{name}\(" if method else rf"^{RETURNS}\s+{name}\s*\("
    return re.search(pat, read(rel), re.M) is not None


def recording_files():
    files = set()
    for d in LIBRARY_DIRS:
        for dirpath, _, filenames in os.walk(os.path.join(ROOT, d)):
            for fn in filenames:
                if not fn.endswith(".cpp"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, fn), ROOT)
                if rel == "autograd/node.cpp":  # defines record()
                    continue
                text = strip_comments(read(rel))
                if "<snug/autograd/node.h>" in text and RECORD_CALL.search(text):
                    files.add(rel)
    return files


def main():
    problems = []
    ops = public_ops(problems)
    raw_decls = set(re.findall(r"^\s*(?:Tensor|void|bool|Shape)\s+(\w+)\s*\(", read("core/raw_ops.h"), re.M))
    rows = table_rows(problems)
    recording = recording_files()
    seen, autograd_files, extra = {}, set(), set()
    for n, cells in rows:
        where = f"{PAGE}:{n}"
        if len(cells) != 5:
            problems.append(f"{where}: {len(cells)} cells; expected op | autograd file | raw entry | CPU | CUDA")
            continue
        op = cells[0].strip("`")
        if op in seen:
            problems.append(f"{where}: {op} has a row already (line {seen[op]})")
        seen[op] = n
        if op not in ops:
            # Allowed when a file outside OP_SOURCES that records nodes defines it.
            files = [p for p in PATH.findall(cells[1]) if p in recording]
            if any(defines(p, op) for p in files):
                extra.add(op)
            else:
                problems.append(f"{where}: {op} is not a public op (declared in none of "
                                f"{', '.join(s[0] for s in OP_SOURCES)}, nor defined in a file that records nodes)")
        for col, cell in zip(("autograd", "raw", "CPU", "CUDA"), cells[1:]):
            paths = PATH.findall(cell)
            for p in paths:
                if not os.path.isfile(os.path.join(ROOT, p)):
                    problems.append(f"{where}: {p} ({col} column of {op}) does not exist")
            if col == "autograd":
                autograd_files.update(paths)
                if not paths:
                    problems.append(f"{where}: {op} names no autograd file")
                elif not any(os.path.isfile(os.path.join(ROOT, p)) and defines(p, op) for p in paths):
                    problems.append(f"{where}: {op} is defined in none of {', '.join(paths)}")
            elif col == "raw":
                for name in re.findall(r"raw::(\w+)", cell):
                    if name not in raw_decls:
                        problems.append(f"{where}: raw::{name} ({op}) is not declared in core/raw_ops.h")
            elif col == "CPU":
                if not paths and "—" not in cell:
                    problems.append(f"{where}: {op} names no CPU kernel file (write `—` for none)")
            elif col == "CUDA":
                if not paths and "—" not in cell:
                    problems.append(f"{where}: {op} names no CUDA kernel file (write `—` for none)")
                for p in paths:
                    if not p.startswith("cuda/"):
                        problems.append(f"{where}: {p} in the CUDA column of {op} is not under cuda/")
    # Ops recorded outside the declared headers: the row's op is then named by its file.
    for rel in sorted(recording - autograd_files):
        problems.append(f"{rel} records autograd nodes but is the autograd file of no row of {PAGE}'s op index")
    for op in sorted(ops - set(seen)):
        problems.append(f"{PAGE}: public op {op} has no row in the op index")
    for p in problems:
        print(p)
    print(f"check_op_index: {len(ops)} declared ops (+{len(extra)} listed from other files), "
          f"{len(rows)} rows, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
