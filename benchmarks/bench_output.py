"""What the output conversion costs: the train pipeline in uint8 against
float32, float16 and bfloat16 (ToDtype + Normalize fused in C), in NCHW and
channels_last, one process, the same data and threads, rounds interleaved.

Usage::

    python benchmarks/bench_output.py [--data DIR] [--threads 2] [--rounds 3]

Each run is ringloader.bench's harness in this process: a fresh Loader, one
warm-up epoch, one timed epoch. Prints images/s (median of the rounds) and
the cost against uint8 NCHW; the target of the training-transform work is at
most 10%. Not run in CI.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

from ringloader.bench import harness, report

CONFIGS = [
    (dtype, layout)
    for layout in ("NCHW", "channels_last")
    for dtype in ("uint8", "float32", "float16", "bfloat16")
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/ringloader-compare-data-2000")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--images", type=int, default=None, help="a subset of the folder")
    args = ap.parse_args()
    if not os.path.isdir(args.data):
        raise SystemExit(
            f"no folder {args.data}: make one with python benchmarks/make_imagenet_like.py {args.data}"
        )
    template = harness.Spec(
        "ringloader", "train", args.threads, args.data, epochs=1, images=args.images
    )
    specs = [
        replace(template, options={"dtype": d, "layout": lay}) for d, lay in CONFIGS
    ]
    results = harness.run_rounds(specs, args.rounds, harness.Runner(subprocess=False))
    base = report.rate(results[0])
    print(
        f"train pipeline, {args.threads} threads, {args.data}, median of {args.rounds} rounds"
    )
    print("dtype    | layout        | images/s | cost vs uint8 NCHW")
    for (dtype, layout), r in zip(CONFIGS, results):
        v = report.rate(r)
        cost = report.fmt(1 - v / base if v and base else None, "6.1%", none="     -")
        print(
            f"{dtype:8} | {layout:13} | {report.fmt(v, '8.0f', none='  failed')} | {cost}"
        )
        if "error" in r:
            print(f"  {r['error']}")


if __name__ == "__main__":
    main()
