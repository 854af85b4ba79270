#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Crash-safe checkpoints: kill charlm with SIGKILL at random moments and resume.

Runs a small charlm that saves a checkpoint after every step, once without
interruption (the reference), then again while killing it with SIGKILL at
random moments --kills times (some of them land in the middle of a save) and
resuming each time from the checkpoint on disk. Checks that

  - every resume starts from a complete checkpoint at a step no earlier than
    the last one the killed run finished saving (nothing saved is lost),
  - the final checkpoint equals the reference's tensor for tensor, bit for bit.

    python3 tools/kill_resume_test.py --charlm build/release/examples/charlm [--kills 20] [--seed 1]
                                      [--device cpu|cuda|cuda:N]

--device trains (and resumes) on that device: on a GPU the final checkpoint
must still equal the uninterrupted GPU run's bit for bit.

Exits non-zero on any failure. docs/reliability.md.
"""
import argparse
import glob
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time

ARGS = ["--layers", "1", "--embd", "32", "--heads", "2", "--block", "32", "--batch", "4", "--eval-every", "0",
        "--eval-batches", "1", "--generate", "0", "--threads", "1", "--seed", "3", "--save-every", "1", "--json"]


def read_checkpoint(path):
    """A safetensors file: {name: (dtype, shape, bytes)} and its metadata. Raises on a torn file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        if b > len(data):
            raise ValueError(f"{path}: tensor {name} runs past the end")
        out[name] = (e["dtype"], tuple(e["shape"]), data[a:b])
    return out, meta


def step_of(meta):
    for k in ("step", "snug.step"):
        if k in meta:
            return int(meta[k])
    raise KeyError("no step in checkpoint metadata: " + ", ".join(sorted(meta)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--charlm", required=True)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="charlm --device (default cpu)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    tmp = tempfile.mkdtemp(prefix="snug_kill_")
    steps = ["--steps", str(a.steps), "--device", a.device]

    ref = os.path.join(tmp, "ref.ckpt")
    t0 = time.time()
    subprocess.run([a.charlm, *ARGS, *steps, "--save", ref], check=True, env=env, stdout=subprocess.DEVNULL)
    full_time = time.time() - t0
    ref_tensors, ref_meta = read_checkpoint(ref)

    ck = os.path.join(tmp, "run.ckpt")
    kills = during_save = resumes = 0
    last_step = 0
    seen_torn = set()
    while kills < a.kills:
        cmd = [a.charlm, *ARGS, *steps, "--save", ck]
        if os.path.exists(ck):
            cmd += ["--resume", ck]
            resumes += 1
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.0, full_time))
        if p.poll() is not None:
            err = p.stderr.read().decode()
            if p.returncode != 0:
                print("FAIL: charlm exited with", p.returncode, err, file=sys.stderr)
                return 1
            os.remove(ck)  # it finished before the kill: start over so every kill interrupts something
            last_step = 0
            continue
        p.send_signal(signal.SIGKILL)
        p.wait()
        kills += 1
        torn = set(glob.glob(ck + ".tmp-*")) - seen_torn
        if torn:  # killed inside save_training_state: its temporary file is left, the checkpoint is untouched
            during_save += 1
            seen_torn |= torn  # left in place: the next successful save must remove it
        if os.path.exists(ck):
            _, meta = read_checkpoint(ck)  # raises if the file on disk is not a whole checkpoint
            s = step_of(meta)
            if s < last_step:
                print(f"FAIL: checkpoint went back from step {last_step} to {s}", file=sys.stderr)
                return 1
            last_step = s

    subprocess.run([a.charlm, *ARGS, *steps, "--save", ck] + (["--resume", ck] if os.path.exists(ck) else []),
                   check=True, env=env, stdout=subprocess.DEVNULL)
    got, meta = read_checkpoint(ck)
    left = glob.glob(ck + ".tmp-*")
    if left:  # every save removes the temporaries of writers that were killed
        print(f"FAIL: {len(left)} temporary files of killed saves were not cleaned up: {left[:3]}", file=sys.stderr)
        return 1
    if step_of(meta) != step_of(ref_meta):
        print(f"FAIL: final step {step_of(meta)} != {step_of(ref_meta)}", file=sys.stderr)
        return 1
    if set(got) != set(ref_tensors):
        print("FAIL: tensor names differ", sorted(set(got) ^ set(ref_tensors)), file=sys.stderr)
        return 1
    diff = [n for n in ref_tensors if got[n] != ref_tensors[n]]
    if diff:
        print(f"FAIL: {len(diff)} tensors differ from the uninterrupted run, e.g. {diff[:5]}", file=sys.stderr)
        return 1
    print(json.dumps({"device": a.device, "kills": kills, "kills_during_save": during_save, "resumes": resumes,
                      "tensors_compared": len(ref_tensors), "steps": a.steps, "lost": 0,
                      "temporaries_cleaned": len(seen_torn),
                      "uninterrupted_run_s": round(full_time, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
