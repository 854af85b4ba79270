#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws snug memory snapshots (memory::dump_snapshot) as timelines.

    python3 tools/memory_timeline.py SNAPSHOT.json [MORE.json ...] [-o timeline.html]
                                     [--titles "best_fit,expandable"] [--png timeline.png]
                                     [--device cuda:0] [--x time|index]

Writes a self-contained HTML page (no network needed): allocated memory over
time, stacked by tag, with the reserved memory as a line; hovering shows the
event under the cursor (action, size, tag, op, address, stream) and the
per-tag totals at that moment. With --png it also writes a static plot with
matplotlib (pip install matplotlib); without matplotlib the HTML is still
written and the script says what to install. --x index starts the x axis on
the event index instead of the time (the page has a checkbox for it).

With several snapshots the page shows one panel per snapshot, two side by
side (more wrap), each titled from --titles (comma-separated, one per file)
or else by its file name, with a line of summary above it (peak allocated,
peak reserved, reserved/allocated) and its own hover. Every panel has the
same y scale, the largest reserved (or allocated) of them all, so their
memory compares at a glance; a thin dashed line marks each training step
("step" events). The PNG then has one subplot per snapshot sharing the y axis.

Blocks that were allocated before recording began show up only through
their frees; their bytes are added back as a baseline so no tag goes
negative. "step" events (a training step begins) change no memory.
"""
import argparse
import html
import json
import math
import os
import sys

TAGS = ["other", "parameter", "gradient", "optimizer_state", "activation", "temporary", "data", "workspace"]
COLORS = ["#9e9e9e", "#1f77b4", "#d62728", "#9467bd", "#ff7f0e", "#bcbd22", "#2ca02c", "#17becf"]
# The actions that change the curves; "step" (a training step begins) and any
# later action are left out of them.
MEMORY_ACTIONS = ("alloc", "free", "segment_alloc", "segment_free", "oom")


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
    events = [e for e in dev.get("events", []) if e["action"] in MEMORY_ACTIONS]
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


def steps(dev):
    """Where each training step begins: its time (ms) and its event index (the
    number of memory events before it, the index of the row it precedes)."""
    out, n = [], 0
    for e in dev.get("events", []):
        if e["action"] == "step":
            out.append({"t": e.get("time_ns", 0) / 1e6, "i": n})
        elif e["action"] in MEMORY_ACTIONS:
            n += 1
    return out


def peaks(rows):
    """(peak allocated, peak reserved or None without segment events) of a series."""
    alloc = max((sum(r["v"]) for r in rows), default=0)
    res = [r["r"] for r in rows if r["r"] is not None]
    return alloc, (max(res) if res else None)


# The script both pages share; the page defines TAGS, COLORS and byIndex before it.
# drawPanel sets up one timeline on a canvas (stacked tag areas, the reserved
# line, a dashed line per training step, the axes, the hover) and returns the
# function that draws it.
TIMELINE_JS = """\
function fmt(b) { const u = ['B','KiB','MiB','GiB','TiB']; let i = 0; while (b >= 1024 && i < 4) { b /= 1024; i++; } return (i ? b.toFixed(2) : b) + ' ' + u[i]; }
const X = d => byIndex ? d.i : d.t;
// The colour key: the tags, then the reserved line and the step mark where any panel has them.
function showKey(Ds, Ss) {
  document.getElementById('key').innerHTML = TAGS.map((t, k) => `<span style="background:${COLORS[k]}"></span>${t}`).join('')
    + (Ds.some(D => D.some(d => d.r !== null)) ? '<span style="background:#000;height:2px"></span>reserved' : '')
    + (Ss.some(S => S.length) ? '<span style="background:#888;width:1px"></span>training step' : '');
}
// One timeline on canvas cv with its tooltip tip: D its events, S its steps, ymax the
// top of its y axis; fit: CSS scales the canvas to its column. Returns its draw().
function drawPanel(cv, tip, D, S, ymax, fit) {
  const ctx = cv.getContext('2d');
  const L = 80, R = 20, T = 10, B = 40, W = cv.width - L - R, H = cv.height - T - B;
  let sx = null, x0 = 0, x1 = 1;
  function draw() {
    ctx.clearRect(0, 0, cv.width, cv.height);
    if (!D.length) { ctx.fillText('no events in this snapshot', L + 10, T + 20); return; }
    x0 = X(D[0]); x1 = Math.max(X(D[D.length - 1]), x0 + 1e-9);
    sx = x => L + (x - x0) / (x1 - x0) * W;
    const sy = y => T + H - y / ymax * H;
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
    // A thin dashed line where each training step begins.
    ctx.save(); ctx.strokeStyle = '#888'; ctx.lineWidth = 1; ctx.setLineDash([4, 3]);
    for (const s of S) {
      const x = X(s);
      if (x < x0 || x > x1) continue;
      ctx.beginPath(); ctx.moveTo(sx(x), T); ctx.lineTo(sx(x), T + H); ctx.stroke();
    }
    ctx.restore();
    ctx.strokeStyle = '#444'; ctx.fillStyle = '#000'; ctx.lineWidth = 1;
    ctx.strokeRect(L, T, W, H);
    for (let i = 0; i <= 4; i++) {
      const y = ymax * i / 4; ctx.fillText(fmt(y), 4, sy(y) + 4);
      const x = x0 + (x1 - x0) * i / 4; ctx.fillText(byIndex ? Math.round(x) : x.toFixed(2) + ' ms', sx(x) - 20, T + H + 16);
    }
    ctx.fillText(byIndex ? 'event index' : 'time (ms since the first allocator)', L + W / 2 - 60, T + H + 32);
  }
  cv.onmousemove = ev => {
    if (!D.length || !sx) return;
    // A canvas scaled to its column: CSS pixels to canvas pixels.
    const r = cv.getBoundingClientRect(), cx = ev.clientX - r.left, px = fit ? cx * cv.width / r.width : cx;
    const x = x0 + (px - L) / W * (x1 - x0);
    let lo = 0, hi = D.length - 1;
    while (lo < hi) { const m = (lo + hi + 1) >> 1; if (X(D[m]) <= x) lo = m; else hi = m - 1; }
    const d = D[lo], tot = d.v.reduce((a, b) => a + b, 0);
    let s = `#${d.i}  ${d.a}  ${fmt(d.s)} (requested ${d.q} B)\\ntag ${d.g}  op ${d.o || '-'}\\naddress ${d.ad}  stream ${d.st}\\ntime ${d.t.toFixed(3)} ms\\n\\nallocated ${fmt(tot)}` + (d.r !== null ? `\\nreserved  ${fmt(d.r)}` : '') + '\\n';
    TAGS.forEach((t, k) => { if (d.v[k]) s += `\\n  ${t.padEnd(16)} ${fmt(d.v[k])}`; });
    tip.textContent = s; tip.style.display = 'block';
    tip.style.left = Math.max(0, Math.min(cx + 16, (fit ? r.width : cv.width) - 260)) + 'px'; tip.style.top = (ev.clientY - r.top + 10) + 'px';
  };
  cv.onmouseleave = () => { tip.style.display = 'none'; };
  return draw;
}
// Draws the panels, and again when the x-axis checkbox flips.
function drawAll(draws) {
  document.getElementById('byindex').onchange = e => { byIndex = e.target.checked; draws.forEach(f => f()); };
  draws.forEach(f => f());
}"""


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
<label><input type="checkbox" id="byindex"%(checked)s> x axis: event index (instead of time)</label>
<div id="wrap"><canvas id="c" width="1200" height="520"></canvas><div id="tip"></div></div>
<script>
const TAGS = %(tags)s, COLORS = %(colors)s, YMAX = %(scale_bytes)d, D = %(data)s;
let byIndex = %(byindex)s;
%(timeline)s
showKey([D], []);
drawAll([drawPanel(document.getElementById('c'), document.getElementById('tip'), D, [], YMAX, false)]);
</script></body></html>
"""


MULTI_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>snug memory timelines: %(title)s</title>
<style>
 body { font: 13px sans-serif; margin: 16px; }
 .panels { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 16px; }
 @media (max-width: 900px) { .panels { grid-template-columns: minmax(0, 1fr); } }
 .panel { min-width: 0; }
 .panel-title { margin: 4px 0; }
 .summary { font-weight: bold; }
 .sub { color: #555; margin-bottom: 4px; overflow-wrap: anywhere; }
 .wrap { position: relative; }
 canvas { border: 1px solid #ccc; width: 100%%; height: auto; }
 .tip { position: absolute; pointer-events: none; background: #fff; border: 1px solid #888;
        padding: 6px 8px; font: 12px monospace; white-space: pre; display: none; z-index: 1; }
 .key span { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: middle; }
</style></head><body>
<h3>snug memory timelines: %(title)s</h3>
<div id="scale">same y axis on every panel: 0 to %(scale)s (the largest reserved of all panels, %(scale_bytes)d bytes)</div>
<div class="key" id="key"></div>
<label><input type="checkbox" id="byindex"%(checked)s> x axis: event index (instead of time)</label>
<div class="panels">
%(panels)s
</div>
<script>
const TAGS = %(tags)s, COLORS = %(colors)s, YMAX = %(scale_bytes)d, P = %(data)s;
let byIndex = %(byindex)s;
%(timeline)s
showKey(P.map(p => p.D), P.map(p => p.S));
// Panel n: canvas c<n>, tooltip tip<n>, all on the shared YMAX.
drawAll(P.map((p, n) => drawPanel(document.getElementById('c' + n), document.getElementById('tip' + n),
                                  p.D, p.S, YMAX, true)));
</script></body></html>
"""

PANEL = """<div class="panel">
 <h4 class="panel-title">%(title)s</h4>
 <div class="summary">%(summary)s</div>
 <div class="sub">%(sub)s</div>
 <div class="wrap"><canvas id="c%(n)d" width="760" height="440"></canvas><div class="tip" id="tip%(n)d"></div></div>
</div>"""


def mib(b):
    return f"{b / 2**20:.2f} MiB"


def summary(rows):
    """The line above a panel: peak allocated, peak reserved, reserved/allocated."""
    alloc, res = peaks(rows)
    if res is None:
        return f"peak allocated {mib(alloc)}, peak reserved n/a (no segment events), reserved/allocated n/a"
    ratio = f"{res / alloc:.2f}" if alloc else "n/a"
    return f"peak allocated {mib(alloc)}, peak reserved {mib(res)}, reserved/allocated {ratio}"


def y_top(rows):
    """The top of a timeline's y axis: its largest reserved (or allocated, where
    larger or where the trace has no segment events); at least 1 byte."""
    alloc, res = peaks(rows)
    return max(1, alloc, res or 0)


def shared_scale(panels):
    """The y scale of every panel: the largest y_top of them all."""
    return max([1] + [y_top(p["rows"]) for p in panels])


def page_fields(data, x):
    """The fields both pages fill alike: the script's constants and the x axis it starts on."""
    return {"tags": json.dumps(TAGS), "colors": json.dumps(COLORS), "timeline": TIMELINE_JS,
            "data": json.dumps(data, separators=(",", ":")).replace("</", "<\\/"),
            "byindex": "true" if x == "index" else "false", "checked": " checked" if x == "index" else ""}


def write_html(dev, rows, path, source, x="time"):
    peak = max((sum(r["v"]) for r in rows), default=0)
    sub = (f"{html.escape(source)}: {len(rows)} events, backend {html.escape(str(dev.get('backend', '?')))}, "
           f"peak allocated in the trace {peak / 2**20:.2f} MiB")
    with open(path, "w") as f:
        f.write(PAGE % {"title": html.escape(dev.get("device", "?")), "subtitle": sub, "scale_bytes": y_top(rows),
                        **page_fields(rows, x)})


def write_html_multi(panels, path, x="time"):
    """panels: [{"title", "source", "dev", "rows", "steps"}], one panel each, side by side."""
    scale = shared_scale(panels)
    blocks = []
    for n, p in enumerate(panels):
        dev = p["dev"]
        sub = (f"{html.escape(p['source'])}: {len(p['rows'])} events of {html.escape(str(dev.get('device', '?')))}, "
               f"backend {html.escape(str(dev.get('backend', '?')))}, {len(p['steps'])} steps")
        blocks.append(PANEL % {"n": n, "title": html.escape(p["title"]), "summary": summary(p["rows"]), "sub": sub})
    data = [{"D": p["rows"], "S": p["steps"]} for p in panels]
    with open(path, "w") as f:
        f.write(MULTI_PAGE % {"title": html.escape(" | ".join(p["title"] for p in panels)),
                              "scale": mib(scale), "scale_bytes": scale, "panels": "\n".join(blocks),
                              **page_fields(data, x)})


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("memory_timeline: matplotlib is not installed, so no PNG was written "
              "(install it with: python3 -m pip install matplotlib). The HTML timeline does not need it.",
              file=sys.stderr)
        return None
    return plt


def plot(ax, rows, x, step_marks=()):
    """One timeline on a matplotlib axis: tags stacked, reserved as a line."""
    key = "i" if x == "index" else "t"
    xs = [r[key] for r in rows]
    used = [k for k in range(len(TAGS)) if any(r["v"][k] for r in rows)]
    ys = [[r["v"][k] / 2**20 for r in rows] for k in used]
    if rows:
        ax.stackplot(xs, *ys, labels=[TAGS[k] for k in used], colors=[COLORS[k] for k in used], step="post", alpha=0.85)
        if any(r["r"] is not None for r in rows):
            ax.step(xs, [(r["r"] or 0) / 2**20 for r in rows], where="post", color="black", lw=1.2, label="reserved")
        for s in step_marks:
            if xs[0] <= s[key] <= xs[-1]:
                ax.axvline(s[key], color="#888", lw=0.6, ls="--")
    ax.set_xlabel("event index" if x == "index" else "time (ms)")


def write_png(dev, rows, path, x="time"):
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(12, 5))
    plot(ax, rows, x)
    ax.set_ylabel("MiB")
    ax.set_title(f"snug memory timeline: {dev.get('device', '?')}")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def write_png_multi(panels, path, x="time"):
    """One figure, one subplot per snapshot (two a row), all on one y axis."""
    plt = pyplot()
    if plt is None:
        return False
    cols = min(len(panels), 2)
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, sharey="all", squeeze=False, figsize=(7 * cols, 4.5 * nrows))
    top = shared_scale(panels) / 2**20
    for n, ax in enumerate(axes.flat):
        if n >= len(panels):
            ax.set_visible(False)
            continue
        p = panels[n]
        plot(ax, p["rows"], x, p["steps"])
        ax.set_ylim(0, top * 1.02)
        ax.set_title(f"{p['title']}\n{summary(p['rows'])}", fontsize=9)
        if n % cols == 0:
            ax.set_ylabel("MiB")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def titles_for(paths, titles):
    """--titles split on commas (one per file), else the file names (whole paths
    where two files share a name)."""
    if titles is not None:
        got = [t.strip() for t in titles.split(",")]
        if len(got) != len(paths):
            sys.exit(f"memory_timeline: --titles has {len(got)} titles for {len(paths)} snapshots")
        return got
    names = [os.path.basename(p) for p in paths]
    return [n if names.count(n) == 1 else p for n, p in zip(names, paths)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshots", nargs="+", metavar="snapshot", help="snapshot JSON files (several: side by side)")
    ap.add_argument("-o", "--output", default="memory_timeline.html", help="HTML file to write")
    ap.add_argument("--titles", help="comma-separated panel titles, one per snapshot (default: the file names; "
                         "with one snapshot its title stands for the file name in the subtitle)")
    ap.add_argument("--png", help="also write a PNG plot (needs matplotlib)")
    ap.add_argument("--device", help="which device of the snapshot (default: the first with events)")
    ap.add_argument("--x", choices=["time", "index"], default="time",
                    help="what the x axis starts as: time (ms) or event index (default: time)")
    args = ap.parse_args()
    titles = titles_for(args.snapshots, args.titles)
    if len(args.snapshots) == 1:
        dev = load(args.snapshots[0], args.device)
        rows = series(dev)
        source = args.snapshots[0] if args.titles is None else titles[0]
        write_html(dev, rows, args.output, source, args.x)
        print(f"wrote {args.output} ({len(rows)} events of {dev.get('device')})")
        if args.png:
            if not write_png(dev, rows, args.png, args.x):
                return 1
            print(f"wrote {args.png}")
        return 0
    panels = []
    for path, title in zip(args.snapshots, titles):
        dev = load(path, args.device)
        panels.append({"title": title, "source": path, "dev": dev, "rows": series(dev), "steps": steps(dev)})
    write_html_multi(panels, args.output, args.x)
    print(f"wrote {args.output} ({len(panels)} panels: "
          + ", ".join(f"{p['title']} {len(p['rows'])} events of {p['dev'].get('device')}" for p in panels) + ")")
    if args.png:
        if not write_png_multi(panels, args.png, args.x):
            return 1
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
