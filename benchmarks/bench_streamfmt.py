"""ringloader.LitData and ringloader.MDS against LitData's and MosaicML
Streaming's own StreamingDataset.

One image-classification set of ImageNet-like JPEGs
(ringloader.bench.data: short side 256-500 px, 10 classes) written under
``--dir`` by litdata's writer (``BinaryWriter``, what ``litdata.optimize``
runs), each row ``{"image": PIL.Image.open(path), "label": class}`` (its
``jpeg`` encoding keeps the file's bytes), twice: uncompressed, and
``compression="zstd"`` (litdata's default framing). Each folder is read
by each contender, each figure in a fresh process:

- ``litdata``: torch's DataLoader (``--workers`` workers) over
  ``litdata.StreamingDataset(folder, shuffle=True)`` whose ``__getitem__``
  applies the transform to the image litdata decodes (a uint8 CHW tensor,
  so ``ToTensor`` is ``ConvertImageDtype(float32)``: the same /255);
- ``ringloader``: ``ringloader.DataLoader(ringloader.LitData(folder,
  transform=...), shuffle=True, num_workers=--threads)`` (threads).

The transform is bench_hf's ``train`` (torchvision's v1 classes:
RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize with
ImageNet's mean and std). Figures, each the median of ``--repeat`` runs
taken in turn within a round: img/s over ``--batches`` batches after
``--warmup``, CPU ms an image (workers included), seconds to the first
batch (ringloader's includes inflating a zstd folder's chunks into its
cache the first time: the cache is emptied before each run), and
ringloader ÷ litdata within each round.

The same JPEGs are written by MosaicML Streaming's ``MDSWriter`` too
(columns ``{"image": "jpeg", "label": "int"}``, 32 MB shards), plain and
``compression="zstd"``, and read by ``streaming``: torch's DataLoader
(``--workers`` workers) over ``streaming.StreamingDataset(local=folder,
shuffle=True, batch_size=...)`` whose ``__getitem__`` applies
bench_hf's train transform to the PIL image Streaming decodes, and by
``ringloader.DataLoader(ringloader.MDS(folder, transform=...))``. The
shards Streaming inflates beside a zstd folder's are removed before each
run, as ringloader's cache is emptied. ``--only litdata`` or ``--only
mds`` runs one of the two.

Usage::

    python benchmarks/bench_streamfmt.py [--images 4000] [--repeat 3]
        [--json benchmarks/streamfmt-results.json]
        [--plot benchmarks/plots/streamfmt.png]
    python benchmarks/bench_streamfmt.py --quick   # a check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from typing import Any

import bench_hf  # beside this file: the transforms, CPU time, worker USS
import bench_scale  # the machine record, medians

# Each format's contenders: the library's own loader, then ringloader.
FAMILIES = {"litdata": ("litdata", "ringloader"), "mds": ("streaming", "ringloader")}
FORMATS = ("plain", "zstd")


def _write_once(root: str, family: str, images: int, fmt: str, write: Any) -> str:
    """The folder root/{family}-{images}-{fmt} (made once): ``write(tmp,
    rows, kw)`` writes the rows, each ``{"image": the JPEG as opened,
    "label": class}`` of ``images`` ImageNet-like JPEGs, into ``tmp`` with
    the writer's compression ``kw``."""
    from PIL import Image

    from ringloader.bench import data

    folder = os.path.join(root, f"{family}-{images}-{fmt}")
    if os.path.isfile(os.path.join(folder, "index.json")):
        return folder
    jpegs = data.build(os.path.join(root, f"jpeg-{images}"), images, 10, 0)
    _, samples = data.scan_folder(jpegs)

    def rows() -> Any:
        for path, label in samples:
            with Image.open(path) as im:
                yield {"image": im, "label": int(label)}

    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp, rows(), {"compression": "zstd"} if fmt == "zstd" else {})
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    return folder


def write_folder(root: str, images: int, fmt: str) -> str:
    """A LitData folder of ``images`` ImageNet-like JPEGs (made once)."""
    from litdata.streaming.writer import BinaryWriter

    def write(tmp: str, rows: Any, kw: dict) -> None:
        os.makedirs(tmp)
        w = BinaryWriter(tmp, chunk_bytes="32MB", **kw)
        for i, row in enumerate(rows):
            w[i] = row
        w.done()
        w.merge()

    return _write_once(root, "litdata", images, fmt, write)


def write_mds(root: str, images: int, fmt: str) -> str:
    """An MDS folder of ``images`` ImageNet-like JPEGs (made once)."""
    from streaming import MDSWriter

    def write(tmp: str, rows: Any, kw: dict) -> None:
        columns = {"image": "jpeg", "label": "int"}
        with MDSWriter(out=tmp, columns=columns, size_limit=1 << 25, **kw) as w:
            for row in rows:
                w.write(row)

    return _write_once(root, "mds", images, fmt, write)


def _drop_inflated(folder: str) -> None:
    """Remove the shards Streaming inflated beside a zstd folder's."""
    if not os.path.basename(folder).startswith("mds-"):
        return
    with open(os.path.join(folder, "index.json")) as f:
        for shard in json.load(f)["shards"]:
            raw = os.path.join(folder, shard["raw_data"]["basename"])
            if shard.get("zip_data") and os.path.exists(raw):
                os.unlink(raw)


def tensor_transform() -> Any:
    """bench_hf's train transform on the uint8 tensor litdata decodes."""
    from torchvision.transforms import (
        Compose,
        ConvertImageDtype,
        Normalize,
        RandomHorizontalFlip,
        RandomResizedCrop,
    )
    import torch

    return Compose(
        [
            RandomResizedCrop(224),
            RandomHorizontalFlip(),
            ConvertImageDtype(torch.float32),
            Normalize(mean=bench_hf.MEAN, std=bench_hf.STD),
        ]
    )


def _litdata_loader(folder: str, a: argparse.Namespace) -> Any:
    import litdata
    import torch

    tf = tensor_transform()

    class Transformed(litdata.StreamingDataset):
        def __getitem__(self, index: Any) -> Any:
            row = super().__getitem__(index)
            return tf(row["image"]), row["label"]

    ds = Transformed(folder, shuffle=True)
    return torch.utils.data.DataLoader(
        ds, batch_size=a.batch_size, num_workers=a.workers, shuffle=False
    )


def _streaming_loader(folder: str, a: argparse.Namespace) -> Any:
    import streaming
    import torch
    from streaming.base.util import clean_stale_shared_memory

    tf = bench_hf.transform("train")

    class Transformed(streaming.StreamingDataset):
        def __getitem__(self, index: Any) -> Any:
            row = super().__getitem__(index)
            return tf(row["image"].convert("RGB")), row["label"]

    clean_stale_shared_memory()
    ds = Transformed(local=folder, shuffle=True, batch_size=a.batch_size)
    return torch.utils.data.DataLoader(
        ds, batch_size=a.batch_size, num_workers=a.workers
    )


def child(a: argparse.Namespace) -> dict:
    """One contender on one folder: the figures, as a dict."""
    import ringloader

    t0 = time.perf_counter()
    if a.who == "litdata":
        loader = _litdata_loader(a.data, a)
    elif a.who == "streaming":
        loader = _streaming_loader(a.data, a)
    else:
        mds = os.path.basename(a.data).startswith("mds-")
        kind = ringloader.MDS if mds else ringloader.LitData
        lit = kind(a.data, transform=bench_hf.transform("train"), cache_dir=a.cache)
        loader = ringloader.DataLoader(
            lit, batch_size=a.batch_size, shuffle=True, num_workers=a.threads
        )
    it = iter(loader)
    first = next(it)[0]
    first_s = time.perf_counter() - t0
    assert tuple(first.shape[1:]) == (3, 224, 224), first.shape
    for _ in range(a.warmup):
        next(it)
    t1, c1 = time.perf_counter(), bench_hf._cpu_s()
    done = 0
    for _ in range(a.batches):
        done += len(next(it)[0])
    img_s = done / max(time.perf_counter() - t1, 1e-9)
    cpu_ms = 1e3 * (bench_hf._cpu_s() - c1) / done
    del it, loader
    return {"img_s": img_s, "cpu_ms_per_image": cpu_ms, "first_batch_s": first_s}


def _run(a: argparse.Namespace, who: str, data: str) -> dict:
    shutil.rmtree(a.cache, ignore_errors=True)
    _drop_inflated(data)
    if a.inline:
        b = argparse.Namespace(**vars(a))
        b.who, b.data = who, data
        return child(b)
    return bench_hf.run_child(__file__, [who, data, f"--cache={a.cache}"], a)


def measure(a: argparse.Namespace, folders: dict, family: str) -> dict:
    """Per format, per contender: the medians, the img/s of each round,
    and ringloader ÷ the library's own within each round and its median."""
    contenders = FAMILIES[family]
    runs: dict = {f: {w: [] for w in contenders} for f in folders}
    for r in range(a.repeat):
        for fmt, data in folders.items():
            for who in contenders:
                res = _run(a, who, data)
                runs[fmt][who].append(res)
                shown = res.get("error") or (
                    f"{res['img_s']:7.0f} img/s {res['cpu_ms_per_image']:5.2f} "
                    f"CPU ms/img  first batch {res['first_batch_s']:5.2f} s"
                )
                print(f"round {r + 1}: {fmt:5} {who:10} {shown}", flush=True)
    out: dict = {}
    for fmt, by in runs.items():
        out[fmt] = {}
        for who, rs in by.items():
            med = bench_scale._median(rs)
            med["img_s_runs"] = [
                None if "error" in x else round(x["img_s"], 1) for x in rs
            ]
            out[fmt][who] = med
        ratios = [
            round(o / p, 2)
            for o, p in zip(
                out[fmt]["ringloader"]["img_s_runs"],
                out[fmt][contenders[0]]["img_s_runs"],
            )
            if o and p
        ]
        out[fmt]["ratio_runs"] = ratios
        out[fmt]["ratio"] = sorted(ratios)[len(ratios) // 2] if ratios else None
    return out


def machine(families: list) -> dict:
    import importlib

    import torchvision

    out = dict(bench_scale.machine(), torchvision=torchvision.__version__)
    for family in families:
        name = FAMILIES[family][0]
        out[name] = importlib.import_module(name).__version__
    return out


# Where each family's figures are kept in the results.
KEYS = {"litdata": "throughput", "mds": "mds"}


def table(results: dict) -> str:
    out = []
    for family, key in KEYS.items():
        if key in results:
            out.append(_table(results[key], FAMILIES[family]))
    return "\n\n".join(out)


def _table(throughput: dict, contenders: tuple) -> str:
    own = contenders[0]
    out = [
        f"| chunks | contender | img/s | ringloader ÷ {own} | CPU ms/img | first batch |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for fmt, by in throughput.items():
        for who in contenders:
            r = by[who]
            if "error" in r:
                out.append(f"| {fmt} | {who} | {r['error']} | | | |")
                continue
            ratio = f"{by['ratio']:.2f}x" if who == own and by["ratio"] else ""
            out.append(
                f"| {fmt} | {who} | {r['img_s']:,.0f} | {ratio} "
                f"| {r['cpu_ms_per_image']:.2f} | {r['first_batch_s']:.2f} s |"
            )
    return "\n".join(out)


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    groups = [
        (family, fmt, by)
        for family, key in KEYS.items()
        if key in results
        for fmt, by in results[key].items()
    ]
    names = ("the library's own StreamingDataset", "ringloader")
    for k, (name, color) in enumerate(zip(names, ("#888888", "#1f77b4"))):
        xs = [i + (k - 0.5) * 0.38 for i in range(len(groups))]
        ys = [by[FAMILIES[fam][k]].get("img_s", 0) for fam, _, by in groups]
        ax.bar_label(ax.bar(xs, ys, 0.38, label=name, color=color), fmt="%.0f")
    ax.set_xticks(range(len(groups)), [f"{fam} {fmt}" for fam, fmt, _ in groups])
    ax.set_ylabel("images/s (median; higher is better)")
    m = results["machine"]
    ax.set_title(
        f"{results['images']:,} ImageNet-like JPEGs, train transform, batch "
        f"{results['batch_size']}\n{m['cpu']}, {m['cores']} cores; "
        f"{results['threads']} threads vs {results['workers']} workers",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", nargs=2, metavar=("WHO", "DATA"))
    p.add_argument("--images", type=int, default=4000)
    p.add_argument(
        "--dir",
        default=os.path.join(
            os.environ.get("TMPDIR", "/tmp"), "ringloader-bench-streamfmt"
        ),
    )
    p.add_argument("--cache", default=None, help="ringloader's cache (inflated chunks)")
    p.add_argument("--only", choices=sorted(FAMILIES), default=None)
    bench_hf.run_flags(p, batches=30)
    a = p.parse_args()
    a.inline = False
    if a.child:
        a.who, a.data = a.child
        print(json.dumps(child(a)))
        return
    if a.quick:
        a.images, a.repeat, a.inline = 120, 1, True
        a.batch_size, a.batches, a.warmup = 16, 2, 1
    os.makedirs(a.dir, exist_ok=True)
    a.cache = a.cache or os.path.join(a.dir, "cache")
    families = [a.only] if a.only else list(FAMILIES)
    results: dict = {
        "machine": machine(families),
        "load_before": os.getloadavg(),
        **{k: getattr(a, k) for k in ("images", "batch_size", "batches", "warmup")},
        **{k: getattr(a, k) for k in ("threads", "workers", "repeat")},
    }
    print(json.dumps(results), flush=True)
    writers = {"litdata": write_folder, "mds": write_mds}
    for family in families:
        folders = {f: writers[family](a.dir, a.images, f) for f in FORMATS}
        results[KEYS[family]] = measure(a, folders, family)
    bench_hf.finish(results, a, table, plot)


if __name__ == "__main__":
    main()
