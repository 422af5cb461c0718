"""I/O benchmark: io_uring against pread on threads, buffered against
O_DIRECT, on many small files and on tar shards, with a warm and a cold page
cache; reading alone (ringloader's I/O layer, no decoding) and end to end
(the Loader on the eval pipeline).

    python benchmarks/bench_io.py [--data DIR] [--copies 5] [--out benchmarks/IO.md]

The data are the ImageNet-like JPEGs of ringloader.bench.data, repeated
--copies times under different names (so the set is larger than one pass
of the page cache's readahead), and the same files packed into tar shards
of about 64 MB. "Cold" drops the page cache before each run by writing to
/proc/sys/vm/drop_caches (root only; without it the cold rows say why and
are left out). Each figure is the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tarfile
from dataclasses import replace

from ringloader.bench import data as bench_data
from ringloader.bench import harness

HERE = os.path.dirname(os.path.abspath(__file__))


def drop_caches() -> str | None:
    """Empties the page cache; returns why not when it cannot."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return None
    except OSError as e:
        return f"cannot drop the page cache ({e.strerror})"


def build(data: str, copies: int, work: str) -> tuple[list[str], list[str]]:
    """Files (the data repeated `copies` times) and tar shards of them."""
    files_dir = os.path.join(work, "files")
    shards_dir = os.path.join(work, "shards")
    src = sorted(
        os.path.join(r, f)
        for r, _, fs in os.walk(data)
        for f in fs
        if f.endswith(".JPEG")
    )
    files: list[str] = []
    if not os.path.isdir(files_dir):
        os.makedirs(files_dir)
        for c in range(copies):
            for i, p in enumerate(src):
                dst = os.path.join(files_dir, f"c{c}_{i:06d}.JPEG")
                shutil.copyfile(p, dst)
    files = sorted(os.path.join(files_dir, f) for f in os.listdir(files_dir))
    if not os.path.isdir(shards_dir):
        os.makedirs(shards_dir)
        shard, size, k = None, 0, 0
        for p in files:
            if shard is None or size > 64 << 20:
                if shard is not None:
                    shard.close()
                shard = tarfile.open(os.path.join(shards_dir, f"s{k:04d}.tar"), "w")
                size, k = 0, k + 1
            shard.add(p, arcname=os.path.basename(p))
            size += os.path.getsize(p)
        shard.close()
    shards = sorted(os.path.join(shards_dir, f) for f in os.listdir(shards_dir))
    return files, shards


def shard_ranges(shards: list[str]) -> tuple[list[str], list[int], list[int]]:
    paths, offs, lens = [], [], []
    for s in shards:
        with tarfile.open(s) as t:
            for m in t.getmembers():
                if m.isfile():
                    paths.append(s)
                    offs.append(m.offset_data)
                    lens.append(m.size)
    return paths, offs, lens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--work", default="/tmp/ringloader-bench-io")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(HERE, "IO.md"))
    args = ap.parse_args()

    import ringloader
    from ringloader import _core

    if not hasattr(_core, "read_bench"):
        sys.exit(
            "bench_io.py times the I/O layer alone through a test hook, which "
            "user builds leave out: install a test build first "
            "(RINGLOADER_TEST_HOOKS=1 pip install .)"
        )

    if args.data is None:
        args.data = bench_data.build("/tmp/ringloader-bench-data", images=2000)
    files, shards = build(args.data, args.copies, args.work)
    spaths, soffs, slens = shard_ranges(shards)
    total = sum(os.path.getsize(p) for p in files)
    cold_reason = drop_caches()
    cores = len(os.sched_getaffinity(0))
    direct_ok = "direct" in _core.read_bench.__doc__

    rows = []

    def measure(kind: str, backend: str, threads: int, direct: bool, cache: str):
        paths, offs, lens = (
            (files, None, None) if kind == "files" else (spaths, soffs, slens)
        )
        best = None
        for _ in range(args.repeat):
            if cache == "cold":
                drop_caches()
            else:
                _core.read_bench(paths, offs, lens, "pread", cores, args.batch)
            kw = {"direct": direct} if direct_ok else {}
            n_bytes, secs = _core.read_bench(
                paths, offs, lens, backend, threads, args.batch, **kw
            )
            best = secs if best is None else min(best, secs)
        rows.append(
            (
                kind,
                cache,
                backend,
                threads,
                "O_DIRECT" if direct else "buffered",
                len(paths) / best,
                n_bytes / best / 1e6,
            )
        )
        print(
            *rows[-1][:5],
            f"{rows[-1][5]:.0f} files/s {rows[-1][6]:.0f} MB/s",
            flush=True,
        )

    caches = ["warm"] + (["cold"] if cold_reason is None else [])
    for kind in ("files", "shards"):
        for cache in caches:
            for direct in [False, True] if direct_ok else [False]:
                measure(kind, "io_uring", 1, direct, cache)
                for t in sorted({1, cores, 4 * cores}):
                    measure(kind, "pread", t, direct, cache)

    # End to end: the eval pipeline, both backends, warm and cold (the page
    # cache dropped after the loader is built, before its epoch).
    e2e = []
    spec = harness.Spec("ringloader", "eval", cores, args.data, args.batch, 1, 0)
    for cache in caches:
        hook = (lambda e: drop_caches()) if cache == "cold" else None
        for backend in ("io_uring", "pread"):
            runs = [
                harness.measure(
                    replace(spec, options={"io": backend}), before_epoch=hook
                )
                for _ in range(args.repeat)
            ]
            failed = [r["error"] for r in runs if "error" in r]
            if failed:
                raise SystemExit(f"loader, {cache}, {backend}: {failed[0]}")
            best = max(r["images_per_s"] for r in runs)
            e2e.append((cache, backend, best))
            print("loader", cache, backend, f"{best:.0f} images/s", flush=True)

    with open(args.out, "w") as f:
        f.write("# I/O: io_uring against pread, buffered against O_DIRECT\n\n")
        f.write(
            f"Made by `python benchmarks/bench_io.py` on "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
            f"{platform.platform()}, {cores} CPUs, Python "
            f"{platform.python_version()}, ringloader {ringloader.__version__}.\n\n"
        )
        f.write(
            f"Data: {len(files)} JPEG files ({total / 1e6:.0f} MB, "
            f"{total / len(files) / 1e3:.0f} kB each) and the same in "
            f"{len(shards)} tar shards; batches of {args.batch}; best of "
            f"{args.repeat}."
        )
        f.write(
            " Cold: page cache dropped before each run.\n\n"
            if cold_reason is None
            else f" Cold cache not measured: {cold_reason}.\n\n"
        )
        if not direct_ok:
            f.write("O_DIRECT: not measured (this build has no direct I/O).\n\n")
        f.write(
            "## Reading alone\n\n| data | cache | backend | threads | mode | "
            "files/s | MB/s |\n|---|---|---|---:|---|---:|---:|\n"
        )
        for r in rows:
            f.write(
                f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.0f} | "
                f"{r[6]:.0f} |\n"
            )
        f.write(
            "\n## End to end (eval pipeline, Loader)\n\n| cache | backend | "
            "images/s |\n|---|---|---:|\n"
        )
        for r in e2e:
            f.write(f"| {r[0]} | {r[1]} | {r[2]:.0f} |\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
