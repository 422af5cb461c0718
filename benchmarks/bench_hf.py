"""ringloader's HFDataset against what Hugging Face users run today.

One image-classification ``datasets.Dataset`` (``Features({"image":
Image(), "label": ClassLabel(...)})``), written once with
``save_to_disk(num_shards=...)`` under ``--dir`` and opened with
``load_from_disk`` (its Arrow files memory-mapped), read by each
contender, each figure in a fresh process:

- ``hf example``: torch's DataLoader over ``ds.with_transform(preprocess)``
  as transformers' ``run_image_classification_no_trainer.py`` writes it
  (``image.convert("RGB")``, the transform per image into
  ``pixel_values``, a collate_fn stacking them into a dict), ``--workers``
  workers;
- ``hf rows``: torch's DataLoader over a map-style dataset indexing the
  ``datasets.Dataset`` row by row (``ds[i]``: ``datasets`` decodes the
  image to PIL) and applying the transform per sample, ``--workers``
  workers;
- ``ringloader.Loader``: ``Loader(HFDataset(ds), transform=...,
  num_threads=--threads)``;
- ``ringloader.DataLoader``: ``DataLoader(HFDataset(ds, transform=...),
  batch_size=..., shuffle=True, num_workers=--threads)``, as the Hugging
  Face guide writes it;
- ``parquet example``: the same data set as one Parquet file (the Hub's
  form, ``Dataset.to_parquet``), read as transformers' example reads a
  Hub data set: ``load_dataset("parquet", data_files=...)`` (which
  converts it to Arrow files in its cache, once), then as ``hf example``;
- ``ringloader.Parquet``: ``DataLoader(Parquet(file, transform=...),
  batch_size=..., shuffle=True, num_workers=--threads)`` over that file,
  as the Parquet guide writes it, its extract made in a fresh cache
  directory each run (the first batch includes it);
- ``ringloader.Parquet (HTTP)``: the same over that file's URL, served by
  nginx on 127.0.0.1 (hf_http.py: the extract made by range GETs), with
  its img/s and first batch over the local reader's within a round; not
  run where nginx is not installed.

Every contender gets the same torchvision transform objects: ``train``,
the transformers example's (RandomResizedCrop(224), RandomHorizontalFlip,
ToTensor, Normalize with ImageNet's mean and std), and ``eval``
(Resize(256), CenterCrop(224), ToTensor, Normalize). All shuffle.

Figures, each the median of ``--repeat`` runs, the contenders taken in
turn within a round (the machine's speed drifts):

- img/s over ``--batches`` batches after ``--warmup`` batches;
- seconds from ``load_from_disk`` to the first batch in hand;
- RssAnon growth of the process from before ``load_from_disk`` to after
  the warm-up batches, and the private memory (USS) of its worker
  processes (torch's workers; ringloader's threads are in the process).

The throughput data set is ``--images`` ImageNet-like JPEGs
(ringloader.bench.data: short side 256-500 px). Memory against the number
of rows is measured on sets of small JPEGs (96x96, from a pool of 64) of
each size in ``--rows``, all in ``--shards`` Arrow files: what grows with
the rows shows as the difference between the sizes.

Usage::

    python benchmarks/bench_hf.py [--images 10000] [--rows 5000 100000]
        [--dir DIR] [--json benchmarks/hf-results.json]
        [--plot benchmarks/plots/hf.png]
    python benchmarks/bench_hf.py --quick    # a check that it runs (seconds)

``--quick`` runs every contender on a few hundred rows, in this process
rather than a fresh one each, once: its figures mean nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

import bench_scale  # beside this file: the same machine record and RssAnon
import hf_http  # beside this file: the Parquet-over-HTTP contender

PEERS = ("hf example", "hf rows", "parquet example")
OURS = ("ringloader.Loader", "ringloader.DataLoader", "ringloader.Parquet")
CONTENDERS = PEERS + OURS + (hf_http.HTTP,)
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
POOL = 64


# ---------------------------------------------------------------------------
# Data


def _from_files(paths: list, labels: list) -> Iterator[dict]:
    for path, label in zip(paths, labels):
        with open(path, "rb") as f:
            yield {"image": {"bytes": f.read(), "path": None}, "label": label}


def _from_pool(rows: int) -> Iterator[dict]:
    pool = _small_jpegs()
    for i in range(rows):
        yield {"image": {"bytes": pool[i % POOL], "path": None}, "label": i % 1000}


def _save(folder: str, gen: Any, kwargs: dict, names: list, shards: int) -> str:
    """Writes an image-classification dataset, the rows ``gen(**kwargs)``
    yields, with ``save_to_disk`` into ``folder`` (once: a finished folder
    is kept), through a temporary sibling."""
    if os.path.isfile(os.path.join(folder, "dataset_info.json")):
        return folder
    import datasets

    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=names)}
    )
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    ds = datasets.Dataset.from_generator(
        gen, features=features, gen_kwargs=kwargs, cache_dir=os.path.join(tmp, "cache")
    )
    ds.save_to_disk(os.path.join(tmp, "ds"), num_shards=shards)
    del ds
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(os.path.join(tmp, "ds"), folder)
    shutil.rmtree(tmp, ignore_errors=True)
    return folder


def imagenet_like(root: str, images: int, shards: int) -> str:
    """The throughput dataset: ``images`` ImageNet-like JPEGs in 10
    classes, as the other benchmarks make them."""
    from ringloader.bench import data

    folder = os.path.join(root, f"hf-imagenet-{images}-{shards}")
    if os.path.isfile(os.path.join(folder, "dataset_info.json")):
        return folder
    jpegs = data.build(os.path.join(root, f"jpeg-{images}"), images, 10, 0)
    classes, samples = data.scan_folder(jpegs)
    kwargs = {"paths": [s[0] for s in samples], "labels": [s[1] for s in samples]}
    return _save(folder, _from_files, kwargs, classes, shards)


def _small_jpegs() -> list[bytes]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for _ in range(POOL):
        x = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(x).resize((96, 96), Image.BILINEAR).save(buf, "JPEG")
        out.append(buf.getvalue())
    return out


def as_parquet(folder: str) -> str:
    """The data set saved in ``folder`` as one Parquet file beside it
    (``Dataset.to_parquet``: the Hub's form; written once)."""
    path = folder + ".parquet"
    if not os.path.isfile(path):
        import datasets

        datasets.load_from_disk(folder).to_parquet(path + ".tmp")
        os.rename(path + ".tmp", path)
    return path


def small(root: str, rows: int, shards: int) -> str:
    """A memory dataset: ``rows`` small JPEGs, 1000 classes."""
    folder = os.path.join(root, f"hf-small-{rows}-{shards}")
    names = [f"c{k}" for k in range(1000)]
    return _save(folder, _from_pool, {"rows": rows}, names, shards)


# ---------------------------------------------------------------------------
# One measurement


def _children_uss() -> int:
    """The memory this process's children hold of their own (USS): a
    forked worker shares its parent's pages until it writes them, so its
    RssAnon would count the parent's heap again."""
    import psutil

    total = 0
    for c in psutil.Process().children(recursive=True):
        try:
            total += c.memory_full_info().uss
        except psutil.Error:  # a worker that has just exited
            pass
    return total


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process, its threads, and its
    live children: the work each image costs, which other jobs on the
    machine disturb less than the wall time."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for c in me.children(recursive=True):
        try:
            total += sum(c.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def transform(kind: str, crop: int = 224) -> Any:
    """The transformers example's transforms (torchvision's v1 classes)."""
    from torchvision.transforms import (
        CenterCrop,
        Compose,
        Normalize,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        ToTensor,
    )

    if kind == "train":
        head = [RandomResizedCrop(crop), RandomHorizontalFlip()]
    else:
        head = [Resize(crop * 256 // 224), CenterCrop(crop)]
    return Compose(head + [ToTensor(), Normalize(mean=MEAN, std=STD)])


class _Rows:
    """A map-style dataset indexing a ``datasets.Dataset`` row by row
    (``datasets`` decodes the image to PIL), the transform per sample."""

    def __init__(self, ds: Any, tf: Any) -> None:
        self.ds, self.tf = ds, tf

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> Any:
        row = self.ds[i]
        return self.tf(row["image"].convert("RGB")), row["label"]


def _example_loader(ds: Any, tf: Any, a: argparse.Namespace) -> Any:
    """torch's DataLoader as run_image_classification_no_trainer.py makes
    it (the example sets no workers; here ``--workers``)."""
    import torch

    def preprocess(example_batch: dict) -> dict:
        example_batch["pixel_values"] = [
            tf(image.convert("RGB")) for image in example_batch["image"]
        ]
        return example_batch

    def collate_fn(examples: list) -> dict:
        pixel_values = torch.stack([e["pixel_values"] for e in examples])
        labels = torch.tensor([e["label"] for e in examples])
        return {"pixel_values": pixel_values, "labels": labels}

    return torch.utils.data.DataLoader(
        ds.with_transform(preprocess),
        shuffle=True,
        collate_fn=collate_fn,
        batch_size=a.batch_size,
        num_workers=a.workers,
    )


def child(a: argparse.Namespace) -> dict:
    """One contender on one dataset: the figures, as a dict."""
    tf = transform(a.transform)
    parquet = a.data + ".parquet"
    with tempfile.TemporaryDirectory(prefix="ringloader-bench-cache-") as cache:
        return _measure(a, tf, parquet, cache)


def _measure(a: argparse.Namespace, tf: Any, parquet: str, cache: str) -> dict:
    """child's measurement, ringloader.Parquet's extract made in ``cache``
    (an empty folder)."""
    import datasets
    import torch

    import ringloader

    base = bench_scale._rss_anon()
    t0 = time.perf_counter()
    if a.who == "parquet example":
        cache = os.path.join(os.path.dirname(a.data), "hf-cache")
        ds = datasets.load_dataset(
            "parquet", data_files=parquet, split="train", cache_dir=cache
        )
        loader = _example_loader(ds, tf, a)
    elif a.who in (hf_http.LOCAL, hf_http.HTTP):  # a URL for HTTP (_run)
        ds = ringloader.Parquet(parquet, transform=tf, cache_dir=cache)
        loader = ringloader.DataLoader(
            ds, batch_size=a.batch_size, shuffle=True, num_workers=a.threads
        )
    else:  # the saved data set's contenders
        ds = datasets.load_from_disk(a.data)
    if a.who == "hf example":
        loader = _example_loader(ds, tf, a)
    elif a.who == "hf rows":
        loader = torch.utils.data.DataLoader(
            _Rows(ds, tf), batch_size=a.batch_size, shuffle=True, num_workers=a.workers
        )
    elif a.who == "ringloader.Loader":
        loader = ringloader.Loader(
            ringloader.HFDataset(ds),
            batch_size=a.batch_size,
            shuffle=True,
            num_threads=a.threads,
            transform=tf,
        )
    elif a.who == "ringloader.DataLoader":
        loader = ringloader.DataLoader(
            ringloader.HFDataset(ds, transform=tf),
            batch_size=a.batch_size,
            shuffle=True,
            num_workers=a.threads,
        )

    def images(batch: Any) -> Any:
        return batch["pixel_values"] if isinstance(batch, dict) else batch[0]

    it = iter(loader)
    first = images(next(it))
    first_s = time.perf_counter() - t0
    assert tuple(first.shape[1:]) == (3, 224, 224), first.shape
    for _ in range(a.warmup):
        next(it)
    rss = bench_scale._rss_anon() - base
    workers = _children_uss()
    t1, c1 = time.perf_counter(), _cpu_s()
    done = 0
    for _ in range(a.batches):
        done += len(images(next(it)))
    img_s = done / max(time.perf_counter() - t1, 1e-9)
    cpu_ms = 1e3 * (_cpu_s() - c1) / done
    del it, loader
    return {
        "img_s": img_s,
        "cpu_ms_per_image": cpu_ms,
        "first_batch_s": first_s,
        "rss_bytes": rss,
        "workers_uss_bytes": workers,
        "rows": len(ds),
    }


# ---------------------------------------------------------------------------
# Driver


def _run(a: argparse.Namespace, who: str, data: str, tf: str) -> dict:
    if who == hf_http.HTTP:
        data = hf_http.url_of(a.url, data)
    if a.inline:
        b = argparse.Namespace(**vars(a))
        b.who, b.data, b.transform = who, data, tf
        return child(b)
    return run_child(__file__, [who, data, tf], a)


def run_child(script: str, args: list, a: argparse.Namespace) -> dict:
    """``script --child *args`` in a fresh Python with ``a``'s batch
    settings: the dict its last line prints, or {"error": why}."""
    cmd = [sys.executable, script, "--child", *args]
    for flag in ("batch_size", "batches", "warmup", "threads", "workers"):
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(a, flag))]
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=a.timeout, check=True
        )
    except subprocess.TimeoutExpired:
        return {"error": f"not done in {a.timeout:.0f} s"}
    except subprocess.CalledProcessError as e:
        last = (e.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {e.returncode}: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    """Each figure's median over the runs that finished, and each run's
    img/s in round order (None for one that failed); the first error
    when none finished."""
    med = bench_scale._median(runs)
    if "error" not in med:
        med["img_s_runs"] = [
            None if "error" in r else round(r["img_s"], 1) for r in runs
        ]
        med["first_batch_s_runs"] = [
            None if "error" in r else round(r["first_batch_s"], 4) for r in runs
        ]
    return med


def _pair(by: dict) -> None:
    """Adds to each peer's result in ``by`` (contender -> result) its
    ratios: each ringloader contender's img/s over the peer's, run by run
    within a round (the two ran minutes apart at most, under the same
    other load), and the median of those."""
    for peer in PEERS:
        r = by.get(peer, {"error": "not run"})
        if "error" in r:
            continue
        r["ratios"], r["ratio_runs"] = {}, {}
        for ours in OURS:
            runs = [
                round(o / p, 2)
                for o, p in zip(by.get(ours, {}).get("img_s_runs", []), r["img_s_runs"])
                if o and p
            ]
            r["ratio_runs"][ours] = runs
            r["ratios"][ours] = sorted(runs)[len(runs) // 2] if runs else None


def _rounds(a: argparse.Namespace, jobs: list[tuple[str, str, str]]) -> list[dict]:
    """Each (contender, data, transform) ``--repeat`` times, the jobs
    taken in turn within a round; the medians, in the jobs' order."""
    runs: list[list[dict]] = [[] for _ in jobs]
    for r in range(a.repeat):
        for k, (who, data, tf) in enumerate(jobs):
            res = _run(a, who, data, tf)
            runs[k].append(res)
            shown = (
                res["error"]
                if "error" in res
                else f"{res['img_s']:7.0f} img/s {res['cpu_ms_per_image']:5.2f} CPU ms/img  first batch {res['first_batch_s']:5.2f} s  "
                f"RssAnon +{res['rss_bytes'] / 1e6:6.1f} MB (workers {res['workers_uss_bytes'] / 1e6:6.1f} MB)"
            )
            rows = os.path.basename(data)
            print(f"round {r + 1}: {who:25} {tf:5} {rows:24} {shown}", flush=True)
    return [_median(x) for x in runs]


def machine() -> dict:
    """bench_scale's record of the machine, with the versions of what
    this benchmark adds."""
    import datasets
    import pyarrow
    import torchvision

    return dict(
        bench_scale.machine(),
        torchvision=torchvision.__version__,
        datasets=datasets.__version__,
        pyarrow=pyarrow.__version__,
    )


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.4))
    tfs = list(results["throughput"])
    names = results["contenders"]
    width = 0.8 / len(names)
    colors = dict(
        zip(
            CONTENDERS,
            (
                "#555555",
                "#aaaaaa",
                "#888888",
                "#1f77b4",
                "#6baed6",
                "#2ca02c",
                "#98df8a",
            ),
        )
    )
    for ax, key, fmt, label in (
        (axes[0], "img_s", "%.0f", "images/s (median; higher is better)"),
        (axes[1], "cpu_ms_per_image", "%.2f", "CPU ms an image, workers included"),
    ):
        for k, who in enumerate(names):
            xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(tfs))]
            ys = [results["throughput"][t][who].get(key, 0) for t in tfs]
            bars = ax.bar(xs, ys, width, label=who, color=colors[who])
            ax.bar_label(bars, fmt=fmt, fontsize=7)
        ax.set_xticks(range(len(tfs)), [f"{t} transform" for t in tfs])
        ax.set_ylabel(label)
        ax.set_title(
            f"{results['images']:,} ImageNet-like JPEGs, batch {results['batch_size']}",
            fontsize=10,
        )
        ax.legend(fontsize=8)
    mem = results["memory"]
    sizes = sorted({r["rows"] for rows in mem.values() for r in rows if "rows" in r})
    for who in names:
        ok = [r for r in mem[who] if "error" not in r]
        axes[2].plot(
            [r["rows"] for r in ok],
            [(r["rss_bytes"] + r["workers_uss_bytes"]) / 1e6 for r in ok],
            "o-",
            label=who,
            color=colors[who],
        )
    axes[2].set_xscale("log")
    axes[2].minorticks_off()
    axes[2].set_xticks(sizes, [f"{s:,}" for s in sizes])
    axes[2].set_xlabel("rows (96x96 JPEGs)")
    axes[2].set_ylabel("MB")
    axes[2].set_title("RssAnon growth + workers' USS (train)", fontsize=10)
    axes[2].legend(fontsize=8)
    m = results["machine"]
    fig.suptitle(
        f"{m['cpu']}, {m['cores']} cores; torch {m['torch']}, datasets "
        f"{m['datasets']}; {results['threads']} threads / workers",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _ratio(x: Any) -> str:
    """A ratio cell: blank for a contender not run (or that failed)."""
    return f"{x:.2f}x" if x else ""


def table(results: dict) -> str:
    """The results as a Markdown table (HF.md's)."""
    out = [
        "| data | transform | contender | img/s | Loader ÷ it "
        "| DataLoader ÷ it | Parquet ÷ it "
        "| CPU ms/img | first batch | RssAnon growth | workers' USS |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(data: str, tf: str, who: str, r: dict, by: dict) -> None:
        if "error" in r:
            out.append(f"| {data} | {tf} | {who} | {r['error']} | | | | | | | |")
            return
        ratios = (
            " | ".join(_ratio(r["ratios"].get(o)) for o in OURS)
            if who in PEERS
            else " |  | "
        )
        out.append(
            f"| {data} | {tf} | {who} | {r['img_s']:,.0f} | {ratios} "
            f"| {r['cpu_ms_per_image']:.2f} "
            f"| {r['first_batch_s']:.2f} s | {r['rss_bytes'] / 1e6:.1f} MB "
            f"| {r['workers_uss_bytes'] / 1e6:.1f} MB |"
        )

    for tf, by in results["throughput"].items():
        for who in results["contenders"]:
            row(f"{results['images']:,} ImageNet-like", tf, who, by[who], by)
    mem = results["memory"]
    for k, n in enumerate(results["rows"]):
        by = {who: mem[who][k] for who in results["contenders"]}
        for who in results["contenders"]:
            row(f"{n:,} small", "train", who, by[who], by)
    return "\n".join(out)


def tables(results: dict) -> str:
    """The results' table, then the HTTP contender's against the local
    file where it ran."""
    out = table(results)
    if hf_http.HTTP in results["contenders"]:
        out += "\n" + hf_http.table(results)
    return out


def finish(results: dict, a: argparse.Namespace, table: Any, plot: Any) -> None:
    """The run's end: the load average after it, the table printed, the
    results and plot written where ``a`` says."""
    results["load_after"] = os.getloadavg()
    print(table(results))
    if a.json:
        with open(a.json, "w") as f:
            f.write(json.dumps(results, indent=1) + "\n")
    if a.plot:
        plot(results, a.plot)


def run_flags(p: argparse.ArgumentParser, batches: int) -> None:
    """The flags of a run a side-by-side benchmark shares: batches,
    threads and workers, rounds, the quick check, where results go."""
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--batches", type=int, default=batches)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--quick", action="store_true", help="a check that it runs")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)


def _measure_all(a: argparse.Namespace, results: dict, data: str, sets: list) -> None:
    """Every contender on the throughput set, then on the memory sets,
    into ``results``, with their ratios."""
    names = results["contenders"]
    jobs = [(who, data, tf) for tf in a.transforms for who in names]
    res = _rounds(a, jobs)
    results["throughput"] = {
        tf: {who: res[k * len(names) + j] for j, who in enumerate(names)}
        for k, tf in enumerate(a.transforms)
    }
    res = _rounds(a, [(who, d, "train") for d in sets for who in names])
    results["memory"] = {
        who: [res[k * len(names) + j] for k in range(len(sets))]
        for j, who in enumerate(names)
    }
    pairs = list(results["throughput"].values()) + [
        {who: results["memory"][who][k] for who in names} for k in range(len(sets))
    ]
    for by in pairs:
        _pair(by)
        hf_http.pair(by)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", nargs=3, metavar=("WHO", "DATA", "TRANSFORM"))
    p.add_argument("--images", type=int, default=10_000)
    p.add_argument("--rows", nargs="+", type=int, default=[5_000, 100_000])
    p.add_argument("--shards", type=int, default=4, help="Arrow files a dataset")
    p.add_argument("--transforms", nargs="+", default=["train", "eval"])
    p.add_argument(
        "--dir",
        default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "ringloader-bench-hf"),
    )
    run_flags(p, batches=40)
    p.add_argument(
        "--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS
    )
    a = p.parse_args()
    a.inline = False
    if a.child:
        a.who, a.data, a.transform = a.child
        print(json.dumps(child(a)))
        return
    if a.quick:
        a.images, a.rows, a.repeat, a.inline = 160, [200, 400], 1, True
        a.batch_size, a.batches, a.warmup = 16, 2, 1
    need = (1 + a.warmup + a.batches) * a.batch_size
    if need > min([a.images, *a.rows]):
        p.error(
            f"the first batch, --warmup {a.warmup} and --batches {a.batches} of "
            f"{a.batch_size} read {need} rows in one epoch: give --images and "
            "--rows at least that many"
        )
    os.makedirs(a.dir, exist_ok=True)
    results: dict = {
        "machine": machine(),
        "load_before": os.getloadavg(),
        "images": a.images,
        "shards": a.shards,
        "batch_size": a.batch_size,
        "batches": a.batches,
        "warmup": a.warmup,
        "threads": a.threads,
        "workers": a.workers,
        "repeat": a.repeat,
        "rows": a.rows,
        "contenders": list(a.contenders),
    }
    print(json.dumps(results), flush=True)
    data = imagenet_like(a.dir, a.images, a.shards)
    sets = [small(a.dir, n, a.shards) for n in a.rows]
    names = results["contenders"]
    for folder in [data, *sets]:
        as_parquet(folder)
    with hf_http.serving(a.dir, names) as a.url:  # takes HTTP out without nginx
        _measure_all(a, results, data, sets)
    finish(results, a, tables, plot)


if __name__ == "__main__":
    main()
