#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs snug's and PyTorch's training-step benchmarks interleaved and prints
the throughput ratios (snug / PyTorch) with their spread.

For each workload and each repeat it runs `snug-bench W --json` and then
`bench/peers/train_torch.py W --json` (same steps, warmup, threads), so both
see the same machine conditions. The ratio of a repeat is PyTorch's median
ms/step over snug's; the table shows the median ratio over the repeats, and
the lowest and highest.

  python3 bench/ratios.py [--bench build/release/bench/snug-bench] [--repeats 5]
                          [--workloads gpt,cnn,mlp] [--python python3] [--json]
                          [--isa avx512|avx2|baseline] [--peer-bench PATH]
                          [--amp bf16|f16 [--peer-amp bf16|f16|none]]

--python picks the interpreter for the peer, e.g. one whose torch is Debian's
1.13 (OpenBLAS; set OPENBLAS_CORETYPE=SkylakeX on this CPU) instead of PyPI's.

--isa runs both sides at one CPU level: snug with SNUG_CPU_ISA (NOTE [ CPU
levels ] in core/cpu/level.h), PyTorch with ATEN_CPU_CAPABILITY and oneMKL's
MKL_ENABLE_INSTRUCTIONS (AVX2 or AVX512). The peer's "isa" field shows what
it ran.

--peer-bench PATH makes the peer another snug-bench instead of PyTorch, e.g.
a -DSNUG_NATIVE=ON build's (build/native/bench/snug-bench): the ratio is then
that build's ms/step over this one's.

--amp bf16|f16 (the gpt workload only) runs snug's step under autocast
(`snug-bench gpt --amp`) and, in the same repeat, `snug-bench gpt --amp X
--paired-f32`: the autocast step and the f32 step of two copies of the model
taken by turns in one process, so both see the same moments of the machine.
Each result then has amp_over_f32 (the median over the repeats of that run's
median per-turn ratio, autocast ms over f32 ms; at most 1.0 means mixed
precision costs no time) and snug_f32_ms_median. (Before, the f32 step ran
in a process of its own, seconds apart: on a VM whose speed drifts that much,
the drift showed in the ratio.)
The peer runs torch.autocast("cpu") with --peer-amp, by default bf16 for
either: PyTorch's f16 autocast on the CPU is about 15x slower than its bf16
one, so bf16 is the comparison that means something.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def last_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not lines:
        raise SystemExit(f"no JSON line from {' '.join(cmd)}:\n{out}")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "release", "bench", "snug-bench"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workloads", default="gpt,cnn,mlp")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--isa", choices=["avx512", "avx2", "baseline"])
    ap.add_argument("--peer-bench")
    ap.add_argument("--amp", choices=["bf16", "f16"])
    ap.add_argument("--peer-amp", choices=["bf16", "f16", "none"], default="bf16")
    a = ap.parse_args()
    if a.amp and a.workloads != "gpt":
        if "--workloads" in sys.argv:
            ap.error("--amp applies to the gpt workload only (--workloads gpt)")
        a.workloads = "gpt"
    snug_env, torch_env = dict(os.environ), dict(os.environ)
    if a.isa:
        snug_env["SNUG_CPU_ISA"] = a.isa
        torch_env["ATEN_CPU_CAPABILITY"] = {"baseline": "default"}.get(a.isa, a.isa)
        if a.isa != "baseline":
            torch_env["MKL_ENABLE_INSTRUCTIONS"] = a.isa.upper()
    if a.peer_bench:
        torch_env = snug_env
    common = ["--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads), "--json"]
    results = {}
    torch_desc = None
    for w in a.workloads.split(","):
        runs = []
        for r in range(a.repeats):
            amp = ["--amp", a.amp] if a.amp else []
            s = last_json([a.bench, w] + common + amp, env=snug_env)
            # amp against f32: both models' steps by turns in one process (snug-bench gpt --paired-f32)
            f32 = last_json([a.bench, w] + common + amp + ["--paired-f32"], env=snug_env) if a.amp else None
            if a.peer_bench:
                t = last_json([a.peer_bench, w] + common + amp, env=torch_env)
                torch_desc = f"snug {a.peer_bench} ({t.get('cpu_isa', '?')})"
                t["peak_rss_growth_bytes"] = t["peak_allocated_bytes"]
            else:
                peer_amp = ["--amp", a.peer_amp] if a.amp else []
                t = last_json([a.python, os.path.join(HERE, "peers", "train_torch.py"), w] + common + peer_amp,
                              env=torch_env)
                torch_desc = f"torch {t['torch']} ({t['blas']}, {t['isa']})"
            snug_isa = s.get("cpu_isa", "?")
            runs.append({"snug_ms": s["ms_per_step"], "torch_ms": t["ms_per_step"],
                         "ratio": t["ms_per_step"] / s["ms_per_step"],
                         "snug_peak_allocated_bytes": s["peak_allocated_bytes"],
                         "torch_peak_rss_growth_bytes": t["peak_rss_growth_bytes"]})
            if f32:
                runs[-1]["snug_f32_ms"] = f32["f32_ms_per_step"]
                runs[-1]["snug_paired_amp_ms"] = f32["ms_per_step"]
                runs[-1]["amp_over_f32"] = f32["amp_over_f32"]
            print(f"{w} repeat {r + 1}: snug {s['ms_per_step']:.2f} ms, torch {t['ms_per_step']:.2f} ms, "
                  f"ratio {runs[-1]['ratio']:.3f}"
                  + (f"; by turns: snug amp {f32['ms_per_step']:.2f} ms, f32 {f32['f32_ms_per_step']:.2f} ms, "
                     f"amp/f32 {runs[-1]['amp_over_f32']:.3f}" if f32 else ""),
                  file=sys.stderr, flush=True)
        ratios = [x["ratio"] for x in runs]
        results[w] = {
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "snug_ms_median": statistics.median(x["snug_ms"] for x in runs),
            "torch_ms_median": statistics.median(x["torch_ms"] for x in runs),
            "snug_peak_allocated_bytes": runs[-1]["snug_peak_allocated_bytes"],
            "torch_peak_rss_growth_bytes": statistics.median(x["torch_peak_rss_growth_bytes"] for x in runs),
            "repeats": a.repeats}
        if a.amp:
            results[w].update({
                "amp": a.amp, "peer_amp": a.peer_amp,
                "snug_f32_ms_median": statistics.median(x["snug_f32_ms"] for x in runs),
                "snug_paired_amp_ms_median": statistics.median(x["snug_paired_amp_ms"] for x in runs),
                "amp_over_f32": statistics.median(x["amp_over_f32"] for x in runs),
                "amp_over_f32_max": max(x["amp_over_f32"] for x in runs)})
    if a.json:
        print(json.dumps({"peer": torch_desc, "snug_cpu_isa": snug_isa, "threads": a.threads,
                          "results": results}))
        return
    print(f"snug ({snug_isa}) vs {torch_desc}, {a.threads} threads, {a.repeats} interleaved repeats "
          f"({a.steps} timed steps after {a.warmup} warmup each)"
          + (f"; snug --amp {a.amp} against the peer's autocast {a.peer_amp}" if a.amp else ""))
    print(f"{'workload':8} {'snug ms':>9} {'torch ms':>9} {'ratio':>7} {'min':>7} {'max':>7} "
          f"{'snug peak alloc':>16} {'torch RSS growth':>17}")
    for w, r in results.items():
        print(f"{w:8} {r['snug_ms_median']:9.2f} {r['torch_ms_median']:9.2f} {r['ratio_median']:7.3f} "
              f"{r['ratio_min']:7.3f} {r['ratio_max']:7.3f} {r['snug_peak_allocated_bytes'] / 2**20:13.1f} MiB "
              f"{r['torch_peak_rss_growth_bytes'] / 2**20:14.1f} MiB")
        if "amp_over_f32" in r:
            print(f"{'':8} by turns, snug f32 {r['snug_f32_ms_median']:.2f} ms, --amp {r['amp']} "
                  f"{r['snug_paired_amp_ms_median']:.2f} ms: --amp {r['amp']} / f32 = "
                  f"{r['amp_over_f32']:.3f} (max {r['amp_over_f32_max']:.3f})")


if __name__ == "__main__":
    main()
