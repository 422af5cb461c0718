"""The table of samples crosses into the C core through the buffer
protocol: file names as one blob of fs-encoded bytes with their offsets
and a prefix (borrowed, not copied), shards as each one's first sample
(``starts``), byte ranges and fields as int64 arrays; no Python object is
made per sample, and a bad array is refused with an error naming it."""

import os
import tarfile
import tracemalloc

import numpy as np
import pytest
import torch

import ringloader
from ringloader import _core
from ringloader._pipeline import _table
from ringloader import transforms as T
from ringloader.datasets.base import Sources
from ringloader.datasets.cache import StringBlob

from images import jpeg_bytes
from test_shards import _add

SPEC = T.compile_transform(T.Compose([T.Resize((8, 8))])).spec


def read_all(n, **table):
    """Every sample of the table in one batch (uint8, NCHW), ids and keys
    given as int64 arrays."""
    p = _core.Pipeline(SPEC, **table)
    try:
        ids = np.arange(n, dtype=np.int64)
        p.submit(ids, ids, 0)
        batch = p.next(timeout=60)
        return torch.from_dlpack(batch.views[0]).clone()
    finally:
        p.close()


def blob_of(names, prefix=""):
    """(blob, offsets, prefix) of names given as bytes."""
    ends = np.cumsum([len(b) for b in names], dtype=np.int64)
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    blob = np.frombuffer(b"".join(names), dtype=np.uint8)
    return blob, offsets, prefix


@pytest.fixture
def files(tmp_path):
    """JPEGs under names ASCII, non-ASCII and not UTF-8 at all (a name
    os.fsdecode gives as surrogate escapes), as str paths."""
    names = [
        b"plain.jpg",
        "caf\u00e9-\u732b.jpg".encode(),
        b"raw-\xff\xfe.jpg",
        b"z.jpg",
    ]
    paths = []
    for i, name in enumerate(names):
        path = os.fsencode(tmp_path) + b"/" + name
        with open(path, "wb") as f:
            f.write(jpeg_bytes("baseline", 24 + i, 20 + 2 * i, seed=i))
        paths.append(os.fsdecode(path))
    return tmp_path, paths


def test_a_blob_table_reads_what_a_list_of_str_reads(files):
    root, paths = files
    want = read_all(len(paths), paths=paths)
    whole = blob_of([os.fsencode(p) for p in paths])
    rel = blob_of([os.fsencode(p)[len(os.fsencode(root)) + 1 :] for p in paths])
    assert torch.equal(read_all(len(paths), paths=whole), want)
    assert torch.equal(read_all(len(paths), paths=(*rel[:2], f"{root}/")), want)
    # As the datasets hold them: a StringBlob, round-tripping every name.
    sb = StringBlob.from_strings(paths)
    assert list(sb) == paths
    assert torch.equal(
        read_all(len(paths), paths=(sb.blob, sb.offsets, sb.prefix)), want
    )


def test_a_failed_sample_of_a_blob_table_is_named_by_its_full_path(tmp_path):
    (tmp_path / "good.jpg").write_bytes(jpeg_bytes("baseline", 24, 20, seed=1))
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a JPEG")
    table = blob_of([b"good.jpg", b"broken.jpg"], f"{tmp_path}/")
    p = _core.Pipeline(SPEC, paths=table)
    try:
        p.submit([1], [1], 0)
        with pytest.raises(ringloader.DecodeError, match=f"{tmp_path}/broken.jpg"):
            p.next(timeout=60)
        p.submit([0], [0], 0)
        assert p.next(timeout=60) is not None
    finally:
        p.close()


def test_a_path_longer_than_path_max_fails_its_sample_clearly(tmp_path):
    (tmp_path / "a.jpg").write_bytes(jpeg_bytes("baseline", 24, 20, seed=1))
    table = blob_of([b"a.jpg", b"x" * 5000], f"{tmp_path}/")
    p = _core.Pipeline(SPEC, paths=table)
    try:
        p.submit([1], [1], 0)
        with pytest.raises(OSError, match="too long.*PATH_MAX"):
            p.next(timeout=60)
        p.submit([0], [0], 0)
        assert p.next(timeout=60) is not None
    finally:
        p.close()


@pytest.fixture
def shards(tmp_path):
    """Three files of concatenated JPEGs (the middle one empty): the
    per-sample table (path, offset, length of each sample) and the shard
    table (names, starts)."""
    per_shard = [3, 0, 2]
    rows, names = [], []
    k = 0
    for s, count in enumerate(per_shard):
        path = tmp_path / f"shard-{s}.bin"
        data = b""
        for _ in range(count):
            jpg = jpeg_bytes("baseline", 24 + k, 20 + k, seed=k)
            rows.append((str(path), len(data) + 7, len(jpg)))
            data += b"pad" * 2 + b"\0" + jpg
            k += 1
        path.write_bytes(data)
        names.append(os.fsencode(path))
    starts = np.concatenate([[0], np.cumsum(per_shard)]).astype(np.int64)
    return rows, names, starts


def test_a_shard_table_reads_what_the_per_sample_table_reads(shards):
    rows, names, starts = shards
    n = len(rows)
    offsets = np.array([r[1] for r in rows], np.int64)
    lengths = np.array([r[2] for r in rows], np.int64)
    want = read_all(n, paths=[r[0] for r in rows], offsets=offsets, lengths=lengths)
    got = read_all(
        n, paths=blob_of(names), starts=starts, offsets=offsets, lengths=lengths
    )
    assert torch.equal(got, want)


def test_lengths_alone_read_from_offset_zero(files):
    _, paths = files
    sizes = np.array([os.path.getsize(p) for p in paths], np.int64)
    want = read_all(len(paths), paths=paths)
    got = read_all(
        len(paths), paths=blob_of([os.fsencode(p) for p in paths]), lengths=sizes
    )
    assert torch.equal(got, want)
    # A prefix of each file: a JPEG cut short fails, naming the file.
    p = _core.Pipeline(SPEC, paths=paths, lengths=sizes // 2)
    try:
        p.submit([0], [0], 0)
        with pytest.raises(ringloader.DecodeError, match="plain.jpg"):
            p.next(timeout=60)
    finally:
        p.close()


def test_the_blob_is_borrowed_and_released_on_every_path(files):
    _, paths = files
    blob, offsets, _ = blob_of([os.fsencode(p) for p in paths])
    held = bytearray(blob.tobytes())  # a bytearray cannot resize while lent
    p = _core.Pipeline(SPEC, paths=(held, offsets, ""))
    with pytest.raises(BufferError):
        held.extend(b"x")
    p.close()
    del p
    held.extend(b"x")  # released with the pipeline
    del held[-1]
    # A construction that fails after the blob was taken lets it go too.
    with pytest.raises(ValueError, match="lengths has 2 entries where 4"):
        _core.Pipeline(SPEC, paths=(held, offsets, ""), lengths=np.zeros(2, np.int64))
    held.extend(b"x")


def two(**more):
    """A table of two names, "ab" and "cd", with more keywords."""
    return dict(paths=(b"abcd", np.array([0, 2, 4]), ""), **more)


def names(blob, offsets, prefix=""):
    return dict(paths=(blob, offsets, prefix))


I32, ONES = np.zeros(2, np.int32), np.ones(2, np.int64)
Z64 = np.zeros(2, np.int64)
BAD = [
    (names([0, 0, 0, 0], [0, 4]), TypeError, "paths' blob must be"),
    (names(np.zeros(4, np.int16), np.array([0, 4])), TypeError, "paths' blob must be"),
    (
        names(b"abcd", np.array([0, 4], np.int32)),
        TypeError,
        "offsets must be a 1-d int64",
    ),
    (names(b"abcd", np.array([0, 2, 4], ">i8")), TypeError, "int64"),
    (names(b"abcd", np.array([[0, 4]])), TypeError, "1-d"),
    (names(b"abcd", np.zeros(0, np.int64)), ValueError, "count \\+ 1"),
    (names(b"abcd", np.array([0, 2, 9])), ValueError, "past the 4-byte blob"),
    (names(b"abcd", np.array([0, 3, 2, 4])), ValueError, "must not fall.*entry 1 is 3"),
    (names(b"abcd", np.array([1, 4])), ValueError, "start at 0"),
    (names(b"ab\0d", np.array([0, 4])), ValueError, "NUL"),
    (names(b"abcd", np.array([0, 4]), "a\0b"), ValueError, "null byte"),
    (dict(paths=(b"abcd", np.array([0, 4]))), TypeError, "blob, offsets, prefix"),
    (two(starts=np.array([0, 3])), ValueError, "starts has 2 entries where 3"),
    (two(starts=np.array([0, 3, 2])), ValueError, "starts: .*never falling"),
    (two(starts=np.array([1, 3, 5])), ValueError, "starts"),
    (
        two(starts=np.array([0, 3, 5]), offsets=np.zeros(4, np.int64), lengths=ONES),
        ValueError,
        "offsets has 4 entries where 5",
    ),
    (two(offsets=I32, lengths=ONES), TypeError, "offsets must be a 1-d int64"),
    (two(offsets=np.array([0, -5]), lengths=ONES), ValueError, "sample 1 starts at -5"),
    (two(offsets=Z64), TypeError, "offsets need lengths"),
    (two(lengths=ONES[::-1]), TypeError, "lengths must be a C-contiguous"),
    (two(fields=(I32, Z64, None, None, 0)), TypeError, "image_at must be"),
    (
        two(fields=(Z64, np.zeros(3, np.int64), None, None, 0)),
        ValueError,
        "image_len has 3",
    ),
    (
        two(fields=(Z64, Z64, None, [(Z64, Z64, Z64, ["txt"], [1])], 0)),
        TypeError,
        "a check's ext must be a 1-d int8",
    ),
]


@pytest.mark.parametrize("table, error, match", BAD)
def test_bad_arrays_are_refused_naming_them(table, error, match):
    with pytest.raises(error, match=match):
        _core.Pipeline(SPEC, **table)


def test_submit_takes_int64_arrays_and_refuses_others(files):
    _, paths = files
    p = _core.Pipeline(SPEC, paths=paths)
    try:
        with pytest.raises(TypeError, match="ids must be a 1-d int64"):
            p.submit(np.arange(2, dtype=np.int32), np.arange(2), 0)
        with pytest.raises(ValueError, match="same length"):
            p.submit(np.arange(2), np.arange(3), 0)
        p.submit(np.array([3, 0]), [5, 6], 0)
        assert list(p.next(timeout=60).ids) == [3, 0]
    finally:
        p.close()


def test_a_million_sample_table_makes_no_python_object_a_sample():
    n = 1_000_000
    name = np.frombuffer(b"f-000000.jpg", dtype=np.uint8)
    blob = np.tile(name, n)
    offsets = np.arange(0, len(name) * (n + 1), len(name), dtype=np.int64)
    starts = np.linspace(0, n, 11).astype(np.int64)
    off = np.zeros(n, np.int64)
    lengths = np.full(n, 100, np.int64)
    shard_names = blob_of([b"shard-%d.tar" % k for k in range(10)], "/nowhere/")
    tracemalloc.start()
    try:
        p = _core.Pipeline(SPEC, paths=(blob, offsets, "/nowhere/"))
        q = _core.Pipeline(
            SPEC, paths=shard_names, starts=starts, offsets=off, lengths=lengths
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (p.closed, q.closed) == (False, False)
    # A str or bytes object a sample would be > 30 MB; the C side's own
    # allocations are not Python's, and none is per sample.
    assert peak < 1 << 20, peak
    p.close()
    q.close()


def test_the_loader_hands_shards_and_folders_over_as_arrays(tmp_path):
    """What _pipeline gives _core.Pipeline for a TarShards (its shards'
    names as a blob, their starts) and an IndexedImageFolder (its paths'
    blob, lengths alone): no list a sample; and a Loader reads them."""
    for s, count in enumerate([2, 3]):
        with tarfile.open(tmp_path / f"s{s}.tar", "w") as tf:
            for i in range(count):
                _add(tf, f"k{s}{i}.jpg", jpeg_bytes("baseline", 24, 20, seed=i))
                _add(tf, f"k{s}{i}.cls", str(i).encode())
    ds = ringloader.TarShards(str(tmp_path / "s*.tar"), progress=False)
    table = _table(ds.ringloader_sources(), None)
    blob, offsets, prefix = table["paths"]
    assert table["starts"].tolist() == [0, 2, 5]
    assert [os.fsdecode(bytes(blob[a:b])) for a, b in zip(offsets, offsets[1:])] == [
        str(tmp_path / "s0.tar"),
        str(tmp_path / "s1.tar"),
    ]
    # Each sample's range is read from its shard's record file as it is
    # read: no offsets or lengths array.
    assert "offsets" not in table and "lengths" not in table
    files, sizes, mtimes, tag = table["records"]
    assert [os.path.basename(f).split(".")[0] for f in files] == ["s0", "s1"]
    assert sizes.tolist() == [os.stat(tmp_path / f"s{s}.tar").st_size for s in (0, 1)]
    assert mtimes.dtype == np.int64 and isinstance(tag, bytes)
    loader = ringloader.Loader(ds, batch_size=5, transform=T.Resize((8, 8)))
    assert next(iter(loader))[0].shape == (5, 3, 8, 8)
    loader.close()

    tree = tmp_path / "tree" / "cls"
    tree.mkdir(parents=True)
    for i in range(3):
        (tree / f"{i}.jpg").write_bytes(jpeg_bytes("baseline", 24, 20, seed=i))
    folder = ringloader.IndexedImageFolder(tmp_path / "tree", cache_dir=tmp_path / "c")
    table = _table(folder.ringloader_sources(), None)
    assert isinstance(table["paths"], tuple) and table["offsets"] is None
    assert table["lengths"].dtype == np.int64
    loader = ringloader.Loader(folder, batch_size=3, transform=T.Resize((8, 8)))
    assert next(iter(loader))[0].shape == (3, 3, 8, 8)
    loader.close()


def test_a_tuple_of_paths_is_read_as_a_list_is(tmp_path):
    # A dataset's own ringloader_sources() may give its paths as a tuple:
    # the C side's blob form is a tuple too, and must not be taken for it.
    paths = []
    for i in range(3):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(jpeg_bytes("baseline", 24, 20, seed=i))
        paths.append(str(p))

    class Tupled:
        def __len__(self):
            return 3

        def ringloader_sources(self):
            return Sources(paths=tuple(paths), targets=np.arange(3, dtype=np.int64))

    loader = ringloader.Loader(Tupled(), batch_size=3, transform=T.Resize((8, 8)))
    images, labels = next(iter(loader))
    assert images.shape == (3, 3, 8, 8) and labels.tolist() == [0, 1, 2]
    loader.close()
