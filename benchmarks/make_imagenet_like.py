"""Build the ImageNet-like folder of JPEG files the benchmarks run on.

A thin command over ringloader.bench.data (see its docstring for what the
files are like): real photographs from the scikit-image wheel, cropped,
rescaled, flipped and jittered, encoded with ImageNet's mix of sizes,
qualities, chroma subsampling, progressive, grayscale and CMYK files; the
torchvision ImageFolder layout; deterministic for a seed; built once (a
second call with the same parameters returns at once).

Usage::

    python benchmarks/make_imagenet_like.py OUT_DIR [--images N] [--classes C] [--seed S]
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from ringloader.bench import data


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="output directory (ImageFolder layout)")
    parser.add_argument(
        "--images", type=int, default=2000, help="total number of images"
    )
    parser.add_argument(
        "--classes", type=int, default=10, help="number of class folders"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--jobs", type=int, default=None, help="worker processes (default: one per CPU)"
    )
    args = parser.parse_args(argv)
    try:
        root = data.build(
            args.out_dir, args.images, args.classes, args.seed, jobs=args.jobs
        )
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{root}: {data.summary(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
