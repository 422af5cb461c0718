"""How ringloader's start-up and memory grow with the number of samples.

For each data set size N it measures, each contender in a fresh process:

- the time from constructing the dataset to the first batch (the dataset,
  the loader, ``iter``, the first ``next``);
- the anonymous resident memory (``RssAnon``) the process gained from
  before the dataset's input existed to after the ``--batches`` batches
  (and, as ``rss_first_bytes``, to the first batch), per sample
  (the input, a list of N paths, is dropped once the dataset holds it: a
  dataset that keeps it pays for it);
- images a second over the first ``--batches`` batches;
- each figure the median of ``--repeat`` runs (RssAnon moves by a few MB
  from run to run);
- the loader's fixed cost: the same growth for a set of ``FIXED_N``
  samples (the median of three runs), which is what the pinned batch
  slots, the threads and the imports cost whatever N is. The growth beyond
  it, divided by N, is what each sample costs.

Data (made once under ``--dir``, kept between runs):

- **FileList**: N distinct paths ``ROOT/AAAA/BBB/CCC.jpg`` over real files:
  every ``AAAA`` is a link to one folder, every ``BBB`` in it a link to
  another, whose ``CCC.jpg`` are links to a pool of small generated JPEGs,
  so any N up to 10^10 needs a few thousand links. Against torch's
  DataLoader over a map-style dataset holding the same list (Pillow,
  ``--workers`` workers).
- **TarShards**: N / 10,000 shards, each a link to one of a few real
  10,000-sample shards (``KEY.jpg`` + ``KEY.cls``), each with links to
  its real shard's sidecars (as a shard set copied with its sidecars); an
  untimed first open writes what else the set needs. ``--billion`` adds a
  simulated 10^9-sample set: 100,000 such links. Against webdataset
  (shuffled shards, ``shuffle(1000)``, the same workers). The same set is
  also read over HTTP from nginx on 127.0.0.1 (up to 10^7 samples: its
  open sends a HEAD request a shard, 100,000 of them at 10^9).

Both sides run the same transform objects (RandomResizedCrop, flip,
ToDtype, Normalize), shuffled, ``--threads`` decode threads against
``--workers`` worker processes. A size a contender cannot reach in
``--timeout`` seconds is reported as such. Results go to a JSON file and a
plot (seconds to the first batch, and bytes a sample, against N).

Usage::

    python benchmarks/bench_scale.py [--sizes 1e5 1e6 1e7] [--billion]
        [--dir DIR] [--json benchmarks/scale-results.json]
        [--plot benchmarks/plots/scale.png]

Not run in CI (the 10^7 sizes take minutes); ``--sizes 1000 --batches 2``
is a quick check that it runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
from typing import Any

SHARD_SAMPLES = 10_000
REAL_SHARDS = 4
POOL = 64
CROP = 128
# The size whose growth is taken as a contender's fixed cost: one shard.
FIXED_N = SHARD_SAMPLES
# The contender reading the shard set from nginx on 127.0.0.1.
REMOTE = "ringloader over HTTP"


# ---------------------------------------------------------------------------
# Data


def _jpegs(n: int, size: int = 96) -> list[bytes]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        x = rng.integers(0, 256, (size // 8, size // 8, 3), dtype=np.uint8)
        img = Image.fromarray(x).resize((size, size), Image.BILINEAR)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def _link(target: str, name: str) -> None:
    if not os.path.lexists(name):
        os.symlink(target, name)


def make_tree(root: str, n: int) -> str:
    """The FileList data: returns the folder the N paths start with."""
    pool = os.path.join(root, "pool")
    if not os.path.isdir(pool):
        os.makedirs(pool + ".tmp", exist_ok=True)
        for i, data in enumerate(_jpegs(POOL)):
            with open(os.path.join(pool + ".tmp", f"{i:02d}.jpg"), "wb") as f:
                f.write(data)
        os.rename(pool + ".tmp", pool)
    leaf, mid, top = (os.path.join(root, d) for d in ("leaf", "mid", "files"))
    for d in (leaf, mid, top):
        os.makedirs(d, exist_ok=True)
    for c in range(1000):
        _link(os.path.join(pool, f"{c % POOL:02d}.jpg"), f"{leaf}/{c:03d}.jpg")
    for b in range(1000):
        _link(leaf, f"{mid}/{b:03d}")
    for a in range((n + 999_999) // 1_000_000):
        _link(mid, f"{top}/{a:04d}")
    return top


def file_paths(top: str, n: int) -> list[str]:
    return [
        f"{top}/{i // 1_000_000:04d}/{i // 1000 % 1000:03d}/{i % 1000:03d}.jpg"
        for i in range(n)
    ]


def make_shards(root: str, n: int) -> str:
    """The TarShards data: returns the glob of the N / 10,000 links."""
    real = os.path.join(root, "real-shards")
    if not os.path.isdir(real):
        os.makedirs(real + ".tmp", exist_ok=True)
        pool = _jpegs(POOL)
        for s in range(REAL_SHARDS):
            with tarfile.open(
                f"{real}.tmp/{s}.tar", "w", format=tarfile.USTAR_FORMAT
            ) as tf:
                for k in range(SHARD_SAMPLES):
                    for ext, data in (
                        ("jpg", pool[(s * SHARD_SAMPLES + k) % POOL]),
                        ("cls", str(k % 1000).encode()),
                    ):
                        info = tarfile.TarInfo(f"{s}-{k:05d}.{ext}")
                        info.size, info.mode = len(data), 0o644
                        tf.addfile(info, io.BytesIO(data))
        os.rename(real + ".tmp", real)
    # The real shards' sidecars (written by opening them once), linked
    # beside every link as a copied shard set carries them.
    import ringloader

    ringloader.TarShards(f"{real}/*.tar", progress=False)
    sidecars = [
        sorted(
            f[len(f"{r}.tar") :] for f in os.listdir(real) if f.startswith(f"{r}.tar.")
        )
        for r in range(REAL_SHARDS)
    ]
    shards = max(1, n // SHARD_SAMPLES)
    folder = os.path.join(root, f"shards-{shards}")
    os.makedirs(folder, exist_ok=True)
    for i in range(shards):
        r = i % REAL_SHARDS
        for suffix in ["", *sidecars[r]]:
            _link(f"{real}/{r}.tar{suffix}", f"{folder}/s-{i:06d}.tar{suffix}")
    return f"{folder}/s-{{000000..{shards - 1:06d}}}.tar"


def _served_pattern(root: str, n: int) -> str:
    """make_shards' pattern as a path under ``root``, for a server of it."""
    return make_shards(root, n)[len(root.rstrip("/")) :]


# ---------------------------------------------------------------------------
# One measurement, in a fresh process


def _rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def _transform() -> Any:
    import torch
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.RandomResizedCrop(CROP, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )


class _Files:
    """torch's side of FileList: a map-style dataset of paths and labels."""

    def __init__(self, paths: list[str], transform: Any) -> None:
        self.paths, self.transform = paths, transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            return self.transform(im.convert("RGB")), i % 1000


def _wds_sample(sample: Any, transform: Any) -> Any:
    from PIL import Image

    image = Image.open(io.BytesIO(sample["jpg"])).convert("RGB")
    return transform(image), int(sample["cls"])


def child(a: argparse.Namespace) -> dict:
    import functools

    import torch

    import ringloader

    tf = _transform()
    n, bs = a.n, a.batch_size
    if a.who == "remote":
        # nginx serves the links (its own process: not in this RssAnon).
        from rlbench.servers import Nginx

        make_shards(a.dir, n)
        served = Nginx(a.dir)
    base = _rss_anon()
    if a.kind == "filelist":
        paths = file_paths(make_tree(a.dir, n), n)
        labels = [i % 1000 for i in range(n)]
    t0 = time.perf_counter()
    if a.kind == "filelist" and a.who == "ringloader":
        ds = ringloader.FileList(paths, labels)
        del paths, labels
        loader = ringloader.Loader(
            ds, batch_size=bs, shuffle=True, num_threads=a.threads, transform=tf
        )
    elif a.kind == "filelist":
        ds = _Files(paths, tf)
        del paths, labels
        loader = torch.utils.data.DataLoader(
            ds, batch_size=bs, shuffle=True, num_workers=a.workers
        )
    elif a.who in ("ringloader", "stream", "remote"):
        if a.who == "remote":
            ds = ringloader.TarShards(
                served.url + _served_pattern(a.dir, n),
                cache_dir=os.path.join(a.dir, "remote-cache"),
                progress=False,
            )
        else:
            ds = ringloader.TarShards(make_shards(a.dir, n), progress=False)
        loader = ringloader.Loader(
            ds,
            batch_size=bs,
            shuffle="stream" if a.who == "stream" else True,
            num_threads=a.threads,
            transform=tf,
        )
    else:
        import webdataset as wds

        pipe = (
            wds.WebDataset(make_shards(a.dir, n), shardshuffle=1000, empty_check=False)
            .shuffle(1000)
            .map(functools.partial(_wds_sample, transform=tf))
            .batched(bs)
        )
        loader = wds.WebLoader(pipe, batch_size=None, num_workers=a.workers)
    it = iter(loader)
    next(it)
    first = time.perf_counter() - t0
    rss = _rss_anon() - base
    t1 = time.perf_counter()
    done = bs
    for _ in range(a.batches - 1):
        images = next(it)[0]
        done += len(images)
    img_s = (done - bs) / max(time.perf_counter() - t1, 1e-9)
    # After the batches every batch slot and buffer has been touched: the
    # growth no longer depends on how far the threads ran ahead of the
    # first batch (which moved the figure at the first batch by MBs).
    steady = _rss_anon() - base
    if a.who == "remote":
        served.stop()
    return {
        "first_batch_s": first,
        "rss_first_bytes": rss,
        "rss_bytes": steady,
        "bytes_per_sample": steady / n,
        "img_s": img_s,
    }


# ---------------------------------------------------------------------------
# Driver


def _run(a: argparse.Namespace, kind: str, who: str, n: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kind,
        who,
        str(n),
        "--dir",
        a.dir,
        "--batch-size",
        str(a.batch_size),
        "--batches",
        str(a.batches),
        "--threads",
        str(a.threads),
        "--workers",
        str(a.workers),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"not done in {a.timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {done.returncode}: {tail}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    """Each figure's median over the runs that finished (the first error
    when none did)."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    return {k: sorted(r[k] for r in ok)[len(ok) // 2] for k in ok[0]}


def _fixed_costs(a: argparse.Namespace, kind: str) -> dict:
    """Each contender's growth at FIXED_N samples, the median of three
    runs (RssAnon moves by a few MB from run to run)."""
    if kind == "tarshards":
        _prepare(a, FIXED_N)
    whos = ["ringloader", "peer"] + (
        ["stream", "remote"] if kind == "tarshards" else []
    )
    fixed: dict = {}
    for who in whos:
        r = _median([_run(a, kind, who, FIXED_N) for _ in range(3)])
        fixed[who] = r.get("rss_bytes")
        shown = r["error"] if "error" in r else f"{r['rss_bytes'] / 1e6:.1f} MB"
        print(f"{kind}: {who} fixed cost (N={FIXED_N:,}): {shown}", flush=True)
    return fixed


def _prepare(a: argparse.Namespace, n: int) -> None:
    """Writes what the set needs beside its shards (untimed): an open of
    the shard set, from disk and over HTTP (whose record files go to the
    cache folder)."""
    code = (
        "import os, ringloader, sys; from bench_scale import make_shards, "
        "_served_pattern; from rlbench.servers import Nginx; "
        "d, n = sys.argv[1], int(sys.argv[2]); "
        "ringloader.TarShards(make_shards(d, n), progress=True); "
        "s = Nginx(d) if n <= 10**7 else None; "
        "s and ringloader.TarShards(s.url + _served_pattern(d, n), "
        "cache_dir=os.path.join(d, 'remote-cache'), progress=True); "
        "s and s.stop()"
    )
    subprocess.run(
        [sys.executable, "-c", code, a.dir, str(n)],
        check=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )


def machine() -> dict:
    import numpy
    import torch

    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
    }


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for key, rows in results["runs"].items():
        ok = [r for r in rows if "error" not in r]
        if not ok:
            continue
        xs = [r["n"] for r in ok]
        axes[0].plot(xs, [r["first_batch_s"] for r in ok], "o-", label=key)
        axes[1].plot(xs, [r["bytes_per_sample"] for r in ok], "o-", label=key)
        axes[2].plot(xs, [r["rss_bytes"] / 1e6 for r in ok], "o-", label=key)
    for ax, title in zip(
        axes,
        (
            "seconds from construction to the first batch",
            "anonymous resident bytes a sample",
            "RssAnon growth, MB (flat: nothing grows with N)",
        ),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("samples (N)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    m = results["machine"]
    fig.suptitle(f"{m['cpu']}, {m['cores']} cores; torch {m['torch']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", nargs=3, metavar=("KIND", "WHO", "N"))
    p.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6, 1e7])
    p.add_argument("--kinds", nargs="+", default=["filelist", "tarshards"])
    p.add_argument(
        "--billion",
        action="store_true",
        help="also a simulated 10^9-sample shard set (100,000 links)",
    )
    p.add_argument(
        "--dir",
        default=os.path.join(
            os.environ.get("TMPDIR", "/tmp"), "ringloader-bench-scale"
        ),
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument(
        "--repeat", type=int, default=3, help="runs of each figure (the median)"
    )
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    a = p.parse_args()
    if a.child:
        a.kind, a.who, a.n = a.child[0], a.child[1], int(a.child[2])
        print(json.dumps(child(a)))
        return
    os.makedirs(a.dir, exist_ok=True)
    peer = {"filelist": "torch DataLoader", "tarshards": "webdataset"}
    results: dict = {"machine": machine(), "runs": {}}
    print(json.dumps(results["machine"]))
    for kind in a.kinds:
        fixed = _fixed_costs(a, kind)
        sizes = [int(s) for s in a.sizes]
        if a.billion and kind == "tarshards":
            sizes.append(10**9)
        for n in sizes:
            if kind == "tarshards":
                _prepare(a, n)
            whos = ["ringloader", peer[kind]]
            if kind == "tarshards":
                whos[1:1] = ['ringloader shuffle="stream"'] + (
                    [REMOTE] if n <= 10**7 else []
                )
            for who in whos:
                key = f"{kind}: {who}"
                arg = {
                    "ringloader": "ringloader",
                    peer[kind]: "peer",
                    REMOTE: "remote",
                }.get(who, "stream")
                r = dict(_median([_run(a, kind, arg, n) for _ in range(a.repeat)]), n=n)
                if "error" not in r and fixed.get(arg) is not None:
                    r["fixed_bytes"] = fixed[arg]
                    r["beyond_fixed_per_sample"] = (r["rss_bytes"] - fixed[arg]) / n
                results["runs"].setdefault(key, []).append(r)
                print(
                    f"{key:40} N={n:>12,}  "
                    + (
                        r["error"]
                        if "error" in r
                        else f"first batch {r['first_batch_s']:7.2f} s  "
                        f"{r['rss_bytes'] / 1e6:8.1f} MB {r['bytes_per_sample']:8.1f} B/sample  "
                        f"{r.get('beyond_fixed_per_sample', float('nan')):6.2f} B/sample "
                        "beyond the fixed cost  "
                        f"{r['img_s']:7.0f} img/s"
                    ),
                    flush=True,
                )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.plot:
        plot(results, a.plot)


if __name__ == "__main__":
    main()
