#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that the tutorial's code listings are the code (docs/tutorial/README.md,
"How the listings stay true").

A listing is a fenced code block right after a line

    <!-- listing: examples/tutorial/02_custom_op.cpp -->

(an HTML comment: invisible on the rendered page). The block's lines must
appear in that file verbatim, as consecutive lines, indentation included. A
line that is only `// ...` (any indentation) marks left-out lines: the pieces
between such lines must each appear verbatim, in order. The file may be any
file of the repository (a chapter may quote core/functors.h), so a listing of
library code rots no more than one of a tutorial program.

Also checked: every chapter (docs/tutorial/NN-*.md) has a listing from its
program and names it; every program in examples/tutorial/ belongs to one
chapter; the index (docs/tutorial/README.md) links every chapter.

  python3 tests/check_tutorial_listings.py [REPO_ROOT]   exit 1 and a list on failure
  python3 tests/check_tutorial_listings.py --self-test   shows that a wrong listing fails
"""
import glob
import os
import re
import sys
import tempfile

MARK = re.compile(r"^<!--\s*listing:\s*(\S+)\s*-->\s*$")
FENCE = re.compile(r"^(```|~~~)")
ELLIPSIS = re.compile(r"^\s*// \.\.\.\s*$")


def listings(md_lines):
    """(line number of the mark, path, block lines) for every marked block."""
    out = []
    i = 0
    while i < len(md_lines):
        m = MARK.match(md_lines[i])
        if not m:
            i += 1
            continue
        mark_line, path = i + 1, m.group(1)
        i += 1
        if i >= len(md_lines) or not FENCE.match(md_lines[i]):
            out.append((mark_line, path, None))  # a mark with no block right after it
            continue
        fence = FENCE.match(md_lines[i]).group(1)
        i += 1
        block = []
        while i < len(md_lines) and not md_lines[i].startswith(fence):
            block.append(md_lines[i])
            i += 1
        i += 1
        out.append((mark_line, path, block))
    return out


def pieces(block):
    """The block split at `// ...` lines into runs of consecutive lines."""
    runs, cur = [], []
    for line in block:
        if ELLIPSIS.match(line):
            if cur:
                runs.append(cur)
            cur = []
        else:
            cur.append(line)
    if cur:
        runs.append(cur)
    return runs


def find_run(src, run, start):
    """Index in src where run occurs verbatim at or after start, or -1."""
    n = len(run)
    for k in range(start, len(src) - n + 1):
        if src[k:k + n] == run:
            return k
    return -1


def check(root):
    problems = []
    tut = os.path.join(root, "docs", "tutorial")
    chapters = sorted(glob.glob(os.path.join(tut, "[0-9][0-9]-*.md")))
    programs = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "examples", "tutorial", "*.cpp")))
    if not chapters:
        problems.append("docs/tutorial/: no chapters (NN-name.md)")
    index = os.path.join(tut, "README.md")
    index_text = open(index, encoding="utf-8").read() if os.path.exists(index) else ""
    if not index_text:
        problems.append("docs/tutorial/README.md: missing or empty")
    claimed = set()
    for page in chapters + ([index] if index_text else []):
        rel = os.path.relpath(page, root)
        lines = open(page, encoding="utf-8").read().splitlines()
        found = listings(lines)
        if page != index:
            name = os.path.basename(page)
            if f"({name})" not in index_text:
                problems.append(f"docs/tutorial/README.md: no link to {name}")
            # The chapter's own program: examples/tutorial/NN_*.cpp with the chapter's number.
            own = [p for p in programs if os.path.basename(p).startswith(name[:2] + "_")]
            if len(own) != 1:
                problems.append(f"{rel}: expected one program examples/tutorial/{name[:2]}_*.cpp, found {own}")
            else:
                claimed.add(own[0])
                if own[0] not in "\n".join(lines):
                    problems.append(f"{rel}: does not name its program {own[0]}")
                if not any(path == own[0] for _, path, _ in found):
                    problems.append(f"{rel}: no listing from its program {own[0]}")
        for mark_line, path, block in found:
            where = f"{rel}:{mark_line}"
            if block is None:
                problems.append(f"{where}: the listing mark is not followed by a fenced code block")
                continue
            full = os.path.join(root, path)
            if not os.path.isfile(full):
                problems.append(f"{where}: {path} does not exist")
                continue
            src = open(full, encoding="utf-8").read().splitlines()
            runs = pieces(block)
            if not runs:
                problems.append(f"{where}: empty listing")
            pos = 0
            for run in runs:
                k = find_run(src, run, pos)
                if k < 0:
                    j = 1  # the longest prefix of the piece that is there; the next line is the first that differs
                    while find_run(src, run[:j], pos) >= 0:
                        j += 1
                    hint = run[j - 1]
                    problems.append(f"{where}: not in {path} verbatim (or out of order), first differing line:\n"
                                    f"    {hint!r}")
                    break
                pos = k + len(run)
    for p in programs:
        if p not in claimed:
            problems.append(f"{p}: no chapter docs/tutorial/{os.path.basename(p)[:2]}-*.md uses it")
    return problems


def self_test():
    """A good listing passes, an edited one, a missing file and an unlisted program fail."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs", "tutorial"))
        os.makedirs(os.path.join(root, "examples", "tutorial"))
        with open(os.path.join(root, "examples", "tutorial", "01_a.cpp"), "w") as f:
            f.write("int main() {\n  int x = 1;\n  int y = 2;\n  return x + y - 3;\n}\n")
        with open(os.path.join(root, "docs", "tutorial", "README.md"), "w") as f:
            f.write("[one](01-a.md)\n")

        def chapter(body):
            with open(os.path.join(root, "docs", "tutorial", "01-a.md"), "w") as f:
                f.write("examples/tutorial/01_a.cpp\n<!-- listing: examples/tutorial/01_a.cpp -->\n```cpp\n" + body +
                        "```\n")
            return check(root)

        assert chapter("int main() {\n  // ...\n  return x + y - 3;\n") == [], "a true listing must pass"
        assert chapter("  int x = 1;\n  int y = 3;\n"), "an edited line must fail"
        assert chapter("  int y = 2;\n  // ...\n  int x = 1;\n"), "pieces out of order must fail"
        assert chapter("int x = 1;\n"), "lost indentation must fail"
        with open(os.path.join(root, "examples", "tutorial", "02_b.cpp"), "w") as f:
            f.write("int main() { return 0; }\n")
        assert chapter("int main() {\n"), "a program without a chapter must fail"
    print("self-test passed: true listings pass; edited, reordered, re-indented and orphaned ones fail")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        self_test()
        return 0
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) with the tutorial's listings")
        return 1
    n = sum(len(listings(open(p, encoding="utf-8").read().splitlines()))
            for p in glob.glob(os.path.join(root, "docs", "tutorial", "*.md")))
    print(f"tutorial listings: {n} listings checked, all verbatim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
