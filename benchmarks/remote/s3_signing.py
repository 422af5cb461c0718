#!/usr/bin/env python3
"""S3 GETs presigned by boto3 vs signed per request in C (libcurl SigV4).

Two measures, side by side in one run:

1. What a refresh costs for a FileList of N S3 objects under temporary
   credentials (a session token; boto3 refreshable credentials). Before:
   every URL presigned again every 5 minutes (``presign.presigned``, on
   the loader's URL thread); timed here on a thread of its own by its
   thread CPU time. After: the keys read again every minute
   (``Keys()``, boto3's ``get_frozen_credentials``) and handed to the C
   source (``Pipeline.set_keys``); the plain URLs are made once
   (``presign.plain``). Both are extrapolated to a million objects and
   to a share of one core.
2. A FileList epoch of small JPEGs over rclone's S3 server (which checks
   every signature), presigned and signed in C, in alternating rounds:
   images per second and the C I/O thread's CPU seconds.

  python benchmarks/remote/s3_signing.py [--objects 100000] [--images 2000]
      [--rounds 3] [--out benchmarks/remote/s3-signing-results.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # benchmarks/: rlbench

import boto3  # noqa: E402
import botocore.session  # noqa: E402
import torchvision.transforms as T  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.credentials import RefreshableCredentials  # noqa: E402

import ringloader  # noqa: E402
from ringloader import _core  # noqa: E402
from ringloader.datasets import presign  # noqa: E402
from ringloader.datasets.filelist import FileList  # noqa: E402
from ringloader.datasets.remote import Client  # noqa: E402
from rlbench.servers import RcloneS3  # noqa: E402

TF = T.Compose([T.Resize(64), T.CenterCrop(64), T.PILToTensor()])


def _temporary_client(endpoint: str) -> object:
    """A boto3 S3 client with refreshable temporary credentials (made up:
    nothing is sent), as roles, SSO and instance profiles give."""

    def fetch() -> dict:
        t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        return {
            "access_key": "ASIAEXAMPLEEXAMPLE",
            "secret_key": "example-secret-example-secret",
            "token": "IQoJb3JpZ2luX2VjE" + "x" * 900,  # as long as STS's
            "expiry_time": t.isoformat(),
        }

    creds = RefreshableCredentials.create_from_metadata(
        metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
    )
    core = botocore.session.get_session()
    core._credentials = creds
    return boto3.session.Session(botocore_session=core).client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(signature_version="s3v4"),
    )


def _thread_cpu(fn) -> tuple[float, float, object]:
    """(thread CPU seconds, wall seconds, result) of fn() on a thread."""
    out: dict = {}

    def run() -> None:
        c, w = time.thread_time(), time.perf_counter()
        out["r"] = fn()
        out["cpu"], out["wall"] = time.thread_time() - c, time.perf_counter() - w

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out["cpu"], out["wall"], out["r"]


def refresh_cost(n: int, rclone: RcloneS3) -> dict:
    s3 = _temporary_client(rclone.endpoint_url)
    client = Client(s3_client=s3)
    names = [f"s3://bkt/train/{i // 1000:04d}/{i:08d}.jpg" for i in range(n)]
    remote = client.remote(names)
    assert remote.keys is not None and remote.refresh_s == presign.KEYS_REFRESH_S
    # Before: every URL presigned (the refresh thread's work, every 5 min).
    pre_cpu, pre_wall, urls = _thread_cpu(
        lambda: presign.presigned(names, lambda: s3, lambda: False)
    )
    assert "X-Amz-Signature=" in urls[0]
    # After: the plain URLs once, then the keys every minute into C.
    plain_cpu, _, plain = _thread_cpu(lambda: presign.plain(names, s3))
    assert "?" not in plain[0]
    src = FileList(names[:1], [0], s3_client=s3).ringloader_sources()
    p = _core.Pipeline(
        ringloader.transforms.compile_transform(TF).spec,
        paths=src.paths,
        http=dict(src.remote.options, names=src.remote.names, urls=src.remote.urls()),
    )
    reps = 200

    def keys_refreshes() -> None:
        for _ in range(reps):
            p.set_keys(*remote.keys())

    try:
        keys_cpu, _, _ = _thread_cpu(keys_refreshes)
    finally:
        p.close()
    keys_cpu /= reps
    per_m = 1e6 / n
    return {
        "objects": n,
        "presigned_refresh_cpu_s": pre_cpu,
        "presigned_refresh_wall_s": pre_wall,
        "presigned_us_per_url": pre_cpu / n * 1e6,
        "presigned_refresh_cpu_s_1M": pre_cpu * per_m,
        "presigned_core_share_1M": pre_cpu * per_m / presign.REFRESH_S,
        "plain_urls_once_cpu_s": plain_cpu,
        "plain_urls_once_cpu_s_1M": plain_cpu * per_m,
        "keys_refresh_cpu_s": keys_cpu,
        "keys_core_share": keys_cpu / presign.KEYS_REFRESH_S,
    }


def epoch_rate(rclone: RcloneS3, images: int, rounds: int, tmp: str) -> dict:
    """ImageNet-like JPEGs (ringloader.bench.data) as single objects."""
    from ringloader.bench import data

    folder = data.build(os.path.join(tmp, "imgs"), images=images, progress=False)
    keys = rclone.upload("imgs", folder)
    names = [f"s3://imgs/{k}" for k in keys if k.lower().endswith(data.JPEG_SUFFIXES)]
    images = len(names)
    out: dict = {"images": images, "presigned": [], "signed_in_c": []}
    with rclone.environ():
        for _ in range(rounds):
            for how in ("presigned", "signed_in_c"):
                ds = FileList(names, [0] * len(names))
                if how == "presigned":
                    ds.client._signing = False  # as without libcurl SigV4
                remote = ds.ringloader_sources().remote
                assert (remote.keys is None) == (how == "presigned")
                loader = ringloader.Loader(
                    ds, batch_size=64, transform=TF, num_threads=2, shuffle=True
                )
                # The whole epoch (the URLs made at its start included),
                # and from its first batch on.
                t = time.perf_counter()
                n, first, t1 = 0, 0, 0.0
                for _, y in loader:
                    n += len(y)
                    if not first:
                        first, t1 = n, time.perf_counter()
                end = time.perf_counter()
                stats = loader.stats()
                loader.close()
                assert n == images and stats["errors"] == 0, stats
                out[how].append(
                    {
                        "images_per_s": n / (end - t),
                        "after_first_batch_images_per_s": (n - first) / (end - t1),
                        "io_cpu_s": stats["io_cpu_seconds"],
                        "requests": stats["http_requests"],
                    }
                )
    for how in ("presigned", "signed_in_c"):
        for k in ("images_per_s", "after_first_batch_images_per_s", "io_cpu_s"):
            v = sorted(r[k] for r in out[how])
            out[f"{how}_median_{k}"] = v[len(v) // 2]
    for k in ("images_per_s", "after_first_batch_images_per_s"):
        out[f"ratio_{k}"] = (
            out[f"signed_in_c_median_{k}"] / out[f"presigned_median_{k}"]
        )
    io = out["signed_in_c_median_io_cpu_s"] - out["presigned_median_io_cpu_s"]
    out["signing_io_cpu_us_per_get"] = io / images * 1e6
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=100_000)
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=os.path.join(HERE, "s3-signing-results.json"))
    args = p.parse_args()
    with RcloneS3() as rclone, tempfile.TemporaryDirectory() as tmp:
        result = {
            "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_before": os.getloadavg(),
            "libcurl": _core.http_library(),
            "refresh": refresh_cost(args.objects, rclone),
            "epoch": epoch_rate(rclone, args.images, args.rounds, tmp),
            "load_after": os.getloadavg(),
        }
    print(json.dumps(result, indent=2))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
