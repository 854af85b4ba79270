#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tests tools/torch_snapshot.py (docs/memory.md, "PyTorch snapshots").

    python3 tests/torch_snapshot_test.py [path/to/snug-bench]

(a) export: a small hand-made snug snapshot becomes a PyTorch snapshot pickle
    that PyTorch's own readers (torch.cuda._memory_viz: segsum, trace,
    segments, memory, trace_plot, segment_plot) render with the right sizes
    and counts, written only with opcodes the web viewer's unpickler knows,
    and whose trace the viewer can walk back from the final segments.
(b) import: a hand-made pickle shaped like torch.cuda.memory._snapshot()'s
    becomes snug events; with snug-bench, its replay peaks at the live bytes
    the events add up to. Also: wgpt_step.json survives export + import, and
    bad inputs exit 2 naming the file.

The torch checks print "SKIPPED: ..." when torch is not installed; the rest
needs no torch. Exit 0: pass.
"""
import base64
import json
import os
import pickle
import pickletools
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snapshot_fixtures import MIB, ROOT, check, finish, tool  # noqa: E402  (what both snapshot tests share)

TOOL = tool("torch_snapshot.py")
WGPT = os.path.join(ROOT, "bench", "traces", "wgpt_step.json")
BENCH = sys.argv[1] if len(sys.argv) > 1 else ""


def run_tool(*args):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# ---- (a) export ------------------------------------------------------------------

S = 0x7F0000000000  # a small-pool segment of cpu:0
L = S + 2 * MIB  # a large one, freed again
P = 0x7F1000000000  # cpu:1's segment, on stream 1


def ev(action, address, size, requested=None, tag="other", op="", t=0, stream=0):
    return {"action": action, "time_ns": t, "address": address, "size": size,
            "requested": size if requested is None else requested, "stream": stream, "tag": tag, "op": op}


def blk(address, size, state, requested=0, tag="other", op=""):
    return {"address": address, "size": size, "requested": requested, "state": state, "tag": tag, "op": op}


SNUG = {"format": "snug-memory-snapshot", "version": 1, "devices": [
    {"device": "cpu:0", "backend": "host", "capacity": 32 * MIB,
     "settings": "round=512,small_threshold=1048576,small_segment=2097152,large_segment=20971520,"
                 "large_threshold=10485760,large_round=2097152,large_growth=16,max_split_size=none,"
                 "max_split_tolerance=20971520,fit=best",
     "segments": [{"address": S, "size": 2 * MIB, "stream": 0, "pool": "small", "blocks": [
         blk(S, 2048, "allocated", 2000, "temporary", "add"),
         blk(S + 2048, 2048, "free"),
         blk(S + 4096, MIB, "allocated", MIB, "parameter"),
         blk(S + 4096 + MIB, 2 * MIB - 4096 - MIB, "free")]}],
     "events": [
         ev("segment_alloc", S, 2 * MIB, 0, t=1000),
         ev("alloc", S, 4096, 4000, "activation", "matmul", t=2000),
         ev("alloc", S + 4096, MIB, MIB, "parameter", t=3000),
         ev("free", S, 4096, 4000, "activation", "matmul", t=4000),
         {"action": "step", "time_ns": 4500, "size": 0},  # a training-step boundary: not in PyTorch's format
         ev("alloc", S, 2048, 2000, "temporary", "add", t=5000),
         ev("segment_alloc", L, 20 * MIB, 0, t=6000),
         ev("alloc", L, 4 * MIB, 4 * MIB, "activation", "linear", t=7000),
         ev("free", L, 4 * MIB, 4 * MIB, "activation", "linear", t=8000),
         ev("segment_free", L, 20 * MIB, 0, t=9000),
         ev("oom", 0, 64 * MIB, 64 * MIB, t=10000)]},
    {"device": "cpu:1", "backend": "host", "capacity": None, "settings": "",
     "segments": [{"address": P, "size": 2 * MIB, "stream": 1, "pool": "small", "blocks": [
         blk(P, 512, "pending_free", 512, "gradient", "AccumulateGrad"),
         blk(P + 512, 2 * MIB - 512, "free")]}],
     "events": [ev("segment_alloc", P, 2 * MIB, 0, stream=1),
                ev("alloc", P, 512, 512, "gradient", "AccumulateGrad", stream=1)]},
    {"device": "cuda:0", "backend": "simulated", "capacity": None, "settings": "", "segments": [], "events": []}]}

# What the web viewer's unpickler (torch/utils/viz/MemoryViz.js) understands.
VIEWER_OPCODES = {"PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "DICT", "LIST",
                  "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "MEMOIZE",
                  "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "SHORT_BINUNICODE", "BINUNICODE", "BININT",
                  "BININT1", "BININT2", "LONG1", "NEWTRUE", "NEWFALSE", "NONE", "BINFLOAT"}


def viewer_walk_back(data, device):
    """Walks a device trace back from the final segments as the viewer's
    "Allocator State History" does; returns the first inconsistency, or None."""
    segs = {s["address"]: s["total_size"] for s in data["segments"] if s["device"] == device}
    live = {}
    for s in data["segments"]:
        if s["device"] == device:
            for b in s["blocks"]:
                if b["state"] in ("active_allocated", "active_pending_free"):
                    live[b["address"]] = b["size"]
    trace = data["device_traces"][device]
    for i in range(len(trace) - 1, -1, -1):
        e = trace[i]
        a = e["action"]
        if a == "alloc":
            live.pop(e["addr"], None)
        elif a == "free_completed":
            if not (i > 0 and trace[i - 1]["action"] == "free_requested" and trace[i - 1]["addr"] == e["addr"]):
                return f"entry {i}: free_completed without the free_requested before it"
            live[e["addr"]] = e["size"]
        elif a == "free_requested":
            pass  # folded into the free_completed after it
        elif a == "segment_free":
            segs[e["addr"]] = e["size"]
        elif a == "segment_alloc":
            if segs.pop(e["addr"], None) is None:
                return f"entry {i}: segment_alloc of a segment that is not there"
        for addr, size in live.items():
            if not any(sa <= addr and addr + size <= sa + ss for sa, ss in segs.items()):
                return f"before entry {i}: block {addr:#x} ({size} B) lies in no segment"
    return None


def convert(tmp, cmd, obj, src_name, out_name):
    """Writes obj to tmp/src_name (JSON to export, a pickle to import), runs
    `torch_snapshot.py cmd` on it into tmp/out_name and checks it exits 0.
    Returns (src, out, stderr), or None when it failed."""
    src, out = os.path.join(tmp, src_name), os.path.join(tmp, out_name)
    with open(src, "w" if cmd == "export" else "wb") as f:
        (json if cmd == "export" else pickle).dump(obj, f)
    rc, _, se = run_tool(cmd, src, "-o", out)
    check(rc == 0, f"{cmd} exits 0 (rc {rc}: {se.strip()})")
    return None if rc else (src, out, se)


def test_export(tmp):
    got = convert(tmp, "export", SNUG, "small.json", "small.pickle")
    if got is None:
        return None
    _, out, se = got
    check("'step'" in se and "skipped" in se, f"export says it skipped the step event: {se!r}")
    with open(out, "rb") as f:
        raw = f.read()
    data = pickle.loads(raw)
    check(set(data) >= {"segments", "device_traces", "allocator_settings"}, f"top-level keys: {sorted(data)}")
    check(len(data["device_traces"]) == 3, "one device trace per snug device (3)")
    t0 = data["device_traces"][0]
    check([e["action"] for e in t0] == ["segment_alloc", "alloc", "alloc", "free_requested", "free_completed",
                                        "alloc", "segment_alloc", "alloc", "free_requested", "free_completed",
                                        "segment_free", "oom"], f"cpu:0 actions: {[e['action'] for e in t0]}")
    a = t0[1]
    check((a["addr"], a["size"], a["requested_size"], a["stream"], a["time_us"]) == (S, 4096, 4000, 0, 2),
          f"alloc entry: {a}")
    check(a["frames"] == [{"filename": "snug", "line": 0, "name": "matmul"}], f"alloc frames: the op: {a['frames']}")
    check(t0[2]["frames"][0]["name"] == "parameter", "without an op the frame names the tag")
    check(t0[3]["addr"] == t0[4]["addr"] == S and t0[4]["size"] == 4096, "free -> free_requested + free_completed")
    oom = t0[-1]
    check("addr" not in oom and oom["size"] == 64 * MIB and oom["device_free"] == 30 * MIB,
          f"oom entry: device_free = capacity - reserved (30 MiB): {oom}")
    check([e["action"] for e in data["device_traces"][1]] == ["segment_alloc", "alloc"] and
          data["device_traces"][1][1]["stream"] == 1, "cpu:1's trace is device 1")
    check(data["device_traces"][2] == [], "cuda:0 without events is an empty trace")
    segs = data["segments"]
    check([s["device"] for s in segs] == [0, 1], f"segments carry the device index: {[s['device'] for s in segs]}")
    s0 = segs[0]
    want = {"address": S, "total_size": 2 * MIB, "allocated_size": 2048 + MIB, "active_size": 2048 + MIB,
            "requested_size": 2000 + MIB, "stream": 0, "segment_type": "small", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": []}
    check({k: s0.get(k) for k in want} == want, f"segment fields: { {k: s0.get(k) for k in want} }")
    check([(b["address"], b["size"], b["requested_size"], b["state"]) for b in s0["blocks"]] ==
          [(S, 2048, 2000, "active_allocated"), (S + 2048, 2048, 0, "inactive"),
           (S + 4096, MIB, MIB, "active_allocated"), (S + 4096 + MIB, MIB - 4096, 0, "inactive")],
          "blocks: address, size, requested_size, state")
    check(s0["blocks"][0]["frames"] == [{"filename": "snug", "line": 0, "name": "add"}], "block frames name the op")
    check(segs[1]["blocks"][0]["state"] == "active_pending_free" and segs[1]["stream"] == 1, "pending_free block")
    check(data["allocator_settings"]["max_split_size"] == -1, "max_split_size none -> -1 (PyTorch's int64 SIZE_MAX)")
    ops = {op.name for op, _, _ in pickletools.genops(raw)}
    check(ops <= VIEWER_OPCODES, f"only opcodes the web viewer reads: extra {sorted(ops - VIEWER_OPCODES)}")
    check(raw[1] in (2, 3, 4), f"pickle protocol 2..4 (the viewer's range), got {raw[1]}")
    for d in range(3):
        bad = viewer_walk_back(data, d)
        check(bad is None, f"viewer walk-back of device {d}: {bad}")
    return out, data


def test_memory_viz(path, data):
    try:
        from torch.cuda import _memory_viz as mv
    except Exception as e:  # noqa: BLE001 (torch missing or broken: the same for this test)
        print(f"SKIPPED: torch is not importable ({type(e).__name__}): the torch.cuda._memory_viz rendering checks")
        return
    text = mv.segsum(data)
    check("segments: 2" in text and "total_reserved: 4.0MiB" in text, f"segsum counts and sizes:\n{text}")
    # segsum's allocated is what the live blocks requested: 2000 + 1 MiB (+ cpu:1's pending block: not counted).
    check("total_allocated: 1.0MiB" in text, "segsum total_allocated")
    text = mv.trace(data)
    check("Device 0" in text and "12 entries" in text and "Device 1" in text and "2 entries" in text
          and "Device 2" not in text, f"trace: devices and entry counts:\n{text}")
    check(f"cudaMalloc({S}, 2.0MiB)" in text and f"cudaMalloc({L}, 20.0MiB)" in text, "trace: segments")
    check("= a[0:4.0KiB]" in text and "del " in text and "# free completed for" in text, "trace: alloc/free lines")
    check("raise OutOfMemoryError # 64.0MiB requested, 30.0MiB free in CUDA" in text, "trace: the oom")
    flame = mv.segments(data, format_flamegraph=lambda lines: lines)  # the flamegraph's input lines
    check(f"stream_0;seg_{S};active_allocated;snug:0:add 2000" in flame, f"segments flamegraph:\n{flame}")
    check(f"stream_0;seg_{S};active_allocated;<gaps> 48" in flame, "segments: 48 B of rounding")
    check(f"stream_0;seg_{S};inactive;<gaps> 2048" in flame, "segments: free block (requested_size 0)")
    flame = mv.memory(data, format_flamegraph=lambda lines: lines)
    check("stream_0;active_allocated;snug:0:parameter 1048576" in flame, f"memory flamegraph:\n{flame}")
    check("stream_1;active_pending_free;snug:0:AccumulateGrad 512" in flame, "memory: pending block on stream 1")
    for fn, kind in ((mv.trace_plot, "Active Memory Timeline"), (mv.segment_plot, "Allocator State History")):
        page = fn(data)
        check(repr(kind) in page, f"{fn.__name__} selects {kind!r}")
        m = re.search(r'"base64": "([A-Za-z0-9+/=]+)"', page)
        check(m is not None, f"{fn.__name__} embeds the snapshot")
        if m:
            embedded = pickle.loads(base64.b64decode(m.group(1)))
            check(embedded["device_traces"] == data["device_traces"] and embedded["segments"] == data["segments"],
                  f"{fn.__name__}: the embedded snapshot is the export")
    html = os.path.join(os.path.dirname(path), "small.html")  # the command docs/memory.md gives
    p = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", path, "-o", html],
                       capture_output=True, text=True)
    check(p.returncode == 0 and os.path.exists(html) and os.path.getsize(html) > 1000,
          f"python -m torch.cuda._memory_viz trace_plot: {p.stderr}")


# ---- (b) import ------------------------------------------------------------------

A = 0x7F3A00000000  # device 0: small segment
LA = A + 2 * MIB  # large segment (20 MiB)
M = LA + 20 * MIB  # a 12 MiB segment of its own, freed again
X = 0x7F3B00000000  # freed in the trace, allocated before it
E = 0x7F4000000000  # device 1: an expandable segment
STREAM = 94000000000000  # a cudaStream_t as PyTorch writes it


def tev(action, addr, size, t, name="forward", stream=0, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t,
         "frames": [{"filename": "model.py", "line": 10, "name": name},
                    {"filename": "train.py", "line": 3, "name": "<module>"}],
         "user_metadata": "", "compile_context": "N/A"}
    e.update(extra)
    return e


def tfree(addr, size, t, name="forward"):
    return [tev("free_requested", addr, size, t, name), tev("free_completed", addr, size, t + 1, name)]


def tblock(address, size, state, requested, name="forward"):
    frames = [{"filename": "model.py", "line": 10, "name": name}] if state != "inactive" else []
    return {"address": address, "size": size, "requested_size": requested, "state": state, "frames": frames}


def tseg(device, address, total, kind, blocks, stream=0, expandable=False):
    alloc = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": device, "address": address, "total_size": total, "allocated_size": alloc, "active_size": active,
            "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
            "stream": stream, "segment_type": kind, "segment_pool_id": (0, 0), "is_expandable": expandable,
            "frames": [], "blocks": blocks}


TORCH = {
    "segments": [
        tseg(0, A, 2 * MIB, "small", [tblock(A, 1024, "active_allocated", 1024, "embed"),
                                      tblock(A + 1024, 512, "inactive", 0),
                                      tblock(A + 1536, MIB, "active_allocated", MIB),
                                      tblock(A + 1536 + MIB, 4096, "active_allocated", 4096),
                                      tblock(A + 5632 + MIB, MIB - 5632, "inactive", 0)]),
        tseg(0, LA, 20 * MIB, "large", [tblock(LA, 4 * MIB, "inactive", 0),
                                        tblock(LA + 4 * MIB, 6 * MIB, "active_allocated", 6 * MIB),
                                        tblock(LA + 10 * MIB, 10 * MIB, "inactive", 0)]),
        tseg(1, E, 2 * MIB, "small", [tblock(E, 512, "active_pending_free", 512),
                                      tblock(E + 512, 1024, "active_allocated", 1024),
                                      tblock(E + 1536, 2 * MIB - 1536, "inactive", 0)],
             stream=STREAM, expandable=True)],
    "device_traces": [
        [tev("segment_alloc", A, 2 * MIB, 100),
         tev("alloc", A, 1536, 101, "linear"),
         tev("alloc", A + 1536, MIB, 102),
         tev("alloc", A + 1536 + MIB, 4096, 103)]
        + tfree(A, 1536, 104, "linear")
        + [tev("snapshot", 0, 0, 106)]
        + tfree(X, 8192, 107)  # allocated before recording began: replay skips it
        + [tev("segment_alloc", LA, 20 * MIB, 109),
           tev("alloc", LA, 4 * MIB, 110),
           tev("alloc", LA + 4 * MIB, 6 * MIB, 111, category="activation")]  # as torch.profiler's snapshots have
        + tfree(LA, 4 * MIB, 112)
        + [tev("segment_alloc", M, 12 * MIB, 114), tev("alloc", M, 12 * MIB, 115)]
        + tfree(M, 12 * MIB, 116)
        + [tev("segment_free", M, 12 * MIB, 118),
           {"action": "oom", "device_free": 1234, "size": 80 << 30, "stream": 0, "time_us": 119, "frames": []},
           tev("alloc", A, 1024, 120, "embed")],
        # Device 1: only free_requested recorded, expandable segments (map/unmap), no times.
        [{k: v for k, v in e.items() if k != "time_us"} for e in [
            tev("segment_map", E, 2 * MIB, 0, stream=STREAM),
            tev("alloc", E, 512, 0, stream=STREAM),
            tev("alloc", E + 512, 1024, 0, stream=STREAM),
            tev("free_requested", E, 512, 0, stream=STREAM),
            tev("segment_map", E + 2 * MIB, 2 * MIB, 0, stream=STREAM),
            tev("segment_unmap", E + 2 * MIB, 2 * MIB, 0, stream=STREAM)]]],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64", "max_split_size": 64 * MIB,
                           "garbage_collection_threshold": 0.0, "expandable_segments": False,
                           "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                           "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {}},
}


def live_bytes(events):
    """Largest and final sum of live allocations; frees of unknown blocks are skipped (as replay does)."""
    live, cur, peak = {}, 0, 0
    for e in events:
        if e["action"] == "alloc":
            live[e["address"]] = e["size"]
            cur += e["size"]
            peak = max(peak, cur)
        elif e["action"] == "free" and e["address"] in live:
            cur -= live.pop(e["address"])
    return peak, cur


def replay(trace, device=None):
    args = [BENCH, "replay", trace, "--json"] + (["--device", device] if device else [])
    p = subprocess.run(args, capture_output=True, text=True)
    check(p.returncode == 0, f"snug-bench replay {trace} exits 0: {p.stderr.strip()}")
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {}


def test_import(tmp):
    got = convert(tmp, "import", TORCH, "torch.pickle", "torch.json")
    if got is None:
        return
    src, out, _ = got
    with open(out) as f:
        snap = json.load(f)
    check(snap["format"] == "snug-memory-snapshot" and snap["version"] == 1, "snug format header")
    devs = snap["devices"]
    check([d["device"] for d in devs] == ["cuda:0", "cuda:1"], f"device names: {[d['device'] for d in devs]}")
    want = ("round=512,small_threshold=1048576,small_segment=2097152,large_segment=20971520,large_threshold=10485760,"
            "large_round=2097152,large_growth=0,max_split_size=67108864,max_split_tolerance=20971520,fit=best")
    check(devs[0]["settings"] == want, f"settings: {devs[0]['settings']}")
    d0 = devs[0]["events"]
    check([e["action"] for e in d0] == ["segment_alloc", "alloc", "alloc", "alloc", "free", "free", "segment_alloc",
                                        "alloc", "alloc", "free", "segment_alloc", "alloc", "free", "segment_free",
                                        "oom", "alloc"], f"device 0 actions: {[e['action'] for e in d0]}")
    e = d0[1]
    check(e == {"action": "alloc", "time_ns": 101000, "address": A, "size": 1536, "requested": 1536, "stream": 0,
                "tag": "other", "op": "linear"}, f"alloc event: {e}")
    check(d0[4]["time_ns"] == 105000 and d0[4]["address"] == A, "free at free_completed's time")
    check(d0[8]["tag"] == "activation" and devs[0]["stats"]["tag_bytes"]["activation"]["current"] == 6 * MIB,
          "a profiler category that names a tag becomes the tag")
    check(d0[14]["address"] == 0 and d0[14]["size"] == 80 << 30, f"oom event: {d0[14]}")
    d1 = devs[1]["events"]
    check([e["action"] for e in d1] == ["segment_alloc", "alloc", "alloc", "free", "segment_alloc", "segment_free"],
          f"device 1 (free_requested only, map/unmap): {[e['action'] for e in d1]}")
    check([e["time_ns"] for e in d1] == list(range(6)), "no time_us: the event index")
    check(all(e["stream"] == STREAM for e in d1), "stream kept as an integer")
    seg = devs[0]["segments"][0]
    check((seg["address"], seg["size"], seg["pool"], seg["stream"]) == (A, 2 * MIB, "small", 0), f"segment: {seg}")
    check([(b["state"], b["requested"], b["op"]) for b in seg["blocks"]] ==
          [("allocated", 1024, "embed"), ("free", 0, ""), ("allocated", MIB, "forward"), ("allocated", 4096, "forward"),
           ("free", 0, "")], "blocks: state, requested, op")
    check(devs[0]["segments"][1]["pool"] == "large", "large segment_type -> large pool")
    check(devs[1]["segments"][0]["blocks"][0]["state"] == "pending_free", "active_pending_free -> pending_free")
    peak, final = live_bytes(d0)
    check(peak == MIB + 4096 + 6 * MIB + 12 * MIB, f"peak of live bytes (when the 12 MiB block lives): {peak}")
    st = devs[0]["stats"]
    check(st["allocated_bytes"]["peak"] == peak and st["allocated_bytes"]["current"] == final,
          f"stats allocated_bytes {st['allocated_bytes']} vs peak {peak}, final {final}")
    check(st["reserved_bytes"]["peak"] == 34 * MIB and st["reserved_bytes"]["current"] == 22 * MIB,
          f"stats reserved_bytes {st['reserved_bytes']}")
    check(st["num_ooms"] == 1 and st["num_raw_allocs"] == 3 and st["num_raw_frees"] == 1, "stats counters")
    st1 = devs[1]["stats"]
    check(st1["active_bytes"]["current"] == 1536 and st1["allocated_bytes"]["current"] == 1024,
          f"device 1: the pending block is active, not allocated: {st1['active_bytes']} {st1['allocated_bytes']}")

    # --device picks one trace.
    one = os.path.join(tmp, "torch1.json")
    rc, _, se = run_tool("import", src, "-o", one, "--device", "1")
    with open(one) as f:
        check(rc == 0 and [d["device"] for d in json.load(f)["devices"]] == ["cuda:1"], f"--device 1: {se}")

    if BENCH and os.path.exists(BENCH):
        r = replay(out)
        check(r.get("peak_allocated_bytes") == peak, f"replay peak_allocated_bytes {r.get('peak_allocated_bytes')} "
                                                     f"== max live bytes {peak}")
        check(r.get("skipped_frees") == 1 and r.get("num_ooms") == 0, f"replay skipped the unknown free: {r}")
        check("large_growth=0" in r.get("settings", "") and "max_split_size=67108864" in r.get("settings", ""),
              f"replay ran the imported settings: {r.get('settings')}")
        r = replay(out, "cuda:1")
        check(r.get("peak_allocated_bytes") == live_bytes(d1)[0] == 1536, f"replay of cuda:1: {r}")
    else:
        print("SKIPPED: no snug-bench given (argv[1]): the replay checks")


def test_round_trip(tmp):
    """wgpt_step.json -> pickle -> JSON keeps the events, segments, settings and statistics."""
    pk, back = os.path.join(tmp, "wgpt.pickle"), os.path.join(tmp, "wgpt.json")
    rc1, _, se1 = run_tool("export", WGPT, "-o", pk)
    rc2, _, se2 = run_tool("import", pk, "-o", back)
    check(rc1 == 0 and rc2 == 0, f"wgpt round trip exits 0: {se1} {se2}")
    if rc1 or rc2:
        return
    with open(WGPT) as f:
        a = json.load(f)["devices"][0]
    with open(back) as f:
        b = json.load(f)["devices"][0]
    keys = ("action", "address", "size", "requested", "stream", "tag", "op")
    check([{k: e[k] for k in keys} for e in a["events"]] == [{k: e[k] for k in keys} for e in b["events"]],
          "wgpt events survive the round trip")
    check(a["segments"] == b["segments"], "wgpt segments survive the round trip")
    check((a["device"], a["settings"]) == (b["device"], b["settings"]), "device name and settings come back")
    for k in ("allocated_bytes", "requested_bytes", "reserved_bytes", "allocation", "segment"):
        check(a["stats"][k] == b["stats"][k], f"stats {k}: recorded {a['stats'][k]}, from the trace {b['stats'][k]}")
    with open(pk, "rb") as f:
        data = pickle.load(f)
    bad = viewer_walk_back(data, 0)
    check(bad is None, f"viewer walk-back of wgpt_step: {bad}")
    if BENCH and os.path.exists(BENCH):
        r1, r2 = replay(WGPT), replay(back)
        check(r1.get("peak_reserved_bytes") == r2.get("peak_reserved_bytes") and
              r1.get("peak_allocated_bytes") == r2.get("peak_allocated_bytes"), f"same replay: {r1} {r2}")


def test_bad_inputs(tmp):
    def expect_fail(cmd, path, what):
        rc, _, se = run_tool(cmd, path, "-o", os.path.join(tmp, "never"))
        check(rc == 2 and path in se, f"{what}: exit 2 naming the file (rc {rc}: {se.strip()})")

    text = os.path.join(tmp, "text.pickle")
    with open(text, "w") as f:
        f.write("not a pickle\n")
    expect_fail("import", text, "import of a text file")
    for name, obj in (("list.pickle", [1, 2]), ("nodt.pickle", {"segments": []})):
        p = os.path.join(tmp, name)
        with open(p, "wb") as f:
            pickle.dump(obj, f)
        expect_fail("import", p, f"import of {name}")
    cls = os.path.join(tmp, "class.pickle")
    with open(cls, "wb") as f:
        pickle.dump({"device_traces": [], "x": complex(1, 2)}, f)  # names builtins.complex: refused
    expect_fail("import", cls, "import of a pickle naming a class")
    expect_fail("import", os.path.join(tmp, "missing.pickle"), "import of a missing file")
    expect_fail("export", text, "export of a non-JSON file")
    notsnug = os.path.join(tmp, "other.json")
    with open(notsnug, "w") as f:
        json.dump({"devices": []}, f)
    expect_fail("export", notsnug, "export of JSON without the snug format")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        got = test_export(tmp)
        if got:
            test_memory_viz(*got)
        test_import(tmp)
        test_round_trip(tmp)
        test_bad_inputs(tmp)
    return finish("torch_snapshot_test: all checks passed")


if __name__ == "__main__":
    sys.exit(main())
