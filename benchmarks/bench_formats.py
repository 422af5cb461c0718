#!/usr/bin/env python3
"""PNG and WebP benchmark: ringloader's native decoders against torch's
DataLoader, and against Pillow alone.

The ImageNet-like JPEG folder of the other benchmarks (ringloader.bench.data)
is re-encoded, once, as PNG (Pillow's default compression) and as lossy WebP
(quality 90), keeping the folder layout. On each, side by side in one run,
every contender in a fresh process pinned to the same CPUs (the harness of
benchmarks/compare.py), the train recipe as a training script writes it,
RandomResizedCrop(224) + RandomHorizontalFlip + Normalize (float32):

* ``dataloader``: torch DataLoader + torchvision ImageFolder (Pillow
  decode), ``num_workers`` = the thread count;
* ``ringloader`` at that thread count and at 1 thread.

Then each native decoder's single-thread rate against Pillow's on the same
files, from memory, whole images to RGB: ``_core.decode`` (libspng,
libwebp) against ``Image.open(f).convert("RGB")``; and the native decoder
on the train recipe's crop boxes alone (``_core.decode(box=)``): the CPU
time a file that no loader decoding with it can go below, so the
DataLoader's CPU time a file over it is the most any such loader can gain.

Usage::

    python benchmarks/bench_formats.py [--images 500] [--threads 2]
                                       [--epochs 1] [--rounds 1] [--json OUT]
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import sys
import time
from typing import Any, Optional

from ringloader.bench import data, harness, system

FORMATS = {"png": ("PNG", {}), "webp": ("WEBP", {"quality": 90})}
PIPELINE = "train-norm"


def _convert(job: tuple[str, str, str]) -> None:
    from PIL import Image

    src, dst, fmt = job
    name, opts = FORMATS[fmt]
    with Image.open(src) as im:
        im.convert("RGB").save(dst, name, **opts)


def reencode(jpeg_root: str, fmt: str) -> str:
    """The folder re-encoded as ``fmt`` beside it, made once."""
    root = os.path.join(os.path.dirname(jpeg_root), fmt)
    done = os.path.join(root, ".done")
    if os.path.exists(done):
        return root
    _, samples = data.scan_folder(jpeg_root)
    jobs = []
    for path, _ in samples:
        rel = os.path.relpath(path, jpeg_root)
        dst = os.path.join(root, os.path.splitext(rel)[0] + "." + fmt)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        jobs.append((path, dst, fmt))
    harness.log(f"re-encoding {len(jobs)} images as {fmt} in {root}")
    with multiprocessing.Pool() as pool:
        pool.map(_convert, jobs, chunksize=16)
    open(done, "w").close()
    return root


def files_of(root: str, fmt: str) -> list[str]:
    out = []
    for dirpath, _dirs, files in sorted(os.walk(root)):
        out += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(fmt)]
    return out


def crop_boxes(blobs: list[bytes], seed: int = 0) -> list[tuple[int, int, int, int]]:
    """One (left, top, width, height) box a file, drawn as the train
    recipe's RandomResizedCrop(224) draws them (torchvision's get_params,
    default scale and ratio), from the header's size."""
    import torch
    from PIL import Image
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(seed)
    boxes = []
    for b in blobs:
        with Image.open(io.BytesIO(b)) as im:
            top, left, h, w = RandomResizedCrop.get_params(
                im, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)
            )
        boxes.append((left, top, w, h))
    return boxes


def decoder_rates(paths: list[str], passes: int = 3) -> dict[str, float]:
    """Images/s of ringloader's native decoder and of Pillow, one thread,
    from bytes in memory, the best of ``passes``, the contenders
    interleaved pass by pass: whole images to RGB (``native``, ``pillow``),
    and the native decoder on the boxes of :func:`crop_boxes` alone
    (``native_crop``), decoded as a pipeline decodes a crop; by wall time
    and by this process's CPU time (``..._cpu``), which other jobs on the
    machine disturb less. ``native_crop_cpu`` bounds any loader that decodes
    with these decoders: the train recipe cannot cost it less a file."""
    from PIL import Image

    from ringloader import _core

    blobs = []
    for p in paths:
        with open(p, "rb") as f:
            blobs.append(f.read())
    boxes = crop_boxes(blobs)

    def pillow(b: bytes) -> Any:
        with Image.open(io.BytesIO(b)) as im:
            return im.convert("RGB")

    contenders = (
        ("native", lambda: [_core.decode(b) for b in blobs]),
        ("pillow", lambda: [pillow(b) for b in blobs]),
        (
            "native_crop",
            lambda: [_core.decode(b, box=x) for b, x in zip(blobs, boxes)],
        ),
    )
    best: dict[str, float] = {}
    for _ in range(passes):
        for name, fn in contenders:
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            best[name] = min(best.get(name, wall), wall)
            best[name + "_cpu"] = min(best.get(name + "_cpu", cpu), cpu)
    return {k: len(blobs) / v for k, v in best.items()}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the benchmark: the results as ``--json`` writes them."""
    formats = [f for f in args.formats.split(",") if f]
    jpeg_root = data.build(
        f"/tmp/ringloader-formats-data-{args.images}/jpeg", images=args.images
    )
    roots = {fmt: reencode(jpeg_root, fmt) for fmt in formats}
    runner = harness.Runner(subprocess=True, cpus=system.cpus(), timeout=1800)
    out: dict[str, Any] = {
        "threads": args.threads,
        "images": args.images,
        "formats": {},
    }
    for fmt in formats:
        # One format at a time: the harness tells runs apart by contender,
        # pipeline and threads, not by folder.
        template = harness.Spec(
            "dataloader",
            PIPELINE,
            threads=args.threads,
            data=roots[fmt],
            batch_size=args.batch_size,
            epochs=args.epochs,
        )
        threads = [args.threads] + ([1] if args.threads > 1 else [])
        specs = harness.plan(
            ["dataloader", "ringloader"], [PIPELINE], threads, template
        )
        specs = [
            s for s in specs if s.contender == "ringloader" or s.threads == args.threads
        ]
        results = harness.run_rounds(specs, args.rounds, runner)
        rates = decoder_rates(files_of(roots[fmt], fmt))
        out["formats"][fmt] = {
            "loaders": {
                f"{s.contender}@{s.threads}": {
                    "images_per_s": round(r.get("images_per_s", float("nan")), 1),
                    "cpu_ms_per_image": round(
                        1e3 * r.get("cpu_s_per_image", float("nan")), 2
                    ),
                }
                for s, r in zip(specs, results)
            },
            "decoder_images_per_s": {k: round(v, 1) for k, v in rates.items()},
        }
    out["load_average"] = os.getloadavg()
    return out


def floor_rate(o: dict[str, Any], threads: int) -> float:
    """images/s of the native decoder on the crop boxes alone, by CPU
    time, on ``threads`` cores: what no loader decoding with it can pass."""
    return threads * o["decoder_images_per_s"]["native_crop_cpu"]


def write_plot(path: str, out: dict[str, Any]) -> str:
    """A panel a format: images/s of each loader, the floor dashed; says
    what it did."""
    from ringloader.bench import plots

    try:
        plt = plots.pyplot()
    except ImportError:
        return "Plot: not written: matplotlib is not installed (pip install matplotlib)"
    t = out["threads"]
    fmts = list(out["formats"])
    fig, axes = plt.subplots(
        1, len(fmts), figsize=(6.4 * len(fmts), 3.0), squeeze=False
    )
    rows = [
        (f"dataloader@{t}", f"DataLoader, {t} workers", "#1f77b4"),
        ("ringloader@1", "ringloader, 1 thread", "#ff9896"),
        (f"ringloader@{t}", f"ringloader, {t} threads", "#d62728"),
    ]
    for ax, fmt in zip(axes[0], fmts):
        o = out["formats"][fmt]
        rates = [o["loaders"][k]["images_per_s"] for k, _, _ in rows]
        ax.barh(range(len(rows)), rates, color=[c for _, _, c in rows])
        ax.set_yticks(range(len(rows)), [name for _, name, _ in rows], fontsize=9)
        floor = floor_rate(o, t)
        top = max(rates + [floor])
        for y, v in enumerate(rates):
            ax.text(
                v + top * 0.01,
                y,
                f"{v:.0f}" + (f"  ({v / rates[0]:.2f}x DataLoader)" if y else ""),
                va="center",
                fontsize=9,
            )
        ax.axvline(
            floor,
            color="#7f7f7f",
            linestyle="--",
            linewidth=1,
            label=f"the decoder alone on the crop boxes, {t} cores: {floor:.0f}",
        )
        ax.legend(loc="lower right", fontsize=8)
        ax.set_xlim(0, top * 1.4)
        ax.set_xlabel("images / s (higher is better)")
        ax.set_title(f"{fmt.upper()}: {PIPELINE}, {t} cores", fontsize=11)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=110)
    except OSError as e:
        return f"Plot: not written: {e}"
    finally:
        plt.close(fig)
    return f"Plot: {os.path.abspath(path)}"


def report(out: dict[str, Any]) -> None:
    t = out["threads"]
    load = out["load_average"]
    print(
        f"\ntrain recipe ({PIPELINE}), {out.get('images', '?')} images, "
        f"load average {load[0]:.2f}"
    )
    for fmt, o in out["formats"].items():
        lo = {k: v["images_per_s"] for k, v in o["loaders"].items()}
        ms = {k: v["cpu_ms_per_image"] for k, v in o["loaders"].items()}
        dl, rl, rl1 = lo[f"dataloader@{t}"], lo[f"ringloader@{t}"], lo["ringloader@1"]
        print(
            f"{fmt}: DataLoader {t} workers {dl} img/s "
            f"({ms[f'dataloader@{t}']} ms CPU/img), ringloader {t} threads {rl} "
            f"({ms[f'ringloader@{t}']} ms CPU/img; {rl / dl:.2f}x), ringloader "
            f"1 thread {rl1} ({ms['ringloader@1']} ms CPU/img; {rl / rl1:.2f}x "
            f"from 1 to {t})"
        )
        d = o["decoder_images_per_s"]
        print(
            f"{fmt}: one thread, whole images: native {d['native']} img/s, "
            f"Pillow {d['pillow']} img/s ({d['native'] / d['pillow']:.2f}x); "
            f"by CPU time {d['native_cpu']} against {d['pillow_cpu']} "
            f"({d['native_cpu'] / d['pillow_cpu']:.2f}x)"
        )
        crop_ms = 1e3 / d["native_crop_cpu"]
        print(
            f"{fmt}: one thread, the RandomResizedCrop boxes alone: "
            f"{crop_ms:.2f} ms CPU/img (whole images "
            f"{1e3 / d['native_cpu']:.2f}); the DataLoader's "
            f"{ms[f'dataloader@{t}']} ms CPU/img over that is the most a loader "
            f"decoding with this decoder can be ahead by CPU time: "
            f"{ms[f'dataloader@{t}'] / crop_ms:.2f}x (ringloader: "
            f"{ms[f'dataloader@{t}'] / ms[f'ringloader@{t}']:.2f}x)"
        )


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=500)
    p.add_argument("--threads", type=int, default=len(system.cpus()))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--formats", default="png,webp")
    p.add_argument("--json", help="write the results here")
    p.add_argument(
        "--plot", metavar="PNG", help="also plot images/s of each loader (matplotlib)"
    )
    p.add_argument(
        "--from-json",
        metavar="JSON",
        help="measure nothing: report (and --plot) the results an earlier --json wrote",
    )
    args = p.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            out = json.load(f)
    else:
        out = measure(args)
        print(json.dumps(out, indent=1))
    report(out)
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.plot:
        print(write_plot(args.plot, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
