"""A FileList of URLs (one object a sample) costs no Python object and only
a few bytes an object to hand over: its objects' names are the paths' own
blob (objects named twice share one id through an int64 array), and the
HTTP source borrows that blob and makes each fetch URL from the name when
the request is prepared (plain HTTP(S): the name; S3 signed in C: the
bucket's URL and the key, percent-encoded), where it kept a C string of
the name and one of the URL per object, and Python a list of str. The
costs are of HTTP URLs and of S3 URLs read from a CSV (the pipelines are
built, nothing is fetched; boto3 finds a bucket's URL offline); a list
naming objects twice is read through nginx."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from images import jpeg_bytes
from remote_table import hand_over_costs
from rlbench.servers import Nginx
from test_remote_records import SPEC

import ringloader
from ringloader import _core

SMALL, BIG = 2_000, 20_000


def _s3_client():
    boto3 = pytest.importorskip("boto3")
    return boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    )


def _http_list(n: int) -> ringloader.FileList:
    urls = [f"http://127.0.0.1:9/img/{i:07d}.jpg" for i in range(n)]
    return ringloader.FileList(urls, np.arange(n) % 10)


def _s3_csv(n: int, tmp_path) -> ringloader.FileList:
    csv = tmp_path / f"list{n}.csv"
    csv.write_text(
        "path,label\n"
        + "".join(f"s3://bkt/img/{i:07d}.jpg,{i % 10}\n" for i in range(n))
    )
    return ringloader.FileList.from_csv(csv, s3_client=_s3_client())


def _costs(fl: ringloader.FileList) -> tuple[int, int, int]:
    return hand_over_costs(fl.ringloader_sources, SPEC)


@pytest.mark.parametrize("where", ["http", "s3"])
def test_a_remote_file_list_costs_no_python_object_an_object(where, tmp_path):
    """10x the objects: under 1 byte an object kept in Python (before: the
    list of names, 100 bytes an object), under 16 at the peak, and under 8
    an object in C (before: two strings an object, and the per-sample
    table: 160 bytes)."""
    make = _http_list if where == "http" else (lambda n: _s3_csv(n, tmp_path))
    small, big = _costs(make(SMALL)), _costs(make(BIG))
    per = [(b - a) / (BIG - SMALL) for a, b in zip(small, big)]
    assert per[0] < 1, (small, big, per)
    assert per[1] < 16, (small, big, per)
    assert per[2] < 8, (small, big, per)


def test_objects_named_twice_share_an_id(tmp_path):
    """Each object is named once; its samples give its id."""
    urls = [f"http://127.0.0.1:9/img/{i % 7}.jpg" for i in range(30)]
    src = ringloader.FileList(urls, range(30)).ringloader_sources()
    names = list(src.remote.names)
    assert names == [f"http://127.0.0.1:9/img/{i}.jpg" for i in range(7)]
    assert [names[j] for j in src.remote.objects] == urls


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    root = tmp_path_factory.mktemp("flmem_www")
    for i in range(6):
        (root / f"{i}.jpg").write_bytes(jpeg_bytes("baseline", 30 + i, 41, seed=i))
    return root


def test_a_file_list_with_repeats_reads_each_sample_its_object(www):
    """Samples naming one object share it and read its bytes; a missing
    object fails naming its URL."""
    order = [3, 0, 3, 5, 1, 1, 0, 2, 4, 3]
    with Nginx(www) as server:
        local = ringloader.FileList([str(www / f"{i}.jpg") for i in order], order)
        remote = ringloader.FileList([f"{server.url}/{i}.jpg" for i in order], order)
        rows = [9, 2, 0, 4]
        subsets = [torch.utils.data.Subset(ds, rows) for ds in (local, remote)]
        got = []
        for ds in (local, remote, *subsets):
            loader = ringloader.Loader(
                ds, batch_size=5, shuffle=False, transform=_EVAL, num_threads=2
            )
            try:
                got.append([(x.clone(), y.clone()) for x, y in loader])
            finally:
                loader.close()
        for a, b in ((got[0], got[1]), (got[2], got[3])):
            assert len(a) == len(b)
            for (lx, ly), (rx, ry) in zip(a, b):
                assert torch.equal(lx, rx) and torch.equal(ly, ry)
        assert [int(y) for _, ys in got[3] for y in ys] == [order[r] for r in rows]
        missing = ringloader.FileList([f"{server.url}/{i}.jpg" for i in (0, 9)], [0, 9])
        loader = ringloader.Loader(missing, batch_size=2, transform=_EVAL)
        try:
            with pytest.raises(FileNotFoundError, match=f"{server.url}/9.jpg"):
                list(loader)
        finally:
            loader.close()


def test_names_and_urls_out_of_shape_are_refused_naming_them():
    """An S3 name without a key, or of a bucket whose URL is not given, and
    URLs not one an object, are refused with the name or the counts."""

    def pipeline(names, urls):
        return _core.Pipeline(SPEC, http=dict(names=names, urls=urls, objects=None))

    bases = {"bkt": "http://127.0.0.1:9/bkt/"}
    with pytest.raises(ValueError, match="s3://bkt/: an S3 URL is s3://bucket/key"):
        pipeline(["s3://bkt/"], bases)
    with pytest.raises(ValueError, match="s3://other/k: no URL is known"):
        pipeline(["s3://other/k"], bases)
    with pytest.raises(ValueError, match="urls: 2 for 1 objects"):
        pipeline(["http://127.0.0.1:9/a"], ["http://a", "http://b"])
    p = pipeline(["http://127.0.0.1:9/a", "s3://bkt/k"], bases)
    try:
        with pytest.raises(ValueError, match="set_urls: urls: 1 for 2 objects"):
            p.set_urls(["http://a"])
        p.set_urls(["http://a", "http://b"])  # presigned: one an object
        p.set_urls(bases)
    finally:
        p.close()


def _eval():
    import torchvision.transforms as T

    return T.Compose([T.Resize(32), T.CenterCrop(32), T.PILToTensor()])


_EVAL = _eval()
