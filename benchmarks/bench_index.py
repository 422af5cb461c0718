"""Benchmark of the ImageFolder index cache on a million files.

Creates a synthetic ImageFolder of ``--classes`` x ``--files`` tiny files
(1000 x 1000 by default) in a temporary folder on the local disk, then, each
step in a fresh process:

1. the first scan: ``build_index`` (walk, stat every file, write the index),
   in files/s;
2. loading the cached index (stat of every directory plus reading the
   arrays), as ``IndexedImageFolder`` does at each start;
3. the memory the index takes: the arrays held (tracemalloc, which sees
   numpy's allocations), the peak while loading, and the peak RSS growth of
   the process, against the 100 MB target;
4. for comparison, torchvision's ``ImageFolder`` listing the same folder
   (``--no-torchvision`` to skip).

The files were just created, so their directory entries and inodes are in
the kernel's caches: the scan is measured warm. With ``--cold``, where the
script may write ``/proc/sys/vm/drop_caches`` (root), it also measures a scan
after dropping those caches, for the whole machine. The folder is deleted at the end unless ``--keep``. Not run in CI.

Usage::

    nice python benchmarks/bench_index.py [--classes 1000] [--files 1000]
        [--dir /tmp] [--bytes 1] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _child(mode: str, root: str, cache: str) -> dict:
    """One measurement, in this (fresh) process."""
    import tracemalloc

    import numpy  # noqa: F401  (imported before the baseline)
    from ringloader import IndexedImageFolder, build_index

    if mode == "torchvision":
        from torchvision.datasets import ImageFolder
    base_rss = _rss_kb()
    out: dict = {}
    if mode == "build":
        t0 = time.perf_counter()
        index = build_index(root, cache_dir=cache, progress=False, force=True)
        out["seconds"] = time.perf_counter() - t0
        out["files"] = len(index)
        out["index_file_bytes"] = os.path.getsize(index.file)
        out["index_nbytes"] = index.nbytes
    elif mode == "load":
        t0 = time.perf_counter()
        ds = IndexedImageFolder(root, cache_dir=cache)
        out["seconds"] = time.perf_counter() - t0
        assert ds.index.reused, "the cached index was not reused"
        out["files"] = len(ds)
        t0 = time.perf_counter()
        src = ds.ringloader_sources()
        paths = [src.paths[i] for i in range(0, len(ds), max(1, len(ds) // 1000))]
        out["sample_paths_ok"] = all(os.path.basename(p) for p in paths)
        out["sources_seconds"] = time.perf_counter() - t0
        del ds, src
        tracemalloc.start()
        ds = IndexedImageFolder(root, cache_dir=cache)
        out["held_bytes"] = tracemalloc.get_traced_memory()[0]
        out["peak_bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del ds
    elif mode == "torchvision":
        t0 = time.perf_counter()
        ds = ImageFolder(root, loader=lambda p: p)
        out["seconds"] = time.perf_counter() - t0
        out["files"] = len(ds)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["rss_growth_bytes"] = max(0, peak_kb - base_rss) * 1024
    return out


def _run_child(mode: str, root: str, cache: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, root, cache]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _make_tree(root: str, classes: int, files: int, nbytes: int) -> float:
    data = b"\xff" * nbytes
    t0 = time.perf_counter()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for c in range(classes):
        d = os.path.join(root, f"n{c:08d}")
        os.mkdir(d)
        for i in range(files):
            fd = os.open(os.path.join(d, f"n{c:08d}_{i:06d}.JPEG"), flags, 0o644)
            if data:
                os.write(fd, data)
            os.close(fd)
        if c % 50 == 49:
            done = (c + 1) * files
            rate = done / (time.perf_counter() - t0)
            print(f"  created {done:,} files ({rate:,.0f}/s)", file=sys.stderr)
    return time.perf_counter() - t0


def _drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")  # dentries and inodes
        return True
    except OSError:
        return False


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(_child(*sys.argv[2:5])))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--files", type=int, default=1000, help="files per class")
    ap.add_argument("--bytes", type=int, default=1, help="size of each file")
    ap.add_argument("--dir", default=None, help="where to create the folder")
    ap.add_argument("--keep", action="store_true", help="keep the folder")
    ap.add_argument("--no-torchvision", action="store_true")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="also time a scan after dropping the kernel's dentry and inode "
        "caches (needs root; affects the whole machine)",
    )
    args = ap.parse_args()

    top = tempfile.mkdtemp(prefix="ringloader-bench-index-", dir=args.dir)
    root, cache = os.path.join(top, "data"), os.path.join(top, "cache")
    os.mkdir(root)
    n = args.classes * args.files
    try:
        print(f"creating {n:,} files in {root} ...", file=sys.stderr)
        made = _make_tree(root, args.classes, args.files, args.bytes)
        print(f"created in {made:.1f} s", file=sys.stderr)

        build = _run_child("build", root, cache)
        assert build["files"] == n
        cold = None
        if args.cold and _drop_caches():
            cold = _run_child("build", root, cache)
        load = _run_child("load", root, cache)
        tv = None if args.no_torchvision else _run_child("torchvision", root, cache)

        mb = 1e6
        print(
            f"\nImageFolder index, {n:,} files ({args.classes} classes x "
            f"{args.files}, {args.bytes}-byte files)"
        )
        print(
            f"first scan (warm cache): {build['seconds']:.2f} s, "
            f"{n / build['seconds']:,.0f} files/s"
        )
        if cold is not None:
            print(
                f"first scan (cold cache): {cold['seconds']:.2f} s, "
                f"{n / cold['seconds']:,.0f} files/s"
            )
        else:
            print("first scan (cold cache): not measured (pass --cold, as root)")
        print(
            f"index file: {build['index_file_bytes'] / mb:.1f} MB; arrays "
            f"{build['index_nbytes'] / mb:.1f} MB"
        )
        print(f"scan process peak RSS growth: {build['rss_growth_bytes'] / mb:.1f} MB")
        print(
            f"load cached index: {load['seconds'] * 1e3:.0f} ms "
            f"(+ {load['sources_seconds'] * 1e3:.1f} ms for sources and "
            "1000 paths)"
        )
        print(
            f"index memory held: {load['held_bytes'] / mb:.1f} MB; peak while "
            f"loading {load['peak_bytes'] / mb:.1f} MB (tracemalloc); load "
            f"process peak RSS growth {load['rss_growth_bytes'] / mb:.1f} MB "
            "(target < 100 MB)"
        )
        if tv is not None:
            print(
                f"torchvision ImageFolder listing: {tv['seconds']:.2f} s "
                f"({n / tv['seconds']:,.0f} files/s), peak RSS growth "
                f"{tv['rss_growth_bytes'] / mb:.1f} MB, at every start"
            )
    finally:
        if args.keep:
            print(f"kept {top}", file=sys.stderr)
        else:
            t0 = time.perf_counter()
            shutil.rmtree(top)
            print(f"removed {top} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
