#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that README.md, docs/*.md and docs/tutorial/*.md point only at files that exist in the
repository.

- A path that starts with one of the repository's top-level folders
  (`core/cpu/gemm.h`, `tests/fuzz/`, `bench/results/...`) must exist, relative to the
  repository root or to the page's own folder (`img/x.png` in docs/).
  `a.{h,cpp}` is expanded; a path with `<...>` or `*` must match something.
- A bare source file name (`cpu/reduce.cpp`) must exist somewhere in the tree.
- Nothing may point outside the repository: no `WORKLOADS.md` or `DESIGN.md`
  (they live beside the repository, not in it; docs/workloads.md is the
  repository's own), and no `../` path except the data and third-party folders
  that the examples and tools/gpu_check.sh look for beside the repository.

  python3 tests/check_doc_paths.py [REPO_ROOT]      (exit 1 and a list on failure)
"""
import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
SKIP_DIRS = {".git", "build"}
# Folders beside the repository that programs look in for data they do not ship.
ALLOWED_OUTSIDE = ("../shared/data", "../third_party")
FORBIDDEN = re.compile(r"\b(WORKLOADS|DESIGN)\.md\b")
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".cmake")
PATH = re.compile(r"(?<![\w./$-])((?:\.\./)*(?:[\w.-]+/)+[\w.<>*-]*(?:\{[\w,]+\})?)")
BARE = re.compile(r"(?<![\w./$-])([\w-]+\.(?:h|cpp|cu|cuh|py|sh|cmake))(?![\w/])")
URL = re.compile(r"[a-z]+://\S+")


def top_level_dirs():
    return {d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)) and d not in SKIP_DIRS
            and not d.startswith(".")}


def all_file_names():
    names = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        names.update(filenames)
    return names


def expand(token):
    m = re.search(r"\{([\w,]+)\}$", token)
    if not m:
        return [token]
    return [token[: m.start()] + alt for alt in m.group(1).split(",")]


def exists(path, page_dir):
    for base in (ROOT, page_dir):
        full = os.path.join(base, path)
        if "<" in path or "*" in path:
            pattern = re.sub(r"<[^>]*>", "*", full)
            if glob.glob(pattern, recursive=True):
                return True
        elif os.path.exists(full):
            return True
    return False


def main():
    tops = top_level_dirs()
    names = all_file_names()
    pages = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    pages += sorted(glob.glob(os.path.join(ROOT, "docs", "tutorial", "*.md")))
    problems = []
    for page in pages:
        rel = os.path.relpath(page, ROOT)
        page_dir = os.path.dirname(page)
        with open(page, encoding="utf-8") as f:
            lines = f.readlines()
        for n, raw in enumerate(lines, 1):
            line = URL.sub("", raw)
            for m in FORBIDDEN.finditer(line):
                problems.append(f"{rel}:{n}: {m.group(0)} is not in the repository (use docs/workloads.md)")
            for m in PATH.finditer(line):
                token = m.group(1).rstrip(".,:;")
                if ">" in token and "<" not in token:  # #include <snug/snug.h>
                    token = token.split(">")[0]
                if token.startswith("../"):
                    if not any(token.startswith(a) or a.startswith(token) for a in ALLOWED_OUTSIDE):
                        problems.append(f"{rel}:{n}: {token} points outside the repository")
                    continue
                # <snug/core/tensor.h> is core/tensor.h in the source tree (NOTE [ Include paths ]);
                # snug/version.h is generated from snug/version.h.in.
                parts = token.split("/")
                if parts[0] == "snug" and len(parts) > 2 and parts[1] in tops:
                    token = "/".join(parts[1:])
                if token == "snug/version.h":
                    token = "snug/version.h.in"
                if token.split("/")[0] not in tops:
                    continue
                for path in expand(token):
                    if not exists(path, page_dir):
                        problems.append(f"{rel}:{n}: {path} does not exist")
            for m in BARE.finditer(line):
                if m.group(1).endswith(SOURCE_EXT) and m.group(1) not in names:
                    problems.append(f"{rel}:{n}: no file named {m.group(1)} in the repository")
    for p in problems:
        print(p)
    print(f"check_doc_paths: {len(pages)} pages, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
