"""Where ringloader's decode threads spend their time, with perf.

Runs ringloader's train (or eval) pipeline for a few epochs under ``perf
record`` (software clock, so it works on virtual machines without hardware
counters), keeps the samples of the loader's busiest threads (the decode
pool), and prints the share of each part: libjpeg-turbo by region, the
resampler's kernels, the kernel, the rest.

libjpeg-turbo as Debian ships it is stripped of its static functions, so
its samples are grouped by the nearest exported symbol below the address
(``nm -D``): the region after ``jpeg_huff_decode`` is the rest of jdhuff.c,
the Huffman decoder; the SIMD kernels (IDCT, colour conversion, upsampling)
are hidden symbols at the end of the text and show up after the last
exported C function.

Usage::

    python benchmarks/profile_decode.py [--data DIR] [--pipeline train|eval]
        [--threads 2] [--epochs 6]

Needs ``perf`` (Debian: linux-perf). Not run in CI.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import os
import shutil
import subprocess
import sys
import tempfile

from ringloader.bench import harness


def exported_symbols(lib: str) -> tuple[list[int], list[str]]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", lib], capture_output=True, text=True
    ).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            syms.append((int(parts[0], 16), parts[2].split("@")[0]))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def perf_report(perf_data: str, *args: str) -> list[list[str]]:
    """The split lines of ``perf report`` (no call graphs) that start with a
    percentage."""
    out = subprocess.run(
        ["perf", "report", "-i", perf_data, "--no-children", "-g", "none"]
        + ["--stdio", *args],
        capture_output=True,
        text=True,
    ).stdout
    return [p for p in map(str.split, out.splitlines()) if p and p[0].endswith("%")]


def report(perf_data: str, tids: list[str]) -> list[tuple[float, str, str]]:
    """(percent, dso, symbol) rows of perf report for those threads."""
    rows = []
    for parts in perf_report(perf_data, "--sort", "dso,sym", "--tid", ",".join(tids)):
        if "[.]" in parts:
            i = parts.index("[.]")
            rows.append((float(parts[0][:-1]), parts[1], " ".join(parts[i + 1 :])))
    return rows


def decode_threads(perf_data: str, n: int) -> list[str]:
    """The n threads with the most samples in libjpeg: the decode pool (the
    main thread, busy importing torch at the start, never decodes)."""
    share: collections.Counter = collections.Counter()
    for parts in perf_report(perf_data, "--sort", "pid,dso"):
        if len(parts) >= 3 and ":" in parts[1] and parts[2].startswith("libjpeg"):
            share[parts[1].split(":")[0]] += float(parts[0][:-1])
    return [tid for tid, _ in share.most_common(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/ringloader-compare-data-2000")
    ap.add_argument("--pipeline", choices=("train", "eval"), default="train")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=6)
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: apt-get install linux-perf)")
    if not os.path.isdir(args.data):
        sys.exit(
            f"no folder {args.data}: make one with "
            f"python benchmarks/make_imagenet_like.py {args.data}"
        )
    # ringloader.bench's harness in a child: a Loader, the epochs, no warm-up.
    spec = harness.Spec(
        "ringloader",
        args.pipeline,
        args.threads,
        args.data,
        epochs=args.epochs,
        warmup=0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        subprocess.run(
            [
                "perf",
                "record",
                "-q",
                "-e",
                "cpu-clock",
                "-F",
                "4000",
                "-o",
                data,
                "--",
                *harness.child_command(spec),
            ],
            check=True,
        )
        pool = decode_threads(data, args.threads)
        rows = report(data, pool)
    jpeg_lib = next((d for _, d, _ in rows if d.startswith("libjpeg")), None)
    addrs, names = ([], [])
    if jpeg_lib is not None:
        path = next(
            (
                os.path.join(p, jpeg_lib)
                for p in (
                    "/usr/lib/x86_64-linux-gnu",
                    "/usr/lib/aarch64-linux-gnu",
                    "/usr/lib64",
                    "/usr/lib",
                )
                if os.path.exists(os.path.join(p, jpeg_lib))
            ),
            None,
        )
        if path:
            addrs, names = exported_symbols(path)
    parts: collections.Counter = collections.Counter()
    for pct, dso, sym in rows:
        if dso.startswith("libjpeg"):
            if sym.startswith("0x") and addrs:
                i = bisect.bisect_right(addrs, int(sym, 16)) - 1
                sym = f"after {names[i]}" if i >= 0 else "before the first symbol"
            parts[f"libjpeg-turbo: {sym}"] += pct
        elif dso.startswith("_core"):
            parts[f"ringloader: {sym}"] += pct
        else:
            parts[dso] += pct
    total = sum(parts.values()) or 1.0
    print(
        f"{args.pipeline} pipeline, {args.threads} decode threads, "
        f"{args.epochs} epochs of {args.data}"
    )
    print(f"share of the decode threads' samples (threads {', '.join(pool)}):")
    for name, pct in parts.most_common(20):
        print(f"  {100 * pct / total:5.1f}%  {name}")
    groups = collections.Counter()
    for name, pct in parts.items():
        key = name.split(":")[0] if ":" in name else "other"
        groups[key] += pct
    print(
        "by library: "
        + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in groups.most_common())
    )


if __name__ == "__main__":
    main()
