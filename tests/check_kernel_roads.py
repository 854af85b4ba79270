#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One road to every kernel: the feature folders reach kernels only through the
backend (core/backend.h, core/raw_ops.h), never directly.

Fails, printing each offending line, when a C++ file under nn/ data/ prune/
quant/ parallel/ distributed/ autograd/ examples/ includes a <snug/cuda/...>
header or calls into snug::cpu:: or snug::kernels:: (outside comments and
string literals). core/, cuda/ and bench/ may; tests/ may too.

Usage: check_kernel_roads.py [repository root]   (default: this file's ../)
       check_kernel_roads.py --self-test             (the checker on made-up files)
"""
import pathlib
import re
import sys
import tempfile

FOLDERS = ["nn", "data", "prune", "quant", "parallel", "distributed", "autograd", "examples"]
SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}
CUDA_INCLUDE = re.compile(r'#\s*include\s*[<"]snug/cuda/')
KERNEL_CALL = re.compile(r"\b(cpu|kernels)::")


def code_lines(text):
    """Yields (line number, code) with comments removed and string/char literals emptied."""
    in_block = False
    for no, line in enumerate(text.splitlines(), 1):
        out, i, n = [], 0, len(line)
        while i < n:
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    i = n
                else:
                    in_block, i = False, end + 2
                continue
            c = line[i]
            if line.startswith("//", i):
                break
            if line.startswith("/*", i):
                in_block, i = True, i + 2
                continue
            if c in "\"'":
                # A literal: keep its quotes, drop its contents (escapes included).
                j = i + 1
                while j < n and line[j] != c:
                    j += 2 if line[j] == "\\" else 1
                out.append(c + c)
                i = j + 1
                continue
            out.append(c)
            i += 1
        yield no, line, "".join(out)


def offenders(root):
    """'path:line: text' for every offending line under root's FOLDERS."""
    bad = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for no, raw, code in code_lines(text):
                # An include's path is a literal once emptied: test it on the line without comments.
                if (code.lstrip().startswith("#") and CUDA_INCLUDE.search(raw.split("//")[0])) or KERNEL_CALL.search(code):
                    bad.append(f"{path.relative_to(root)}:{no}: {raw.strip()}")
    return bad


def self_test():
    """The checker finds calls and includes, and not what only mentions them."""
    files = {
        "nn/calls.cpp": "#include <snug/core/tensor.h>\nvoid f() { snug::cpu::conv2d_relu(x); }\n"
                        "void g() { kernels::gemm_f32(1); }\n",
        "examples/inc.cpp": '#include <snug/cuda/fused_api.h>\n#include "snug/cuda/cuda_api.h"\n',
        "quant/quiet.cpp": "// kernels::gemm_f32 in a comment\n/* cpu::conv2d_relu\n   kernels:: */ int a;\n"
                           'const char* s = "cpu::conv2d_relu: bad";\nchar c = \':\'; // #include <snug/cuda/x.h>\n'
                           "bool is_cpu = d.is_cpu(); auto t = DeviceType::CPU;\n",
        "core/allowed.cpp": "void f() { kernels::gemm_f32(1); }\n",  # core/ may
    }
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            p = pathlib.Path(d) / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        got = sorted(b.split(": ")[0] for b in offenders(pathlib.Path(d)))
    want = ["examples/inc.cpp:1", "examples/inc.cpp:2", "nn/calls.cpp:2", "nn/calls.cpp:3"]
    if got != want:
        print(f"kernel roads self-test: found {got}, expected {want}")
        return 1
    print("kernel roads self-test: ok")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    bad = offenders(root)
    if bad:
        print("kernel roads: these lines reach a kernel directly; call the backend (core/backend.h) or a raw:: op "
              "(core/raw_ops.h) instead (NOTE [ Fused ops are backend entries ] in core/fused_defaults.cpp):")
        print("\n".join("  " + b for b in bad))
        print(f"kernel roads: {len(bad)} line(s) in {len({b.split(':')[0] for b in bad})} file(s)")
        return 1
    print(f"kernel roads: no cuda/ include and no cpu:: or kernels:: call under {', '.join(f + '/' for f in FOLDERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
