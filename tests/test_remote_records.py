"""Remote tar shard sets (HTTP on nginx, S3 on moto's server) read through
their record files, as local ones are: the HTTP source finds each sample's
byte range in its shard's record file when it fetches it, and keeps
nothing per sample (no offsets or lengths arrays, no per-sample cache or
block tables). The batches are the local set's, in every order, with the
cache of fetched members on and off; a record file that no longer fits
its shard fails its samples naming it. Real servers on 127.0.0.1, no
mocks."""

from __future__ import annotations

import glob
import os
import tarfile

import numpy as np
import pytest
import ringloader
import torch
from images import jpeg_bytes
from rlbench.servers import MotoS3, Nginx
from ringloader import _core
from ringloader.datasets.shards import TarShards
from remote_table import hand_over_costs, http_table
from test_shards import EVAL, _add

SHARDS = 4
PER_SHARD = 9
SPEC = ringloader.transforms.compile_transform(EVAL).spec


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    """Four shards of JPEGs of varied sizes and kinds, a label member
    before or after each image, and members that are not samples."""
    root = tmp_path_factory.mktemp("records_www")
    kinds = ["baseline", "progressive", "s444", "grayscale"]
    rng = np.random.default_rng(11)
    n = 0
    for s in range(SHARDS):
        with tarfile.open(root / f"s{s}.tar", "w") as tf:
            _add(tf, "README.txt", b"not a sample")
            for i in range(PER_SHARD):
                h, w = (int(v) for v in rng.integers(60, 200, 2))
                blob = jpeg_bytes(kinds[n % len(kinds)], h, w, seed=n)
                label = str(n % 7).encode()
                if i % 2:
                    _add(tf, f"k{n:04d}.cls", label)
                _add(tf, f"k{n:04d}.jpg", blob)
                if not i % 2:
                    _add(tf, f"k{n:04d}.cls", label)
                n += 1
    return root


@pytest.fixture(scope="module")
def nginx(www):
    with Nginx(www) as server:
        yield server


@pytest.fixture(scope="module")
def s3(www):
    with MotoS3() as server:
        server.upload("shards", www, prefix="r/")
        yield server


@pytest.fixture(scope="module")
def local(www, tmp_path_factory):
    return TarShards(
        str(www / "*.tar"), progress=False, cache_dir=tmp_path_factory.mktemp("lc")
    )


def _remote(where, nginx, s3, cache_dir, **kw) -> TarShards:
    pattern = f"s{{0..{SHARDS - 1}}}.tar"
    if where == "http":
        return TarShards(
            f"{nginx.url}/{pattern}", progress=False, cache_dir=cache_dir, **kw
        )
    return TarShards(
        f"s3://shards/r/{pattern}",
        progress=False,
        cache_dir=cache_dir,
        s3_client=s3.client(),
        **kw,
    )


def _epochs(ds, shuffle, epochs=2, **kw):
    loader = ringloader.Loader(
        ds, batch_size=4, shuffle=shuffle, seed=5, transform=EVAL, **kw
    )
    out = []
    try:
        for _ in range(epochs):
            out.append([(x.clone(), y.clone()) for x, y in loader])
        return out, loader.stats()
    finally:
        loader.close()


@pytest.mark.parametrize("where", ["http", "s3"])
@pytest.mark.parametrize("cache", [None, 1 << 30], ids=["no_cache", "cache"])
@pytest.mark.parametrize("shuffle", [True, "runs", "stream"])
def test_remote_shards_read_their_record_files_and_match_local(
    where, cache, shuffle, nginx, s3, local, tmp_path
):
    ds = _remote(where, nginx, s3, tmp_path, cache_limit=cache)
    src = ds.ringloader_sources()
    # The HTTP source gets the record files, not per-sample ranges.
    assert src.records is not None
    assert len(src.records[0]) == SHARDS
    assert all(os.path.isfile(f) for f in src.records[0])
    assert not isinstance(src.offsets, np.ndarray)
    assert not isinstance(src.lengths, np.ndarray)
    want, _ = _epochs(local, shuffle)
    got, stats = _epochs(ds, shuffle)
    assert stats["errors"] == 0
    assert len(got) == len(want) == 2
    for a, b in zip(want, got):
        assert len(a) == len(b)
        for (wx, wy), (gx, gy) in zip(a, b):
            assert torch.equal(wx, gx) and torch.equal(wy, gy)
    if cache is not None:
        assert stats["http_cache_hits"] > 0  # epoch 1 came from the cache


def _shards(root, count, per_shard):
    """count shards of per_shard samples of a few bytes each (the pipeline
    is built, nothing is decoded)."""
    root.mkdir()
    for s in range(count):
        with tarfile.open(root / f"m{s}.tar", "w") as tf:
            for i in range(per_shard):
                _add(tf, f"{s:02d}{i:06d}.jpg", b"\xff\xd8")
    return root


def test_a_remote_set_costs_nothing_a_sample_to_hand_over(tmp_path):
    """ringloader_sources() and the pipeline's construction of a remote set
    ten times as large take no more memory: before, the record files were
    read into offsets and lengths arrays (16 bytes a sample, tracemalloc
    sees numpy's) and the HTTP source copied them with each sample's
    object (24 bytes a sample, and its cache's tables more, malloc's)."""
    small, big = 1_500, 15_000
    www = tmp_path / "www"
    www.mkdir()
    _shards(www / "small", 3, small // 3)
    _shards(www / "big", 3, big // 3)
    costs = {}
    with Nginx(www) as server:
        for name, n in (("small", small), ("big", big)):
            ds = TarShards(
                f"{server.url}/{name}/m{{0..2}}.tar",
                progress=False,
                cache_dir=tmp_path / name,
                cache_limit=1 << 30,
                label_key=None,
            )
            assert len(ds) == n
            _, peak, built = hand_over_costs(ds.ringloader_sources, SPEC)
            costs[name] = (peak, built)
    grew = [b - a for a, b in zip(costs["small"], costs["big"])]
    per_sample = [g / (big - small) for g in grew]
    # 13,500 samples more: under 1 byte a sample each (the tables are per
    # shard); before, 16 and over 24.
    assert per_sample[0] < 1, (costs, per_sample)
    assert per_sample[1] < 1, (costs, per_sample)


def _record_files(cache_dir) -> list[str]:
    return sorted(glob.glob(str(cache_dir / "**" / "*.rec"), recursive=True))


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_record_file_that_no_longer_fits_fails_its_samples_naming_it(
    on_error, nginx, local, tmp_path
):
    ds = _remote("http", nginx, None, tmp_path)
    bad = ds.ringloader_sources().records[0][2]
    loader = ringloader.Loader(
        ds, batch_size=1, transform=EVAL, on_error=on_error, num_threads=1
    )
    try:
        batches = iter(loader)
        got = [next(batches)]  # the pipeline is built: its record files given
        # One record short: the file no longer holds the shard's count.
        os.truncate(bad, os.path.getsize(bad) - 24)
        if on_error == "raise":
            for _ in range(2 * PER_SHARD - 1):
                next(batches)  # shards 0 and 1
            with pytest.raises(OSError) as e:
                next(batches)
            assert os.path.basename(bad) in str(e.value)
            assert "s2.tar" in str(e.value)
        else:
            got += [(x.clone(), y.clone()) for x, y in batches]
            stats = loader.stats()
            assert len(got) == len(ds)
            assert stats["errors"] >= PER_SHARD  # each of s2's, at least once
    finally:
        loader.close()
    if on_error == "skip":
        # The replacements are samples of the other shards, right ones.
        truth = {
            local.targets[i].item() for i in range(len(local)) if local.shard_of(i) != 2
        }
        assert {int(y) for _, y in got} <= truth


def test_a_record_file_of_another_remote_shard_is_made_anew(nginx, local, tmp_path):
    """Shards 0 and 3 hold as many samples: with 0's record file copied over
    3's, the C source must not read shard 3 at shard 0's offsets. The
    header names shard 0's size and ETag: found when the sources are made,
    and the file made again."""
    ds = _remote("http", nginx, None, tmp_path)
    files = ds.ringloader_sources().records[0]
    with open(files[0], "rb") as f:
        other = f.read()
    with open(files[3], "wb") as f:
        f.write(other)
    want, _ = _epochs(local, False, epochs=1)
    got, stats = _epochs(ds, False, epochs=1)
    assert stats["errors"] == 0
    for (wx, wy), (gx, gy) in zip(want[0], got[0]):
        assert torch.equal(wx, gx) and torch.equal(wy, gy)


@pytest.mark.parametrize("reverse", [False, True], ids=["in_order", "reversed"])
def test_a_per_sample_table_reads_right_with_blocks(nginx, tmp_path, reverse):
    """Blocks step from a sample to ids i - 1, i + 1 of its object, which a
    record file gives in offset order (a shard's samples are runs of
    members, numbered in member order). The per-sample form (object,
    offset, length a sample) steps the same way; in another order (here
    each shard's samples reversed) each sample must still get its own
    bytes: a step out of order ends the block."""
    ds = _remote("http", nginx, None, tmp_path / "idx")
    src = ds.ringloader_sources()
    starts = np.asarray(ds.starts)
    n = len(ds)
    step = -1 if reverse else 1
    order = np.concatenate(
        [np.arange(starts[k], starts[k + 1])[::step] for k in range(SHARDS)]
    )
    objects = np.searchsorted(starts, order, side="right") - 1
    offsets = np.array([ds.offsets[i] for i in order], np.int64)
    lengths = np.array([ds.lengths[i] for i in order], np.int64)
    (tmp_path / "fetched").mkdir()
    http = dict(
        names=list(src.remote.names),
        urls=src.remote.urls(),
        objects=objects.astype(np.int64),
        cache_dir=str(tmp_path / "fetched"),
        cache_bytes=1 << 30,
        block_bytes=1 << 20,
    )
    ids = np.arange(n, dtype=np.int64)

    requests = []

    def read(**table):
        p = _core.Pipeline(SPEC, **table)
        try:
            out = []
            for _ in range(2):  # the second from the cache
                p.submit(ids, ids, 0)
                out.append(torch.from_dlpack(p.next(timeout=60).views[0]).clone())
            requests.append(p.stats()["http_requests"])
            return out
        finally:
            p.close()

    got = read(offsets=offsets, lengths=lengths, http=http)
    want = read(**http_table(src))
    for g in got:
        assert torch.equal(g, want[0][torch.from_numpy(order)])
    assert torch.equal(want[0], want[1])
    # In order: a block a shard (each under 1 MiB); reversed: one a member.
    assert requests[0] == (n if reverse else SHARDS)


def test_a_record_giving_a_range_over_the_limit_fails_before_a_byte_is_asked(
    nginx, tmp_path
):
    """A ranged fetch's buffer is allocated at its length before the body
    comes: a record file giving a member terabytes fails that sample over
    max_file_bytes, naming the record file, instead of allocating it."""
    ds = _remote("http", nginx, None, tmp_path)
    path = ds.ringloader_sources().records[0][0]
    head = os.path.getsize(path) - PER_SHARD * 24
    recs = np.memmap(path, dtype="<u8", mode="r+", offset=head)
    recs[3 * 1 + 1] = 1 << 40  # sample 1's length
    recs.flush()
    del recs
    loader = ringloader.Loader(ds, batch_size=1, transform=EVAL, num_threads=1)
    try:
        batches = iter(loader)
        next(batches)  # sample 0
        with pytest.raises(ringloader.DecodeError) as e:  # as a file over it
            next(batches)
        assert "max_file_bytes" in str(e.value), str(e.value)
        assert os.path.basename(path) in str(e.value), str(e.value)
    finally:
        loader.close()


def test_a_remote_fields_set_keeps_its_record_files(nginx, tmp_path):
    """With fields the records are version 2: checked as such when the
    sources are made, not remade (with the manifest dropped) each time."""
    ds = _remote("http", nginx, None, tmp_path, fields=("jpg", "cls"))
    files = list(ds.ringloader_sources().records[0])
    stamps = [os.stat(f).st_mtime_ns for f in files]
    manifests = sorted(glob.glob(str(tmp_path / "**" / "shards-*"), recursive=True))
    assert manifests
    again = list(ds.ringloader_sources().records[0])
    assert again == files
    assert [os.stat(f).st_mtime_ns for f in again] == stamps
    assert sorted(glob.glob(str(tmp_path / "**" / "shards-*"), recursive=True)) == (
        manifests
    )
    out, stats = _epochs(ds, True, epochs=1)
    assert stats["errors"] == 0 and sum(len(y) for _, y in out[0]) == len(ds)
