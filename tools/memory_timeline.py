#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws a snug memory snapshot (memory::dump_snapshot) as a timeline.

    python3 tools/memory_timeline.py SNAPSHOT.json [-o timeline.html] [--png timeline.png]
                                     [--device cuda:0] [--x time|index]

Writes a self-contained HTML page (no network needed): allocated memory over
time, stacked by tag, with the reserved memory as a line; hovering shows the
event under the cursor (action, size, tag, op, address, stream) and the
per-tag totals at that moment. With --png it also writes a static plot with
matplotlib (pip install matplotlib); without matplotlib the HTML is still
written and the script says what to install.

Blocks that were allocated before recording began show up only through
their frees; their bytes are added back as a baseline so no tag goes
negative.
"""
import argparse
import html
import json
import sys

TAGS = ["other", "parameter", "gradient", "optimizer_state", "activation", "temporary", "data", "workspace"]
COLORS = ["#9e9e9e", "#1f77b4", "#d62728", "#9467bd", "#ff7f0e", "#bcbd22", "#2ca02c", "#17becf"]


def load(path, device):
    with open(path) as f:
        snap = json.load(f)
    if snap.get("format") != "snug-memory-snapshot":
        sys.exit(f"{path}: not a snug memory snapshot (no \"format\": \"snug-memory-snapshot\")")
    devices = snap.get("devices", [])
    if device:
        devices = [d for d in devices if d.get("device") == device]
        if not devices:
            sys.exit(f"{path}: no device {device}")
    else:
        devices = [d for d in devices if d.get("events")] or devices
    if not devices:
        sys.exit(f"{path}: the snapshot has no devices")
    return devices[0]


def series(dev):
    """Per-event running totals: allocated bytes by tag, and reserved bytes."""
    events = [e for e in dev.get("events", []) if e["action"] in ("alloc", "free", "segment_alloc", "segment_free", "oom")]
    by_tag = {t: 0 for t in TAGS}
    low = {t: 0 for t in TAGS}
    reserved = 0
    low_reserved = 0
    rows = []
    for e in events:
        tag = e.get("tag", "other")
        if tag not in by_tag:
            tag = "other"
        if e["action"] == "alloc":
            by_tag[tag] += e["size"]
        elif e["action"] == "free":
            by_tag[tag] -= e["size"]
            low[tag] = min(low[tag], by_tag[tag])
        elif e["action"] == "segment_alloc":
            reserved += e["size"]
        elif e["action"] == "segment_free":
            reserved -= e["size"]
            low_reserved = min(low_reserved, reserved)
        rows.append((e, dict(by_tag), reserved))
    base = {t: -low[t] for t in TAGS}
    have_segments = any(e["action"].startswith("segment") for e in events)
    out = []
    for i, (e, tags, res) in enumerate(rows):
        vals = [tags[t] + base[t] for t in TAGS]
        out.append({"i": i, "t": e.get("time_ns", 0) / 1e6, "v": vals,
                    "r": (res - low_reserved) if have_segments else None,
                    "a": e["action"], "s": e["size"], "q": e.get("requested", e["size"]),
                    "g": e.get("tag", "other"), "o": e.get("op", ""), "ad": hex(e.get("address", 0)),
                    "st": e.get("stream", 0)})
    return out


PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>snug memory timeline: %(title)s</title>
<style>
 body { font: 13px sans-serif; margin: 16px; }
 #wrap { position: relative; }
 canvas { border: 1px solid #ccc; }
 #tip { position: absolute; pointer-events: none; background: #fff; border: 1px solid #888;
        padding: 6px 8px; font: 12px monospace; white-space: pre; display: none; }
 .key span { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: middle; }
</style></head><body>
<h3>snug memory timeline: %(title)s</h3>
<div>%(subtitle)s</div>
<div class="key" id="key"></div>
<label><input type="checkbox" id="byindex"> x axis: event index (instead of time)</label>
<div id="wrap"><canvas id="c" width="1200" height="520"></canvas><div id="tip"></div></div>
<script>
const TAGS = %(tags)s, COLORS = %(colors)s, D = %(data)s;
const cv = document.getElementById('c'), ctx = cv.getContext('2d'), tip = document.getElementById('tip');
const L = 80, R = 20, T = 10, B = 40, W = cv.width - L - R, H = cv.height - T - B;
document.getElementById('key').innerHTML = TAGS.map((t, k) => `<span style="background:${COLORS[k]}"></span>${t}`).join('')
  + (D.some(d => d.r !== null) ? '<span style="background:#000;height:2px"></span>reserved' : '');
function fmt(b) { const u = ['B','KiB','MiB','GiB','TiB']; let i = 0; while (b >= 1024 && i < 4) { b /= 1024; i++; } return (i ? b.toFixed(2) : b) + ' ' + u[i]; }
let byIndex = false;
const X = d => byIndex ? d.i : d.t;
function draw() {
  ctx.clearRect(0, 0, cv.width, cv.height);
  if (!D.length) { ctx.fillText('no events in this snapshot', L + 10, T + 20); return; }
  const x0 = X(D[0]), x1 = Math.max(X(D[D.length - 1]), x0 + 1e-9);
  let ymax = 1;
  for (const d of D) { ymax = Math.max(ymax, d.v.reduce((a, b) => a + b, 0), d.r || 0); }
  const sx = x => L + (x - x0) / (x1 - x0) * W, sy = y => T + H - y / ymax * H;
  // Stacked step areas, bottom tag first.
  const cum = D.map(() => 0);
  for (let k = 0; k < TAGS.length; k++) {
    if (!D.some(d => d.v[k] > 0)) continue;
    ctx.beginPath();
    ctx.moveTo(sx(X(D[0])), sy(cum[0]));
    for (let j = 0; j < D.length; j++) {
      const top = cum[j] + D[j].v[k];
      if (j) ctx.lineTo(sx(X(D[j])), sy(cum[j - 1] + D[j - 1].v[k]));
      ctx.lineTo(sx(X(D[j])), sy(top));
    }
    for (let j = D.length - 1; j >= 0; j--) {
      ctx.lineTo(sx(X(D[j])), sy(cum[j]));
      if (j) ctx.lineTo(sx(X(D[j])), sy(cum[j - 1]));
    }
    ctx.closePath(); ctx.fillStyle = COLORS[k]; ctx.globalAlpha = 0.85; ctx.fill(); ctx.globalAlpha = 1;
    for (let j = 0; j < D.length; j++) cum[j] += D[j].v[k];
  }
  if (D.some(d => d.r !== null)) {
    ctx.beginPath(); ctx.strokeStyle = '#000'; ctx.lineWidth = 1.5;
    D.forEach((d, j) => { if (j) ctx.lineTo(sx(X(d)), sy(D[j - 1].r)); else ctx.moveTo(sx(X(d)), sy(d.r)); ctx.lineTo(sx(X(d)), sy(d.r)); });
    ctx.stroke();
  }
  ctx.strokeStyle = '#444'; ctx.fillStyle = '#000'; ctx.lineWidth = 1;
  ctx.strokeRect(L, T, W, H);
  for (let i = 0; i <= 4; i++) {
    const y = ymax * i / 4; ctx.fillText(fmt(y), 4, sy(y) + 4);
    const x = x0 + (x1 - x0) * i / 4; ctx.fillText(byIndex ? Math.round(x) : x.toFixed(2) + ' ms', sx(x) - 20, T + H + 16);
  }
  ctx.fillText(byIndex ? 'event index' : 'time (ms since the first allocator)', L + W / 2 - 60, T + H + 32);
  cv._sx = sx; cv._x0 = x0; cv._x1 = x1;
}
document.getElementById('byindex').onchange = e => { byIndex = e.target.checked; draw(); };
cv.onmousemove = ev => {
  if (!D.length) return;
  const r = cv.getBoundingClientRect(), px = ev.clientX - r.left;
  const x = cv._x0 + (px - L) / W * (cv._x1 - cv._x0);
  let lo = 0, hi = D.length - 1;
  while (lo < hi) { const m = (lo + hi + 1) >> 1; if (X(D[m]) <= x) lo = m; else hi = m - 1; }
  const d = D[lo], tot = d.v.reduce((a, b) => a + b, 0);
  let s = `#${d.i}  ${d.a}  ${fmt(d.s)} (requested ${d.q} B)\\ntag ${d.g}  op ${d.o || '-'}\\naddress ${d.ad}  stream ${d.st}\\ntime ${d.t.toFixed(3)} ms\\n\\nallocated ${fmt(tot)}` + (d.r !== null ? `\\nreserved  ${fmt(d.r)}` : '') + '\\n';
  TAGS.forEach((t, k) => { if (d.v[k]) s += `\\n  ${t.padEnd(16)} ${fmt(d.v[k])}`; });
  tip.textContent = s; tip.style.display = 'block';
  tip.style.left = Math.min(px + 16, cv.width - 260) + 'px'; tip.style.top = (ev.clientY - r.top + 10) + 'px';
};
cv.onmouseleave = () => { tip.style.display = 'none'; };
draw();
</script></body></html>
"""


def write_html(dev, rows, path, source):
    peak = max((sum(r["v"]) for r in rows), default=0)
    sub = (f"{html.escape(source)}: {len(rows)} events, backend {html.escape(str(dev.get('backend', '?')))}, "
           f"peak allocated in the trace {peak / 2**20:.2f} MiB")
    with open(path, "w") as f:
        f.write(PAGE % {"title": html.escape(dev.get("device", "?")), "subtitle": sub, "tags": json.dumps(TAGS),
                        "colors": json.dumps(COLORS), "data": json.dumps(rows, separators=(",", ":"))})


def write_png(dev, rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("memory_timeline: matplotlib is not installed, so no PNG was written "
              "(install it with: python3 -m pip install matplotlib). The HTML timeline does not need it.",
              file=sys.stderr)
        return False
    xs = [r["t"] for r in rows]
    used = [k for k in range(len(TAGS)) if any(r["v"][k] for r in rows)]
    ys = [[r["v"][k] / 2**20 for r in rows] for k in used]
    fig, ax = plt.subplots(figsize=(12, 5))
    if rows:
        ax.stackplot(xs, *ys, labels=[TAGS[k] for k in used], colors=[COLORS[k] for k in used], step="post", alpha=0.85)
        if any(r["r"] is not None for r in rows):
            ax.step(xs, [(r["r"] or 0) / 2**20 for r in rows], where="post", color="black", lw=1.2, label="reserved")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("MiB")
    ax.set_title(f"snug memory timeline: {dev.get('device', '?')}")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("-o", "--output", default="memory_timeline.html", help="HTML file to write")
    ap.add_argument("--png", help="also write a PNG plot (needs matplotlib)")
    ap.add_argument("--device", help="which device of the snapshot (default: the first with events)")
    args = ap.parse_args()
    dev = load(args.snapshot, args.device)
    rows = series(dev)
    write_html(dev, rows, args.output, args.snapshot)
    print(f"wrote {args.output} ({len(rows)} events of {dev.get('device')})")
    if args.png:
        if not write_png(dev, rows, args.png):
            return 1
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
