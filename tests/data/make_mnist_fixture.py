#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A small MNIST-format data set of synthetic digits, for the tests that run
examples/mnist in a clone without the real MNIST (examples/CMakeLists.txt).

  python3 tests/data/make_mnist_fixture.py OUT_DIR [--train N] [--test N] [--seed S]

writes OUT_DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz in MNIST's own
format (IDX, big-endian header, gzip'd): 28x28 u8 images, labels 0..9, by
default 1000 training and 300 test images. Each image is one of ten hand-drawn
stroke paths, one per digit, inside MNIST's central 20x20 box, drawn with a
random shift, scale, slant and stroke width, then given speckle noise: varied
enough that a model must learn the shapes (a pixel template fails on shifted
strokes), simple enough that W-MLP learns it in a few hundred steps. Same seed,
same bytes (gzip's mtime is 0). Standard library only.
"""
import argparse
import gzip
import math
import os
import random
import struct
import sys

SIZE = 28


def ellipse(cx, cy, rx, ry, start=0.0, end=360.0, n=16):
    pts = []
    for i in range(n + 1):
        a = math.radians(start + (end - start) * i / n)
        pts.append((cx + rx * math.sin(a), cy - ry * math.cos(a)))
    return pts


# Strokes of each digit in a unit box (x right, y down), as polylines.
STROKES = {
    0: [ellipse(0.5, 0.5, 0.3, 0.42)],
    1: [[(0.35, 0.25), (0.55, 0.08), (0.55, 0.92)]],
    2: [[(0.2, 0.3), (0.3, 0.12), (0.55, 0.07), (0.78, 0.2), (0.75, 0.42), (0.2, 0.92), (0.85, 0.92)]],
    3: [[(0.2, 0.12), (0.78, 0.12), (0.45, 0.45), (0.75, 0.58), (0.78, 0.8), (0.55, 0.93), (0.2, 0.86)]],
    4: [[(0.68, 0.92), (0.68, 0.08), (0.15, 0.65), (0.88, 0.65)]],
    5: [[(0.8, 0.1), (0.28, 0.1), (0.24, 0.45), (0.6, 0.4), (0.8, 0.6), (0.7, 0.86), (0.45, 0.93), (0.2, 0.85)]],
    6: [[(0.72, 0.08), (0.4, 0.35), (0.24, 0.65)] + ellipse(0.5, 0.7, 0.26, 0.22, 270, 630)],
    7: [[(0.15, 0.1), (0.85, 0.1), (0.4, 0.92)]],
    8: [ellipse(0.5, 0.28, 0.22, 0.2), ellipse(0.5, 0.7, 0.27, 0.23)],
    9: [ellipse(0.5, 0.3, 0.25, 0.22, 90, 450), [(0.75, 0.3), (0.62, 0.92)]],
}


def draw(digit, rng):
    """One 28x28 image (bytes) of `digit`: its strokes transformed, then stamped."""
    scale = 20.0 * rng.uniform(0.8, 1.05)
    slant = rng.uniform(-0.3, 0.3)  # x shear, like slanted handwriting
    angle = rng.uniform(-0.15, 0.15)
    dx, dy = rng.uniform(-2.5, 2.5), rng.uniform(-2.5, 2.5)
    width = rng.uniform(0.9, 1.8)  # stroke half-width in pixels
    c, s = math.cos(angle), math.sin(angle)

    def to_px(p):
        x, y = p[0] - 0.5, p[1] - 0.5
        x += slant * -y
        x, y = c * x - s * y, s * x + c * y
        return 14.0 + dx + scale * x, 14.0 + dy + scale * y

    img = [0.0] * (SIZE * SIZE)
    for line in STROKES[digit]:
        pts = [to_px(p) for p in line]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            n = max(1, int(math.hypot(x1 - x0, y1 - y0) * 2))  # a stamp every half pixel
            for k in range(n + 1):
                t = k / n
                px, py = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
                reach = width + 0.7  # the pixels this stamp lights: within `reach` of (px, py)
                for iy in range(max(0, math.ceil(py - reach)), min(SIZE, math.floor(py + reach) + 1)):
                    for ix in range(max(0, math.ceil(px - reach)), min(SIZE, math.floor(px + reach) + 1)):
                        v = min(1.0, reach - math.hypot(ix - px, iy - py))  # 1 inside, a soft edge
                        if v > img[iy * SIZE + ix]:
                            img[iy * SIZE + ix] = v
    out = bytearray(SIZE * SIZE)
    for i, v in enumerate(img):
        if rng.random() < 0.03:
            v = rng.random()  # speckle
        out[i] = int(round(255 * min(1.0, v)))
    return bytes(out)


def make_split(n, rng):
    labels = [i % 10 for i in range(n)]
    rng.shuffle(labels)
    images = b"".join(draw(d, rng) for d in labels)
    return images, bytes(labels)


def write_gz(path, payload):
    tmp = path + ".tmp"
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(payload)
    os.replace(tmp, path)  # concurrent writers each leave a whole file


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=1000)
    ap.add_argument("--test", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.train < 10 or a.test < 10:
        ap.error("--train and --test must be at least 10")
    os.makedirs(a.out_dir, exist_ok=True)
    rng = random.Random(a.seed)
    for prefix, n in (("train", a.train), ("t10k", a.test)):
        images, labels = make_split(n, rng)
        write_gz(os.path.join(a.out_dir, prefix + "-images-idx3-ubyte.gz"),
                 struct.pack(">IIII", 0x803, n, SIZE, SIZE) + images)
        write_gz(os.path.join(a.out_dir, prefix + "-labels-idx1-ubyte.gz"), struct.pack(">II", 0x801, n) + labels)
    print(f"make_mnist_fixture: {a.train} training and {a.test} test images in {a.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
