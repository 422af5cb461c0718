"""Evaluation-pipeline benchmark: ringloader versus torch DataLoader.

Both contenders read the same ImageFolder tree and produce the same output,
uint8 tensors of shape ``(B, 3, 224, 224)`` plus int64 labels, using the
classic evaluation transform ``Resize(256)`` followed by ``CenterCrop(224)``:

* ``dataloader``: ``torch.utils.data.DataLoader`` over
  ``torchvision.datasets.ImageFolder`` (PIL decode) with ``num_workers``
  worker processes;
* ``ringloader``: ``ringloader.Loader`` over ``ringloader.ImageFolder`` with
  ``num_threads`` threads.

Each contender runs in a fresh subprocess so that memory and CPU figures are
not mixed up.  It runs one warm-up epoch (which also fills the page cache)
and then ``--epochs`` timed epochs, and reports

* throughput in images/s (median over the timed epochs),
* CPU seconds per image, summed over the whole process tree,
* the time from creating the epoch iterator to the first batch (median),
* the peak memory of the process tree: the sum of RSS, and the anonymous
  memory (heap, tensors, shared-memory batches) which does not count pages
  shared between the DataLoader's forked workers twice.

Usage::

    python benchmarks/bench_eval.py [--data DIR] [--batch-size 64] [--threads N]
                                    [--epochs 2] [--json OUT] [--check]

Without ``--data`` an ImageNet-like folder is built (once) with
``make_imagenet_like.py`` in ``/tmp/ringloader-bench-data``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import itertools
import json
import math
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = "/tmp/ringloader-bench-data"
CONTENDERS = ("dataloader", "ringloader")
RESULT_TAG = "@@bench-result@@ "
"""Prefix of the stdout line carrying a contender's JSON result."""

RESIZE = 256
CROP = 224

LoaderAndDataset = tuple[Iterable[Any], Any]
"""What the loader factories return: the batch iterable and its data set."""

try:
    import psutil
except ImportError:  # pragma: no cover - depends on environment
    psutil = None


# ---------------------------------------------------------------------------
# Loader construction
# ---------------------------------------------------------------------------


def make_dataloader(
    root: str, batch_size: int, threads: int, prefetch: int
) -> LoaderAndDataset:
    """Return the reference torch DataLoader (PIL decode in worker processes).

    ``prefetch`` is accepted for symmetry but left at DataLoader's default
    (``prefetch_factor=2`` batches per worker).
    """
    del prefetch
    import torch.utils.data
    import torchvision.transforms as T
    from torchvision import datasets

    transform = T.Compose([T.Resize(RESIZE), T.CenterCrop(CROP), T.PILToTensor()])
    dataset = datasets.ImageFolder(root, transform=transform)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=threads,
        shuffle=False,
        # Workers are started and reaped every epoch (the default), so that
        # their CPU time shows up in getrusage(RUSAGE_CHILDREN).
        persistent_workers=False,
    )
    return loader, dataset


def make_ringloader(
    root: str, batch_size: int, threads: int, prefetch: int
) -> LoaderAndDataset:
    """Return a ringloader Loader producing the same batches as the DataLoader."""
    import ringloader
    from ringloader import transforms as RT

    dataset = ringloader.ImageFolder(root)
    loader = ringloader.Loader(
        dataset,
        batch_size=batch_size,
        num_threads=threads,
        prefetch=prefetch,
        transform=RT.Compose([RT.Resize(RESIZE), RT.CenterCrop(CROP)]),
    )
    return loader, dataset


MODULES = {"dataloader": "torchvision", "ringloader": "ringloader"}
"""Main module of each contender, imported (and timed) before the set-up."""

FACTORIES: dict[str, Callable[[str, int, int, int], LoaderAndDataset]] = {
    "dataloader": make_dataloader,
    "ringloader": make_ringloader,
}


def dataset_length(dataset: Any) -> int | None:
    """Return the number of samples in ``dataset`` (``None`` if unknown)."""
    try:
        return len(dataset)
    except (TypeError, NotImplementedError):
        return None


# ---------------------------------------------------------------------------
# Measurement helpers
# ---------------------------------------------------------------------------


def _descendants() -> list[Any]:
    """Live descendant processes (psutil objects); empty without psutil."""
    if psutil is None:
        return []
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and all its descendants.

    ``getrusage(RUSAGE_SELF)`` covers every thread of this process and
    ``getrusage(RUSAGE_CHILDREN)`` covers children that have terminated and
    been reaped.  Children still alive are added through psutil if available.
    """
    total = 0.0
    for proc in _descendants():
        with contextlib.suppress(Exception):
            times = proc.cpu_times()
            total += times.user + times.system
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def cpu_method() -> str:
    """Human readable description of how CPU time is measured."""
    method = "getrusage(RUSAGE_SELF + RUSAGE_CHILDREN), DataLoader workers reaped every epoch"
    if psutil is not None:
        method += ", plus psutil cpu_times() of live descendants"
    return method


def anon_bytes(pid: int) -> int | None:
    """Anonymous plus shared-memory pages of ``pid``, proportionally shared.

    This is ``Pss_Anon + Pss_Shmem`` from ``/proc/PID/smaps_rollup``: heaps,
    tensors, decode buffers and the DataLoader's shared-memory batches.  Such
    pages are only shared inside the benchmark's own process tree (through
    fork or shared memory), so the sum over the tree counts every page once,
    unlike RSS, and unlike PSS it does not depend on unrelated processes
    mapping the same libraries.  ``None`` if the file cannot be read.
    """
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    total = 0
    found = False
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Pss_Anon", "Pss_Shmem"):
            total += int(value.split()[0]) * 1024
            found = True
    return total if found else None


class MemorySampler:
    """Background thread recording the peak memory of the process tree.

    The RSS summed over this process and its descendants is sampled every
    ``interval`` seconds; it counts the pages shared between the DataLoader's
    forked workers (libraries, copy-on-write heap) once per process.  The
    anonymous memory of the tree (see :func:`anon_bytes`) is more expensive
    to read and is sampled every ``anon_interval`` seconds (0 disables it).
    The CPU time used by the sampler itself is tracked so that it can be
    excluded from the figures.  Without psutil only ``ru_maxrss`` (the
    largest single process) is available.
    """

    def __init__(self, interval: float = 0.02, anon_interval: float = 0.5) -> None:
        """Prepare (but do not start) the sampler."""
        self.interval = interval
        self.anon_interval = anon_interval
        self.peak_rss = 0
        self.peak_anon: int | None = None
        self.max_processes = 1
        self._own_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="mem-sampler", daemon=True
        )

    @property
    def method(self) -> str:
        """Human readable description of how memory is measured."""
        if psutil is None:
            return "ru_maxrss of the largest single process (psutil not installed)"
        text = (
            "RSS: sum over the process tree (psutil) every "
            f"{self.interval * 1e3:.0f} ms, pages shared by several processes "
            "counted in each"
        )
        if self.anon_interval > 0:
            text += (
                f"; anon: sum of Pss_Anon + Pss_Shmem (/proc/PID/smaps_rollup) over "
                f"the tree every {self.anon_interval:.1f} s, each page counted once, "
                "mapped library files excluded"
            )
        return text

    def own_cpu(self) -> float:
        """CPU seconds consumed so far by the sampler thread."""
        return self._own_cpu

    def start(self) -> None:
        """Start sampling (no-op without psutil)."""
        if psutil is not None:
            self._thread.start()

    def stop(self) -> None:
        """Stop sampling and take a last sample."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()

    def _sample(self, *, anon: bool) -> None:
        procs = [psutil.Process(), *_descendants()]
        self.max_processes = max(self.max_processes, len(procs))
        rss_total = 0
        anon_total: int | None = 0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                rss_total += proc.memory_info().rss
            if anon and anon_total is not None:
                value = anon_bytes(proc.pid)
                anon_total = None if value is None else anon_total + value
        self.peak_rss = max(self.peak_rss, rss_total)
        if anon and anon_total is not None:
            self.peak_anon = max(self.peak_anon or 0, anon_total)

    def _run(self) -> None:
        next_anon = 0.0
        while True:
            now = time.monotonic()
            want_anon = self.anon_interval > 0 and now >= next_anon
            if want_anon:
                next_anon = now + self.anon_interval
            self._sample(anon=want_anon)
            self._own_cpu = time.thread_time()
            if self._stop.wait(self.interval):
                break
        self._sample(anon=self.anon_interval > 0)
        self._own_cpu = time.thread_time()

    def peak_mb(self) -> dict[str, float | None]:
        """Peak figures in MB (``None`` when not measured)."""
        if psutil is None:
            kib = max(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
            )
            return {"peak_rss_mb": kib * 1024 / 1e6, "peak_anon_mb": None}
        return {
            "peak_rss_mb": self.peak_rss / 1e6,
            "peak_anon_mb": None if self.peak_anon is None else self.peak_anon / 1e6,
        }


@dataclass
class EpochStats:
    """Measurements of one pass over the data set."""

    images: int = 0
    batches: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    first_batch_s: float = float("nan")
    label_sum: int = 0

    @property
    def images_per_s(self) -> float:
        """Throughput of the epoch."""
        return self.images / self.wall_s if self.wall_s > 0 else float("nan")


@dataclass
class BatchCheck:
    """Validates the type and shape of the batches a loader produces."""

    batch_size: int
    problems: list[str] = field(default_factory=list)
    first_batch: str = ""

    def __call__(self, batch: Any) -> tuple[int, int]:
        """Check one batch; return ``(number of images, sum of labels)``."""
        import torch

        try:
            images, labels = batch
        except (TypeError, ValueError):
            self.warn(
                f"batch is not an (images, labels) pair but {type(batch).__name__}"
            )
            return len(batch), 0
        n = int(images.shape[0]) if hasattr(images, "shape") else len(images)
        if not self.first_batch:
            self.first_batch = (
                f"images {type(images).__name__} {getattr(images, 'dtype', '?')} "
                f"{tuple(getattr(images, 'shape', ()))}, labels {type(labels).__name__} "
                f"{getattr(labels, 'dtype', '?')} {tuple(getattr(labels, 'shape', ()))}"
            )
        if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8:
            self.warn(f"images are not a uint8 tensor: {self.first_batch}")
        elif tuple(images.shape[1:]) != (3, CROP, CROP):
            self.warn(f"unexpected image shape {tuple(images.shape)}")
        if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64:
            self.warn(f"labels are not an int64 tensor: {self.first_batch}")
        elif tuple(labels.shape) != (n,):
            self.warn(f"labels shape {tuple(labels.shape)} does not match {n} images")
        label_sum = int(labels.sum()) if isinstance(labels, torch.Tensor) else 0
        return n, label_sum

    def warn(self, text: str) -> None:
        """Record (and print, once) a problem with the batches."""
        if text not in self.problems:
            self.problems.append(text)
            print(f"  warning: {text}", file=sys.stderr, flush=True)


def run_epoch(
    loader: Iterable[Any], check: BatchCheck, sampler: MemorySampler
) -> EpochStats:
    """Iterate over ``loader`` once and measure it."""
    stats = EpochStats()
    cpu0, own0 = cpu_seconds(), sampler.own_cpu()
    t0 = time.perf_counter()
    it = iter(loader)
    sizes = []
    for batch in it:
        if not sizes:
            stats.first_batch_s = time.perf_counter() - t0
        n, label_sum = check(batch)
        sizes.append(n)
        stats.label_sum += label_sum
        del batch
    stats.wall_s = time.perf_counter() - t0
    stats.cpu_s = cpu_seconds() - cpu0 - (sampler.own_cpu() - own0)
    del it
    stats.images, stats.batches = sum(sizes), len(sizes)
    if any(n != check.batch_size for n in sizes[:-1]):
        check.warn(f"batch sizes vary before the last batch: {sorted(set(sizes))}")
    return stats


# ---------------------------------------------------------------------------
# Contender subprocess
# ---------------------------------------------------------------------------


def package_version(name: str) -> str:
    """Installed version of distribution ``name``, or ``"n/a"``."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "n/a"


def run_contender(args: argparse.Namespace) -> dict[str, Any]:
    """Benchmark one contender in this process and return its results."""
    name = args.contender
    result: dict[str, Any] = {
        "contender": name,
        "cpu_method": cpu_method(),
        "pid": os.getpid(),
        "loadavg_at_start": os.getloadavg()[0],
    }
    sampler = MemorySampler(anon_interval=0.0 if args.no_anon else 0.5)
    result["memory_method"] = sampler.method

    def log(text: str) -> None:
        print(f"[{name}] {text}", file=sys.stderr, flush=True)

    import torch  # both contenders produce torch tensors

    result["torch_version"] = torch.__version__
    t0 = time.perf_counter()
    try:
        module = importlib.import_module(MODULES[name])
    except ImportError as exc:
        result["error"] = f"cannot import {MODULES[name]}: {exc!r}"
        log(result["error"])
        return result
    result["import_s"] = time.perf_counter() - t0
    result[f"{MODULES[name]}_version"] = getattr(
        module, "__version__", package_version(MODULES[name])
    )
    result["baseline_rss_mb"] = (
        psutil.Process().memory_info().rss / 1e6 if psutil else None
    )
    anon = anon_bytes(os.getpid())
    result["baseline_anon_mb"] = None if anon is None else anon / 1e6
    sampler.start()
    try:
        t0 = time.perf_counter()
        loader, dataset = FACTORIES[name](
            args.data, args.batch_size, args.threads, args.prefetch
        )
        result["setup_s"] = time.perf_counter() - t0
        expected = dataset_length(dataset)
        result["dataset_len"] = expected
        check = BatchCheck(args.batch_size)

        warm = run_epoch(loader, check, sampler)
        log(
            f"warm-up: {warm.images} images in {warm.wall_s:.2f} s "
            f"({warm.images_per_s:.0f} img/s)"
        )
        epochs = []
        for i in range(args.epochs):
            ep = run_epoch(loader, check, sampler)
            epochs.append(ep)
            log(
                f"epoch {i + 1}/{args.epochs}: {ep.images_per_s:.0f} img/s, "
                f"{ep.cpu_s / max(ep.images, 1) * 1e3:.2f} ms CPU/img, "
                f"first batch {ep.first_batch_s:.3f} s"
            )
        for ep in [warm, *epochs]:
            if expected is not None and ep.images != expected:
                check.warn(
                    f"epoch produced {ep.images} images, data set has {expected}"
                )
            if ep.images != warm.images or ep.label_sum != warm.label_sum:
                check.warn("epochs differ in number of images or labels")
    except Exception as exc:  # noqa: BLE001 - any failure of the loader under test is reported
        result["error"] = f"{type(exc).__name__}: {exc}"
        log(f"failed:\n{traceback.format_exc()}")
        return result
    finally:
        sampler.stop()
        result.update(sampler.peak_mb())
        result["max_processes"] = sampler.max_processes

    timed = epochs or [warm]
    total_images = sum(ep.images for ep in timed)
    result.update(
        {
            "images": warm.images,
            "batches": warm.batches,
            "first_batch_shapes": check.first_batch,
            "problems": check.problems,
            "images_per_s": statistics.median(ep.images_per_s for ep in timed),
            "cpu_s_per_image": sum(ep.cpu_s for ep in timed) / max(total_images, 1),
            "first_batch_s": statistics.median(ep.first_batch_s for ep in timed),
            "warmup": asdict(warm),
            "epochs": [asdict(ep) for ep in epochs],
        }
    )
    return result


def _kill_session(proc: subprocess.Popen[str]) -> None:
    """Kill a contender started in its own session, with its workers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def spawn_contender(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run ``name`` in a fresh interpreter and collect its JSON result."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--contender",
        name,
        "--data",
        args.data,
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--epochs",
        str(args.epochs),
        "--prefetch",
        str(args.prefetch),
    ]
    if args.no_anon:
        cmd.append("--no-anon")
    print(f"== {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    # Own session so that a hung run can be killed together with its workers.
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            return {"contender": name, "error": f"timed out after {args.timeout} s"}
        except KeyboardInterrupt:  # the child does not see the terminal's ^C
            _kill_session(proc)
            raise
    result: dict[str, Any] | None = None
    for line in out.splitlines():
        if line.startswith(RESULT_TAG):
            result = json.loads(line[len(RESULT_TAG) :])
        elif line.strip():
            print(f"[{name} stdout] {line}", file=sys.stderr)
    if result is None:
        result = {
            "contender": name,
            "error": f"no result (exit status {proc.returncode})",
        }
    return result


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (or platform as a fallback)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model"):
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def machine_info() -> dict[str, Any]:
    """Describe the machine and software versions."""
    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "torchvision": package_version("torchvision"),
        "pillow": package_version("pillow"),
        "ringloader": package_version("ringloader"),
    }
    with contextlib.suppress(AttributeError, OSError):
        info["cores_usable"] = len(os.sched_getaffinity(0))
    with contextlib.suppress(Exception):
        from PIL import features

        info["pillow_libjpeg_turbo"] = features.version("libjpeg_turbo")
    return info


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return format(value, spec)


def _one_line(text: str) -> str:
    """Last non-empty line of ``text``, safe inside a markdown table cell."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "").replace("|", "\\|")


def format_report(
    info: dict[str, Any], config: dict[str, Any], results: list[dict[str, Any]]
) -> str:
    """Markdown report: configuration, results table and machine info."""
    base = next(
        (r for r in results if r["contender"] == "dataloader" and "error" not in r),
        None,
    )
    lines = [
        (
            f"Data: `{config['data']}` ({config.get('dataset', '')}), batch size "
            f"{config['batch_size']}, {config['threads']} workers/threads, "
            f"1 warm-up + {config['epochs']} timed epochs, Resize({RESIZE}) + "
            f"CenterCrop({CROP}) -> uint8"
        ),
        "",
        (
            "| contender | images/s | vs DataLoader | CPU s/img | peak RSS MB "
            "| peak anon MB | first batch s |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            lines.append(
                f"| {r['contender']} | failed: {_one_line(r['error'])} | | | | | |"
            )
            continue
        ratio = r["images_per_s"] / base["images_per_s"] if base else None
        lines.append(
            f"| {r['contender']} | {_fmt(r['images_per_s'], '.0f')} | {_fmt(ratio, '.2f')}x "
            f"| {_fmt(r['cpu_s_per_image'], '.4f')} | {_fmt(r.get('peak_rss_mb'), '.0f')} "
            f"| {_fmt(r.get('peak_anon_mb'), '.0f')} | {_fmt(r['first_batch_s'], '.3f')} |"
        )
    lines.append("")
    for r in results:
        if "error" in r:
            continue
        per_epoch = ", ".join(f"{e['images'] / e['wall_s']:.0f}" for e in r["epochs"])
        lines.append(
            f"- {r['contender']}: {r['images']} images/epoch, per-epoch img/s "
            f"[{per_epoch}], import {r['import_s']:.2f} s, set-up {r['setup_s']:.2f} s, "
            f"warm-up first batch {r['warmup']['first_batch_s']:.3f} s, after imports "
            f"RSS {_fmt(r.get('baseline_rss_mb'), '.0f')} MB / anon "
            f"{_fmt(r.get('baseline_anon_mb'), '.0f')} MB, processes: "
            f"{r['max_processes']}, 1-min load average at start "
            f"{r['loadavg_at_start']:.2f}; batches: {r['first_batch_shapes']}"
        )
        lines.extend(f"  - WARNING: {problem}" for problem in r.get("problems", []))
    measured = next((r for r in results if "cpu_method" in r), None)
    if measured:
        lines.append(f"- CPU time: {measured['cpu_method']}")
        lines.append(f"- Memory: {measured['memory_method']}")
    lines.append("")
    lines.append(
        f"Machine: {info['cpu']}, {info['cores']} cores, Linux {info['kernel']}, "
        f"Python {info['python']}, torch {info['torch']}, torchvision "
        f"{info['torchvision']}, Pillow {info['pillow']} (libjpeg-turbo "
        f"{info.get('pillow_libjpeg_turbo', '?')}), ringloader {info['ringloader']}; "
        f"{info['date']}"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# --check
# ---------------------------------------------------------------------------


def run_check(args: argparse.Namespace) -> int:
    """Verify that both loaders yield the same number of samples.

    Also compares the label sequences and, where the batches line up, reports
    the mean absolute pixel difference between the two outputs (the resize
    filters differ, so small differences are expected).
    """
    import torch

    loaders: dict[str, Iterable[Any]] = {}
    datasets: dict[str, Any] = {}
    for name in CONTENDERS:
        try:
            loaders[name], datasets[name] = FACTORIES[name](
                args.data, args.batch_size, args.threads, args.prefetch
            )
        except Exception as exc:  # noqa: BLE001 - reported, then the check fails
            print(
                f"error: cannot create the {name} loader: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 2
        classes = getattr(datasets[name], "classes", None)
        size = dataset_length(datasets[name])
        print(
            f"{name}: data set of {size} samples, "
            f"{len(classes) if classes is not None else '?'} classes"
        )

    counts = dict.fromkeys(CONTENDERS, 0)
    labels: dict[str, list[torch.Tensor]] = {name: [] for name in CONTENDERS}
    diffs: list[tuple[int, torch.Tensor]] = []  # (first sample index, per image)
    # Iterate both loaders in lockstep so that no output has to be stored.
    for batches in itertools.zip_longest(*(iter(loaders[n]) for n in CONTENDERS)):
        for name, batch in zip(CONTENDERS, batches):
            if batch is not None:
                counts[name] += int(batch[0].shape[0])
                labels[name].append(torch.as_tensor(batch[1]).flatten().to(torch.int64))
        ref, new = batches
        if ref is not None and new is not None and ref[0].shape == new[0].shape:
            diff = (ref[0].to(torch.int16) - new[0].to(torch.int16)).abs()
            start = counts["dataloader"] - int(ref[0].shape[0])
            diffs.append((start, diff.flatten(1).float().mean(1)))

    print(
        f"samples: dataloader {counts['dataloader']}, ringloader {counts['ringloader']}"
    )
    seqs = {name: torch.cat(v) if v else torch.empty(0) for name, v in labels.items()}
    print(
        f"label sequences identical: {torch.equal(seqs['dataloader'], seqs['ringloader'])}"
    )
    if diffs:
        per_image = torch.cat([d for _, d in diffs])
        index = torch.cat([torch.arange(i, i + len(d)) for i, d in diffs])
        print(
            f"mean |pixel difference| over {per_image.numel()} aligned images: "
            f"{per_image.mean():.2f} (0-255 scale); largest:"
        )
        samples = getattr(datasets["dataloader"], "samples", None)
        for k in torch.argsort(per_image, descending=True)[:3].tolist():
            i = int(index[k])
            path = samples[i][0] if samples else f"sample {i}"
            print(f"  {per_image[k]:.2f}  {path}")
    if counts["dataloader"] != counts["ringloader"]:
        print("CHECK FAILED: different number of samples")
        return 1
    print("CHECK OK: same number of samples")
    return 0


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", help=f"ImageFolder root (default: build {DEFAULT_DATA})"
    )
    parser.add_argument(
        "--images",
        type=int,
        default=2000,
        help="images to build when --data is not given",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="DataLoader workers / ringloader threads",
    )
    parser.add_argument(
        "--epochs", type=int, default=2, help="timed epochs after the warm-up epoch"
    )
    parser.add_argument(
        "--prefetch", type=int, default=4, help="ringloader prefetch depth (batches)"
    )
    parser.add_argument(
        "--only",
        choices=CONTENDERS,
        action="append",
        help="run only this contender (repeatable)",
    )
    parser.add_argument(
        "--json", metavar="OUT", help="also write the results as JSON to OUT"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only verify that both loaders yield the same number of samples",
    )
    parser.add_argument(
        "--no-anon",
        action="store_true",
        help="do not sample the anonymous memory (saves some CPU)",
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds allowed per contender"
    )
    parser.add_argument("--contender", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.threads < 1:
        parser.error("--epochs, --batch-size and --threads must be positive")
    return args


def prepare_data(args: argparse.Namespace) -> str:
    """Return the data root, building the default data set if needed."""
    if args.data:
        if not Path(args.data).is_dir():
            raise SystemExit(f"error: --data {args.data} is not a directory")
        return args.data
    sys.path.insert(0, str(HERE))
    import make_imagenet_like

    root = make_imagenet_like.build(DEFAULT_DATA, images=args.images)
    print(make_imagenet_like.summary(root), file=sys.stderr)
    return root


def describe_data(root: str) -> str:
    """Short description of the data folder (count and size)."""
    files = [p for p in Path(root).glob("*/*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return f"{len(files)} files, {size / 1e6:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    args = parse_args(argv)
    if args.contender:  # internal: run inside the fresh subprocess
        result = run_contender(args)
        print(RESULT_TAG + json.dumps(result), flush=True)
        return 0 if "error" not in result else 1

    args.data = prepare_data(args)
    if args.check:
        return run_check(args)

    info = machine_info()
    config = {
        "data": args.data,
        "dataset": describe_data(args.data),
        "batch_size": args.batch_size,
        "threads": args.threads,
        "epochs": args.epochs,
        "prefetch": args.prefetch,
    }
    results = [spawn_contender(name, args) for name in args.only or CONTENDERS]
    for r in results:  # versions as seen by the imported modules
        for key in ("torch", "torchvision", "ringloader"):
            if r.get(f"{key}_version"):
                info[key] = r[f"{key}_version"]
    report = format_report(info, config, results)
    print(report)
    if args.json:
        payload = {
            "machine": info,
            "config": config,
            "results": results,
            "report": report,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
