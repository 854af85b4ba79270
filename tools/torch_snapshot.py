#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Converts between snug memory snapshots (memory::dump_snapshot, JSON) and
PyTorch's (torch.cuda.memory._snapshot() / _dump_snapshot(), a pickle).

    python3 tools/torch_snapshot.py import SNAPSHOT.pickle -o TRACE.json [--device N]
    python3 tools/torch_snapshot.py export SNAPSHOT.json -o SNAPSHOT.pickle [--device cuda:0]

import: each PyTorch device trace becomes a snug device "cuda:N" whose events
`snug-bench replay TRACE.json` replays, with the segments at the end of the
trace, PyTorch-like settings and statistics worked out from the trace.
export: each snug device becomes one PyTorch device trace (in order), for
https://pytorch.org/memory_viz or `python -m torch.cuda._memory_viz`.

Neither direction needs torch: the pickle holds only dicts, lists, tuples,
strings and numbers, and import refuses a pickle that names any class.
docs/memory.md ("PyTorch snapshots") says what maps to what and what is lost.
"""
import argparse
import json
import pickle
import sys

FORMAT = "snug-memory-snapshot"
TAGS = ["other", "parameter", "gradient", "optimizer_state", "activation", "temporary", "data", "workspace",
        "master_weights"]
MIB = 1 << 20
# snug's defaults (memory/settings.h) with large_growth=0: fixed 20 MiB large
# segments, PyTorch's rule. "fit=best" rather than a newer key, so every
# snug-bench that reads snapshots accepts the string.
TORCH_LIKE = [("round", "512"), ("small_threshold", "1048576"), ("small_segment", "2097152"),
              ("large_segment", "20971520"), ("large_threshold", "10485760"), ("large_round", "2097152"),
              ("large_growth", "0"), ("max_split_size", "none"), ("max_split_tolerance", "20971520"),
              ("fit", "best")]
LARGE_SEGMENT = 20 * MIB  # snug accepts max_split_size only above this

BLOCK_STATE_FROM_TORCH = {"active_allocated": "allocated", "active_pending_free": "pending_free",
                          "active_awaiting_free": "pending_free",  # the spelling of torch's docstring
                          "inactive": "free"}
BLOCK_STATE_TO_TORCH = {"allocated": "active_allocated", "pending_free": "active_pending_free", "free": "inactive"}


class InputError(Exception):
    """A bad input file; main() prints it and exits 2."""


def warn(msg):
    print(f"torch_snapshot.py: warning: {msg}", file=sys.stderr)


# ---- import: PyTorch pickle -> snug JSON ----------------------------------------


class _PlainUnpickler(pickle.Unpickler):
    """Builds only plain values: a memory snapshot never names a class, and
    refusing them means a hostile pickle cannot run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it refers to {module}.{name}, and a memory snapshot holds only plain values")


def load_torch_snapshot(path):
    try:
        with open(path, "rb") as f:
            data = _PlainUnpickler(f).load()
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})")
    except Exception as e:  # UnpicklingError, EOFError, ValueError, ... all mean "not a snapshot pickle"
        raise InputError(f"{path}: not a PyTorch memory snapshot pickle ({type(e).__name__}: {e})")
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a PyTorch memory snapshot: the pickle holds a {type(data).__name__}, "
                         "not the dict torch.cuda.memory._snapshot() returns")
    traces = data.get("device_traces")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise InputError(f"{path}: not a PyTorch memory snapshot with a trace: no \"device_traces\" list "
                         "(record with torch.cuda.memory._record_memory_history() before taking the snapshot)")
    segments = data.get("segments", [])
    if not isinstance(segments, list):
        raise InputError(f"{path}: \"segments\" is a {type(segments).__name__}, not a list")
    return data


def _int(v, what, default=None):
    if isinstance(v, bool) or not isinstance(v, int):
        if v is None and default is not None:
            return default
        raise InputError(f"{what} is {v!r}, not an integer")
    return v


def _address(v, what):
    """An address or stream handle: PyTorch writes pointers as int64."""
    v = _int(v, what, 0)
    return v + (1 << 64) if v < 0 else v


def _first_frame_name(frames):
    if isinstance(frames, list) and frames and isinstance(frames[0], dict):
        name = frames[0].get("name", "")
        return name if isinstance(name, str) else ""
    return ""


# The categories of torch.profiler's memory profile (snapshots made by
# torch.cuda._memory_viz.profile_plot) that name a snug tag.
CATEGORY_TAGS = {"activation": "activation", "gradient": "gradient", "parameter": "parameter",
                 "optimizer_state": "optimizer_state", "temporary": "temporary", "input": "data"}


def _tag_of(entry):
    tag = entry.get("snug_tag")  # only pickles written by export carry it
    if tag in TAGS:
        return tag
    return CATEGORY_TAGS.get(entry.get("category"), "other")


def _op_of(entry):
    op = entry.get("snug_op")
    return op if isinstance(op, str) else _first_frame_name(entry.get("frames"))


def torch_settings(data, warnings):
    """The snug settings string: TORCH_LIKE, with PyTorch's max_split_size."""
    items = dict(TORCH_LIKE)
    conf = data.get("allocator_settings")
    mss = conf.get("max_split_size") if isinstance(conf, dict) else None
    # PyTorch writes int64(SIZE_MAX) = -1 when it is unset.
    if isinstance(mss, int) and not isinstance(mss, bool) and 0 < mss < (1 << 63):
        if mss > LARGE_SEGMENT:
            items["max_split_size"] = str(mss)
        else:
            warnings.append(f"PyTorch's max_split_size {mss} is not above 20 MiB, which snug requires; using none")
    return ",".join(f"{k}={items[k]}" for k, _ in TORCH_LIKE)


def convert_events(trace, what):
    """PyTorch trace entries -> snug events (docs/memory.md, "PyTorch snapshots")."""
    actions = {e.get("action") for e in trace if isinstance(e, dict)}
    # A free is when the block is reusable: free_completed; a trace with only
    # free_requested (no completions recorded) uses those.
    free_action = "free_completed" if "free_completed" in actions else "free_requested"
    mapping = {"alloc": "alloc", free_action: "free", "segment_alloc": "segment_alloc", "segment_map": "segment_alloc",
               "segment_free": "segment_free", "segment_unmap": "segment_free", "oom": "oom"}
    events = []
    for i, e in enumerate(trace):
        where = f"{what} entry {i}"
        if not isinstance(e, dict) or not isinstance(e.get("action"), str):
            raise InputError(f"{where}: not a trace entry (a dict with an \"action\")")
        action = mapping.get(e["action"])
        if action is None:  # snapshot, annotate, free_requested beside free_completed, anything newer
            continue
        size = _int(e.get("size"), f"{where} ({e['action']}): size")
        requested = _int(e.get("requested_size", size), f"{where}: requested_size")
        t = e.get("time_us")
        time_ns = int(max(0, t) * 1000) if isinstance(t, (int, float)) and not isinstance(t, bool) else i
        events.append({"action": action, "time_ns": time_ns,
                       "address": 0 if action == "oom" else _address(e.get("addr"), f"{where}: addr"),
                       "size": size, "requested": requested if action in ("alloc", "free", "oom") else 0,
                       "stream": _address(e.get("stream", 0), f"{where}: stream"),
                       "tag": _tag_of(e), "op": _op_of(e)})
    return events


def convert_segments(segments, device, what):
    out = []
    for n, seg in enumerate(segments):
        if not isinstance(seg, dict) or seg.get("device", 0) != device:
            continue
        where = f"{what} segment {n}"
        address = _address(seg.get("address"), f"{where}: address")
        size = _int(seg.get("total_size"), f"{where}: total_size")
        blocks = []
        at = address
        for k, b in enumerate(seg.get("blocks", [])):
            bw = f"{where} block {k}"
            if not isinstance(b, dict):
                raise InputError(f"{bw}: not a dict")
            bsize = _int(b.get("size"), f"{bw}: size")
            state = BLOCK_STATE_FROM_TORCH.get(b.get("state"))
            if state is None:
                raise InputError(f"{bw}: unknown state {b.get('state')!r}")
            requested = b.get("requested_size")
            if requested is None and isinstance(b.get("history"), list) and b["history"]:  # older torch
                requested = b["history"][0].get("real_size")
            requested = _int(requested, f"{bw}: requested_size", bsize) if state != "free" else 0
            blocks.append({"address": _address(b.get("address", at), f"{bw}: address"), "size": bsize,
                           "requested": requested, "state": state, "tag": _tag_of(b),
                           "op": _op_of(b) if state != "free" else ""})
            at = blocks[-1]["address"] + bsize
        out.append({"address": address, "size": size, "stream": _address(seg.get("stream", 0), f"{where}: stream"),
                    "pool": "small" if seg.get("segment_type") == "small" else "large", "blocks": blocks})
    return out


class _Flow:
    """A quantity that the trace moves up and down, for a snug Stat whose
    value before the trace is unknown: the baseline is the smallest that keeps
    it from going negative, or more when the final segments say so."""

    def __init__(self):
        self.cur = self.low = self.high = self.added = self.removed = 0

    def add(self, n):
        self.cur += n
        self.added += n
        self.high = max(self.high, self.cur)

    def sub(self, n):
        self.cur -= n
        self.removed += n
        self.low = min(self.low, self.cur)

    def move(self, n, up):
        """add(n) when up, else sub(n)."""
        if up:
            self.add(n)
        else:
            self.sub(n)

    def base(self, final=None):
        return max(-self.low, final - self.cur) if final is not None else -self.low

    def stat(self, final=None, base=None):
        b = self.base(final) if base is None else base
        return {"current": b + self.cur, "peak": b + self.high, "allocated": b + self.added, "freed": self.removed}


def compute_stats(events, segments, trace):
    """A DeviceStats object (memory/history.cpp's loader wants every field)
    worked out from the events, with the current values the final segments
    give. Blocks allocated before the trace began count from its start."""
    f = {k: _Flow() for k in ("allocated_bytes", "requested_bytes", "allocation", "reserved_bytes", "segment")}
    tags = {t: _Flow() for t in TAGS}
    tag_at_peak = {t: 0 for t in TAGS}
    hits = misses = ooms = raw_allocs = raw_frees = 0
    prev = None
    for e in events:
        a, size = e["action"], e["size"]
        if a in ("alloc", "free"):
            up = a == "alloc"
            for flow, n in ((f["allocated_bytes"], size), (f["requested_bytes"], e["requested"]),
                            (f["allocation"], 1), (tags[e["tag"]], size)):
                flow.move(n, up)
            if up:
                if prev == "segment_alloc":
                    misses += 1
                else:
                    hits += 1
                if f["allocated_bytes"].cur >= f["allocated_bytes"].high:
                    tag_at_peak = {t: tags[t].cur for t in TAGS}
        elif a in ("segment_alloc", "segment_free"):
            up = a == "segment_alloc"
            f["reserved_bytes"].move(size, up)
            f["segment"].move(1, up)
            if up:
                raw_allocs += 1
            else:
                raw_frees += 1
        else:
            ooms += 1
        prev = a
    # Events carry rounded sizes when the trace has requested_size beside size
    # (export writes both); PyTorch's own traces record the requested size.
    rounded = any("requested_size" in e for e in trace if isinstance(e, dict) and e.get("action") == "alloc")
    blocks = [b for s in segments for b in s["blocks"]]
    live = [b for b in blocks if b["state"] == "allocated"]
    pending = [b for b in blocks if b["state"] == "pending_free"]
    split_free = [b for s in segments if len(s["blocks"]) > 1 for b in s["blocks"] if b["state"] == "free"]
    have = bool(segments)
    final = {"allocated_bytes": sum(b["size"] if rounded else b["requested"] for b in live),
             "requested_bytes": sum(b["requested"] for b in live), "allocation": len(live),
             "reserved_bytes": sum(s["size"] for s in segments), "segment": len(segments)}
    st = {k: f[k].stat(final[k] if have else None) for k in f}
    extra_bytes = sum(b["size"] if rounded else b["requested"] for b in pending)
    # Active: allocated plus pending_free blocks; the trace moves both alike.
    fa, fn = f["allocated_bytes"], f["allocation"]
    st["active_bytes"] = fa.stat(base=fa.base(final["allocated_bytes"] + extra_bytes) if have else None)
    st["active"] = fn.stat(base=fn.base(len(live) + len(pending)) if have else None)
    for k, n in (("inactive_split_bytes", sum(b["size"] for b in split_free)), ("inactive_split", len(split_free))):
        st[k] = {"current": n, "peak": n, "allocated": n, "freed": 0}  # not traced; the final state only
    # A deferred free: its free_completed does not follow its free_requested at once.
    deferred = sum(1 for k, e in enumerate(trace) if isinstance(e, dict) and e.get("action") == "free_completed"
                   and not (k > 0 and isinstance(trace[k - 1], dict) and trace[k - 1].get("action") == "free_requested"
                            and trace[k - 1].get("addr") == e.get("addr")))
    st.update(num_alloc_retries=0, num_ooms=ooms, num_cache_hits=hits, num_cache_misses=misses,
              num_raw_allocs=raw_allocs, num_raw_frees=raw_frees, num_deferred_frees=deferred)
    # Per tag: each tag's own baseline; what the allocated baseline has beyond
    # them (blocks from before the trace, never freed in it) is "other".
    alloc_base = st["allocated_bytes"]["current"] - f["allocated_bytes"].cur
    bases = {t: tags[t].base() for t in TAGS}
    bases["other"] += max(0, alloc_base - sum(bases.values()))
    tag_bytes = {}
    for t in TAGS:
        if tags[t].added or tags[t].removed or bases[t]:
            s = tags[t].stat(base=bases[t])
            s["at_peak"] = bases[t] + tag_at_peak[t]
            tag_bytes[t] = s
    st["tag_bytes"] = tag_bytes
    return st


def cmd_import(args):
    data = load_torch_snapshot(args.snapshot)
    traces, segments = data["device_traces"], data.get("segments", [])
    meta = data.get("snug") if isinstance(data.get("snug"), dict) else {}
    meta_devices = meta.get("devices") if isinstance(meta.get("devices"), list) else []
    seg_devices = {s.get("device", 0) for s in segments if isinstance(s, dict)}
    if args.device is not None:
        if not (0 <= args.device < len(traces)) and args.device not in seg_devices:
            raise InputError(f"{args.snapshot}: no device {args.device} (the snapshot has {len(traces)} device traces)")
        indices = [args.device]
    else:
        indices = [i for i in range(max([len(traces)] + [d + 1 for d in seg_devices if isinstance(d, int)]))
                   if (i < len(traces) and traces[i]) or i in seg_devices] or [0]
    warnings = []
    settings = torch_settings(data, warnings)
    devices = []
    for i in indices:
        trace = traces[i] if i < len(traces) else []
        what = f"{args.snapshot}: device {i}"
        events = convert_events(trace, what)
        segs = convert_segments(segments, i, what)
        m = meta_devices[i] if i < len(meta_devices) and isinstance(meta_devices[i], dict) else {}
        devices.append({"device": m.get("device", f"cuda:{i}"), "backend": m.get("backend", "pytorch"),
                        "settings": m.get("settings", settings), "capacity": m.get("capacity"),
                        "stats": compute_stats(events, segs, trace), "segments": segs, "events": events})
    for w in warnings:
        warn(w)
    out = {"format": FORMAT, "version": 1, "devices": devices}
    try:
        with open(args.output, "w") as fo:
            json.dump(out, fo, separators=(",", ":"))
            fo.write("\n")
    except OSError as e:
        sys.exit(f"torch_snapshot.py: cannot write {args.output}: {e.strerror or e}")
    summary = ", ".join(f"{d['device']} ({len(d['events'])} events, {len(d['segments'])} segments)" for d in devices)
    print(f"wrote {args.output}: {summary}")
    return 0


# ---- export: snug JSON -> PyTorch pickle ----------------------------------------


def load_snug_snapshot(path):
    try:
        with open(path, encoding="utf-8") as f:
            snap = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})")
    except ValueError as e:
        raise InputError(f"{path}: not a snug memory snapshot (not JSON: {e})")
    if not isinstance(snap, dict) or snap.get("format") != FORMAT:
        raise InputError(f"{path}: not a snug memory snapshot (missing \"format\": \"{FORMAT}\")")
    if snap.get("version") != 1:
        raise InputError(f"{path}: unsupported snapshot version {snap.get('version')!r}")
    if not isinstance(snap.get("devices"), list) or not all(isinstance(d, dict) for d in snap["devices"]):
        raise InputError(f"{path}: \"devices\" is not a list of devices")
    return snap


def _max_split_bytes(settings):
    for item in (settings or "").split(","):
        key, _, val = item.strip().partition("=")
        if key == "max_split_size" and val.isdigit():
            return int(val)
    return -1  # PyTorch's int64 of SIZE_MAX: no limit (also for sizes with a suffix, which snug never writes)


def cmd_export(args):
    snap = load_snug_snapshot(args.snapshot)
    devices = snap["devices"]
    if args.device:
        devices = [d for d in devices if d.get("device") == args.device]
        if not devices:
            names = ", ".join(str(d.get("device")) for d in snap["devices"]) or "none"
            raise InputError(f"{args.snapshot}: no device {args.device} (it has: {names})")
    frame_cache = {}
    strings = {}

    def s(v):  # one str object per distinct value, so the pickle memo stores each once
        return strings.setdefault(v, v)

    def frames(op, tag):
        name = op or tag
        if name not in frame_cache:  # shared lists: pickled once, referenced after
            frame_cache[name] = [{"filename": "snug", "line": 0, "name": s(name)}]
        return frame_cache[name]

    segments, traces, meta = [], [], []
    skipped = {}
    for idx, dev in enumerate(devices):
        what = f"{args.snapshot}: device {dev.get('device', idx)}"
        capacity = dev.get("capacity")
        seg_list = dev.get("segments", [])
        # Reserved bytes before the first event, so an oom's device_free is
        # capacity minus what was reserved then.
        reserved = sum(sg.get("size", 0) for sg in seg_list)
        for e in dev.get("events", []):
            if e.get("action") == "segment_alloc":
                reserved -= e.get("size", 0)
            elif e.get("action") == "segment_free":
                reserved += e.get("size", 0)
        trace = []
        for n, e in enumerate(dev.get("events", [])):
            if not isinstance(e, dict):
                raise InputError(f"{what}: event {n} is not an object")
            a = e.get("action")
            tag, op = s(e.get("tag", "other")), s(e.get("op", ""))
            base = {"addr": e.get("address", 0), "size": e.get("size", 0), "stream": e.get("stream", 0),
                    "time_us": e.get("time_ns", 0) // 1000, "frames": frames(op, tag)}
            snug = {"snug_tag": tag, "snug_op": op}
            if a == "alloc" or a == "free":
                base["requested_size"] = e.get("requested", base["size"])
                acts = ["alloc"] if a == "alloc" else ["free_requested", "free_completed"]
                for act in acts:
                    trace.append({"action": s(act), **base, **snug})
            elif a in ("segment_alloc", "segment_free"):
                reserved += base["size"] if a == "segment_alloc" else -base["size"]
                trace.append({"action": s(a), **base, **snug})
            elif a == "oom":
                free = max(0, capacity - reserved) if isinstance(capacity, int) else 0
                entry = {"action": "oom", "device_free": free, **base, **snug}
                del entry["addr"]  # PyTorch's oom entries carry device_free instead
                trace.append(entry)
            else:  # "step" (a training-step boundary) and anything newer: PyTorch has no such entry
                skipped[a] = skipped.get(a, 0) + 1
        traces.append(trace)
        for sg in seg_list:
            blocks, allocated, active, requested = [], 0, 0, 0
            for b in sg.get("blocks", []):
                state = b.get("state", "free")
                if state not in BLOCK_STATE_TO_TORCH:
                    raise InputError(f"{what}: block at {b.get('address')}: unknown state {state!r}")
                size = b.get("size", 0)
                used = state != "free"
                req = b.get("requested", size) if used else 0
                allocated += size if state == "allocated" else 0
                active += size if used else 0
                requested += req
                block = {"address": b.get("address", 0), "size": size, "requested_size": req,
                         "state": BLOCK_STATE_TO_TORCH[state],
                         "frames": frames(s(b.get("op", "")), s(b.get("tag", "other"))) if used else []}
                if used:
                    block.update(snug_tag=s(b.get("tag", "other")), snug_op=s(b.get("op", "")))
                blocks.append(block)
            segments.append({"device": idx, "address": sg.get("address", 0), "total_size": sg.get("size", 0),
                             "allocated_size": allocated, "active_size": active, "requested_size": requested,
                             "stream": sg.get("stream", 0), "segment_type": "small" if sg.get("pool") == "small"
                             else "large", "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                             "blocks": blocks})
        meta.append({"device": dev.get("device", f"cuda:{idx}"), "backend": dev.get("backend", ""),
                     "settings": dev.get("settings", ""), "capacity": capacity})
    first = meta[0]["settings"] if meta else ""
    out = {"segments": segments, "device_traces": traces,
           "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": _max_split_bytes(first),
                                  "garbage_collection_threshold": 0.0, "expandable_segments": False,
                                  "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                                  "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {}},
           # snug's own names and settings, so import gives them back.
           "snug": {"format": FORMAT, "version": 1, "devices": meta}}
    try:
        with open(args.output, "wb") as fo:
            pickle.dump(out, fo, protocol=4)  # torch's _dump_snapshot writes 4; the web viewer reads 2 to 4
    except OSError as e:
        sys.exit(f"torch_snapshot.py: cannot write {args.output}: {e.strerror or e}")
    if skipped:
        counts = ", ".join(f"{n} {a!r}" for a, n in sorted(skipped.items(), key=str))
        print(f"skipped (no PyTorch equivalent): {counts}", file=sys.stderr)
    summary = ", ".join(f"{m['device']} as device {i} ({len(t)} entries)" for i, (m, t) in enumerate(zip(meta, traces)))
    print(f"wrote {args.output}: {summary or 'no devices'}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="torch_snapshot.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See docs/memory.md, \"PyTorch snapshots\".")
    sub = ap.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="PyTorch snapshot pickle -> snug snapshot JSON (for snug-bench replay)")
    imp.add_argument("snapshot", help="a pickle from torch.cuda.memory._dump_snapshot()")
    imp.add_argument("-o", "--output", required=True, help="the snug snapshot JSON to write")
    imp.add_argument("--device", type=int, default=None,
                     help="only this device trace (an index) [default: every device with events or segments]")
    exp = sub.add_parser("export", help="snug snapshot JSON -> PyTorch snapshot pickle (for memory_viz)")
    exp.add_argument("snapshot", help="a snug snapshot (memory::dump_snapshot)")
    exp.add_argument("-o", "--output", required=True, help="the pickle to write")
    exp.add_argument("--device", default=None, help="only this snug device, e.g. cuda:0 [default: all, in order]")
    args = ap.parse_args(argv)
    try:
        return cmd_import(args) if args.command == "import" else cmd_export(args)
    except InputError as e:
        print(f"torch_snapshot.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
