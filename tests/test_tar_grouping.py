"""Tar members grouped into samples as WebDataset groups them, checked
against the webdataset package itself on the same shards, local and over
HTTP (nginx): the samples, their keys, their members and their labels.
And the index that records the grouping: one of an older format, or one
that contradicts its shard, is rebuilt, never read as it is."""

from __future__ import annotations

import io
import glob
import os
import random
import shutil
import tarfile

import numpy as np
import pytest
from images import jpeg_bytes
from rlbench.servers import Nginx, find_nginx
from ringloader.datasets import tarindex
from ringloader.datasets.cache import StringBlob
from ringloader.datasets.shards import IMAGE_KEYS, ShardError, TarShards

wds = pytest.importorskip("webdataset")
from webdataset import tariterators  # noqa: E402

JPG = [jpeg_bytes("baseline", 30 + 4 * i, 40, seed=i) for i in range(8)]


def _write(path, members) -> None:
    """A tar of ``members``: (name, bytes) for a file, (name, None) for a
    directory."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))


# The shard of the report: a key met again after another is a sample of
# its own (three samples, labels 1, 2, 3), not merged into the first.
ISSUE = [
    ("a.jpg", JPG[0]),
    ("a.cls", b"1"),
    ("b.jpg", JPG[1]),
    ("b.cls", b"2"),
    ("a.jpg", JPG[2]),
    ("a.cls", b"3"),
]

# The corners of WebDataset's rules: a directory, a member without an
# extension and metadata members inside a sample (none ends it); dot
# files (their folder is the key, unless the folder's name has a dot);
# several dots (the extension is all after the first); extensions in
# capitals (lowercased); dots in folder names; samples without an image
# (dropped by TarShards, kept by the index); keys in and out of order.
CORNERS = [
    ("d", None),
    ("d/k1.jpg", JPG[0]),
    ("d/sub", None),
    ("d/README", b"no extension"),
    ("__meta__/info.json", b"{}"),
    ("__index__", b"meta"),
    ("d/k1.cls", b"4"),
    ("d/k1.seg.png", b"not read"),
    ("d/.hidden", b"the key d/"),
    ("d/.other.txt", b"the key d/ again"),
    ("v1.0/.x", b"no key"),
    ("v1.0/k2.JPG", JPG[1]),
    ("v1.0/k2.Cls", b"5"),
    ("k3.txt", b"no image"),
    ("k3.cls", b"6"),
    ("z.jpeg", JPG[2]),
    ("z.cls", b"7"),
    ("d/k1.jpg", JPG[3]),
    ("d/k1.cls", b"8"),
    ("z.cls", b"9"),
    ("z.png", JPG[4]),
    ("a..b", JPG[5]),
    ("a..cls", b"10"),
    ("d/k1.jpg", JPG[6]),
    ("d/k1.cls", b"11"),
]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("grouping")
    _write(root / "issue.tar", ISSUE)
    _write(root / "corners.tar", CORNERS)
    return root


def _webdataset(url: str) -> list[dict]:
    """The samples webdataset makes of one shard, as its WebDataset does
    (the tar walk and group_by_keys), without decoding."""
    samples = tariterators.tarfile_samples(iter([{"url": url}]))
    return [
        {k: v for k, v in s.items() if not k.startswith("__")}
        | {"__key__": s["__key__"]}
        for s in samples
    ]


def _index_samples(shard: str, z: dict) -> list[dict]:
    """The samples an index records, read back from the shard: key and
    extension -> bytes, in the index's order."""
    names = StringBlob(z["names_blob"], z["names_offsets"])
    exts = list(StringBlob(z["exts_blob"], z["exts_offsets"]))
    with open(shard, "rb") as f:
        blob = f.read()
    out: list[dict] = []
    for i, group in enumerate(z["key_ids"].tolist()):
        if group == len(out):
            out.append({"__key__": tarindex.key_of(names[i])})
        off, size = int(z["offsets"][i]), int(z["sizes"][i])
        out[group][exts[int(z["ext_codes"][i])]] = blob[off : off + size]
    return out


def _image_samples(samples: list[dict]) -> list[tuple[str, bytes, int]]:
    """(key, image, label) of the samples with an image, the image member
    chosen by TarShards' order of extensions."""
    out = []
    for s in samples:
        image = next((s[k] for k in IMAGE_KEYS if k in s), None)
        if image is not None:
            out.append((s["__key__"], image, int(s["cls"])))
    return out


def _same_as_webdataset(ds: TarShards, reference: list[dict]) -> None:
    expected = _image_samples(reference)
    assert len(ds) == len(expected)
    got = [(ds.key(i), ds.read(i), int(ds.targets[i])) for i in range(len(ds))]
    assert got == expected


@pytest.mark.parametrize("name", ["issue.tar", "corners.tar"])
def test_local_shards_group_as_webdataset(shards, tmp_path, name):
    path = str(shards / name)
    reference = _webdataset(path)
    ds = TarShards(path, cache_dir=tmp_path / "cache")
    _same_as_webdataset(ds, reference)
    with np.load(ds.index_files[0]) as z:
        assert _index_samples(path, dict(z)) == reference
    if name == "issue.tar":
        assert [s["__key__"] for s in reference] == ["a", "b", "a"]
        assert ds.targets.tolist() == [1, 2, 3]


def test_http_shards_group_as_webdataset(shards, tmp_path, monkeypatch):
    # webdataset reads a URL through a curl child: under `make test-asan`
    # that child would inherit the preloaded sanitizer runtime, with which
    # an uninstrumented curl can hang; it gets the plain environment.
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    if find_nginx() is None:
        pytest.fail("nginx is missing: apt-get install nginx (CI installs it)")
    www = tmp_path / "www"
    www.mkdir()
    for name in ("issue.tar", "corners.tar"):
        shutil.copy(shards / name, www / name)  # no sidecars: streamed
    with Nginx(www) as server:
        for name in ("issue.tar", "corners.tar"):
            url = f"{server.url}/{name}"
            reference = _webdataset(url)
            assert reference == _webdataset(str(shards / name))
            ds = TarShards(url, cache_dir=tmp_path / "cache")
            _same_as_webdataset(ds, reference)


def test_an_extension_twice_in_one_sample_is_refused(tmp_path):
    """As webdataset refuses it ("duplicate file name"): which of the two
    is the sample's would be anybody's guess."""
    path = tmp_path / "s.tar"
    _write(path, [("k/x.jpg", JPG[0]), ("k/x.cls", b"1"), ("k/x.JPG", JPG[1])])
    with pytest.raises(ValueError, match="duplicate file name"):
        _webdataset(str(path))
    with pytest.raises(ShardError, match=r"s\.tar: member 'k/x\.JPG' .*\.jpg.*'k/x'"):
        TarShards(str(path))
    assert not os.path.exists(str(path) + ".idx.npz")


def test_keys_split_as_webdataset():
    """split_key against webdataset's own split, on names made of the
    characters that matter: letters, dots and slashes."""
    rng = random.Random(0)
    names = ["a.b", ".a", "a/.b", "a.b/.c", "a/b.c/d", "a..b", "a.", "/.a", "a//.b"]
    names += [
        "".join(rng.choice("ab./") for _ in range(rng.randint(1, 9)))
        for _ in range(5000)
    ]
    for name in names:
        base, ext = tariterators.base_plus_ext(name)
        expected = None if base is None else (base, ext.lower())
        assert tarindex.split_key(name) == expected, name


def _old_format(path: str) -> dict:
    """The index the previous format wrote for ``path``: keys numbered
    by first appearance, so a key met again joined its first sample."""
    with open(path, "rb") as f:
        z = tarindex._scan(f, path, os.path.getsize(path))
    names = StringBlob(z["names_blob"], z["names_offsets"])
    first: dict[str, int] = {}
    z["key_ids"] = np.array(
        [
            first.setdefault(tarindex.key_of(names[i]), len(first))
            for i in range(len(names))
        ],
        dtype=np.int32,
    )
    st = os.stat(path)
    return {**tarindex._header(os.path.abspath(path), st.st_size, st.st_mtime_ns), **z}


def _save(path: str, arrays: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def test_an_index_of_the_previous_format_is_rebuilt(shards, tmp_path):
    path = str(tmp_path / "issue.tar")
    shutil.copy2(shards / "issue.tar", path)
    old = _old_format(path)
    old["version"] = np.int64(1)
    _save(path + ".idx.npz", old)
    ds = TarShards(path, cache_dir=tmp_path / "cache")
    assert [ds.key(i) for i in range(len(ds))] == ["a", "b", "a"]
    assert ds.targets.tolist() == [1, 2, 3]
    with np.load(path + ".idx.npz") as z:  # written again, this format
        assert int(z["version"]) == tarindex.SHARD_INDEX_VERSION
        assert z["key_ids"].tolist() == [0, 0, 1, 1, 2, 2]


def test_an_index_that_contradicts_its_shard_is_rebuilt(shards, tmp_path):
    """Of this format's version, the shard's size and mtime, yet not the
    shard's: samples out of member order, or a member past the end."""
    path = str(tmp_path / "issue.tar")
    shutil.copy2(shards / "issue.tar", path)
    size = os.path.getsize(path)
    bad = _old_format(path)  # of this version, the grouping of another
    past = _old_format(path)
    past["key_ids"] = np.array([0, 0, 1, 1, 2, 2], dtype=np.int32)
    past["offsets"] = past["offsets"].copy()
    past["offsets"][-2] = size - 1  # the last image running past the end
    for arrays in (bad, past):
        assert int(arrays["version"]) == tarindex.SHARD_INDEX_VERSION
        _save(path + ".idx.npz", arrays)
        # The member index is read when the sample records derived from it
        # are missing (or stale): as they are when the index is written.
        for records in glob.glob(glob.escape(path) + ".*.rec"):
            os.remove(records)
        ds = TarShards(path, cache_dir=tmp_path / "cache")
        assert ds.targets.tolist() == [1, 2, 3]
        assert [ds.read(i) for i in range(3)] == [JPG[0], JPG[1], JPG[2]]
        with np.load(path + ".idx.npz") as z:
            assert int(z["offsets"][-2]) < size - 1


def test_http_sidecar_of_the_previous_format_is_not_used(shards, tmp_path):
    if find_nginx() is None:
        pytest.fail("nginx is missing: apt-get install nginx (CI installs it)")
    www = tmp_path / "www"
    www.mkdir()
    path = str(www / "issue.tar")
    shutil.copy2(shards / "issue.tar", path)
    old = _old_format(path)
    old["version"] = np.int64(1)
    _save(path + ".idx.npz", old)
    with Nginx(www, access_log=True) as server:
        ds = TarShards(f"{server.url}/issue.tar", cache_dir=tmp_path / "cache")
        assert ds.targets.tolist() == [1, 2, 3]
        served = [r[1] for r in server.requests() if r[0] == "GET"]
        assert "/issue.tar" in served  # streamed, the sidecar passed over
