"""ringloader.Parquet over HTTP (a real nginx on 127.0.0.1) and S3 (moto's
server): the footer and the row groups' column chunks read by range GETs
through the datasets' remote client, extracted once, then the same batches
as the local file gives."""

from __future__ import annotations

import os

import numpy as np
import pytest
import ringloader
import torch
from batches import assert_same, collect
from faultproxy import FaultProxy
from images import mixed_images
from ringloader import transforms as T
from rlbench.servers import MotoS3, Nginx

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N = 18
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32)])
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    """Two Parquet files of N // 2 rows each (row groups of 4, zstd)."""
    root = tmp_path_factory.mktemp("www")
    images = mixed_images(N)
    for part in range(2):
        rows = range(part * N // 2, (part + 1) * N // 2)
        table = pa.table(
            {
                "image": pa.array(
                    [{"bytes": images[i], "path": None} for i in rows], IMAGE
                ),
                "label": [i % 5 for i in rows],
                "caption": [f"caption {i}" for i in rows],
            }
        )
        pq.write_table(
            table,
            str(root / f"train-{part}.parquet"),
            row_group_size=4,
            compression="zstd",
        )
    return root


@pytest.fixture(scope="module")
def nginx(www):
    with Nginx(www, access_log=True) as server:
        yield server


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGLOADER_CACHE_DIR", str(tmp_path / "cache"))


def _local(www):
    return ringloader.Parquet(sorted(str(p) for p in www.glob("*.parquet")))


def test_http_gives_the_local_batches(www, nginx, tmp_path):
    urls = [f"{nginx.url}/train-{k}.parquet" for k in range(2)]
    ds = ringloader.Parquet(urls)
    assert len(ds) == N and ds.ringloader_shards().tolist() == [0, 4, 8, 9, 13, 17, 18]
    assert f"{nginx.url}/train-1.parquet: row group 1, row 0" in ds.describe(13)
    ranges = [r for r in nginx.requests() if r[0] == "GET"]
    assert ranges  # read by GETs, not downloaded by some other way
    got, _ = collect(ds, EVAL, shuffle=True, batch_size=N)
    want, _ = collect(_local(www), EVAL, shuffle=True, batch_size=N)
    assert_same(got, want)
    with_captions = ringloader.Parquet(urls, columns=("caption",))
    (_, _, captions), *_ = ringloader.Loader(
        with_captions, batch_size=3, transform=EVAL
    )
    assert captions == ["caption 0", "caption 1", "caption 2"]

    # Made once: a second dataset reads the extract (a HEAD for its
    # validator, the footer and the label column), not the image column's
    # chunks again (a GET a row group).
    def gets(cache):
        nginx.clear_requests()
        assert len(ringloader.Parquet(urls[0], cache_dir=cache)) == N // 2
        return sum(r[0] == "GET" for r in nginx.requests())

    first = gets(tmp_path / "once")
    assert gets(tmp_path / "once") <= first - 3


def test_a_missing_object_is_named(nginx):
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        ringloader.Parquet(f"{nginx.url}/nope.parquet", retries=0)


def test_a_failed_fetch_names_object_and_row_group_and_leaves_nothing(nginx, tmp_path):
    """A GET that fails while the image column is fetched is the network's
    OSError naming the object and the row group (not a damaged file), and
    no part of an extract stays behind."""
    url = "/train-0.parquet"
    nginx.clear_requests()
    ringloader.Parquet(nginx.url + url, cache_dir=tmp_path / "counted")
    gets = sum(r[0] == "GET" for r in nginx.requests())
    cache = tmp_path / "cache"
    with FaultProxy(nginx.url) as proxy:
        # The last GET of a whole construction: the last row group's chunk.
        proxy.fail("status", status=503, method="GET", every=gets)
        with pytest.raises(OSError) as e:
            ringloader.Parquet(proxy.url + url, cache_dir=cache, retries=0)
    assert not isinstance(e.value, ValueError)
    assert f"{proxy.url}{url}: row group 2 could not be read" in str(e.value)
    assert not [f for f in os.listdir(cache) if not f.endswith(".lock")]


def test_an_empty_file_is_refused(tmp_path):
    path = str(tmp_path / "empty.parquet")
    pq.write_table(
        pa.table({"image": pa.array([], IMAGE), "label": pa.array([], pa.int64())}),
        path,
    )
    with pytest.raises(ValueError, match="empty.parquet'\\]: no rows in the files"):
        ringloader.Parquet(path)


def test_s3_glob_gives_the_local_batches(www):
    with MotoS3() as server:
        server.upload(
            "data", {f"train-{k}.parquet": www / f"train-{k}.parquet" for k in range(2)}
        )
        with server.environ():
            ds = ringloader.Parquet("s3://data/train-*.parquet")
            assert ds.files == [f"s3://data/train-{k}.parquet" for k in range(2)]
            got, _ = collect(ds, EVAL, shuffle="stream", batch_size=4)
    want, _ = collect(_local(www), EVAL, shuffle="stream", batch_size=4)
    assert_same(got, want)
    assert sorted(torch.cat([y for _, y in got]).tolist()) == sorted(
        (np.arange(N) % 5).tolist()
    )
    assert not os.environ.get("AWS_ENDPOINT_URL_S3")


def _revision(path, images, labels):
    """A file of these rows, whose size depends only on the images' sizes
    (no compression, no dictionary, no statistics): its rows reversed is
    another revision of the same size."""
    table = pa.table(
        {"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64())}
    )
    pq.write_table(
        table,
        str(path),
        compression="none",
        use_dictionary=False,
        write_statistics=False,
    )


@pytest.mark.parametrize("weak", [False, True])
def test_an_object_replaced_while_read_fails_not_mixes(www, nginx, monkeypatch, weak):
    """The object replaced (as many rows and bytes, images and labels in
    another order) after its footer and labels were read, before its row
    groups are: the range GETs carry its ETag (If-Match), so the error
    names the URL instead of pairing the first labels with the second
    images. A weak ETag cannot be sent as If-Match: the object's validator
    is checked again once it is extracted."""
    from ringloader.datasets import parquet as P
    from ringloader.datasets.remote import Client

    if weak:
        head = Client.head
        monkeypatch.setattr(
            Client, "head", lambda c, n: (lambda s, v: (s, "W/" + v))(*head(c, n))
        )
    swap = www / "swap.parquet"
    images = mixed_images(4)
    _revision(swap, images, [0, 1, 2, 3])
    size = swap.stat().st_size
    made = P._Extract.__init__

    def replace_first(self, path, *args, **kw):
        _revision(swap, images[::-1], [3, 2, 1, 0])
        assert swap.stat().st_size == size
        os.utime(swap, (1, 2_000_000_000))  # another ETag (mtime-size)
        made(self, path, *args, **kw)

    monkeypatch.setattr(P._Extract, "__init__", replace_first)
    try:
        changed = "swap.parquet changed while" if weak else "swap.parquet: the object"
        with pytest.raises((OSError, ValueError), match=changed):
            ringloader.Parquet(f"{nginx.url}/swap.parquet", retries=0)
    finally:
        swap.unlink()
