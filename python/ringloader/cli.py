"""The ``ringloader`` command (also ``python -m ringloader``).

- ``bench``: ringloader and torch's DataLoader side by side on the same
  JPEG folder, same transforms, same uint8 output, for each thread count;
  prints a table and plots images/s against threads.
- ``index ROOT``: builds the ImageFolder index cache (when this version has
  ``ringloader.index``).
- ``info``: versions, I/O backend, CUDA, libjpeg-turbo, SIMD, CPUs.

Optional packages only add to the output: tqdm (progress bars), matplotlib
(the plot), torchvision (the DataLoader side of the benchmark), Pillow (the
generated data set). Each missing one is named with its reason.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import resource
import statistics
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

__all__ = ["main"]


# ---------------------------------------------------------------- helpers


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _version(module: str) -> Optional[str]:
    """The module's version, or None when it cannot be imported."""
    try:
        mod = importlib.import_module(module)
    except Exception:
        return None
    return str(getattr(mod, "__version__", "installed"))


def _dist_version(dist: str) -> Optional[str]:
    """An installed distribution's version without importing it (fast)."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _parse_threads(text: Optional[str]) -> list[int]:
    """'1,2,4' or '1-4' (or a mix) to a sorted list; default 1..cores."""
    if not text:
        return list(range(1, _cpus() + 1))
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(
            f"bad thread list {text!r}: use e.g. 1,2,4 or 1-4"
        )
    return sorted(out)


class _Bar:
    """A tqdm bar when tqdm is installed and wanted, else nothing."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self.bar = tqdm(
                total=total, desc=desc, unit="batch", leave=False, file=sys.stderr
            )

    def update(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ------------------------------------------------------------------ bench


PIPELINES = {
    "train": "RandomResizedCrop(224) + RandomHorizontalFlip",
    "eval": "Resize(256) + CenterCrop(224)",
}


@dataclass
class Run:
    loader: str
    threads: int
    images: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    error: Optional[str] = None
    epochs: list[float] = field(default_factory=list)

    @property
    def images_per_second(self) -> Optional[float]:
        if self.error or self.seconds <= 0:
            return None
        return self.images / self.seconds

    @property
    def cpu_ms_per_image(self) -> Optional[float]:
        if self.error or not self.images:
            return None
        return 1e3 * self.cpu_seconds / self.images


def _cpu_time() -> float:
    """CPU seconds of this process and of its reaped children (DataLoader
    workers are reaped when their iterator ends)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def _timed(
    run: Run, make_iter: Callable[[], Any], batches: int, epochs: int, progress: bool
) -> Run:
    """Consumes `epochs` epochs of make_iter(); fills run in."""
    bar = _Bar(batches * epochs, f"{run.loader:>10} {run.threads} thr", progress)
    cpu0 = _cpu_time()
    try:
        for _ in range(epochs):
            t0 = time.perf_counter()
            n = 0
            it = make_iter()
            for images, _labels in it:
                n += images.shape[0]
                bar.update()
            del it
            run.epochs.append(time.perf_counter() - t0)
            run.images += n
    except Exception as e:  # report and go on with the other runs
        run.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        bar.close()
    run.cpu_seconds = _cpu_time() - cpu0
    run.seconds = sum(run.epochs)
    return run


def _ringloader_transform(pipeline: str) -> Any:
    from . import transforms as T

    if pipeline == "train":
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()])
    return T.Compose([T.Resize(256), T.CenterCrop(224)])


def _torchvision_transform(pipeline: str) -> Any:
    from torchvision import transforms as v1

    if pipeline == "train":
        head = [v1.RandomResizedCrop(224), v1.RandomHorizontalFlip()]
    else:
        head = [v1.Resize(256), v1.CenterCrop(224)]
    return v1.Compose(head + [v1.PILToTensor()])  # uint8, as ringloader's


def _subset(samples: list, n: Optional[int]) -> list[int]:
    """Indices of n samples spread over the whole folder (all by default)."""
    if n is None or n >= len(samples):
        return list(range(len(samples)))
    step = len(samples) / n
    return [int(i * step) for i in range(n)]


def _warm(paths: Sequence[str]) -> None:
    """Reads every file once so both loaders start with a warm page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


def _bench_ringloader(samples: list, args: argparse.Namespace, threads: int) -> Run:
    from .loader import Loader

    class Files:
        def __init__(self, s: list) -> None:
            self.samples = s

        def __len__(self) -> int:
            return len(self.samples)

    loader = Loader(
        Files(samples),
        batch_size=args.batch_size,
        shuffle=True,
        num_threads=threads,
        transform=_ringloader_transform(args.pipeline),
    )
    try:
        return _timed(
            Run("ringloader", threads),
            lambda: iter(loader),
            len(loader),
            args.epochs,
            args.progress,
        )
    finally:
        loader.close()


def _bench_dataloader(
    root: str, indices: list[int], args: argparse.Namespace, threads: int
) -> Run:
    import torch
    from torchvision import datasets

    transform = _torchvision_transform(args.pipeline)
    dataset = datasets.ImageFolder(root, transform=transform)
    subset = torch.utils.data.Subset(dataset, indices)
    loader = torch.utils.data.DataLoader(
        subset, batch_size=args.batch_size, shuffle=True, num_workers=threads
    )
    return _timed(
        Run("DataLoader", threads),
        lambda: iter(loader),
        len(loader),
        args.epochs,
        args.progress,
    )


def _fmt(value: Optional[float], spec: str, width: int) -> str:
    return format("-" if value is None else format(value, spec), f">{width}")


def _table(runs: dict[tuple[str, int], Run], threads: list[int], with_dl: bool) -> str:
    head = ["threads", "ringloader img/s"]
    if with_dl:
        head += ["DataLoader img/s", "ratio"]
    head += ["CPU ms/img ringloader"]
    if with_dl:
        head += ["CPU ms/img DataLoader"]
    widths = [len(h) for h in head]
    lines = [" | ".join(head), "-|-".join("-" * w for w in widths)]
    for t in threads:
        rl = runs[("ringloader", t)]
        cells = [str(t), _fmt(rl.images_per_second, ".1f", 0)]
        if with_dl:
            dl = runs[("DataLoader", t)]
            ratio = (
                rl.images_per_second / dl.images_per_second
                if rl.images_per_second and dl.images_per_second
                else None
            )
            cells += [
                _fmt(dl.images_per_second, ".1f", 0),
                "-" if ratio is None else f"{ratio:.2f}x",
            ]
        cells += [_fmt(rl.cpu_ms_per_image, ".2f", 0)]
        if with_dl:
            cells += [_fmt(runs[("DataLoader", t)].cpu_ms_per_image, ".2f", 0)]
        lines.append(" | ".join(c.rjust(w) for c, w in zip(cells, widths)))
    return "\n".join(lines)


def _plot(
    path: str, runs: dict[tuple[str, int], Run], threads: list[int], title: str
) -> str:
    """Writes the plot; returns what to tell the user."""
    try:
        import matplotlib
    except ImportError:
        return "plot: not written: matplotlib is not installed (pip install matplotlib)"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, marker in (("ringloader", "o"), ("DataLoader", "s")):
        pts = [
            (t, runs[(name, t)].images_per_second)
            for t in threads
            if (name, t) in runs and runs[(name, t)].images_per_second
        ]
        if pts:
            label = name if name == "ringloader" else "torch DataLoader (num_workers)"
            ax.plot(
                [p[0] for p in pts], [p[1] for p in pts], marker=marker, label=label
            )
    ax.set_xlabel("threads (ringloader) / worker processes (DataLoader)")
    ax.set_ylabel("images per second")
    ax.set_xticks(threads)
    ax.set_ylim(bottom=0)
    # Wrapped, so a long description is not cut at the figure's edge.
    ax.set_title(
        "\n".join(textwrap.fill(line, 80) for line in title.split("\n")),
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        return f"plot: not written: {e}"
    finally:
        plt.close(fig)
    return f"plot: wrote {os.path.abspath(path)}"


def _bench_data(args: argparse.Namespace) -> tuple[str, str]:
    """(root, how it was made) of the folder to benchmark."""
    if args.data:
        if not os.path.isdir(args.data):
            raise SystemExit(f"ringloader bench: {args.data} is not a directory")
        return args.data, "your folder"
    from . import _demo

    try:
        root = _demo.demo_folder(
            args.images, seed=0, cache_dir=args.cache_dir, progress=args.progress
        )
    except RuntimeError as e:  # Pillow missing
        raise SystemExit(f"ringloader bench: {e}") from None
    return root, _demo.describe(root)


def cmd_bench(args: argparse.Namespace) -> int:
    from .folder import ImageFolder

    threads = args.threads
    root, origin = _bench_data(args)
    folder = ImageFolder(root)
    indices = _subset(folder.samples, args.images if args.data else None)
    samples = [folder.samples[i] for i in indices]
    if len(samples) < args.batch_size:
        args.batch_size = max(1, len(samples))

    why_no_dl = None
    if args.no_dataloader:
        why_no_dl = "--no-dataloader"
    elif _version("torchvision") is None:
        why_no_dl = (
            "torchvision is not installed (pip install torchvision), so "
            "only ringloader runs"
        )
    with_dl = why_no_dl is None

    print(
        f"ringloader bench: {args.pipeline} pipeline ({PIPELINES[args.pipeline]}), "
        f"uint8 NCHW, batch size {args.batch_size}, shuffled"
    )
    print(
        f"data: {len(samples)} JPEGs in {len(folder.classes)} classes at {root}"
        + (f" ({origin})" if origin else "")
    )
    print(
        f"machine: {_cpus()} CPUs usable; {args.epochs} epoch(s) per run, wall "
        "time of whole epochs (start-up included), page cache warm"
    )
    if with_dl:
        print(
            "baseline: torch.utils.data.DataLoader(num_workers=threads) over "
            "torchvision ImageFolder (PIL decode, torchvision transforms)"
        )
    else:
        print(f"baseline: not run: {why_no_dl}")
    sys.stdout.flush()

    _warm([p for p, _ in samples])
    runs: dict[tuple[str, int], Run] = {}
    for t in threads:
        runs[("ringloader", t)] = _bench_ringloader(samples, args, t)
        if with_dl:
            runs[("DataLoader", t)] = _bench_dataloader(root, indices, args, t)
    print()
    print(_table(runs, threads, with_dl))
    for r in runs.values():
        if r.error:
            print(f"{r.loader} with {r.threads} thread(s) failed: {r.error}")
    if with_dl:
        ratios = [
            runs[("ringloader", t)].images_per_second
            / runs[("DataLoader", t)].images_per_second
            for t in threads
            if runs[("ringloader", t)].images_per_second
            and runs[("DataLoader", t)].images_per_second
        ]
        if ratios:
            print(
                f"\nringloader / DataLoader: {min(ratios):.2f}x to "
                f"{max(ratios):.2f}x (median {statistics.median(ratios):.2f}x)"
            )
    if args.plot:
        title = (
            f"{args.pipeline} ({PIPELINES[args.pipeline]})\n{len(samples)} "
            f"images, batch {args.batch_size}, {_cpus()} CPUs"
        )
        print(_plot(args.plot, runs, threads, title))
    else:
        print("plot: not written (--plot '')")
    return 1 if any(r.error for r in runs.values() if r.loader == "ringloader") else 0


# ------------------------------------------------------------------ index


def cmd_index(args: argparse.Namespace) -> int:
    try:
        index = importlib.import_module("ringloader.index")
    except ModuleNotFoundError as e:
        if e.name != "ringloader.index":
            raise
        index = None
    build = getattr(index, "build_index", None)
    if build is None:
        print(
            "ringloader index: not available in this version of ringloader "
            f"({_version('ringloader')}): it has no ringloader.index.build_index",
            file=sys.stderr,
        )
        return 2
    kwargs: dict[str, Any] = {"cache_dir": args.cache_dir, "progress": args.progress}
    if args.force:
        kwargs["force"] = True
    t0 = time.perf_counter()
    try:
        index = build(args.root, **kwargs)
    except (OSError, ValueError) as e:
        print(f"ringloader index: {e}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - t0
    n = len(index) if hasattr(index, "__len__") else None
    classes = getattr(index, "classes", None)
    what = (
        "loaded (unchanged since it was built)"
        if getattr(index, "reused", False)
        else "built"
    )
    summary = [f"{args.root}: index {what} in {seconds:.2f} s"]
    if n is not None:
        summary.append(f"{n} images")
    if classes is not None:
        summary.append(f"{len(classes)} classes")
    print(", ".join(summary))
    if getattr(index, "file", None):
        print(f"index file: {index.file}")
    return 0


# ------------------------------------------------------------------- info


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _libjpeg_path() -> Optional[str]:
    """The file ringloader's extension takes libjpeg from: the mapped
    library whose name is the extension's DT_NEEDED entry (torchvision
    brings a libjpeg of its own into the same process), or the extension
    itself when libjpeg is linked in statically."""
    import re

    from . import _core

    core = getattr(_core, "__file__", None)
    if core is None:
        return None
    try:
        with open(core, "rb") as f:
            needed = re.search(rb"libjpeg\.so[.0-9]*", f.read())
    except OSError:
        return None
    if needed is None:
        return core
    name = needed.group().decode()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith(name) and os.path.exists(path):
                    return path
    except OSError:
        pass
    return None


def _simd_lines() -> list[str]:
    """What SIMD libjpeg-turbo and ringloader's resampler use, from the CPU
    flags, libjpeg-turbo's own environment switches and whether the library
    carries its SIMD dispatch code (no LD_DEBUG, no decoding)."""
    arch = platform.machine().lower()
    flags = _cpu_flags()
    lines = []
    lib = _libjpeg_path()
    has_simd_code: Optional[bool] = None
    if lib is not None:
        try:
            with open(lib, "rb") as f:
                has_simd_code = b"JSIMD_FORCENONE" in f.read()
        except OSError:
            pass
    if has_simd_code is False:
        jpeg = "none (this libjpeg-turbo was built without SIMD)"
    elif os.environ.get("JSIMD_FORCENONE") == "1":
        jpeg = "none (disabled by JSIMD_FORCENONE=1)"
    elif arch in ("x86_64", "amd64"):
        if os.environ.get("JSIMD_FORCESSE2") == "1":
            jpeg = "SSE2 (forced by JSIMD_FORCESSE2=1)"
        elif "avx2" in flags:
            jpeg = "AVX2 (CPU has avx2)"
        elif "sse2" in flags:
            jpeg = "SSE2 (CPU has sse2, no avx2)"
        else:
            jpeg = "none (CPU flags show no sse2)"
    elif arch in ("aarch64", "arm64"):
        jpeg = "NEON" if ("asimd" in flags or arch == "arm64") else "none"
    else:
        jpeg = f"unknown on {arch}"
    where = f" [{lib}]" if lib else ""
    lines.append(f"SIMD, libjpeg-turbo: {jpeg}{where}")
    from . import _core

    level = _core.resample_simd()
    resampler = {
        "avx2": "AVX2 (CPU has avx2)",
        "sse2": "SSE2 (x86-64 baseline)",
        "c": "portable C",
    }[level]
    if os.environ.get("RINGLOADER_SIMD") in ("c", "sse2"):
        resampler += f" (capped by RINGLOADER_SIMD={os.environ['RINGLOADER_SIMD']})"
    elif level == "c":
        resampler += " (no SIMD kernels for this architecture)"
    lines.append(f"SIMD, ringloader resampler: {resampler}")
    return lines


def _cuda_lines() -> list[str]:
    from . import _core

    lines = []
    probe = getattr(_core, "cuda_probe", None)
    if callable(probe):
        try:
            result = probe()
        except Exception as e:  # report, never fail `info`
            result = f"probe failed: {e}"
        if isinstance(result, tuple) and len(result) >= 4:
            # (available, message, library, device_count)
            ok, message, library, count = result[:4]
            if ok:
                lines.append(
                    f"ringloader CUDA path: runtime found ({library}, "
                    f"{count} device(s))"
                )
            elif library:
                lines.append(
                    f"ringloader CUDA path: {library} found but not usable: {message}"
                )
            else:
                lines.append(
                    "ringloader CUDA path: no CUDA runtime found"
                    + (f" ({message})" if message else "")
                )
        else:
            lines.append(f"ringloader CUDA path: {result}")
    else:
        lines.append("ringloader CUDA path: not built")
    try:
        import torch

        if torch.cuda.is_available():
            names = ", ".join(
                torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
            )
            lines.append(
                f"CUDA (torch): runtime {torch.version.cuda} found, "
                f"{torch.cuda.device_count()} device(s): {names}"
            )
        elif torch.version.cuda is None:
            lines.append("CUDA (torch): not found (this torch is a CPU-only build)")
        else:
            lines.append(
                f"CUDA (torch): built for CUDA {torch.version.cuda}, but "
                "no usable device or driver (torch.cuda.is_available() "
                "is False)"
            )
    except ImportError:
        lines.append("CUDA (torch): torch is not installed")
    return lines


def cmd_info(args: argparse.Namespace) -> int:
    from . import __version__, _core

    pkg = os.path.dirname(os.path.abspath(__file__))
    print(f"ringloader {__version__} ({pkg})")
    print(f"python {platform.python_version()} ({sys.executable})")
    import torch

    print(f"torch {torch.__version__}")
    for name in ("torchvision", "numpy", "Pillow"):
        print(f"{name} {_dist_version(name) or 'not installed'}")
    optional = []
    for name in ("tqdm", "matplotlib", "prometheus_client", "scikit-image"):
        optional.append(f"{name} {_dist_version(name) or 'not installed'}")
    print("optional: " + ", ".join(optional))

    ok, reason = _core.io_probe()
    forced = os.environ.get("RINGLOADER_IO")
    if ok:
        io_line = "io_uring: available"
    else:
        why = reason or "no reason given"
        io_line = f"io_uring: not available ({why}); reads use pread"
    if not getattr(_core, "built_with_liburing", True):
        io_line += " [built without liburing]"
    if forced:
        io_line += f" [RINGLOADER_IO={forced} set]"
    print(io_line)
    for line in _cuda_lines():
        print(line)
    print(f"libjpeg-turbo {_core.libjpeg_version}")
    for line in _simd_lines():
        print(line)
    print(
        f"CPUs: {_cpus()} usable of {os.cpu_count()} ({_cpu_model()}, "
        f"{platform.machine()})"
    )
    return 0


# ------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ringloader",
        description="ringloader: JPEG batches for PyTorch from C threads.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    b = sub.add_parser(
        "bench",
        help="ringloader vs torch DataLoader side by side",
        description="Run ringloader and torch.utils.data.DataLoader(num_workers) "
        "on the same JPEG folder with the same transforms and uint8 output, for "
        "each thread count; print a table and plot images/s against threads.",
    )
    b.add_argument(
        "--data",
        metavar="DIR",
        help="an ImageFolder tree (default: a generated photo-like data set, cached)",
    )
    b.add_argument(
        "--images",
        type=int,
        default=None,
        metavar="N",
        help="images to use (default: 1000 generated, or all of --data)",
    )
    b.add_argument(
        "--pipeline",
        choices=sorted(PIPELINES),
        default="train",
        help="train: RandomResizedCrop(224)+flip; eval: Resize(256)+"
        "CenterCrop(224) (default: train)",
    )
    b.add_argument(
        "--threads",
        type=_parse_threads,
        default=None,
        metavar="LIST",
        help="thread / worker counts, e.g. 1,2,4 or 1-4 (default: 1 "
        "to the number of CPUs)",
    )
    b.add_argument("--batch-size", type=int, default=64)
    b.add_argument(
        "--epochs",
        type=int,
        default=3,
        help="epochs per run (default 3: one alone is dominated by start-up)",
    )
    b.add_argument(
        "--plot",
        default="ringloader-bench.png",
        metavar="PATH",
        help="PNG plot to write (default ./ringloader-bench.png; '' for none)",
    )
    b.add_argument(
        "--cache-dir",
        default=None,
        help="where the generated data set lives (default "
        "$RINGLOADER_CACHE_DIR or ~/.cache/ringloader)",
    )
    b.add_argument("--no-dataloader", action="store_true", help="run ringloader alone")
    b.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bars"
    )
    b.set_defaults(func=cmd_bench)

    i = sub.add_parser("index", help="build the ImageFolder index cache of ROOT")
    i.add_argument("root", metavar="ROOT")
    i.add_argument(
        "--cache-dir",
        default=None,
        help="where index files live (default: ringloader's cache)",
    )
    i.add_argument(
        "--force", action="store_true", help="rescan even when the folder is unchanged"
    )
    i.add_argument("--no-progress", dest="progress", action="store_false")
    i.set_defaults(func=cmd_index)

    n = sub.add_parser("info", help="versions, I/O backend, CUDA, libjpeg-turbo, SIMD")
    n.set_defaults(func=cmd_info)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "bench":
        if args.threads is None:
            args.threads = _parse_threads(None)
        if args.images is None and not args.data:
            args.images = 1000
        if args.batch_size < 1 or args.epochs < 1 or (args.images or 1) < 1:
            parser.error("--batch-size, --epochs and --images must be positive")
    return int(args.func(args) or 0)
