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
from ringloader.datasets.composed import resolve

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


def _halves(make, n):
    """Two remote FileLists of n // 2 objects each, named apart."""
    a, b = make(n // 2, "a"), make(n - n // 2, "b")
    return a, b


def _composition(kind, make, n):
    """A composition of remote FileLists holding n objects in all."""
    if kind == "subset":
        fl = make(n, "a")
        rows = np.random.default_rng(0).permutation(n)
        return torch.utils.data.Subset(fl, rows.tolist())
    a, b = _halves(make, n)
    if kind == "concat":
        return torch.utils.data.ConcatDataset([a, b])
    return ringloader.Mix([a, b])


@pytest.mark.parametrize("where", ["http", "s3"])
@pytest.mark.parametrize("kind", ["subset", "concat", "mix"])
def test_a_composition_of_remote_file_lists_costs_no_python_object_an_object(
    kind, where, tmp_path
):
    """A Subset, a ConcatDataset and a Mix of remote FileLists are handed
    over without a Python object an object or a sample. Kept, an object:
    the composition's map of its samples (which part, which of its
    samples: 16 bytes, the loader's before as now), each sample's object
    (an int64), and for parts joined one blob of their names (the name's
    bytes and an 8-byte offset); at the peak 32 bytes more; in C under 12
    bytes (the object of each sample). Before: a str a sample, and a dict
    entry and a str an object for parts joined (52 to 284 bytes kept, 85
    to 328 at the peak, 85 to 92 in C for parts joined)."""
    if where == "http":

        def make(n, tag):
            urls = [f"http://127.0.0.1:9/{tag}/{i:07d}.jpg" for i in range(n)]
            return ringloader.FileList(urls, np.arange(n) % 10)

    else:

        def make(n, tag):
            csv = tmp_path / f"{tag}{n}.csv"
            csv.write_text(
                "path,label\n"
                + "".join(f"s3://bkt/{tag}/{i:07d}.jpg,{i % 10}\n" for i in range(n))
            )
            return ringloader.FileList.from_csv(csv, s3_client=_s3_client())

    costs = []
    for n in (SMALL, BIG):
        # The loader resolves the composition once and keeps its map.
        composed = resolve(_composition(kind, make, n))
        costs.append(hand_over_costs(composed.ringloader_sources, SPEC))
    small, big = costs
    per = [(b - a) / (BIG - SMALL) for a, b in zip(small, big)]
    kept = 16 + 8 + 4  # the map, each sample's object, slack
    if kind != "subset":
        kept += len(make(1, "a").paths[0]) + 8  # the names joined
    assert per[0] < kept, (small, big, per)
    assert per[1] < kept + 32, (small, big, per)
    assert per[2] < 12, (small, big, per)


def test_a_composition_of_local_file_lists_names_its_samples_in_a_blob():
    """Local files too: a Subset and a ConcatDataset of FileLists name
    each sample in one blob (its bytes and an 8-byte offset) beside the
    composition's map (16 bytes), where they made a str a sample (about
    90 bytes), the same names in the same order."""
    import gc
    import tracemalloc

    def make(n, tag):
        return ringloader.FileList(
            [f"/data/{tag}/{i:07d}.jpg" for i in range(n)], [0] * n
        )

    figures = {}
    for kind in ("subset", "concat"):
        kept = []
        for n in (SMALL, BIG):
            composed = resolve(_composition(kind, make, n))
            composed.ringloader_sources()  # what is made once, made
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                src = composed.ringloader_sources()
                gc.collect()
                kept.append(tracemalloc.get_traced_memory()[0] - base)
            finally:
                tracemalloc.stop()
            if kind == "subset":
                rows = composed.dataset.indices
                leaf = composed.dataset.dataset
                assert list(src.paths) == [leaf.paths[i] for i in rows]
            else:
                leaves = composed.dataset.datasets
                assert list(src.paths) == [p for d in leaves for p in d.paths]
        figures[kind] = (kept, (kept[1] - kept[0]) / (BIG - SMALL))
    name = len(make(1, "a").paths[0])
    for kind, (_, per) in figures.items():
        # The map, the targets' int64, a name's bytes and offset, slack.
        assert per < 16 + 8 + name + 8 + 4, (kind, figures)


def test_parts_naming_one_object_fetch_it_once():
    """Objects named in two parts of a ConcatDataset are one object (the
    first part's), each sample fetching its own."""
    a = [f"http://127.0.0.1:9/img/{i}.jpg" for i in (0, 1, 2, 1)]
    b = [f"http://127.0.0.1:9/img/{i}.jpg" for i in (3, 2, 0)]
    ds = torch.utils.data.ConcatDataset(
        [ringloader.FileList(a, range(4)), ringloader.FileList(b, range(3))]
    )
    src = resolve(ds).ringloader_sources()
    names = list(src.remote.names)
    assert names == [f"http://127.0.0.1:9/img/{i}.jpg" for i in range(4)]
    assert [names[j] for j in src.remote.objects] == a + b
    assert list(src.remote.urls()) == names


def test_presigned_urls_of_parts_are_joined_the_first_part_naming_each():
    """Presigned URLs (one an object) of two parts come back as one blob,
    in the objects' order, an object of both parts by the first's URL."""
    a = [f"http://127.0.0.1:9/a/{i}.jpg" for i in (0, 1, 2)]
    b = [f"http://127.0.0.1:9/b/{i}.jpg" for i in (3, 4)] + a[1:2]
    parts = [ringloader.FileList(a, range(3)), ringloader.FileList(b, range(3))]
    for fl, sig in zip(parts, "xy"):
        fl.client.fetch_urls = lambda names, signed=False, sig=sig: [
            f"{n}?sig={sig}" for n in names
        ]
    src = resolve(torch.utils.data.ConcatDataset(parts)).ringloader_sources()
    names = list(src.remote.names)
    assert names == a + b[:2]
    urls = src.remote.urls()
    assert not isinstance(urls, list)  # a blob, not a str an object
    assert list(urls) == [f"{n}?sig=x" for n in a] + [f"{n}?sig=y" for n in b[:2]]
    assert [names[j] for j in src.remote.objects] == a + b


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
        other = ringloader.FileList([f"{server.url}/{i}.jpg" for i in (1, 2)], [1, 2])
        for ds in (
            missing,
            torch.utils.data.Subset(missing, [1, 0]),
            torch.utils.data.ConcatDataset([other, missing]),
        ):
            loader = ringloader.Loader(ds, batch_size=2, transform=_EVAL)
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
