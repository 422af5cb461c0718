"""The contenders of the remote-shards benchmark (benchmarks/remote/compare.py):
the same WebDataset tar shards (shards.py) read from local disk, from nginx
over HTTP and from an S3 API server (rclone's or moto's), by ringloader and
by the loaders people would otherwise use, all on the train pipeline (RandomResizedCrop(224) +
RandomHorizontalFlip, shuffled, uint8 NCHW batches with int64 labels).

``spec.options["shards"]`` is the shards' brace pattern (a local path, an
``http://`` URL or an ``s3://`` URL); ``spec.options["endpoint"]`` the S3
endpoint for the peers that take one (ringloader finds it in
``AWS_ENDPOINT_URL``, set by the script with the dummy credentials).

- ``ringloader-local``, ``ringloader-http``, ``ringloader-s3``:
  ``ringloader.Loader`` over ``ringloader.TarShards``; the shard indexes
  are made in set-up (timed apart: ``index_s``), remote ones in a fresh
  cache directory, so from the sidecar index beside each shard;
- ``webdataset-http``, ``webdataset-s3fs``: ``webdataset.WebDataset`` whose
  URLs webdataset opens through fsspec (a handler in
  ``webdataset.gopen.gopen_schemes``, the dispatch table webdataset 1.0
  opens every URL with), shard shuffle + a sample shuffle buffer, PIL decode
  and torchvision v2 transforms, batched in the workers of a
  ``torch.utils.data.DataLoader``;
- ``s3torchconnector``: the AWS S3 connector's ``S3IterableDataset`` over
  the shard objects with webdataset's tar iteration on its readers, as the
  connector's docs show for tar shards, then the same shuffle buffer,
  decode, transforms and batching.

As in contenders.py, nothing is imported at the top but the harness's own
modules (_bench.py): the harness's children import this module again, by
name, beside the harness package they loaded by path.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, Optional

from ._bench import base, system

CROP, Contender, recipe_steps = base.CROP, base.Contender, base.recipe_steps

SHUFFLE_BUFFER = 1000  # samples per worker (each worker's share is 1000 here)
SHUFFLE_INITIAL = 100  # webdataset's default: samples buffered before the first
BUCKET = "ringloader-bench"
REGION = "us-east-1"
ACCESS_KEY = SECRET_KEY = "testing"

LABELS = {
    "dataloader": "DataLoader + ImageFolder (PIL), local files",
    "webdataset-local": "WebDataset (local shards) + DataLoader",
    "webdataset-http": "WebDataset over HTTP (fsspec) + DataLoader",
    "webdataset-s3fs": "WebDataset over S3 (s3fs) + DataLoader",
    "s3torchconnector": "s3torchconnector S3IterableDataset + WebDataset tar iteration",
    "ringloader-local": "ringloader, local shards",
    "ringloader-http": "ringloader over HTTP",
    "ringloader-s3": "ringloader over S3",
    "ringloader-local-runs": 'ringloader, local shards, shuffle="runs"',
    "ringloader-http-runs": 'ringloader over HTTP, shuffle="runs"',
    "ringloader-s3-runs": 'ringloader over S3, shuffle="runs"',
    "ringloader-http-blocks": "ringloader over HTTP, cache_limit: first epoch (blocks)",
    "ringloader-s3-blocks": "ringloader over S3, cache_limit: first epoch (blocks)",
    "ringloader-s3-cache": "ringloader over S3, cache_limit: later epochs (local disk)",
}
# Where each contender reads from: local, http (nginx) or s3 (rclone or moto).
STORE = {
    "dataloader": "local",
    "webdataset-local": "local",
    "webdataset-http": "http",
    "webdataset-s3fs": "s3",
    "s3torchconnector": "s3",
    "ringloader-local": "local",
    "ringloader-http": "http",
    "ringloader-s3": "s3",
    "ringloader-local-runs": "local",
    "ringloader-http-runs": "http",
    "ringloader-s3-runs": "s3",
    "ringloader-http-blocks": "http",
    "ringloader-s3-blocks": "s3",
    "ringloader-s3-cache": "s3",
}


def _train_only(spec: Any) -> None:
    if spec.pipeline != "train":
        raise RuntimeError(
            f"{spec.contender}: the remote benchmark runs the train pipeline only"
        )


class RingloaderShards(Contender):
    """ringloader.Loader over ringloader.TarShards(spec.options["shards"])."""

    packages = ("ringloader", "urllib3", "boto3")

    def load(self) -> None:
        self.extra.update(system.imported_ringloader(self.spec.build))
        import torch  # noqa: F401

    def build(self) -> None:
        import ringloader

        s = self.spec
        _train_only(s)
        self.cache = tempfile.mkdtemp(prefix="ringloader-bench-index-")
        t0 = time.perf_counter()
        cached = s.contender.endswith(("-cache", "-blocks"))
        # -blocks: a new loader for every epoch, so that each starts with an
        # empty cache and reads from the server, in blocks.
        self.fresh = s.contender.endswith("-blocks")
        self.shuffle = "runs" if s.contender.endswith("-runs") else True
        self._past: dict[str, float] = {}
        self.ds = ringloader.TarShards(
            s.options["shards"],
            cache_dir=self.cache,
            progress=False,
            cache_limit=8 << 30 if cached else None,
        )
        ds = self.ds
        self.extra["index_s"] = time.perf_counter() - t0
        self.extra["shards"] = len(ds.shards)
        self.loader = self._loader()
        self.extra["io_backend"] = self.loader.io_backend
        where = (
            "the shard's sidecar" if "://" in s.options["shards"] else "the sidecars"
        )
        self.notes.append(
            f"TarShards({len(ds.shards)} shards) + Loader(num_threads={s.threads}, "
            f"prefetch={s.prefetch}, shuffle={self.shuffle!r}), "
            f"io={self.loader.io_backend}; "
            f"index from {where} in a fresh cache directory, in set-up"
            + ("; cache_limit=8 GiB" if cached else "")
            + ("; a new Loader (empty cache) for each epoch" if self.fresh else "")
        )

    def _loader(self) -> Any:
        import ringloader
        from ringloader import transforms as T

        s = self.spec
        return ringloader.Loader(
            self.ds,
            batch_size=s.batch_size,
            shuffle=self.shuffle,
            num_threads=s.threads,
            prefetch=s.prefetch,
            seed=s.seed,
            transform=T.Compose(recipe_steps(T, "train")),
        )

    def epoch(self, e: int) -> Iterator[tuple[Any, Any]]:
        if self.fresh and e > 0:
            self._past = self.counters()  # what the loaders so far counted
            self.loader.close()
            self.loader = self._loader()
        self.loader.set_epoch(e)
        return iter(self.loader)

    def counters(self) -> dict[str, float]:
        if self.loader is None:
            return {}
        st = self.loader.stats()
        out = {"read_s": st["read_seconds"], "decode_s": st["decode_seconds"]}
        if "io_cpu_seconds" in st:
            out["io_cpu_s"] = st["io_cpu_seconds"]
        return {k: v + self._past.get(k, 0.0) for k, v in out.items()}

    def close(self) -> None:
        super().close()
        shutil.rmtree(getattr(self, "cache", ""), ignore_errors=True)


# ---------------------------------------------------------------------------
# The peers: functions at module level, so a DataLoader worker can run them
# whichever start method it uses.


def _decode(tf: Any, sample: tuple[bytes, bytes]) -> tuple[Any, int]:
    from PIL import Image

    jpg, cls = sample
    with Image.open(io.BytesIO(jpg)) as img:
        rgb = img.convert("RGB")
    return tf(rgb), int(cls)


def _collate(items: list) -> tuple[Any, Any]:
    import torch

    images = torch.stack([x for x, _ in items])
    return images, torch.tensor([c for _, c in items], dtype=torch.int64)


def _train_transform() -> Any:
    from torchvision.transforms import v2

    return v2.Compose(recipe_steps(v2, "train") + [v2.PILToTensor()])


def _fsspec_gopen(
    options: dict, url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any
) -> Any:
    """A webdataset gopen handler: the URL opened by fsspec (its HTTP or S3
    file system), read sequentially by webdataset's tar iterator."""
    import fsspec

    return fsspec.open(url, mode, **options).open()


def _workers(ds: Any, threads: int) -> Any:
    """The peers' DataLoader over an iterable dataset that batches itself:
    one worker per core, kept across epochs."""
    import torch

    return torch.utils.data.DataLoader(
        ds,
        batch_size=None,
        num_workers=threads,
        persistent_workers=True,
        pin_memory=False,
    )


def _shard_list(pattern: str) -> list[str]:
    import braceexpand

    return list(braceexpand.braceexpand(pattern))


class WebDatasetPeer(Contender):
    """webdataset.WebDataset over local paths, or over HTTP / S3 URLs that
    webdataset opens with fsspec, in a DataLoader; batched in the workers."""

    packages = ("webdataset", "fsspec", "torch", "torchvision", "pillow")

    def __init__(self, spec: Any, store: str) -> None:
        super().__init__(spec)
        self.store = store
        if store == "http":
            self.packages += ("aiohttp",)
        if store == "s3":
            self.packages += ("s3fs", "aiobotocore")

    def load(self) -> None:
        import torch  # noqa: F401
        import webdataset  # noqa: F401
        from torchvision.transforms import v2  # noqa: F401

        if self.store == "s3":
            import s3fs  # noqa: F401
        elif self.store == "http":
            import fsspec.implementations.http  # noqa: F401

    def build(self) -> None:
        import torch
        import webdataset as wds
        from webdataset.gopen import gopen_schemes  # the module, not wds.gopen()

        s = self.spec
        _train_only(s)
        torch.manual_seed(s.seed)
        urls = _shard_list(s.options["shards"])
        how = "local files"
        if self.store == "http":
            options: dict = {}
            for scheme in ("http", "https"):
                gopen_schemes[scheme] = functools.partial(_fsspec_gopen, options)
            how = (
                "gopen_schemes['http'] = fsspec.open(url, 'rb').open() (fsspec's "
                "HTTPFileSystem over aiohttp: ranged GETs of its 5 MiB blocks)"
            )
        elif self.store == "s3":
            options = {
                "endpoint_url": s.options["endpoint"],
                "key": ACCESS_KEY,
                "secret": SECRET_KEY,
                "client_kwargs": {"region_name": REGION},
            }
            gopen_schemes["s3"] = functools.partial(_fsspec_gopen, options)
            how = (
                "gopen_schemes['s3'] = fsspec.open(url, 'rb', endpoint_url=<the S3 server>).open() "
                "(s3fs over aiobotocore: the shard in its 50 MiB blocks, one GET)"
            )
        tf = _train_transform()
        ds = (
            wds.WebDataset(
                urls,
                shardshuffle=len(urls),
                seed=s.seed,
                empty_check=False,
            )
            .shuffle(SHUFFLE_BUFFER, initial=SHUFFLE_INITIAL)
            .to_tuple("jpg", "cls")
            .map(functools.partial(_decode, tf))
            .batched(s.batch_size, collation_fn=_collate, partial=True)
        )
        self.loader = _workers(ds, s.threads)
        self.notes.append(
            f"WebDataset({len(urls)} shards, shardshuffle={len(urls)}) .shuffle("
            f"{SHUFFLE_BUFFER}, initial={SHUFFLE_INITIAL}) .to_tuple('jpg', 'cls') "
            ".map(PIL decode + v2 RandomResizedCrop + flip + PILToTensor) .batched("
            f"{s.batch_size}, partial) in DataLoader(batch_size=None, num_workers="
            f"{s.threads}, persistent_workers=True): each worker reads its share of "
            f"the shards whole, in order; {how}"
        )

    def batches(self) -> Optional[int]:
        return None


def _shard_dict(reader: Any) -> dict[str, Any]:
    """An S3Reader as webdataset's tar iterator takes a stream."""
    return {"url": reader.key, "stream": reader}


class _S3Tars:
    """An IterableDataset: each epoch, the shard objects in a new order
    (this worker's generator), read by the connector's S3IterableDataset
    (sharded across the DataLoader's workers), the tar members grouped into
    samples by webdataset's iterators, a shuffle buffer, decode, batches."""

    def __init__(
        self, uris: list[str], endpoint: str, seed: int, batch_size: int, tf: Any
    ) -> None:
        self.uris, self.endpoint, self.seed = uris, endpoint, seed
        self.batch_size, self.tf = batch_size, tf
        self.epoch = 0  # this worker's count of its iterations

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        import webdataset as wds
        from s3torchconnector import S3ClientConfig, S3IterableDataset
        from webdataset.tariterators import group_by_keys, tar_file_expander

        # A new order each epoch, the same in every worker (each counts its
        # own epochs: persistent workers iterate once an epoch), so that the
        # connector's sharding by worker splits one permutation.
        order = list(self.uris)
        random.Random(self.seed * 1000003 + self.epoch).shuffle(order)
        self.epoch += 1
        objects = S3IterableDataset.from_objects(
            order,
            region=REGION,
            endpoint=self.endpoint,
            s3client_config=S3ClientConfig(force_path_style=True),
            enable_sharding=True,
            transform=_shard_dict,
        )
        samples = group_by_keys(tar_file_expander(iter(objects)))
        pipeline = wds.shuffle(SHUFFLE_BUFFER, initial=SHUFFLE_INITIAL)(samples)
        pipeline = wds.to_tuple("jpg", "cls")(pipeline)
        pipeline = wds.map(functools.partial(_decode, self.tf))(pipeline)
        yield from wds.batched(self.batch_size, collation_fn=_collate, partial=True)(
            pipeline
        )


class S3TorchConnector(Contender):
    packages = (
        "s3torchconnector",
        "s3torchconnectorclient",
        "webdataset",
        "torch",
        "torchvision",
        "pillow",
    )

    def load(self) -> None:
        import s3torchconnector  # noqa: F401
        import torch  # noqa: F401
        import webdataset  # noqa: F401
        from torchvision.transforms import v2  # noqa: F401

    def build(self) -> None:
        import torch
        import torch.utils.data

        s = self.spec
        _train_only(s)
        torch.manual_seed(s.seed)
        uris = _shard_list(s.options["shards"])
        base = type("S3Tars", (_S3Tars, torch.utils.data.IterableDataset), {})
        ds = base(uris, s.options["endpoint"], s.seed, s.batch_size, _train_transform())
        self.loader = _workers(ds, s.threads)
        self.notes.append(
            f"S3IterableDataset.from_objects({len(uris)} shard URIs, shuffled each epoch, "
            f"region={REGION}, endpoint=the S3 server over http, S3ClientConfig(force_path_style"
            "=True), enable_sharding=True, transform=reader -> {url, stream}), "
            "webdataset.tariterators.tar_file_expander + group_by_keys on the readers "
            "(the connector's example for tar shards), then .shuffle("
            f"{SHUFFLE_BUFFER}, initial={SHUFFLE_INITIAL}), PIL decode + v2 transforms, "
            f"batched({s.batch_size}) in DataLoader(batch_size=None, num_workers="
            f"{s.threads}, persistent_workers=True); the connector's default "
            "(sequential) reader"
        )

    def batches(self) -> Optional[int]:
        return None


FACTORIES = {
    "ringloader-local": RingloaderShards,
    "ringloader-http": RingloaderShards,
    "ringloader-s3": RingloaderShards,
    "ringloader-local-runs": RingloaderShards,
    "ringloader-http-runs": RingloaderShards,
    "ringloader-s3-runs": RingloaderShards,
    "ringloader-http-blocks": RingloaderShards,
    "ringloader-s3-blocks": RingloaderShards,
    "ringloader-s3-cache": RingloaderShards,
    "webdataset-local": lambda s: WebDatasetPeer(s, "local"),
    "webdataset-http": lambda s: WebDatasetPeer(s, "http"),
    "webdataset-s3fs": lambda s: WebDatasetPeer(s, "s3"),
    "s3torchconnector": S3TorchConnector,
}


# ---------------------------------------------------------------------------
# moto's S3 server in a process of its own (servers.MotoS3 runs it in a
# thread of the process that starts it), so that its CPU time is its own.

_MOTO_MAIN = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("_rl_servers", sys.argv[1])
servers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(servers)
s3 = servers.MotoS3()
print(s3.port, flush=True)
sys.stdin.read()  # until the parent closes the pipe (or dies)
s3.stop()
"""


class MotoProcess:
    """moto's S3 server (servers.MotoS3) in a child process: ``pid``,
    ``endpoint_url``; stopped by ``stop()`` or leaving the ``with`` block."""

    def __init__(self, python: str = sys.executable, timeout: float = 60.0) -> None:
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "servers.py")
        self.proc = subprocess.Popen(
            [python, "-c", _MOTO_MAIN, here],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        line = self._first_line(timeout)
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"moto's S3 server did not start (it said {line!r})")
        self.port = int(line)

    def _first_line(self, timeout: float) -> str:
        import selectors

        sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
        return self.proc.stdout.readline()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        proc, self.proc = getattr(self, "proc", None), None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> MotoProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def s3_env(endpoint_url: str) -> dict[str, str]:
    """What points boto3 (ringloader's S3 client) at the S3 server: the endpoint,
    dummy credentials, the region."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }


def upload(endpoint_url: str, files: dict[str, str], progress: bool = True) -> float:
    """Creates BUCKET on the server and puts ``files`` (key -> local path)
    in it, with a progress bar of bytes; returns the seconds it took."""
    import boto3

    t0 = time.perf_counter()
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    total = sum(os.path.getsize(p) for p in files.values())
    bar: Any = None
    if progress:
        with contextlib.suppress(ImportError):
            from tqdm import tqdm

            bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=f"uploading {len(files)} objects",
                leave=False,
                file=sys.stderr,
            )
    try:
        for key, path in sorted(files.items()):
            client.upload_file(
                path, BUCKET, key, Callback=bar.update if bar is not None else None
            )
    finally:
        if bar is not None:
            bar.close()
    return time.perf_counter() - t0


__all__ = ["CROP", "FACTORIES", "LABELS", "MotoProcess", "STORE", "s3_env", "upload"]
