#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tests tools/memory_timeline.py (docs/memory.md, "View") on hand-made snapshots.

    python3 tests/memory_timeline_test.py

- one snapshot: the page is written, has no panel markup, and leaves the
  "step" events out of its rows;
- two snapshots with --titles: two panels with those titles in order, each
  with its summary line (peak allocated, peak reserved, reserved/allocated),
  the shared y scale (the larger reserved) on the page, the steps kept apart
  from the rows; without --titles the panels are named by their files; three
  panels escape their titles; a --titles of the wrong length fails;
- --png: a PNG when matplotlib is installed, else the message and the HTML;
- the pages' scripts parse (node --check; SKIPPED without node).

Exit 0: pass.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from snapshot_fixtures import MIB, check, finish, tool  # noqa: E402  (what both snapshot tests share)

TOOL = tool("memory_timeline.py")


def event(action, t, address=0, size=0, tag="other", op=""):
    return {"action": action, "time_ns": t, "address": address, "size": size, "requested": size,
            "stream": 0, "tag": tag, "op": op}


def snapshot(events):
    return {"format": "snug-memory-snapshot", "version": 1,
            "devices": [{"device": "cpu:0", "backend": "host", "settings": "", "capacity": None,
                         "stats": {}, "segments": [], "events": events}]}


# A: 4 MiB reserved, 3 MiB allocated at the peak. B: 8 MiB reserved, 6 MiB allocated.
A = snapshot([event("segment_alloc", 100, 0x10000, 4 * MIB),
              event("step", 200),
              event("alloc", 300, 0x10000, 1 * MIB, "activation", "matmul"),
              event("alloc", 400, 0x10000 + MIB, 2 * MIB, "parameter"),
              event("free", 500, 0x10000, 1 * MIB, "activation", "matmul"),
              event("step", 600),
              event("free", 700, 0x10000 + MIB, 2 * MIB, "parameter")])
B = snapshot([event("segment_alloc", 100, 0x20000, 8 * MIB),
              event("step", 150),
              event("alloc", 200, 0x20000, 6 * MIB, "activation", "gelu"),
              event("free", 900, 0x20000, 6 * MIB, "activation", "gelu")])


def run(args):
    r = subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def script_of(page):
    return page[page.index("<script>") + len("<script>"):page.rindex("</script>")]


def data_of(page, name):
    """The JSON literal assigned to `name` in the page's script (the last constant of its line)."""
    m = re.search(r"\b" + name + r" = (\[.*\]);\n", page)
    return json.loads(m.group(1)) if m else None


def main():
    node = shutil.which("node")
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        for path, snap in ((a, A), (b, B)):
            with open(path, "w") as f:
                json.dump(snap, f)
        pages = []

        # One snapshot: the page as it always was, no panels.
        one = os.path.join(d, "one.html")
        rc, out = run([a, "-o", one])
        check(rc == 0, f"one snapshot: exit {rc}: {out}")
        check(os.path.exists(one), "one snapshot: no page written")
        if os.path.exists(one):
            page = open(one).read()
            pages.append(("one", page))
            check("snug memory timeline: cpu:0" in page, "one snapshot: no title")
            check('class="panel-title"' not in page and 'class="panel"' not in page,
                  "one snapshot: the page has panel markup")
            rows = data_of(page, "D")
            check(rows is not None and len(rows) == 5, f"one snapshot: {rows and len(rows)} rows, expected 5")
            check(rows is not None and all(r["a"] != "step" for r in rows), "one snapshot: a step event is a row")
            check("peak allocated in the trace 3.00 MiB" in page, "one snapshot: wrong peak in the subtitle")
            same = os.path.join(d, "same.html")
            run([a, "-o", same, "--x", "time"])
            check(os.path.exists(same) and open(same).read() == page, "one snapshot: --x time changes the page")

        # Two snapshots, titled: two panels, one y scale.
        two = os.path.join(d, "two.html")
        rc, out = run([a, b, "-o", two, "--titles", "best_fit,expandable"])
        check(rc == 0, f"two snapshots: exit {rc}: {out}")
        check(os.path.exists(two), "two snapshots: no page written")
        if os.path.exists(two):
            page = open(two).read()
            pages.append(("two", page))
            titles = re.findall(r'<h4 class="panel-title">(.*?)</h4>', page)
            check(titles == ["best_fit", "expandable"], f"two snapshots: panel titles {titles}")
            check(page.count('<canvas id="c') == 2, "two snapshots: not two canvases")
            check("YMAX = %d," % (8 * MIB) in page, "two snapshots: the shared scale is not 8 MiB in the script")
            check("0 to 8.00 MiB" in page, "two snapshots: the shared scale is not shown")
            sums = re.findall(r'<div class="summary">(.*?)</div>', page)
            check(sums == ["peak allocated 3.00 MiB, peak reserved 4.00 MiB, reserved/allocated 1.33",
                           "peak allocated 6.00 MiB, peak reserved 8.00 MiB, reserved/allocated 1.33"],
                  f"two snapshots: summaries {sums}")
            panels = data_of(page, "P")
            check(panels is not None and [len(p["D"]) for p in panels] == [5, 3],
                  f"two snapshots: rows {panels and [len(p['D']) for p in panels]}")
            check(panels is not None and all(r["a"] != "step" for p in panels for r in p["D"]),
                  "two snapshots: a step event is a row")
            check(panels is not None and [[s["i"] for s in p["S"]] for p in panels] == [[1, 4], [1]],
                  f"two snapshots: steps {panels and [p['S'] for p in panels]}")
            check("grid-template-columns: repeat(2" in page, "two snapshots: the panels are not two a row")

        # Untitled: the file names; three panels, titles escaped.
        named = os.path.join(d, "named.html")
        rc, out = run([a, b, "-o", named])
        check(rc == 0 and re.findall(r'<h4 class="panel-title">(.*?)</h4>', open(named).read()) == ["a.json", "b.json"],
              f"untitled: exit {rc}, panels not named a.json, b.json: {out}")
        three = os.path.join(d, "three.html")
        rc, out = run([a, b, a, "-o", three, "--titles", "one,two,<three>", "--x", "index"])
        if rc == 0:
            page = open(three).read()
            pages.append(("three", page))
            titles = re.findall(r'<h4 class="panel-title">(.*?)</h4>', page)
            check(titles == ["one", "two", "&lt;three&gt;"], f"three snapshots: panel titles {titles}")
            check("let byIndex = true;" in page and 'id="byindex" checked' in page, "--x index: not on the index")
        else:
            check(False, f"three snapshots: exit {rc}: {out}")
        rc, out = run([a, b, "-o", os.path.join(d, "bad.html"), "--titles", "only_one"])
        check(rc != 0 and "--titles" in out, f"--titles of the wrong length: exit {rc}: {out}")

        # --png: one subplot per snapshot, or the message without matplotlib.
        png, page2 = os.path.join(d, "two.png"), os.path.join(d, "two_png.html")
        rc, out = run([a, b, "-o", page2, "--png", png])
        if "matplotlib is not installed" in out:
            check(rc == 1 and os.path.exists(page2) and not os.path.exists(png),
                  f"--png without matplotlib: exit {rc}, the HTML not written or a PNG written")
            print("SKIPPED: the PNG (matplotlib is not installed)")
        else:
            check(rc == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", f"--png: exit {rc}, no PNG: {out}")

        # The scripts parse.
        if node:
            for name, page in pages:
                js = os.path.join(d, name + ".js")
                with open(js, "w") as f:
                    f.write(script_of(page))
                r = subprocess.run([node, "--check", js], capture_output=True, text=True)
                check(r.returncode == 0, f"{name}: the page's script does not parse: {r.stderr}")
        else:
            print("SKIPPED: node --check of the pages' scripts (node is not installed)")

    return finish("ok: memory_timeline one and several snapshots")


if __name__ == "__main__":
    sys.exit(main())
