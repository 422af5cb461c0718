"""TarShards: WebDataset tar shards read in place, against the same images
in an ImageFolder."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import time

import numpy as np
import pytest
import ringloader
import torch
from images import jpeg_bytes
from ringloader import transforms as T
from ringloader.datasets.shards import ShardError, TarShards

EVAL = T.Compose([T.Resize(64), T.CenterCrop(56)])
TRAIN = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip()])

LONG_DIR = "d" * 70 + "/" + "e" * 60  # names well past ustar's 100 bytes


def _add(tf: tarfile.TarFile, name: str, data: bytes, mtime: float = 0) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = mtime
    tf.addfile(info, io.BytesIO(data))


def _load_all(dataset, transform=EVAL, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    loader = ringloader.Loader(
        dataset, batch_size=4, transform=transform, num_threads=2, **kw
    )
    images, labels = [], []
    for x, y in loader:
        images.append(x.clone())
        labels.append(y.clone())
    loader.close()
    return torch.cat(images), torch.cat(labels)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """An ImageFolder and the same samples in three tar shards of three
    formats, in the same order: (folder, shard dir, files in order)."""
    base = tmp_path_factory.mktemp("shards")
    root = base / "folder"
    kinds = ["baseline", "progressive", "s444", "s422", "grayscale", "restart"]
    rng = np.random.default_rng(5)
    files: list[tuple[str, int, bytes]] = []  # (key, class, bytes) in folder order
    for c in range(3):
        (root / f"class_{c}").mkdir(parents=True)
        for i in range(5):
            h, w = (int(v) for v in rng.integers(70, 260, 2))
            blob = jpeg_bytes(kinds[(c * 5 + i) % len(kinds)], h, w, seed=c * 10 + i)
            name = f"img_{i:02d}.jpg"
            (root / f"class_{c}" / name).write_bytes(blob)
            files.append((f"class_{c}/img_{i:02d}", c, blob))
    shards = base / "tars"
    shards.mkdir()
    # Shard 0, GNU format: long names, each .cls member before its image.
    chunk = files[0:5]
    with tarfile.open(shards / "train-000.tar", "w", format=tarfile.GNU_FORMAT) as tf:
        for key, c, blob in chunk:
            _add(tf, f"{LONG_DIR}/{key}.cls", str(c).encode())
            _add(tf, f"{LONG_DIR}/{key}.jpg", blob)
    # Shard 1, pax format: non-ASCII and long names, a .json member per
    # sample, a sample with no image and a stray directory entry.
    chunk = files[5:10]
    with tarfile.open(shards / "train-001.tar", "w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("ünïcødé")
        info.type = tarfile.DIRTYPE
        tf.addfile(info)
        _add(tf, "ünïcødé/orphan.cls", b"7")
        _add(tf, "ünïcødé/orphan.json", b'{"no": "image"}')
        for key, c, blob in chunk:
            stem = f"ünïcødé/{'π' * 60}/{key}"
            _add(tf, stem + ".json", b'{"caption": "x"}')
            _add(tf, stem + ".jpeg", blob)
            _add(tf, stem + ".cls", f"{c}\n".encode())
    # Shard 2, ustar: plain names, a .txt member and a README without a key.
    chunk = files[10:15]
    with tarfile.open(shards / "train-002.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        _add(tf, "README", b"not a sample")
        for key, c, blob in chunk:
            _add(tf, key + ".txt", b"a caption")
            _add(tf, key + ".cls", str(c).encode())
            _add(tf, key + ".jpg", blob)
    return root, shards, files


def _copy_shards(src, dst):
    dst.mkdir()
    for name in sorted(os.listdir(src)):
        if name.endswith(".tar"):
            shutil.copy2(src / name, dst / name)
    return dst


@pytest.fixture
def shards(data, tmp_path):
    """A private copy of the shards (so index files start afresh)."""
    return _copy_shards(data[1], tmp_path / "tars")


def test_same_samples_as_image_folder(data, shards, tmp_path):
    files = data[2]
    ds = TarShards(str(shards / "train-*.tar"), cache_dir=tmp_path / "cache")
    assert len(ds) == len(files)
    assert ds.targets.tolist() == [c for _, c, _ in files]
    assert ds.targets.dtype == np.int64
    assert [ds.read(i) for i in range(len(ds))] == [b for _, _, b in files]
    assert ds.key(0) == f"{LONG_DIR}/class_0/img_00"
    assert ds.key(5).startswith("ünïcødé/ππ")
    assert ds.key(-1) == "class_2/img_04"
    assert ds.describe(14).startswith(f"{ds.shards[2]}[class_2/img_04] (bytes ")
    assert ds.paths[0].endswith("train-000.tar")
    assert ds.paths[14].endswith("train-002.tar")
    assert len(ds.paths) == len(ds)
    src = ds.ringloader_sources()
    assert src.offsets.dtype == np.int64 and src.lengths.dtype == np.int64


@pytest.mark.parametrize("transform,shuffle", [(EVAL, False), (TRAIN, True)])
def test_batches_match_image_folder(data, shards, tmp_path, transform, shuffle):
    root = data[0]
    ours = _load_all(
        TarShards(str(shards / "*.tar"), cache_dir=tmp_path / "c"),
        transform,
        shuffle=shuffle,
        seed=3,
    )
    ref = _load_all(
        ringloader.ImageFolder(str(root)), transform, shuffle=shuffle, seed=3
    )
    assert torch.equal(ours[1], ref[1])
    assert torch.equal(ours[0], ref[0])


def test_index_written_next_to_shards_and_reused(shards, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    ds = TarShards(sorted(str(p) for p in shards.glob("*.tar")), cache_dir=cache)
    for path, file in zip(ds.shards, ds.index_files):
        assert file == path + ".idx.npz" and os.path.isfile(file)
        with np.load(file, allow_pickle=False) as z:  # plain arrays only
            assert "offsets" in z.files
    # The cache directory holds the shard set's manifest only.
    assert [p.name.startswith("shards-") for p in cache.iterdir()] == [True]

    def no_tar(*a, **k):
        raise AssertionError("the tar headers were read again")

    monkeypatch.setattr(tarfile, "TarFile", no_tar)
    again = TarShards(str(shards / "*.tar"), cache_dir=cache)
    assert np.array_equal(again.offsets, ds.offsets)
    assert np.array_equal(again.targets, ds.targets)


def test_brace_notation_and_lists(shards, tmp_path):
    a = TarShards(str(shards / "train-{000..002}.tar"), cache_dir=tmp_path)
    b = TarShards(
        [shards / "train-000.tar", f"file://{shards}/train-00[12].tar"],
        cache_dir=tmp_path,
    )
    assert a.shards == b.shards and len(a) == len(b) == 15
    with pytest.raises(FileNotFoundError):
        TarShards(str(shards / "nothing-*.tar"), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="only local"):
        TarShards("gs://bucket/a.tar", cache_dir=tmp_path)


def test_label_key_callable_and_none(data, shards, tmp_path):
    files = data[2]
    ds = TarShards(
        str(shards / "*.tar"), label_key=lambda key: int(key[-2:]), cache_dir=tmp_path
    )
    assert ds.targets.tolist() == [int(k[-2:]) for k, _, _ in files]
    ds = TarShards(str(shards / "*.tar"), label_key=None, cache_dir=tmp_path)
    assert ds.targets.tolist() == [-1] * 15


def test_image_key_preference(tmp_path):
    a, b = jpeg_bytes("baseline", 40, 50, 1), jpeg_bytes("baseline", 30, 20, 2)
    with tarfile.open(tmp_path / "s.tar", "w") as tf:
        _add(tf, "x.png", a)
        _add(tf, "x.jpg", b)
        _add(tf, "x.cls", b"1")
        _add(tf, "y.seg.png", a)  # extension "seg.png": not an image key
        _add(tf, "y.cls", b"2")
    assert TarShards(str(tmp_path / "s.tar")).read(0) == b
    ds = TarShards(str(tmp_path / "s.tar"), image_key="png;jpg")
    assert len(ds) == 1 and ds.read(0) == a
    assert len(TarShards(str(tmp_path / "s.tar"), image_key=("seg.png",))) == 1


def test_a_key_met_again_is_a_sample_of_its_own(tmp_path):
    """As WebDataset groups members: a new sample whenever the key changes
    (a shard written by appending, ``tar -r``, repeats a key)."""
    a, b = jpeg_bytes("baseline", 40, 50, 1), jpeg_bytes("baseline", 30, 20, 2)
    with tarfile.open(tmp_path / "s.tar", "w") as tf:
        _add(tf, "x.jpg", a)
        _add(tf, "x.cls", b"1")
        _add(tf, "y.jpg", a)
        _add(tf, "y.cls", b"5")
        _add(tf, "x.jpg", b)
        _add(tf, "x.cls", b"2")
    ds = TarShards(str(tmp_path / "s.tar"))
    assert [ds.key(i) for i in range(len(ds))] == ["x", "y", "x"]
    assert ds.targets.tolist() == [1, 5, 2]
    assert [ds.read(i) for i in range(3)] == [a, a, b]


def test_missing_or_bad_label(tmp_path):
    jpg = jpeg_bytes("baseline", 40, 50)
    with tarfile.open(tmp_path / "a.tar", "w") as tf:
        _add(tf, "k1.jpg", jpg)
        _add(tf, "k1.cls", b"3")
        _add(tf, "k2.jpg", jpg)
    with pytest.raises(ShardError, match=r"a\.tar.*'k2'.*\.cls"):
        TarShards(str(tmp_path / "a.tar"))
    with tarfile.open(tmp_path / "b.tar", "w") as tf:
        _add(tf, "k1.jpg", jpg)
        _add(tf, "k1.cls", b"dog")
    with pytest.raises(ShardError, match=r"b\.tar.*'k1\.cls'.*integer"):
        TarShards(str(tmp_path / "b.tar"))


def test_truncated_shard_names_shard_and_member(shards, tmp_path):
    path = shards / "train-002.tar"
    size = path.stat().st_size
    with tarfile.open(path) as tf:
        last = [m for m in tf.getmembers() if m.name.endswith(".jpg")][-1]
    # Cut in the middle of the last image.
    os.truncate(path, last.offset_data + last.size // 2)
    with pytest.raises(ShardError) as e:
        TarShards(str(path), cache_dir=tmp_path)
    assert str(path) in str(e.value) and last.name in str(e.value)
    assert "truncated" in str(e.value)
    assert not os.path.exists(str(path) + ".idx.npz")
    # Cut in the middle of a header: the member before it is named.
    other = shards / "train-000.tar"
    with tarfile.open(other) as tf:
        members = tf.getmembers()
    os.truncate(other, members[3].offset + 100)
    with pytest.raises(ShardError) as e:
        TarShards(str(other), cache_dir=tmp_path)
    assert str(other) in str(e.value) and members[2].name in str(e.value)
    assert size > 0


def test_truncated_after_indexing_fails_at_read(shards, tmp_path):
    path = shards / "train-002.tar"
    ds = TarShards(str(path), cache_dir=tmp_path)
    with tarfile.open(path) as tf:
        last = [m for m in tf.getmembers() if m.name.endswith(".jpg")][-1]
    os.truncate(path, last.offset_data + 10)
    loader = ringloader.Loader(ds, batch_size=5, transform=EVAL, num_threads=2)
    with pytest.raises(OSError, match="train-002.tar"):
        list(loader)
    loader.close()
    with pytest.raises(ShardError, match="truncated"):  # the index is stale now
        TarShards(str(path), cache_dir=tmp_path)


def test_stale_index_is_rebuilt(shards, tmp_path):
    path = shards / "train-002.tar"
    ds = TarShards(str(path), cache_dir=tmp_path)
    assert len(ds) == 5
    index_mtime = os.stat(ds.index_files[0]).st_mtime_ns
    images = [ds.read(i) for i in range(4)]
    # Rewrite the shard with one sample fewer and other offsets.
    with tarfile.open(path) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        _add(tf, "padding.bin", b"\0" * 3000)
        for m, blob in members:
            if "img_04" not in m.name:
                _add(tf, m.name, blob)
    new = TarShards(str(path), cache_dir=tmp_path)
    assert len(new) == 4
    assert new.targets.tolist() == ds.targets.tolist()[:4]
    assert [new.read(i) for i in range(4)] == images
    assert os.stat(new.index_files[0]).st_mtime_ns != index_mtime
    # Same size, new mtime only: rebuilt as well.
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    again = TarShards(str(path), cache_dir=tmp_path)
    assert np.array_equal(again.offsets, new.offsets)
    with np.load(again.index_files[0]) as z:
        assert int(z["mtime_ns"]) == os.stat(path).st_mtime_ns


def test_read_only_folder_uses_cache_dir(shards, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    folder = str(shards)
    os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    if os.geteuid() == 0:  # root writes anywhere: make the folder look read-only
        real = os.access
        monkeypatch.setattr(
            os,
            "access",
            lambda p, mode, **k: (
                False
                if os.fspath(p) == folder and mode & os.W_OK
                else real(p, mode, **k)
            ),
        )
    try:
        ds = TarShards(str(shards / "*.tar"), cache_dir=cache)
        assert all(os.path.dirname(f) == str(cache) for f in ds.index_files)
        assert not any(n.endswith(".idx.npz") for n in os.listdir(folder))
        again = TarShards(str(shards / "*.tar"), cache_dir=cache)
        assert again.index_files == ds.index_files
        assert np.array_equal(again.offsets, ds.offsets)
    finally:
        os.chmod(folder, 0o755)


def test_cache_dir_from_environment(shards, tmp_path, monkeypatch):
    folder = str(shards)
    monkeypatch.setenv("RINGLOADER_CACHE_DIR", str(tmp_path / "envcache"))
    monkeypatch.setattr(os, "access", lambda p, mode, **k: os.fspath(p) != folder)
    ds = TarShards(str(shards / "train-000.tar"))
    assert ds.index_files[0].startswith(str(tmp_path / "envcache") + os.sep)


def test_compressed_and_non_tar_shards_are_refused(tmp_path):
    import gzip

    (tmp_path / "a.tar.gz").write_bytes(gzip.compress(b"x" * 1000))
    with pytest.raises(ShardError, match="compressed"):
        TarShards(str(tmp_path / "a.tar.gz"))
    (tmp_path / "b.tar").write_bytes(b"hello, not a tar file" * 50)
    with pytest.raises(ShardError, match="b.tar"):
        TarShards(str(tmp_path / "b.tar"))


def test_a_shard_set_without_a_sample_is_refused_naming_it(tmp_path):
    # Shards that exist but hold no image: a data set of 0 samples would
    # only fail later, far from its cause (a wrong image_key, wrong files).
    for i in range(2):
        with tarfile.open(tmp_path / f"e-{i}.tar", "w") as tf:
            _add(tf, f"k{i}.txt", b"notes")
            _add(tf, f"k{i}.cls", b"3")
    pattern = str(tmp_path / "e-*.tar")
    with pytest.raises(
        ValueError, match=r"no sample in the 2 shard\(s\) of .*e-\*\.tar"
    ):
        TarShards(pattern)
    with pytest.raises(ValueError, match="webp"):
        TarShards([str(tmp_path / "e-0.tar")], image_key="webp")


def test_a_shard_gone_at_read_time_fails_its_samples_only(tmp_path):
    # Indexed, then removed (a node's disk cleaned, a bucket pruned): each
    # of its samples is an OSError naming the shard, which skip replaces
    # from the shards still there.
    for s in range(2):
        with tarfile.open(tmp_path / f"s-{s}.tar", "w") as tf:
            for k in range(6):
                _add(
                    tf, f"{s}-{k}.jpg", jpeg_bytes("baseline", 40, 48, seed=10 * s + k)
                )
                _add(tf, f"{s}-{k}.cls", str(s).encode())
    ds = TarShards(str(tmp_path / "s-*.tar"))
    os.unlink(tmp_path / "s-1.tar")
    with pytest.raises(OSError, match="s-1.tar"):
        _load_all(ds)
    loader = ringloader.Loader(ds, batch_size=4, transform=EVAL, on_error="skip")
    labels = torch.cat([t for _, t in loader])
    assert labels.tolist() == [0] * 12  # every replacement from s-0.tar
    assert loader.stats()["skipped"] == 6
