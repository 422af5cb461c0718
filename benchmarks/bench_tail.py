"""A Python tail: the part of a transform ringloader cannot fuse, run per
sample in Python after the fused part (python/ringloader/_plan.py).

Compares, side by side and alternating, on the same folder and transform
(RandomResizedCrop(224) + flip fused, then ``PILToTensor``,
``ConvertImageDtype`` and ``RandomPerspective`` in Python):

* ``ringloader``: ringloader.DataLoader as shipped (the tail runs torch's
  ops on one thread, so as not to compete with the decode threads);
* ``ringloader, tail on torch's threads``: the same loader with the tail run
  at torch's default intra-op thread count (what it did before);
* ``DataLoader``: torch's DataLoader with the same number of workers.

Each round runs every contender once; the table shows the median, the
lowest and the highest images/s over the rounds, since the issue was the
spread (runs of 25-65 img/s against 300 in others).

Usage: python benchmarks/bench_tail.py [--images 512] [--rounds 5]
       [--workers 2] [--batch-size 32] [--out benchmarks/TAIL.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings

import torch
import torchvision
import torchvision.transforms as T

import ringloader
import ringloader.loader
from ringloader import _plan
from ringloader.bench import data


def transform() -> T.Compose:
    return T.Compose(
        [
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            T.PILToTensor(),
            T.ConvertImageDtype(torch.float32),
            T.RandomPerspective(p=1.0),
        ]
    )


def tail_on_torchs_threads(images: torch.Tensor, plan: _plan.TransformPlan):
    """The tail as ringloader ran it before it pinned torch to one thread:
    each sample's ops at torch's default intra-op thread count."""
    samples = [_plan._tail_of(images, i, plan) for i in range(images.shape[0])]
    return torch.utils.data.default_collate(samples)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def rate(make, epochs: int = 1) -> float:
    loader = make()
    it = iter(loader)
    next(it)  # start-up is not what is compared
    n, t0 = 0, time.perf_counter()
    for images, _ in it:
        n += images.shape[0]
    for _ in range(epochs - 1):
        for images, _ in loader:
            n += images.shape[0]
    return n / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--data", default="/tmp/ringloader-tail-data")
    ap.add_argument("--out", help="write the table here (markdown)")
    a = ap.parse_args()
    root = data.build(a.data, a.images, 10, 0, progress=True)
    load_start = os.getloadavg()[0]
    tf = transform()
    rl_ds = ringloader.ImageFolder(root, transform=tf)
    tv_ds = torchvision.datasets.ImageFolder(root, transform=tf)
    kw = dict(batch_size=a.batch_size, num_workers=a.workers, shuffle=True)

    def ours():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ringloader.FallbackWarning)
            return ringloader.DataLoader(rl_ds, **kw)

    def ours_torch_threads():
        ringloader.loader.run_tail = tail_on_torchs_threads
        return ours()

    contenders = {
        "ringloader": ours,
        "ringloader, tail on torch's threads": ours_torch_threads,
        "DataLoader": lambda: torch.utils.data.DataLoader(tv_ds, **kw),
    }
    shipped = ringloader.loader.run_tail
    rates: dict[str, list[float]] = {k: [] for k in contenders}
    for r in range(a.rounds):
        for name, make in contenders.items():
            ringloader.loader.run_tail = shipped
            rates[name].append(rate(make))
            print(f"round {r + 1}/{a.rounds} {name}: {rates[name][-1]:.0f} img/s")
    ringloader.loader.run_tail = shipped
    base = statistics.median(rates["DataLoader"])
    lines = [
        "# A Python tail: ringloader vs. DataLoader",
        "",
        f"Made by `benchmarks/bench_tail.py --images {a.images} --rounds "
        f"{a.rounds} --workers {a.workers} --batch-size {a.batch_size}`.",
        "",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores; 1-min load "
        f"{load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; torch {torch.__version__} "
        f"({torch.get_num_threads()} intra-op threads by default), "
        f"torchvision {torchvision.__version__}, ringloader {ringloader.__version__}",
        "- transform: RandomResizedCrop(224) + RandomHorizontalFlip (fused), "
        "then PILToTensor, ConvertImageDtype(float32), RandomPerspective(p=1) "
        "in Python",
        "",
        "| contender | median img/s | lowest | highest | median × DataLoader |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, rs in rates.items():
        m = statistics.median(rs)
        lines.append(
            f"| {name} | {m:.0f} | {min(rs):.0f} | {max(rs):.0f} | {m / base:.2f}× |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
