"""A tar shard set opened from its manifest and the shards' sample record
files: the same samples as per-sample tables give, only changed shards
indexed again, altered files rebuilt or refused, little memory at open."""

from __future__ import annotations

import gc
import glob
import io
import os
import pickle
import tarfile
import time
import tracemalloc

import numpy as np
import pytest
import ringloader
import torch
from images import jpeg_bytes
from ringloader import transforms as T
from ringloader.datasets import tarindex
from ringloader.datasets.cache import load_npz, save_npz
from ringloader.datasets.shards import ShardError, TarShards

EVAL = T.Compose([T.Resize(40), T.CenterCrop(32)])
JPG = [jpeg_bytes("baseline", 40 + 3 * i, 48, seed=i) for i in range(6)]


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def _shard(path, samples: int, first: int, label_every: int = 1) -> None:
    """A WebDataset shard: ``dir/k{i}.jpg`` then ``.cls`` (and a ``.txt``
    the selection leaves out)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(first, first + samples):
            _add(tf, f"d/k{i:05d}.jpg", JPG[i % len(JPG)])
            _add(tf, f"d/k{i:05d}.cls", str((i * 7) % 11).encode())
            _add(tf, f"d/k{i:05d}.txt", b"caption %d" % i)


@pytest.fixture
def shard_dir(tmp_path):
    folder = tmp_path / "tars"
    folder.mkdir()
    for s, n in enumerate((5, 7, 3, 6)):  # sizes differ: shards differ
        _shard(folder / f"train-{s:03d}.tar", n, first=s * 100)
    return folder


def _truth(folder) -> tuple[list, list, list, list]:
    """(offset, length, label, key) of every sample, from the tar headers."""
    out: tuple[list, list, list, list] = ([], [], [], [])
    for path in sorted(glob.glob(str(folder / "*.tar"))):
        with tarfile.open(path) as tf:
            members = {m.name: m for m in tf.getmembers()}
            for name, m in members.items():
                if name.endswith(".jpg"):
                    key = name[: -len(".jpg")]
                    label = int(tf.extractfile(members[key + ".cls"]).read())
                    for column, v in zip(out, (m.offset_data, m.size, label, key)):
                        column.append(v)
    return out


def _same_as_truth(ds: TarShards, folder, keys: bool = True) -> None:
    offsets, lengths, labels, names = _truth(folder)
    assert len(ds) == len(offsets)
    assert np.asarray(ds.offsets).tolist() == offsets
    assert np.asarray(ds.lengths).tolist() == lengths
    assert ds.targets.tolist() == labels
    if keys:  # (a key is read from the member index)
        assert [ds.key(i) for i in range(len(ds))] == names


def _records(folder) -> list[str]:
    return sorted(glob.glob(str(folder / "*.tar.*.rec")))


def test_second_open_reads_the_manifest_not_the_indexes(shard_dir, tmp_path):
    cache = tmp_path / "cache"
    first = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    _same_as_truth(first, shard_dir)
    assert len(_records(shard_dir)) == 4  # one record file per shard
    manifests = [p.name for p in cache.iterdir()]
    assert len(manifests) == 1 and manifests[0].startswith("shards-")
    # Without the member indexes, the second open still has every sample:
    # it read the manifest and the record files only (reading an index
    # would have built it again).
    for index in glob.glob(str(shard_dir / "*.idx.npz")):
        os.remove(index)
    again = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    assert np.array_equal(again.offsets, first.offsets)
    assert np.array_equal(again.lengths, first.lengths)
    assert np.array_equal(again.targets, first.targets)
    assert [again.read(i) for i in range(len(again))] == [
        first.read(i) for i in range(len(first))
    ]
    assert glob.glob(str(shard_dir / "*.idx.npz")) == []
    # A set opened from its manifest pickles, as a spawned worker or a
    # framework's copy gets it (its record files' names were a blob whose
    # memoryview did not pickle: "cannot pickle memoryview objects").
    copy = pickle.loads(pickle.dumps(again))
    assert [copy.read(i) for i in range(len(copy))] == [
        first.read(i) for i in range(len(first))
    ]
    assert np.array_equal(copy.targets, first.targets)


def test_same_samples_labels_and_batches_as_per_sample_tables(shard_dir, tmp_path):
    cache = tmp_path / "cache"
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    _same_as_truth(ds, shard_dir)
    assert len(_records(shard_dir)) == 4
    # The reference: the labels a function gives (written to record files
    # of that open's own), its ranges those of a selection without labels.
    labels = dict(zip(_truth(shard_dir)[3], _truth(shard_dir)[2]))
    ref = TarShards(
        str(shard_dir / "*.tar"), label_key=lambda k: labels[k], cache_dir=cache
    )
    assert not isinstance(ref.targets, np.ndarray)  # read from records
    n = len(ds)
    assert ds.offsets.shape == (n,) and ds.targets.dtype == np.int64
    assert ds.targets.ndim == 1
    # Indexing as an ndarray indexes: ints, negatives, arrays, lists,
    # slices, masks; what targets.batch does with a batch's indices.
    idx = np.array([n - 1, 0, 7, 3, 7, 12], dtype=np.int64)
    tables = (np.asarray(ref.offsets), np.asarray(ref.targets))
    for view, table in zip((ds.offsets, ds.targets), tables):
        assert view[5] == table[5] and isinstance(view[5], np.int64)
        assert view[-2] == table[-2]
        assert np.array_equal(view[idx], table[idx])
        assert view[idx].dtype == np.int64
        assert np.array_equal(view[list(idx)], table[list(idx)])
        assert np.array_equal(view[3:19:4], table[3:19:4])
        mask = np.arange(n) % 3 == 0
        assert np.array_equal(view[mask], table[mask])
        with pytest.raises(IndexError):
            view[n]
        with pytest.raises(IndexError):
            view[np.array([0, -n - 1])]
    assert torch.equal(
        torch.from_numpy(ds.targets[idx]), torch.tensor(ref.targets[idx])
    )
    assert [ds.describe(i) for i in range(n)] == [ref.describe(i) for i in range(n)]
    assert ds[4][1] == ref[4][1] and torch.equal(ds[4][0], ref[4][0])
    assert ds._sample(6) == ref._sample(6)
    assert [ds.shard_of(i) for i in range(n)] == [ref.shard_of(i) for i in range(n)]
    copy = pickle.loads(pickle.dumps(ds))  # as a spawned worker gets it
    assert np.array_equal(copy.targets[idx], ref.targets[idx])
    assert copy.read(n - 1) == ref.read(n - 1)
    src, ref_src = ds.ringloader_sources(), ref.ringloader_sources()
    assert np.array_equal(src.offsets, ref_src.offsets)
    assert np.array_equal(src.lengths, ref_src.lengths)
    for shuffle in (False, True):
        got, want = [], []
        for data, out in ((ds, got), (ref, want)):
            loader = ringloader.Loader(
                data,
                batch_size=4,
                transform=EVAL,
                num_threads=2,
                shuffle=shuffle,
                seed=3,
            )
            out.extend((x.clone(), y.clone()) for x, y in loader)
            loader.close()
        assert len(got) == len(want)
        for (x, y), (x_ref, y_ref) in zip(got, want):
            assert torch.equal(y, y_ref) and torch.equal(x, x_ref)


def test_a_rewritten_shard_is_reindexed_alone(shard_dir, tmp_path):
    cache = tmp_path / "cache"
    TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    records = _records(shard_dir)
    stamps = {p: os.stat(p).st_mtime_ns for p in records}
    time.sleep(0.01)
    _shard(shard_dir / "train-001.tar", 9, first=500)  # new size and mtime
    # The other shards' indexes gone: reading one would build it again.
    for s in (0, 2, 3):
        os.remove(str(shard_dir / f"train-{s:03d}.tar.idx.npz"))
    again = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    _same_as_truth(again, shard_dir, keys=False)
    assert len(again) == 5 + 9 + 3 + 6
    assert sorted(os.listdir(shard_dir)).count("train-001.tar.idx.npz") == 1
    for s in (0, 2, 3):
        assert not os.path.exists(shard_dir / f"train-{s:03d}.tar.idx.npz")
    changed = [p for p in records if os.stat(p).st_mtime_ns != stamps[p]]
    assert [os.path.basename(p).split(".")[0] for p in changed] == ["train-001"]
    # The manifest now records the new shard: a third open indexes nothing.
    os.remove(str(shard_dir / "train-001.tar.idx.npz"))
    third = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    _same_as_truth(third, shard_dir, keys=False)
    assert glob.glob(str(shard_dir / "*.idx.npz")) == []


def _alter(path: str, how: str, other: str) -> None:
    data = bytearray(open(path, "rb").read())
    if how == "truncated":
        data = data[: len(data) - 10]
    elif how == "count":  # the header says one record fewer, and the file too
        data[32:40] = (int.from_bytes(data[32:40], "little") - 1).to_bytes(8, "little")
        data = data[: len(data) - tarindex.RECORD.itemsize]
    elif how == "version":
        data[8:12] = (tarindex.RECORDS_VERSION + 1).to_bytes(4, "little")
    elif how == "index_version":
        data[12:16] = (tarindex.SHARD_INDEX_VERSION + 1).to_bytes(4, "little")
    elif how == "selection":  # the records of another image extension
        data[48:51] = b"png"
    elif how == "other_shard":
        data = bytearray(open(other, "rb").read())
    elif how == "garbage":
        data = bytearray(os.urandom(len(data)))
    elif how == "empty":
        data = bytearray()
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize(
    "how",
    [
        "truncated",
        "count",
        "version",
        "index_version",
        "selection",
        "other_shard",
        "garbage",
        "empty",
        "removed",
    ],
)
def test_an_altered_record_file_is_rebuilt(shard_dir, tmp_path, how):
    cache = tmp_path / "cache"
    TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    records = _records(shard_dir)
    if how == "removed":
        os.remove(records[2])
    else:
        _alter(records[2], how, other=records[1])
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    _same_as_truth(ds, shard_dir)
    # Rebuilt in place, and the shard set opens cleanly again.
    assert tarindex.map_records(records[2], *_expect(ds, 2)) is not None
    _same_as_truth(TarShards(str(shard_dir / "*.tar"), cache_dir=cache), shard_dir)


def _expect(ds: TarShards, s: int) -> tuple:
    st = os.stat(ds.shards[s])
    tag = tarindex.selection_tag(ds.image_key, "cls")
    return st.st_size, st.st_mtime_ns, tag, int(ds.starts[s + 1] - ds.starts[s])


def _manifest(cache) -> str:
    (path,) = glob.glob(str(cache / "shards-*.npz"))
    return path


@pytest.mark.parametrize("how", ["truncated", "garbage", "shards", "lengths"])
def test_an_altered_manifest_is_rebuilt(shard_dir, tmp_path, how):
    cache = tmp_path / "cache"
    TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    path = _manifest(cache)
    if how in ("truncated", "garbage"):
        data = open(path, "rb").read()
        data = data[: len(data) // 2] if how == "truncated" else os.urandom(len(data))
        with open(path, "wb") as f:
            f.write(data)
    else:
        z = load_npz(path)
        if how == "shards":  # another shard set's list
            z["names_blob"] = z["names_blob"].copy()
            z["names_blob"][-5] ^= 1
        else:  # arrays of other lengths
            z["counts"] = z["counts"][:-1]
        save_npz(path, z)
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    _same_as_truth(ds, shard_dir)


def test_a_manifest_that_miscounts_a_shard_is_corrected_at_open(shard_dir, tmp_path):
    cache = tmp_path / "cache"
    TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    path = _manifest(cache)
    z = load_npz(path)
    z["counts"] = z["counts"].copy()
    z["counts"][1] += 1  # shard 1 has 7 samples, not 8
    save_npz(path, z)
    # Its record file is not the size 8 records make: derived from the
    # shard's index again, which settles it (7), and never misread.
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    assert len(ds) == 5 + 7 + 3 + 6
    _same_as_truth(ds, shard_dir)
    assert _labels_read(ds) == _truth(shard_dir)[2]
    assert load_npz(path)["counts"].tolist() == [5, 7, 3, 6]


def test_a_shard_changed_after_opening_is_refused_naming_it(shard_dir, tmp_path):
    cache = tmp_path / "cache"
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    time.sleep(0.01)
    _shard(shard_dir / "train-002.tar", 4, first=900)
    for records in _records(shard_dir):
        if "train-002" in records:
            os.remove(records)
    with pytest.raises(ShardError, match=r"train-002\.tar.*changed"):
        ds.targets[5 + 7]
    assert ds.targets[5 + 7 + 3] == ((300 * 7) % 11)  # shard 3 still reads
    _same_as_truth(TarShards(str(shard_dir / "*.tar"), cache_dir=cache), shard_dir)


def test_read_only_folder_keeps_records_in_cache_dir(shard_dir, tmp_path, monkeypatch):
    folder = str(shard_dir)
    real = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode, **k: (
            False if os.fspath(p) == folder and mode & os.W_OK else real(p, mode, **k)
        ),
    )
    cache = tmp_path / "cache"
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    _same_as_truth(ds, shard_dir)
    assert _records(shard_dir) == []
    assert len(glob.glob(str(cache / "samples-*.rec"))) == 4
    _same_as_truth(TarShards(str(shard_dir / "*.tar"), cache_dir=cache), shard_dir)


def test_a_million_samples_open_in_under_4_bytes_each(tmp_path):
    """100 links to one 10,000-sample shard, its index and its records:
    after a first open (which writes the manifest), opening the set
    allocates less than 4 bytes a sample at its peak."""
    real = tmp_path / "real"
    real.mkdir()
    shard = real / "big.tar"
    with tarfile.open(shard, "w") as tf:
        for i in range(10_000):
            _add(tf, f"{i:06d}.jpg", b"j" * (i % 13 + 1))
            _add(tf, f"{i:06d}.cls", str(i % 1000).encode())
    TarShards(str(shard), cache_dir=tmp_path / "cache")  # index and records
    sidecars = glob.glob(glob.escape(str(shard)) + ".*")  # index, records
    links = tmp_path / "links"
    links.mkdir()
    for k in range(100):
        link = links / f"part-{k:03d}.tar"
        os.symlink(shard, link)
        for sidecar in sidecars:
            os.symlink(sidecar, str(link) + sidecar[len(str(shard)) :])
    pattern = str(links / "*.tar")
    TarShards(pattern, cache_dir=tmp_path / "cache")  # writes the manifest
    tracemalloc.start()
    try:
        ds = TarShards(pattern, cache_dir=tmp_path / "cache")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ds) == 1_000_000
    assert peak / len(ds) < 4, f"{peak} bytes at the peak of opening"
    assert ds.targets[999_999] == 9_999 % 1000 and ds.lengths[10_001] == 2
    assert ds.key(123_456) == "003456"


def test_an_unwritable_cache_dir_fails_no_open(shard_dir, tmp_path):
    """The manifest cannot be written (the cache directory is a file): the
    set opens all the same, from the record files beside the shards."""
    cache = tmp_path / "not-a-folder"
    cache.write_bytes(b"")
    for _ in range(2):
        ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
        _same_as_truth(ds, shard_dir)


def test_a_record_file_of_another_shard_is_refused_when_read(shard_dir, tmp_path):
    # Shards 0 and 3 hold different samples: with 0's record file copied
    # over 3's (a count made equal), the C source must not read shard 3
    # at shard 0's offsets: the file's header names another shard (size,
    # mtime), so shard 3's samples fail naming its record file.
    _shard(shard_dir / "train-003.tar", 5, first=300)
    cache = tmp_path / "cache"
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    files = _records(shard_dir)
    with open(files[0], "rb") as f:
        other = f.read()
    with open(files[3], "wb") as f:
        f.write(other)
    loader = ringloader.Loader(ds, batch_size=1, transform=EVAL)
    batches = iter(loader)
    for _ in range(5 + 7 + 3):
        next(batches)  # shards 0-2 read
    with pytest.raises(OSError, match=r"train-003\.tar.*another shard"):
        next(batches)


def test_batch_lookups_keep_few_record_files_open_and_close_them(
    shard_dir, tmp_path, monkeypatch
):
    # A batch's labels are read from the record files with pread, through
    # a bounded cache of open files, closed when the dataset goes.
    from ringloader.datasets import manifest

    monkeypatch.setattr(manifest, "_OPEN_RECORD_FILES", 2)
    gc.collect()  # files of earlier tests' datasets
    before = len(os.listdir("/proc/self/fd"))
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=tmp_path / "cache")
    ds._records._limit = 2  # more shards than stay mapped: batches read
    _, _, labels, _ = _truth(shard_dir)
    idx = np.array([0, 6, 13, 20, 1, 19, 7])  # every shard, back and forth
    for _ in range(3):
        assert ds.targets[idx].tolist() == [labels[i] for i in idx]
        assert len(os.listdir("/proc/self/fd")) <= before + 2
    del ds
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_set_opened_from_two_working_directories_reads_from_both(
    shard_dir, tmp_path, monkeypatch
):
    # The manifest is found by the shards' absolute paths, so what it
    # keeps (the record files) must not depend on the working directory.
    cache = tmp_path / "cache"
    monkeypatch.chdir(shard_dir.parent)
    TarShards("tars/*.tar", cache_dir=cache)
    sub = shard_dir.parent / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    ds = TarShards("../tars/*.tar", cache_dir=cache)
    labels = _labels_read(ds)
    assert labels == _truth(shard_dir)[2]


def test_a_record_file_removed_is_made_again_at_the_next_open(shard_dir, tmp_path):
    cache = tmp_path / "cache"
    TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    gone = _records(shard_dir)[1]
    os.remove(gone)
    ds = TarShards(str(shard_dir / "*.tar"), cache_dir=cache)
    assert _labels_read(ds) == _truth(shard_dir)[2]
    assert os.path.exists(gone)


def _labels_read(ds) -> list[int]:
    """The labels of a loader's epoch over ds, in order: the C source read
    every sample's range from the record files."""
    loader = ringloader.Loader(ds, batch_size=4, transform=EVAL)
    try:
        return torch.cat([t for _, t in loader]).tolist()
    finally:
        loader.close()
