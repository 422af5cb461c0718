"""The ``ringloader`` command (also ``python -m ringloader``).

- ``bench``: ringloader and torch's DataLoader side by side on the same
  JPEG folder, same transforms, same uint8 output, for each thread count;
  prints a table and plots images/s against threads.
- ``index ROOT``: builds the ImageFolder index cache
  (``ringloader.datasets.index``).
- ``info``: versions, I/O backend, CUDA, libjpeg-turbo, SIMD, CPUs.
- ``data DIR``: writes a small ImageNet-like ImageFolder tree of generated
  JPEGs (what the README's examples read), once.

Optional packages only add to the output: tqdm (progress bars), matplotlib
(the plot), torchvision (the DataLoader side of the benchmark), Pillow (the
generated data set). Each missing one is named with its reason.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from typing import Any, Optional, Sequence

from .bench import harness, system
from .bench.base import PIPELINES

__all__ = ["main"]


# ---------------------------------------------------------------- helpers


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


# ------------------------------------------------------------------ bench


def _bench_data(args: argparse.Namespace) -> tuple[str, str]:
    """(root, how it was made) of the folder to benchmark."""
    if args.data:
        if not os.path.isdir(args.data):
            raise SystemExit(f"ringloader bench: {args.data} is not a directory")
        return args.data, "your folder"
    from .bench import data

    try:
        root = data.demo_folder(
            args.images, seed=0, cache_dir=args.cache_dir, progress=args.progress
        )
    except RuntimeError as e:  # Pillow missing
        raise SystemExit(f"ringloader bench: {e}") from None
    return root, data.describe(root)


def _plot(args: argparse.Namespace, results: list, names: list, n: int) -> str:
    """Writes the plot; returns what to tell the user."""
    from .bench import plots

    title = (
        f"{args.pipeline} ({PIPELINES[args.pipeline]})\n{n} images, batch "
        f"{args.batch_size}, {len(system.cpus())} CPUs"
    )
    try:
        plots.scaling(args.plot, results, names, args.pipeline, args.threads, title)
    except ImportError:
        return "plot: not written: matplotlib is not installed (pip install matplotlib)"
    except OSError as e:
        return f"plot: not written: {e}"
    return f"plot: wrote {os.path.abspath(args.plot)}"


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import data, report

    root, origin = _bench_data(args)
    classes, samples = data.scan_folder(root)
    images = args.images if args.data else None
    picked = [samples[i] for i in data.spread(len(samples), images)]
    if len(picked) < args.batch_size:
        args.batch_size = max(1, len(picked))
    why_no_dl = None
    if args.no_dataloader:
        why_no_dl = "--no-dataloader"
    elif _version("torchvision") is None:
        why_no_dl = (
            "torchvision is not installed (pip install torchvision), so "
            "only ringloader runs"
        )
    with_dl = why_no_dl is None
    order = "shuffled" if args.pipeline == "train" else "in order"
    print(
        f"ringloader bench: {args.pipeline} pipeline ({PIPELINES[args.pipeline]}), "
        f"uint8 NCHW, batch size {args.batch_size}, {order}"
    )
    print(
        f"data: {len(picked)} JPEGs in {len(classes)} classes at {root}"
        + (f" ({origin})" if origin else "")
    )
    rounds = f", median of {args.rounds} rounds" if args.rounds > 1 else ""
    print(
        f"machine: {len(system.cpus())} CPUs usable; {args.epochs} epoch(s) per run, "
        f"wall time of whole epochs (start-up included), page cache warm{rounds}"
    )
    if with_dl:
        print(
            "baseline: torch.utils.data.DataLoader(num_workers=threads) over "
            "torchvision ImageFolder (PIL decode, torchvision transforms)"
        )
    else:
        print(f"baseline: not run: {why_no_dl}")
    sys.stdout.flush()

    data.warm([p for p, _ in picked])
    names = ["ringloader"] + (["dataloader"] if with_dl else [])
    template = harness.Spec(
        "ringloader",
        args.pipeline,
        threads=1,
        data=root,
        batch_size=args.batch_size,
        epochs=args.epochs,
        warmup=0,
        images=images,
    )
    specs = harness.plan(names, [args.pipeline], args.threads, template)
    run = harness.Runner(subprocess=False, progress=args.progress, verbose=False)
    results = harness.run_rounds(specs, args.rounds, run, say=None)
    print()
    print("\n".join(report.cli_table(results, args.threads, args.pipeline, with_dl)))
    for r in results:
        if "error" in r:
            who = "DataLoader" if r["contender"] == "dataloader" else "ringloader"
            print(f"{who} with {r['threads']} thread(s) failed: {r['error']}")
    summary = report.ratio_summary(results, args.threads, args.pipeline)
    if summary:
        print(f"\n{summary}")
    for line in report.rounds_line(results):
        print(line)
    if args.json:
        harness.write_json(args.json, {"data": root, "results": results})
        print(f"json: wrote {os.path.abspath(args.json)}")
    if args.plot:
        print(_plot(args, results, names, len(picked)))
    else:
        print("plot: not written (--plot '')")
    failed = [r for r in results if r["contender"] == "ringloader" and "error" in r]
    return 1 if failed else 0


# ------------------------------------------------------------------ index


def cmd_data(args: argparse.Namespace) -> int:
    from .bench import data

    try:
        root = data.build(
            args.dir, args.images, args.classes, seed=0, progress=args.progress
        )
    except (RuntimeError, FileExistsError, ValueError) as e:
        raise SystemExit(f"ringloader data: {e}") from None
    print(f"{root}: {data.summary(root)}")
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from .datasets.index import build_index

    kwargs: dict[str, Any] = {"cache_dir": args.cache_dir, "progress": args.progress}
    if args.force:
        kwargs["force"] = True
    t0 = time.perf_counter()
    try:
        index = build_index(args.root, **kwargs)
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
    from . import _simd

    lines.append(f"SIMD, ringloader resampler: {_simd.describe()}")
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
        f"CPUs: {len(system.cpus())} usable of {os.cpu_count()} ({system.cpu_model()}, "
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
        type=harness.parse_threads,
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
    b.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run everything this many times, round-robin, and report each "
        "run's median (default 1)",
    )
    b.add_argument("--json", metavar="PATH", help="also write the results as JSON")
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

    d = sub.add_parser(
        "data",
        help="write a small ImageNet-like folder of JPEGs (the README's examples)",
        description="Write an ImageFolder tree of generated JPEGs to DIR "
        "(class_000/img_000000.JPEG...), ImageNet-like in sizes and encodings; "
        "nothing is done when DIR already holds the same folder.",
    )
    d.add_argument("dir", metavar="DIR")
    d.add_argument("--images", type=int, default=128, help="JPEGs (default 128)")
    d.add_argument("--classes", type=int, default=4, help="classes (default 4)")
    d.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar"
    )
    d.set_defaults(func=cmd_data)

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
            args.threads = harness.parse_threads(None)
        if args.images is None and not args.data:
            args.images = 1000
        if min(args.batch_size, args.epochs, args.rounds, args.images or 1) < 1:
            parser.error(
                "--batch-size, --epochs, --rounds and --images must be positive"
            )
    return int(args.func(args) or 0)
