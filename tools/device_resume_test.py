#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checkpoints across devices: save charlm's training state on one device, resume on another.

Runs a small charlm three times:
  1. --steps N on --resume-device, saved at the end: the reference;
  2. --steps N --stop-at K on --save-device, saved there (the file holds host
     copies of every tensor; the schedule is that of N steps);
  3. --steps N --resume that file on --resume-device, saved at the end.
Checks that run 3 reports --resume-device, reaches step N, and that its final
checkpoint equals the reference's tensor for tensor: bit for bit when both
devices run the same kernels (the same device, or two CPU devices: cpu and
cpu:N are one CPU with separate memory pools), else within --tolerance (the
largest difference of a parameter, relative to its largest magnitude), and the
validation losses within --loss-tolerance.

    python3 tools/device_resume_test.py --charlm build/release/examples/charlm \\
        --save-device cpu:1 --resume-device cpu [--steps 12] [--at 5]

Exits non-zero on any failure and prints one JSON line. docs/cuda.md.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

from kill_resume_test import read_checkpoint  # {name: (dtype, shape, bytes)}, metadata

ARGS = ["--layers", "2", "--embd", "32", "--heads", "2", "--block", "32", "--batch", "4", "--eval-every", "0",
        "--eval-batches", "2", "--generate", "16", "--threads", "1", "--seed", "5", "--json"]
DTYPES = {"F32": "f", "F64": "d", "F16": "e"}


def values(t):
    dtype, _, raw = t
    if dtype == "BF16":  # the high half of an f32
        return struct.unpack(f"<{len(raw) // 2}f", b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2)))
    code = DTYPES.get(dtype)
    if code is None:
        return None
    return struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw)


def run(charlm, args, env):
    p = subprocess.run([charlm, *ARGS, *args], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: charlm {' '.join(args)} exited with {p.returncode}:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def same_kernels(a, b):
    return a.split(":")[0] == "cpu" and b.split(":")[0] == "cpu" or a.replace("cuda:0", "cuda") == b.replace(
        "cuda:0", "cuda")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--charlm", required=True)
    ap.add_argument("--save-device", required=True)
    ap.add_argument("--resume-device", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--at", type=int, default=5, help="the step the first run saves at")
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument("--loss-tolerance", type=float, default=2e-3)
    ap.add_argument("extra", nargs="*", help="more charlm flags for all three runs (after --)")
    a = ap.parse_args()
    if not 0 < a.at < a.steps:
        ap.error("--at must be between 0 and --steps")
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    tmp = tempfile.mkdtemp(prefix="snug_devres_")
    ref, mid, end = (os.path.join(tmp, f) for f in ("ref.ckpt", "mid.ckpt", "end.ckpt"))
    steps = ["--steps", str(a.steps)]
    r_ref = run(a.charlm, [*steps, "--device", a.resume_device, "--save", ref, *a.extra], env)
    run(a.charlm, [*steps, "--stop-at", str(a.at), "--device", a.save_device, "--save", mid, *a.extra], env)
    r_end = run(a.charlm, [*steps, "--device", a.resume_device, "--resume", mid, "--save", end, *a.extra], env)
    if r_end["device"] != str(r_ref["device"]):
        sys.exit(f"FAIL: the resumed run reports device {r_end['device']}, the reference {r_ref['device']}")
    want, want_meta = read_checkpoint(ref)
    got, got_meta = read_checkpoint(end)
    if want_meta.get("step") != got_meta.get("step"):
        sys.exit(f"FAIL: final step {got_meta.get('step')} != {want_meta.get('step')}")
    if set(want) != set(got):
        sys.exit(f"FAIL: tensor names differ: {sorted(set(want) ^ set(got))[:5]}")
    bitwise = same_kernels(a.save_device, a.resume_device)
    differ = [k for k in want if want[k] != got[k]]
    worst = 0.0
    for k in want:
        if not k.startswith("model.") or want[k] == got[k]:
            continue
        w, g = values(want[k]), values(got[k])
        if w is None or g is None or len(w) != len(g):
            sys.exit(f"FAIL: {k} differs in dtype or size")
        scale = max(max(abs(v) for v in w), 1e-12)
        worst = max(worst, max(abs(x - y) for x, y in zip(w, g)) / scale)
    loss_diff = abs(r_end["val_loss"] - r_ref["val_loss"])
    out = {"save_device": a.save_device, "resume_device": a.resume_device, "steps": a.steps, "saved_at": a.at,
           "tensors": len(want), "tensors_differing": len(differ), "bitwise_expected": bitwise,
           "max_param_rel_diff": worst, "val_loss": r_end["val_loss"], "val_loss_ref": r_ref["val_loss"]}
    print(json.dumps(out))
    if bitwise and differ:
        sys.exit(f"FAIL: {len(differ)} tensors differ from the uninterrupted run, e.g. {differ[:5]}")
    if worst > a.tolerance or loss_diff > a.loss_tolerance:
        sys.exit(f"FAIL: resumed on {a.resume_device}: parameters differ by {worst:.3g} (tolerance {a.tolerance}), "
                 f"val loss by {loss_diff:.3g} (tolerance {a.loss_tolerance})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
