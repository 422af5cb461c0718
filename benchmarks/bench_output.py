"""What the output conversion costs: the train pipeline in uint8 against
float32, float16 and bfloat16 (ToDtype + Normalize fused in C), in NCHW and
channels_last, one process, the same data and threads, rounds interleaved.

Usage::

    python benchmarks/bench_output.py [--data DIR] [--threads 2] [--rounds 3]

Prints images/s (median of the rounds) and the cost against uint8 NCHW;
the target of the training-transform work is at most 10%. Not run in CI.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import ringloader
from ringloader import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CONFIGS = [
    (dtype, layout)
    for layout in ("NCHW", "channels_last")
    for dtype in ("uint8", "float32", "float16", "bfloat16")
]


def make_loader(data: str, dtype: str, layout: str, threads: int) -> ringloader.Loader:
    steps = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    if dtype != "uint8":
        steps += [T.ToDtype(getattr(torch, dtype), scale=True), T.Normalize(MEAN, STD)]
    return ringloader.Loader(
        ringloader.ImageFolder(data),
        batch_size=64,
        shuffle=True,
        num_threads=threads,
        prefetch=4,
        layout=layout,
        transform=T.Compose(steps),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/ringloader-compare-data-2000")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not os.path.isdir(args.data):
        raise SystemExit(
            f"no folder {args.data}: make one with "
            f"python benchmarks/make_imagenet_like.py {args.data}"
        )
    loaders = {c: make_loader(args.data, *c, args.threads) for c in CONFIGS}
    for loader in loaders.values():  # warm-up epoch each
        for _ in loader:
            pass
    rates: dict = {c: [] for c in CONFIGS}
    for r in range(args.rounds):
        for c, loader in loaders.items():
            loader.set_epoch(r + 1)
            t0, n = time.perf_counter(), 0
            for _, labels in loader:
                n += len(labels)
            rates[c].append(n / (time.perf_counter() - t0))
    base = statistics.median(rates[("uint8", "NCHW")])
    print(
        f"train pipeline, {args.threads} threads, {args.data}, median of "
        f"{args.rounds} rounds"
    )
    print("dtype    | layout        | images/s | cost vs uint8 NCHW")
    for (dtype, layout), values in rates.items():
        v = statistics.median(values)
        print(f"{dtype:8} | {layout:13} | {v:8.0f} | {1 - v / base:6.1%}")
    for loader in loaders.values():
        loader.close()


if __name__ == "__main__":
    main()
