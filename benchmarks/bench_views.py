"""Self-supervised multi-view recipes: ringloader against torch's DataLoader,
side by side, with the very same ``MultiView`` object for both.

Recipes (``RECIPES``), written with torchvision classes as their
repositories write them: SimCLR, MoCo v2, BYOL (asymmetric blur and
solarize), DINO and DINOv2 (2 global crops of 224 and 8 local ones, of 96
for DINO and 98 for DINOv2), each with ``RandomApply(ColorJitter, p=0.8)``,
``RandomGrayscale(0.2)``, ``GaussianBlur`` with the recipe's probabilities
and, where the recipe has it, ``RandomSolarize(128, p=0.2)``. Where the
original uses something else, the torchvision equivalent is used and
``NOTES`` says what it changes. Interpolation is the recipe's: bilinear,
bicubic for DINO and DINOv2.

Usage::

    python benchmarks/bench_views.py [--data DIR] [--threads 2] [--images 512]
        [--rounds 3] [--batch 64] [--recipes simclr,mocov2,byol,dino,dinov2]

For each recipe and round (rounds interleave the contenders): one epoch of
``--images`` images through ``ringloader.DataLoader`` and through
``torch.utils.data.DataLoader`` (``num_workers=--threads``), each after a
warm-up batch. Prints images/s (source images) and views/s, the ratio, and
what the views cost against one plain RandomResizedCrop(224) view through
ringloader; says for each recipe whether every view ran in C (the fast path)
or which transform made a view finish in Python. Not run in CI: measure
both contenders in one run and compare ratios (2 cores are noisy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import Subset
from torchvision import datasets
from torchvision.transforms import v2

import ringloader
from ringloader.transforms import MultiView, compile_views

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

# --always: RandomApply([t], p) written as t (applied with p = 1), a proxy
# of the recipes' cost for a build where RandomApply is not fused yet.
ALWAYS = False


def _maybe(t: Any, p: float) -> list:
    return [t] if p == 1 or ALWAYS else [v2.RandomApply([t], p=p)]


def _tail() -> list:
    return [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]


def _jitter(b: float, c: float, s: float, h: float) -> list:
    return _maybe(v2.ColorJitter(b, c, s, h), 0.8) + [v2.RandomGrayscale(p=0.2)]


def _blur(p: float, kernel: int = 23) -> list:
    if p == 0:
        return []
    return _maybe(v2.GaussianBlur(kernel, sigma=(0.1, 2.0)), p)


def simclr() -> MultiView:
    view = v2.Compose(
        [v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]
        + _jitter(0.8, 0.8, 0.8, 0.2)
        + _blur(0.5)
        + _tail()
    )
    return MultiView(view, view)


def mocov2() -> MultiView:
    view = v2.Compose(
        [v2.RandomResizedCrop(224, scale=(0.2, 1.0))]
        + _jitter(0.4, 0.4, 0.4, 0.1)
        + _blur(0.5)
        + [v2.RandomHorizontalFlip()]
        + _tail()
    )
    return MultiView(view, view)


def byol() -> MultiView:
    def view(blur_p: float, solarize_p: float) -> v2.Compose:
        solarize = [v2.RandomSolarize(128, p=solarize_p)] if solarize_p else []
        return v2.Compose(
            [v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]
            + _jitter(0.4, 0.4, 0.2, 0.1)
            + _blur(blur_p)
            + solarize
            + _tail()
        )

    return MultiView(view(1.0, 0.0), view(0.1, 0.2))


def _dino_like(global_scale: tuple, local_scale: tuple, local_size: int, kernel: int):
    flip_jitter = [v2.RandomHorizontalFlip()] + _jitter(0.4, 0.4, 0.2, 0.1)
    bicubic = v2.InterpolationMode.BICUBIC
    g1 = v2.Compose(
        [v2.RandomResizedCrop(224, scale=global_scale, interpolation=bicubic)]
        + flip_jitter
        + _blur(1.0, kernel)
        + _tail()
    )
    g2 = v2.Compose(
        [v2.RandomResizedCrop(224, scale=global_scale, interpolation=bicubic)]
        + flip_jitter
        + _blur(0.1, kernel)
        + [v2.RandomSolarize(128, p=0.2)]
        + _tail()
    )
    local = v2.Compose(
        [v2.RandomResizedCrop(local_size, scale=local_scale, interpolation=bicubic)]
        + flip_jitter
        + _blur(0.5, kernel)
        + _tail()
    )
    return MultiView(g1, g2, *[local] * 8)


def dino() -> MultiView:
    return _dino_like((0.4, 1.0), (0.05, 0.4), 96, 23)


def dinov2() -> MultiView:
    return _dino_like((0.32, 1.0), (0.05, 0.32), 98, 9)


def plain() -> MultiView:
    """The yardstick: one RandomResizedCrop(224) view, nothing else."""
    return MultiView(
        v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()] + _tail())
    )


RECIPES: dict[str, Callable[[], MultiView]] = {
    "simclr": simclr,
    "mocov2": mocov2,
    "byol": byol,
    "dino": dino,
    "dinov2": dinov2,
}

NOTES = {
    "mocov2": "MoCo v2 blurs with PIL's ImageFilter.GaussianBlur(radius=sigma): "
    "GaussianBlur(23, sigma) truncates the kernel at 11 px and is an exact "
    "Gaussian where PIL's is three box filters",
    "dino": "DINO blurs with PIL's ImageFilter.GaussianBlur (as MoCo v2)",
}


def fast_path(mv: MultiView) -> str:
    """'yes' if every view runs in C, else the first reason a view does not."""
    for i, c in enumerate(compile_views(mv)):
        if c.rest:
            return f"no: view {i}: {c.reason}"
    return "yes"


def epoch(loader: Any) -> tuple[float, int]:
    """Seconds for one epoch after its first batch, and the images timed."""
    it = iter(loader)
    next(it)
    n, t0 = 0, time.perf_counter()
    for _views, labels in it:
        n += len(labels)
    return time.perf_counter() - t0, n


def make(kind: str, ds: Any, args: argparse.Namespace) -> Any:
    common = dict(batch_size=args.batch, shuffle=True, num_workers=args.threads)
    if kind == "torch":
        return TorchDataLoader(ds, persistent_workers=False, **common)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ringloader.FallbackWarning)
        return ringloader.DataLoader(ds, **common)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/ringloader-compare-data-2000")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--recipes", default=",".join(RECIPES))
    ap.add_argument("--contenders", default="ringloader,torch")
    ap.add_argument(
        "--always",
        action="store_true",
        help="RandomApply([t], p) as t: a proxy where RandomApply is not fused",
    )
    args = ap.parse_args()
    global ALWAYS
    ALWAYS = args.always
    if not os.path.isdir(args.data):
        raise SystemExit(
            f"no folder {args.data}: make one with "
            f"python benchmarks/make_imagenet_like.py {args.data}"
        )
    names = ["plain"] + [r for r in args.recipes.split(",") if r]
    contenders = args.contenders.split(",")
    rates: dict[tuple[str, str], list[float]] = {}
    views: dict[str, int] = {}
    paths: dict[str, str] = {}
    for _ in range(args.rounds):
        for name in names:
            mv = plain() if name == "plain" else RECIPES[name]()
            views[name], paths[name] = len(mv.views), fast_path(mv)
            folder = datasets.ImageFolder(args.data, transform=mv)
            ds = Subset(folder, range(min(args.images, len(folder))))
            for kind in contenders if name != "plain" else contenders[:1]:
                seconds, n = epoch(make(kind, ds, args))
                rates.setdefault((name, kind), []).append(n / seconds)
    load = os.getloadavg()
    print(
        ("RandomApply written as its transform (--always); " if ALWAYS else "")
        + f"{args.images} images of {args.data}, batch {args.batch}, "
        f"{args.threads} threads/workers, median of {args.rounds} rounds, "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    base = statistics.median(rates[("plain", contenders[0])])
    print(f"plain RandomResizedCrop(224) view, {contenders[0]}: {base:.0f} images/s")
    print(
        "recipe  | views | "
        + " | ".join(f"{k} images/s | {k} views/s" for k in contenders)
        + " | ratio | views' cost vs plain | fast path"
    )
    for name in names[1:]:
        med = {k: statistics.median(rates[(name, k)]) for k in contenders}
        cells = " | ".join(
            f"{med[k]:9.0f} | {med[k] * views[name]:8.0f}" for k in contenders
        )
        ratio = med[contenders[0]] / med[contenders[-1]] if len(contenders) > 1 else 1
        cost = base / med[contenders[0]]
        print(
            f"{name:7} | {views[name]:5} | {cells} | {ratio:4.1f}x | "
            f"{cost:4.1f}x | {paths[name]}"
        )
    for name in names[1:]:
        if name in NOTES:
            print(f"note, {name}: {NOTES[name]}")


if __name__ == "__main__":
    main()
