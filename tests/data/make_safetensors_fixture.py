#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Interop fixtures for tests/test_safetensors.cpp.

  python tests/data/make_safetensors_fixture.py
      writes tests/data/fixture.safetensors with the reference `safetensors`
      package's own writer (serialize_file; BF16 goes in as raw bits, so no
      torch is needed). The C++ test reads it and checks every value.

  python tests/data/make_safetensors_fixture.py --check FILE
      reads FILE, written by snug (see the comment at the top of
      tests/test_safetensors.cpp), with the reference package and checks that
      it holds exactly the values the C++ test wrote. Exits non-zero on any
      difference.

Needs: pip install safetensors numpy (torch optional: when installed, --check
also loads the file through safetensors.torch).
The values here and in the C++ test must stay in step.
"""
import json
import os
import struct
import sys

import numpy as np

try:
    import torch  # optional: an extra read of snug's file through safetensors.torch
except ImportError:
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- what the Python side writes (fixture.safetensors) ----------------------
FIXTURE = {
    "f32": np.array([[0.0, 1.5, -2.25], [1e-3, 3.0e38, -0.0]], dtype=np.float32),
    "f16": np.array([1.0, -0.5, 65504.0, 2.0**-24], dtype=np.float16),  # max and smallest subnormal
    "i64": np.array([-1, 2**40, -(2**62)], dtype=np.int64),
    "bool": np.array([True, False, True], dtype=np.bool_),
    "scalar": np.array(3.5, dtype=np.float32),  # 0-d
    "empty": np.zeros((0, 3), dtype=np.float32),
}
BF16_VALUES = [1.0, -2.0, 0.15625, 3.0e38]  # bits 3F80 C000 3E20 7F62 (3.0e38 rounds up)
FIXTURE_METADATA = {"format": "pt", "source": "make_safetensors_fixture.py"}


def bf16_bits(values):
    """float -> bfloat16 bit patterns, round to nearest even (numpy has no bf16)."""
    u = np.array(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def specs(arrays):
    """The reference package's own low-level writer input: no torch needed,
    and BF16 goes in as raw bits."""
    from safetensors import TensorSpec
    out = {}
    for k, (dtype, a) in arrays.items():
        out[k] = TensorSpec(dtype=dtype, shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes)
    return out


def write_fixture(path):
    from safetensors import serialize_file
    arrays = {k: (v.dtype.name, v.copy(order="C")) for k, v in FIXTURE.items()}  # ascontiguousarray would make 0-d 1-d
    arrays["bf16"] = ("bfloat16", bf16_bits(BF16_VALUES))
    serialize_file(specs(arrays), path, metadata=FIXTURE_METADATA)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


# ---- what snug writes (the C++ test's "snug-written file" case) --------------
def snug_expected():
    return {
        "f32": np.array([[0.0, 1.5, -2.25], [1e-3, 3.0e38, -0.0]], dtype=np.float32),
        "f16": np.array([1.0, -0.5, 65504.0, 2.0**-24], dtype=np.float16),
        "f64": np.array([np.pi, -1e300], dtype=np.float64),
        "i8": np.array([-128, 127, 0], dtype=np.int8),
        "u8": np.array([0, 255, 7], dtype=np.uint8),
        "i32": np.array([-2**31, 2**31 - 1], dtype=np.int32),
        "i64": np.array([-1, 2**40, -(2**62)], dtype=np.int64),
        "bool": np.array([True, False, True], dtype=np.bool_),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        # snug writes arange(6).reshape(2, 3).t(): a non-contiguous view
        "transposed": np.arange(6, dtype=np.float32).reshape(2, 3).T.copy(),
    }


def check(path):
    from safetensors import safe_open
    want = snug_expected()
    bad = 0
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
        names = [k for k in f.keys() if k != "bf16"]
        got = {k: f.get_tensor(k) for k in names}
    if meta != {"writer": "snug", "note": "interop check"}:
        print(f"metadata differs: {meta}")
        bad += 1
    if sorted(got) != sorted(want):
        print(f"names differ: {sorted(got)} vs {sorted(want)}")
        bad += 1
    for k, v in want.items():
        g = got.get(k)
        if g is None or g.dtype != v.dtype or g.shape != v.shape or g.tobytes() != v.tobytes():
            print(f"{k}: got {None if g is None else (g.dtype, g.shape, g.tolist())}, want {(v.dtype, v.shape, v.tolist())}")
            bad += 1
    if torch is not None:
        from safetensors.torch import load_file
        t = load_file(path)["bf16"]
        ok = t.dtype == torch.bfloat16 and t.float().numpy().tolist() == torch.tensor(BF16_VALUES, dtype=torch.bfloat16).float().numpy().tolist()
        print(f"bf16 via torch: {t.float().tolist()} {'ok' if ok else 'WRONG'}")
        bad += not ok
        # torch reads every tensor too (checks the non-numpy path).
        for k, v in want.items():
            tt = load_file(path)[k]
            if tt.numpy().tobytes() != v.tobytes() or tuple(tt.shape) != v.shape:
                print(f"{k} via torch differs")
                bad += 1
    # BF16 through the reference reader's raw view (numpy has no bf16).
    from safetensors import deserialize
    with open(path, "rb") as fh:
        views = dict(deserialize(fh.read()))
    v = views.get("bf16")
    ok = v is not None and v["dtype"] == "BF16" and v["shape"] == [4] and \
        bytes(v["data"]) == bf16_bits(BF16_VALUES).tobytes()
    print(f"bf16 (reference deserialize, raw bits): {'ok' if ok else 'WRONG'}")
    bad += not ok
    print(f"{path}: {'OK, every tensor and the metadata match' if bad == 0 else f'{bad} problem(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    write_fixture(os.path.join(HERE, "fixture.safetensors"))
