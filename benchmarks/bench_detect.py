"""torchvision's detection and segmentation references: ringloader.DataLoader
against torch's DataLoader, recipe by recipe.

The data, written once under ``--dir``: ``--images`` ImageNet-like JPEGs
(ringloader.bench.data: short side 256-500 px) and a COCO-style instances
json over them, 1-6 objects an image, each a random polygon (its bbox and
area from the polygon's points), categories from a few COCO ids; and the
same JPEGs as a VOC-style segmentation tree (JPEGImages,
SegmentationClass palette PNGs with the polygons filled, ImageSets).

Each recipe builds the reference's preset with transforms.v2 (the image
made a tv_tensor first, as ``backend="tv_tensor"``):

- ``eval``: ToImage, ToDtype(float, scale=True), ToPureTensor;
- ``hflip``, ``multiscale``, ``ssdlite``, ``ssd``, ``lsj``: ToImage, the
  recipe's augmentation (RandomHorizontalFlip; RandomShortestSize(480-800,
  1333) + flip; RandomIoUCrop + flip; RandomPhotometricDistort,
  RandomZoomOut, RandomIoUCrop + flip; ScaleJitter(1024) + FixedSizeCrop
  (1024, padded with the mean: ringloader.transforms_v2's, the reference's
  crop for v2 targets) + flip), ToDtype(float, scale=True),
  ConvertBoundingBoxFormat(XYXY), SanitizeBoundingBoxes, ToPureTensor;
  ``hflip+masks`` is hflip with the masks among the targets;
- ``segmentation``: ToImage, RandomResize(260, 1040), RandomHorizontalFlip,
  the reference's own PadIfSmaller(480) (``reference_extras``: at the
  bottom and right, masks with 255), RandomCrop(480), ToDtype (image
  float, mask int64), Normalize, ToPureTensor, on a wrapped
  VOCSegmentation;
- ``segmentation-v1``: the same preset as the reference's ``train.py``
  builds it without ``--use-v2`` (``reference_pairs``: its own pair
  classes, RandomResize(260, 1040), RandomHorizontalFlip, RandomCrop(480)
  padding masks with 255, PILToTensor, ToDtype, Normalize, on the PIL
  image and mask), on an unwrapped VOCSegmentation;
- ``segmentation-coco``: that preset after the reference's COCO category
  filter and polygon-to-mask merge, in its Compose, on an unwrapped
  CocoDetection in the Subset of the images with annotations: the
  reference's ``train.py`` with its default ``--dataset coco``;
- ``segmentation-coco-v2``: ``segmentation``'s preset after the
  reference's own CocoDetectionToVOCSegmentation (``reference_extras``),
  in its Compose, on a CocoDetection wrapped with target_keys masks and
  labels, in the same Subset: ``train.py --dataset coco --use-v2``.

Detection datasets are a CocoDetection wrapped by
``wrap_dataset_for_transforms_v2`` in a Subset of the images with
annotations, batched by an aspect-ratio grouping batch sampler
(landscape and portrait, shuffled with a fixed seed) and
``collate_fn=tuple(zip(*batch))``; segmentation's batches come from a
BatchSampler over a seeded RandomSampler, stacked. Both contenders get the
same dataset, transform objects, batch sampler and collate_fn; torch's
DataLoader runs ``--workers`` worker processes, ringloader.DataLoader
``--threads`` threads. Each figure comes from a fresh process, the two
contenders taken in turn within each of ``--repeat`` rounds: img/s over
``--batches`` batches after ``--warmup``, CPU ms an image (workers
included), ringloader's read and decode + transform thread seconds an
image where it ran natively (``Loader.stats()``), whether it ran natively
or fell back to torch's DataLoader and the FallbackWarning's reason, and
ringloader ÷ torch within each round and its median.

Usage::

    python benchmarks/bench_detect.py [--images 2000] [--repeat 3]
        [--json benchmarks/detect-results.json]
        [--plot benchmarks/plots/detect.png]
    python benchmarks/bench_detect.py --quick   # a check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from typing import Any

import bench_hf  # beside this file: CPU time, child runs, flags, the end
import bench_scale  # the machine record

import detect_data  # beside this file: the COCO and VOC sets

RECIPES = (
    "eval",
    "hflip",
    "hflip+masks",
    "multiscale",
    "ssdlite",
    "ssd",
    "lsj",
    "segmentation",
    "segmentation-v1",
    "segmentation-coco",
    "segmentation-coco-v2",
)
CONTENDERS = ("torch", "ringloader")
MEAN = (123.0, 117.0, 104.0)  # the detection reference's fill, in 0-255
# The targets set for ringloader ÷ torch, by recipe.
TARGETS = {"hflip": 3.0, "multiscale": 3.0, "ssdlite": 3.0, "ssd": 2.5}
TARGETS.update({f"segmentation{k}": 3.0 for k in ("", "-v1", "-coco", "-coco-v2")})
DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ringloader-bench-detect")
# --quick: a check that it runs.
QUICK = {"images": 40, "repeat": 1, "batch_size": 4, "batches": 2, "warmup": 1}


class Preset:
    """As the references write their presets: a class holding a v2
    Compose, called on (image, target)."""

    def __init__(self, steps: list) -> None:
        from torchvision.transforms import v2

        self.transforms = v2.Compose(steps)

    def __call__(self, image: Any, target: Any) -> Any:
        return self.transforms(image, target)


def detection_preset(recipe: str) -> Preset:
    """The detection reference's preset for ``recipe``, in transforms.v2."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    from ringloader.transforms_v2 import FixedSizeCrop

    head = [v2.ToImage()]
    if recipe == "eval":
        return Preset(head + [v2.ToDtype(torch.float, scale=True), v2.ToPureTensor()])
    flip = v2.RandomHorizontalFlip(p=0.5)
    fill = {tv_tensors.Mask: 0, "others": list(MEAN)}
    augment = {
        "hflip": [flip],
        "hflip+masks": [flip],
        "multiscale": [
            v2.RandomShortestSize(
                min_size=tuple(range(480, 801, 32)), max_size=1333, antialias=True
            ),
            flip,
        ],
        "ssdlite": [v2.RandomIoUCrop(), flip],
        "ssd": [
            v2.RandomPhotometricDistort(),
            v2.RandomZoomOut(fill=fill),
            v2.RandomIoUCrop(),
            flip,
        ],
        "lsj": [
            v2.ScaleJitter(target_size=(1024, 1024), antialias=True),
            FixedSizeCrop((1024, 1024), fill=fill),  # the reference's, for v2
            flip,
        ],
    }[recipe]
    tail = [
        v2.ToDtype(torch.float, scale=True),
        v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        v2.SanitizeBoundingBoxes(),
        v2.ToPureTensor(),
    ]
    return Preset(head + augment + tail)


def segmentation_preset(base: int = 520, crop: int = 480) -> Preset:
    """The segmentation reference's train preset, in transforms.v2, with
    its own PadIfSmaller (``reference_extras``)."""
    import torch
    from reference_extras import PadIfSmaller
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return Preset(
        [
            v2.ToImage(),
            v2.RandomResize(base // 2, base * 2, antialias=True),
            v2.RandomHorizontalFlip(p=0.5),
            PadIfSmaller(crop, fill={tv_tensors.Mask: 255, "others": 0}),
            v2.RandomCrop(crop),
            v2.ToDtype(
                {
                    tv_tensors.Image: torch.float32,
                    tv_tensors.Mask: torch.int64,
                    "others": None,
                },
                scale=True,
            ),
            v2.Normalize(mean=bench_hf.MEAN, std=bench_hf.STD),
            v2.ToPureTensor(),
        ]
    )


def detection_collate(batch: list) -> tuple:
    return tuple(zip(*batch))


def segmentation_collate(batch: list) -> tuple:
    import torch

    images, masks = zip(*batch)
    return torch.stack(images), torch.stack(masks)


class AspectGroups:
    """A batch sampler as the reference's GroupedBatchSampler: the images
    shuffled (a fixed seed), then batched within their aspect group
    (landscape or portrait)."""

    def __init__(self, ds: Any, batch_size: int, seed: int = 0) -> None:
        import random

        inner = ds.dataset
        order = list(range(len(ds)))
        random.Random(seed).shuffle(order)
        groups: dict = {True: [], False: []}
        self.batches: list = []
        for k in order:
            info = inner.coco.imgs[inner.ids[ds.indices[k]]]
            group = groups[info["height"] > info["width"]]
            group.append(k)
            if len(group) == batch_size:
                self.batches.append(list(group))
                group.clear()
        self.batches += [g for g in groups.values() if g]

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _with_annotations(coco: Any) -> Any:
    """The Subset of a CocoDetection's images that have annotations."""
    from torch.utils.data import Subset

    ids = [i for i, img in enumerate(coco.ids) if coco.coco.getAnnIds(imgIds=img)]
    return Subset(coco, ids)


def segmentation_dataset(recipe: str, data: str) -> Any:
    """The dataset of a segmentation recipe over ``data``."""
    import reference_pairs
    from torch.utils.data import Subset
    from torchvision import datasets

    v2 = recipe in ("segmentation", "segmentation-coco-v2")
    # else the reference's own v1 classes
    preset = segmentation_preset() if v2 else reference_pairs.train_preset(520, 480)
    if recipe.startswith("segmentation-coco"):
        from reference_extras import CocoDetectionToVOCSegmentation

        images, ann = detect_data.coco_paths(data)
        if v2:
            steps = [CocoDetectionToVOCSegmentation(), preset]
            transforms = reference_pairs.Compose(steps)
        else:
            transforms = reference_pairs.coco_transforms(preset)
        coco = datasets.CocoDetection(images, ann, transforms=transforms)
        kept = _with_annotations(coco)
        if v2:
            keys = {"masks", "labels"}
            wrapped = datasets.wrap_dataset_for_transforms_v2(coco, target_keys=keys)
            kept = Subset(wrapped, kept.indices)
        return kept
    ds = datasets.VOCSegmentation(
        detect_data.voc_root(data), year="2012", image_set="train", transforms=preset
    )
    if recipe == "segmentation":
        ds = datasets.wrap_dataset_for_transforms_v2(ds)
    return ds


def build(recipe: str, data: str, batch_size: int) -> tuple:
    """(dataset, batch sampler, collate_fn) of ``recipe`` over ``data``."""
    import torch
    from torch.utils.data import BatchSampler, RandomSampler, Subset
    from torchvision import datasets

    if recipe.startswith("segmentation"):
        ds = segmentation_dataset(recipe, data)
        g = torch.Generator().manual_seed(0)
        sampler = BatchSampler(RandomSampler(ds, generator=g), batch_size, True)
        return ds, sampler, segmentation_collate
    keys = ["boxes", "labels", "image_id"]
    if recipe == "hflip+masks":
        keys.insert(2, "masks")
    images, ann = detect_data.coco_paths(data)
    coco = datasets.CocoDetection(images, ann, transforms=detection_preset(recipe))
    wrapped = datasets.wrap_dataset_for_transforms_v2(coco, target_keys=keys)
    ds = Subset(wrapped, _with_annotations(coco).indices)
    return ds, AspectGroups(ds, batch_size), detection_collate


def _batches(loader: Any) -> Any:
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def _images(batch: Any) -> int:
    return len(batch[0])


def child(a: argparse.Namespace) -> dict:
    """One contender on one recipe: the figures, as a dict."""
    import torch

    import ringloader

    torch.set_num_threads(1)
    ds, sampler, collate = build(a.recipe, a.data, a.batch_size)
    kw = dict(batch_sampler=sampler, collate_fn=collate)
    t0 = time.perf_counter()
    reason = None
    if a.who == "ringloader":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ringloader.FallbackWarning)
            loader = ringloader.DataLoader(ds, num_workers=a.threads, **kw)
        fell = [w for w in caught if issubclass(w.category, ringloader.FallbackWarning)]
        reason = str(fell[0].message) if fell else None
    else:
        loader = torch.utils.data.DataLoader(ds, num_workers=a.workers, **kw)
    it = _batches(loader)
    next(it)
    first_s = time.perf_counter() - t0
    for _ in range(a.warmup):
        next(it)
    t1, c1 = time.perf_counter(), bench_hf._cpu_s()
    done = 0
    for _ in range(a.batches):
        done += _images(next(it))
    img_s = done / max(time.perf_counter() - t1, 1e-9)
    out = {
        "img_s": img_s,
        "cpu_ms_per_image": 1e3 * (bench_hf._cpu_s() - c1) / done,
        "first_batch_s": first_s,
    }
    if a.who == "ringloader":
        out["native"] = isinstance(loader, ringloader.DataLoader)
        out["fallback"] = reason
        if out["native"]:
            s = loader.stats()
            seen = max(s.get("decodes", 0), 1)
            out["read_ms_per_image"] = 1e3 * s["read_seconds"] / seen
            out["decode_ms_per_image"] = 1e3 * s["decode_seconds"] / seen
    return out


def _run(a: argparse.Namespace, who: str, recipe: str) -> dict:
    if a.inline:
        b = argparse.Namespace(**vars(a))
        b.who, b.recipe = who, recipe
        return child(b)
    return bench_hf.run_child(__file__, [who, recipe, f"--data={a.data}"], a)


def _median(runs: list[dict]) -> dict:
    """Each number's median over the runs that finished, the rest from the
    first of them; the first error when none finished."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    out = dict(ok[0])
    for k, v in ok[0].items():
        if isinstance(v, float):
            out[k] = sorted(r[k] for r in ok)[len(ok) // 2]
    out["img_s_runs"] = [None if "error" in r else round(r["img_s"], 1) for r in runs]
    return out


def measure(a: argparse.Namespace, recipes: list) -> dict:
    """Per recipe, per contender: the medians, and ringloader ÷ torch
    within each round and its median."""
    runs: dict = {r: {w: [] for w in CONTENDERS} for r in recipes}
    for k in range(a.repeat):
        for recipe in recipes:
            for who in CONTENDERS:
                res = _run(a, who, recipe)
                runs[recipe][who].append(res)
                shown = res.get("error") or (
                    f"{res['img_s']:7.1f} img/s {res['cpu_ms_per_image']:6.2f} "
                    f"CPU ms/img" + ("  (fell back)" if res.get("fallback") else "")
                )
                print(f"round {k + 1}: {recipe:12} {who:10} {shown}", flush=True)
    out: dict = {}
    for recipe, by in runs.items():
        out[recipe] = {who: _median(rs) for who, rs in by.items()}
        ratios = [
            o / p
            for o, p in zip(
                out[recipe]["ringloader"].get("img_s_runs", []),
                out[recipe]["torch"].get("img_s_runs", []),
            )
            if o and p
        ]
        out[recipe]["ratio_runs"] = [round(x, 3) for x in ratios]
        out[recipe]["ratio"] = (
            round(sorted(ratios)[len(ratios) // 2], 3) if ratios else None
        )
    return out


def machine() -> dict:
    import torchvision

    return dict(bench_scale.machine(), torchvision=torchvision.__version__)


def _ms(r: dict, key: str) -> str:
    return f"{r[key]:.2f}" if r.get(key) is not None else "—"


def table(results: dict) -> str:
    out = [
        "| recipe | torch img/s | ringloader img/s | ringloader ÷ torch | target "
        "| ringloader ran | CPU ms/img torch | CPU ms/img ringloader "
        "| read ms/img | decode+transform ms/img |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for recipe, by in results["recipes"].items():
        t, r = by["torch"], by["ringloader"]
        if "error" in t or "error" in r:
            out.append(
                f"| {recipe} | {t.get('error', '')} | {r.get('error', '')} |"
                " | | | | | | |"
            )
            continue
        ratio = f"{by['ratio']:.2f}x" if by["ratio"] else "—"
        target = f"≥{TARGETS[recipe]:g}x" if recipe in TARGETS else ""
        ran = "natively" if r["native"] else "fell back"
        out.append(
            f"| {recipe} | {t['img_s']:,.1f} | {r['img_s']:,.1f} | {ratio} | {target} "
            f"| {ran} | {_ms(t, 'cpu_ms_per_image')} | {_ms(r, 'cpu_ms_per_image')} "
            f"| {_ms(r, 'read_ms_per_image')} | {_ms(r, 'decode_ms_per_image')} |"
        )
    reasons = [
        f"- {recipe}: {by['ringloader']['fallback']}"
        for recipe, by in results["recipes"].items()
        if by["ringloader"].get("fallback")
    ]
    if reasons:
        out += ["", "Fell back:", "", *reasons]
    return "\n".join(out)


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(results["recipes"].items())
    fig, ax = plt.subplots(figsize=(10, 4.4))
    ys = [by.get("ratio") or 0 for _, by in rows]
    native = [by["ringloader"].get("native", False) for _, by in rows]
    colors = ["#1f77b4" if n else "#bbbbbb" for n in native]
    bars = ax.bar(range(len(rows)), ys, 0.6, color=colors)
    for bar, n in zip(bars, native):
        if not n:
            bar.set_hatch("//")
    ax.bar_label(bars, labels=[f"{y:.2f}x" for y in ys], fontsize=8)
    for i, (recipe, _) in enumerate(rows):
        if recipe in TARGETS:
            ax.hlines(TARGETS[recipe], i - 0.3, i + 0.3, colors="#d62728")
    ax.axhline(1.0, color="black", lw=0.6)
    # a long name on two lines: "segmentation-coco-v2" as "segmentation\ncoco-v2"
    names = [r.replace("-", "\n", 1) for r, _ in rows]
    labels = [f"{r}\n(fell back)" if not n else r for r, n in zip(names, native)]
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("ringloader ÷ torch img/s (median)")
    m = results["machine"]
    ax.set_title(
        f"{results['images']:,} COCO-like images, batch {results['batch_size']}; "
        f"{m['cpu']}, {m['cores']} cores\n{results['threads']} threads vs "
        f"{results['workers']} workers; grey hatched: fell back to torch's "
        "DataLoader; red: target",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", nargs=2, metavar=("WHO", "RECIPE"))
    p.add_argument("--data", default=None, help="(a child's) the data's folder")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    p.add_argument("--dir", default=DIR)
    bench_hf.run_flags(p, batches=30)
    p.set_defaults(batch_size=8)
    a = p.parse_args()
    if a.child:
        a.who, a.recipe = a.child
        print(json.dumps(child(a)))
        return
    a.inline = False  # each figure from a fresh process, --quick's too
    if a.quick:
        vars(a).update(QUICK)
    os.makedirs(a.dir, exist_ok=True)
    results: dict = {
        "machine": machine(),
        "load_before": os.getloadavg(),
        **{k: getattr(a, k) for k in ("images", "batch_size", "batches", "warmup")},
        **{k: getattr(a, k) for k in ("threads", "workers", "repeat")},
        "targets": TARGETS,
    }
    print(json.dumps(results), flush=True)
    a.data = detect_data.write(a.dir, a.images)
    results["recipes"] = measure(a, list(a.recipes))
    bench_hf.finish(results, a, table, plot)


if __name__ == "__main__":
    main()
