"""The mask raster of one COCO annotation at a detection output size:
torchvision's path (pycocotools' full-size raster, as its CocoDetection
wrapper makes it, then a nearest resize of the tv_tensors.Mask) against
ringloader's C raster evaluated only at the output's rows and columns
(_core.mask_from_polygons / mask_from_rle through index maps); and a
VOC-like segmentation PNG: Pillow's decode made a tv_tensors.Mask and
resized, against _core.mask_from_png (the palette indices decoded and
sampled through the same maps).

Usage::

    python benchmarks/bench_masks.py [--rounds 7] [--objects 20] [--pngs 5]
        [--out 800x1333] [--sizes 480x640,2000x3000] [--threads 1]

For each source size: ``--objects`` annotations (3 polygons of 12-40
vertices each, covering from a few percent of the image to most of it,
partly outside it), each made into a mask at ``--out`` by both contenders,
in rounds that alternate them; the same annotations as compressed RLEs
(pycocotools' encode) likewise. Every output is checked identical before
timing; then ``--pngs`` palette PNGs of class shapes with 255 borders,
likewise. Prints the median time per mask of each and their ratio. torch
runs with ``--threads`` intra-op threads (torchvision's resize of one mask
is what a DataLoader worker does). Not run in CI; the machine may be
shared, so compare ratios from one run.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import numpy as np
import torch
from PIL import Image, ImageDraw
from pycocotools import mask as coco_mask
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as F

from ringloader import _core
from ringloader.bench.system import cpu_model


def nearest_index(n_in: int, n_out: int) -> np.ndarray:
    """torch's nearest interpolation index rule: floor(dst * scale), the
    scale in float32, clamped."""
    if n_in == n_out:
        return np.arange(n_out, dtype=np.int32)
    scale = np.float32(n_in) / np.float32(n_out)
    src = (np.arange(n_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(src, n_in - 1).astype(np.int32)


def annotation(rng: np.random.Generator, h: int, w: int) -> list[list[float]]:
    polys = []
    for _ in range(3):
        k = int(rng.integers(12, 41))
        r = rng.uniform(0.05, 0.6) * min(h, w)
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        a = np.sort(rng.uniform(0, 2 * np.pi, k))
        rad = r * rng.uniform(0.6, 1.0, k)
        xy = np.stack([cx + rad * np.cos(a), cy + rad * np.sin(a)], 1)
        polys.append([float(v) for v in xy.reshape(-1)])
    return polys


def torchvision_polygons(polys, h, w, size):
    m = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(polys, h, w)))
    return F.resize(tv_tensors.Mask(torch.from_numpy(m)), size)


def torchvision_rle(rle, size):
    m = coco_mask.decode(rle)
    return F.resize(tv_tensors.Mask(torch.from_numpy(m)), size)


def time_round(fn, items, rounds_out: list) -> None:
    """Appends the mean seconds per item of one pass over items."""
    t0 = time.perf_counter()
    for it in items:
        fn(it)
    rounds_out.append((time.perf_counter() - t0) / len(items))


def run_size(h, w, oh, ow, args, rng):
    size = [oh, ow]
    rows, cols = nearest_index(h, oh), nearest_index(w, ow)
    anns = [annotation(rng, h, w) for _ in range(args.objects)]
    rles = [coco_mask.merge(coco_mask.frPyObjects(p, h, w)) for p in anns]
    for polys, rle in zip(anns, rles):  # identical before timed
        want = torchvision_polygons(polys, h, w, size).numpy()
        got = np.frombuffer(_core.mask_from_polygons(polys, h, w, rows, cols), np.uint8)
        assert np.array_equal(got.reshape(oh, ow), want)
        got = np.frombuffer(_core.mask_from_rle(rle, h, w, rows, cols), np.uint8)
        assert np.array_equal(got.reshape(oh, ow), want)
    times = {k: [] for k in ("tv_poly", "rl_poly", "tv_rle", "rl_rle")}
    for _ in range(args.rounds):
        time_round(
            lambda p: torchvision_polygons(p, h, w, size), anns, times["tv_poly"]
        )
        time_round(
            lambda p: _core.mask_from_polygons(p, h, w, rows, cols),
            anns,
            times["rl_poly"],
        )
        time_round(lambda r: torchvision_rle(r, size), rles, times["tv_rle"])
        time_round(
            lambda r: _core.mask_from_rle(r, h, w, rows, cols), rles, times["rl_rle"]
        )
    med = {k: statistics.median(v) for k, v in times.items()}
    for kind in ("poly", "rle"):
        tv, rl = med[f"tv_{kind}"], med[f"rl_{kind}"]
        name = "polygons" if kind == "poly" else "RLE string"
        print(
            f"{h}x{w} -> {oh}x{ow}  {name:10s}  torchvision+pycocotools "
            f"{tv * 1e3:7.3f} ms   ringloader {rl * 1e3:7.3f} ms   ratio {tv / rl:5.2f}x"
        )


def voc_png(rng: np.random.Generator, h: int, w: int) -> bytes:
    """A palette PNG as VOC's: class shapes with a 255 border, Pillow's."""
    img = Image.new("P", (w, h), 0)
    img.putpalette([v % 256 for v in range(768)])
    draw = ImageDraw.Draw(img)
    for _ in range(8):
        x0, x1 = sorted(rng.uniform(0, w, 2))
        y0, y1 = sorted(rng.uniform(0, h, 2))
        draw.ellipse(
            [x0, y0, x1, y1], fill=int(rng.integers(1, 21)), outline=255, width=5
        )
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def torchvision_png(data: bytes, size):
    """VOCSegmentation's target through wrap_dataset_for_transforms_v2: a
    tv_tensors.Mask of Pillow's image, then resized (nearest)."""
    return F.resize(tv_tensors.Mask(Image.open(io.BytesIO(data))), size)


def run_png(h, w, oh, ow, args, rng):
    size = [oh, ow]
    rows, cols = nearest_index(h, oh), nearest_index(w, ow)
    pngs = [voc_png(rng, h, w) for _ in range(args.pngs)]
    for data in pngs:  # identical before timed
        want = torchvision_png(data, size).numpy()[0]
        got = np.frombuffer(_core.mask_from_png(data, rows, cols), np.uint8)
        assert np.array_equal(got.reshape(oh, ow), want)
    tv, rl = [], []
    for _ in range(args.rounds):
        time_round(lambda d: torchvision_png(d, size), pngs, tv)
        time_round(lambda d: _core.mask_from_png(d, rows, cols), pngs, rl)
    tv, rl = statistics.median(tv), statistics.median(rl)
    print(
        f"{h}x{w} -> {oh}x{ow}  {'PNG':10s}  torchvision+Pillow      "
        f"{tv * 1e3:7.3f} ms   ringloader {rl * 1e3:7.3f} ms   ratio {tv / rl:5.2f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--objects", type=int, default=20)
    ap.add_argument("--pngs", type=int, default=5)
    ap.add_argument("--out", default="800x1333")
    ap.add_argument("--sizes", default="480x640,2000x3000")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    oh, ow = (int(v) for v in args.out.split("x"))
    from importlib.metadata import version

    import torchvision

    print(
        f"CPU: {cpu_model()}; torch {torch.__version__} ({args.threads} thread), "
        f"torchvision {torchvision.__version__}, pycocotools {version('pycocotools')}; "
        f"median of {args.rounds} rounds of {args.objects} masks"
    )
    rng = np.random.default_rng(args.seed)
    for s in args.sizes.split(","):
        h, w = (int(v) for v in s.split("x"))
        run_size(h, w, oh, ow, args, rng)
        run_png(h, w, oh, ow, args, rng)


if __name__ == "__main__":
    main()
