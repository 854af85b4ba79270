#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Puts `SPDX-License-Identifier: MIT` at the top of every source file that lacks it.

   tools/add_spdx.py          add the line where it is missing
   tools/add_spdx.py --check  list files without it and exit 1 if there are any

Source files: C++ and CUDA (.cpp .h .cu .cuh .in of headers), CMake, Python
and shell scripts tracked by git. The line goes after a #! line.
"""
import subprocess
import sys
from pathlib import Path

TAG = "SPDX-License-Identifier: MIT"
SLASH = (".cpp", ".h", ".cu", ".cuh", ".hpp", ".h.in")
HASH = (".py", ".sh", ".cmake", ".cmake.in", ".pc.in", "Makefile", "CMakeLists.txt", ".ci/run", "tools/fuzz.sh")


def comment_for(path: str):
    if path.endswith(SLASH):
        return "// "
    if path.endswith(HASH) or path == ".ci/run":
        return "# "
    return None


def main() -> int:
    check = "--check" in sys.argv[1:]
    root = Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
    files = subprocess.check_output(["git", "ls-files"], cwd=root, text=True).split()
    missing = []
    for f in files:
        lead = comment_for(f)
        if lead is None:
            continue
        p = root / f
        text = p.read_text()
        if TAG in "\n".join(text.splitlines()[:3]):
            continue
        missing.append(f)
        if check:
            continue
        lines = text.splitlines(keepends=True)
        at = 1 if lines and lines[0].startswith("#!") else 0
        lines.insert(at, lead + TAG + "\n")
        p.write_text("".join(lines))
    if check and missing:
        print("no SPDX line in:", *missing, sep="\n  ")
        return 1
    if not check:
        print(f"added the SPDX line to {len(missing)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
