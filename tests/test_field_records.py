"""Tar shard sets with fields, or a label function, opened from record
files: what they yield is what indexing gives, under every shuffle; what
an open keeps does not grow with the samples; a record file made for
another selection is never read as this one's."""

from __future__ import annotations

import gc
import glob
import io
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tarfile
import tracemalloc

import numpy as np
import pytest
import ringloader
import torch
from images import jpeg_bytes
from ringloader import transforms as T
from ringloader.datasets.shards import ShardError, TarShards

EVAL = T.Compose([T.Resize(24), T.CenterCrop(16)])
FIELDS = ("jpg", "txt", "json", "cls")


def _shard(path, first: int, n: int, image=None) -> str:
    """A shard of samples first..first + n - 1 (jpg, txt, json, cls); the
    image a real JPEG unless ``image`` gives the bytes of every one."""
    with tarfile.open(path, "w") as tf:
        for i in range(first, first + n):
            members = {
                "jpg": image
                if image is not None
                else jpeg_bytes("baseline", 24, 20, seed=i),
                "txt": f"caption {i} é".encode(),
                "json": json.dumps({"i": i}).encode(),
                "cls": str(i % 7).encode(),
            }
            for ext, data in members.items():
                info = tarfile.TarInfo(f"k{i:06d}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("field-records")
    for s in range(3):
        _shard(root / f"s-{s}.tar", 100 * s, 11 + s)
    return root


def _loaded(ds, shuffle, **kw) -> list[tuple]:
    """(txt, json, cls, image) of every sample the loader yields."""
    loader = ringloader.Loader(
        ds, batch_size=5, transform=EVAL, num_threads=2, shuffle=shuffle, seed=7, **kw
    )
    out = []
    for x, txt, obj, cls in loader:
        out += [
            (t, o["i"], c, img.clone())
            for t, o, c, img in zip(txt, obj, cls.tolist(), x)
        ]
    loader.close()
    return out


@pytest.mark.parametrize("shuffle", [False, True, "runs", "stream"])
def test_fields_from_records_as_indexing_gives(shard_dir, shuffle):
    ds = TarShards(str(shard_dir / "*.tar"), fields=FIELDS, progress=False)
    # Each record file holds the fields' places (version 2, not per-sample
    # arrays): the set keeps none.
    assert not isinstance(ds.field_table.image_at, np.ndarray)
    assert not isinstance(ds.offsets, np.ndarray)
    plain = TarShards(str(shard_dir / "*.tar"), progress=False)
    loader = ringloader.Loader(plain, batch_size=5, transform=EVAL, num_threads=2)
    images = torch.cat([x.clone() for x, _ in loader])  # in index order
    loader.close()
    want = {}
    for i in range(len(ds)):
        _, txt, obj, cls = ds[i]
        want[obj["i"]] = (txt, cls, i)
    got = _loaded(ds, shuffle)
    assert sorted(g[1] for g in got) == sorted(want)
    for txt, key, cls, image in got:
        assert (txt, cls) == want[key][:2]
        assert torch.equal(image, images[want[key][2]])


def test_a_record_file_of_other_fields_is_remade_not_misread(shard_dir, tmp_path):
    root = tmp_path / "shards"
    shutil.copytree(shard_dir, root)
    for f in glob.glob(str(root / "*.rec")) + glob.glob(str(root / "*.npz")):
        os.unlink(f)
    shards = str(root / "*.tar")
    cache = tmp_path / "cache"
    a = TarShards(shards, fields=("jpg", "txt"), cache_dir=cache, progress=False)
    first = set(glob.glob(str(root / "*.rec")))
    b = TarShards(shards, fields=("jpg", "json"), cache_dir=cache, progress=False)
    second = set(glob.glob(str(root / "*.rec"))) - first
    # One record file a shard and a selection, of the same width here.
    assert len(first) == 3 and len(second) == 3
    want = [b[i][1] for i in range(len(b))]
    assert [a[i][1] for i in range(len(a))] == [f"caption {j['i']} é" for j in want]
    # Each of b's record files overwritten by a's (same size, other tag).
    for path in second:
        mine = next(p for p in first if p.split(".")[0] == path.split(".")[0])
        shutil.copyfile(mine, path)
    b = TarShards(shards, fields=("jpg", "json"), cache_dir=cache, progress=False)
    assert [b[i][1] for i in range(len(b))] == want  # remade, not a's
    loader = ringloader.Loader(b, batch_size=4, transform=EVAL, num_threads=1)
    objs = [o for _, batch in loader for o in batch]
    loader.close()
    assert objs == want


def _labels(key: str) -> int:
    return int(key[1:]) * 3 - 1


def test_label_function_labels_from_records(shard_dir):
    ds = TarShards(str(shard_dir / "*.tar"), label_key=_labels, progress=False)
    keys = [ds.key(i) for i in range(len(ds))]
    assert not isinstance(ds.targets, np.ndarray)  # a column over record files
    assert np.asarray(ds.targets).tolist() == [_labels(k) for k in keys]
    copy = pickle.loads(pickle.dumps(ds))  # as a spawned worker gets it
    assert np.asarray(copy.targets).tolist() == [_labels(k) for k in keys]
    del copy
    assert [ds[i][1] for i in (0, 5, len(ds) - 1)] == [
        _labels(keys[i]) for i in (0, 5, len(ds) - 1)
    ]
    for shuffle in (False, True, "runs", "stream"):
        loader = ringloader.Loader(
            ds, batch_size=4, transform=EVAL, num_threads=2, shuffle=shuffle, seed=1
        )
        got = [y for _, ys in loader for y in ys.tolist()]
        loader.close()
        assert sorted(got) == sorted(_labels(k) for k in keys)
    # Floats are kept as an array, as before.
    floats = TarShards(
        str(shard_dir / "*.tar"), label_key=lambda k: int(k[1:]) / 2, progress=False
    )
    assert np.asarray(floats.targets).tolist() == [int(k[1:]) / 2 for k in keys]
    # The labels' record files are this open's: gone with the set.
    folder = os.path.dirname(ds.targets._store.files[0])
    assert os.path.isdir(folder)
    del ds, loader
    gc.collect()
    assert not os.path.exists(folder)


def _kept(open_set) -> int:
    """Bytes of Python memory an open set (and its loader sources) keeps."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = open_set()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return after - before


@pytest.mark.parametrize("kind", ["fields", "label function"])
def test_an_open_keeps_nothing_per_sample(tmp_path, kind):
    """Two sets of 4 shards, one 10 times the other's samples: opening the
    larger (records made already) keeps no more than a few KiB more."""
    sizes = {}
    for n in (300, 3000):
        root = tmp_path / f"n{n}"
        root.mkdir()
        for s in range(4):
            _shard(root / f"s-{s}.tar", s * n, n // 4, image=b"\xff\xd8")
        kw = dict(fields=FIELDS) if kind == "fields" else dict(label_key=_labels)
        kw.update(progress=False, cache_dir=tmp_path / "cache")
        TarShards(str(root / "*.tar"), **kw)  # makes the records

        def open_set(root=root, kw=kw):
            ds = TarShards(str(root / "*.tar"), **kw)
            return ds, ds.ringloader_sources()

        sizes[n] = _kept(open_set)
    # Per-sample tables cost tens of bytes a sample: 2700 more samples
    # would keep 100 KiB and more.
    assert sizes[3000] - sizes[300] < 24 << 10, sizes


def _copied(shard_dir, tmp_path) -> str:
    """The shards copied without their record files and indexes."""
    root = tmp_path / "shards"
    shutil.copytree(shard_dir, root)
    for f in glob.glob(str(root / "*.rec")) + glob.glob(str(root / "*.npz")):
        os.unlink(f)
    return str(root / "*.tar")


def _records(ds, s: int) -> tuple[str, int, np.dtype]:
    """Shard s's record file, where its records start, and their dtype."""
    store = ds.field_table.store
    path, count = store.file(s), int(store.starts[s + 1] - store.starts[s])
    return path, os.path.getsize(path) - count * store.dtype.itemsize, store.dtype


def _poke(path: str, head: int, dtype: np.dtype, row: int, **values) -> None:
    recs = np.memmap(path, dtype=dtype, mode="r+", offset=head)
    for k, v in values.items():
        recs[row][k] = v
    recs.flush()
    del recs


def test_a_record_file_cut_short_in_use_is_made_again_not_read_past(
    shard_dir, tmp_path
):
    """A record file cut short while the set is in use (another process
    rewriting it, a full disk) is checked again and made anew: before, its
    records were read through a map, and the next batch past the cut
    killed the process (SIGBUS) or read zeros as places."""
    code = f"""
import os, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_field_records import FIELDS, _records
from ringloader.datasets.shards import ShardError, TarShards
ds = TarShards({_copied(shard_dir, tmp_path)!r}, fields=FIELDS, progress=False)
want = [ds[i][1:] for i in range(len(ds))]
path, head, dtype = _records(ds, 0)
os.truncate(path, head + 2 * dtype.itemsize)
got = [ds[i][1:] for i in range(len(ds))]
print("same" if got == want else f"differ: {{got[:4]}} {{want[:4]}}")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "same"


def test_a_corrupt_record_is_refused_naming_its_file(shard_dir, tmp_path):
    ds = TarShards(_copied(shard_dir, tmp_path), fields=FIELDS, progress=False)
    want = ds[3]
    path, head, dtype = _records(ds, 0)
    _poke(path, head, dtype, 3, ext0=5)  # txt's extension: out of range
    with pytest.raises(ringloader.DecodeError, match=re.escape(path)):
        ds[3]
    _poke(path, head, dtype, 3, ext0=0, at0=-5)  # txt's place: before the bytes
    with pytest.raises(ringloader.DecodeError, match=re.escape(path)):
        ds[3]
    _poke(path, head, dtype, 3, at0=0, size0=1 << 40)  # past the bytes
    with pytest.raises(ringloader.DecodeError, match=re.escape(path)):
        ds[3]
    _poke(path, head, dtype, 3, size0=len(want[1].encode()), image_at=-1000)
    with pytest.raises(ShardError, match=re.escape(path)):
        ds[3]
    # The C core's check of the record names the file too.
    _poke(path, head, dtype, 3, image_at=0, ext0=99)
    loader = ringloader.Loader(ds, batch_size=4, transform=EVAL, num_threads=1)
    with pytest.raises(OSError, match=re.escape(path)):
        list(loader)
    loader.close()


def _odd_shard(path) -> str:
    with tarfile.open(path, "w") as tf:
        members = {
            "jpg": jpeg_bytes("baseline", 24, 20, seed=1),
            "a": b"A",
            "b|c": b"BC",
            "a|b": b"AB",
            "c": b"C",
        }
        for ext, data in members.items():
            info = tarfile.TarInfo(f"k000000.{ext}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return str(path)


def test_selections_whose_extensions_join_alike_do_not_share_records(tmp_path):
    """("a|b", "c") and ("a", "b|c") read the same text when joined with
    "|": their record files were one, and the second read the first's."""
    shard = _odd_shard(tmp_path / "odd.tar")
    a = TarShards(shard, fields=("jpg", "a|b", "c"), progress=False)
    assert a[0][1:] == (b"AB", b"C")
    b = TarShards(shard, fields=("jpg", "a", "b|c"), progress=False)
    assert b[0][1:] == (b"A", b"BC")


def test_a_label_function_without_a_writable_cache_keeps_labels_in_memory(
    shard_dir, tmp_path
):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    ds = TarShards(
        str(shard_dir / "*.tar"),
        label_key=_labels,
        cache_dir=blocker / "cache",
        progress=False,
    )
    keys = [ds.key(i) for i in range(len(ds))]
    assert np.asarray(ds.targets).tolist() == [_labels(k) for k in keys]


def test_label_files_last_as_long_as_what_reads_them(shard_dir):
    ds = TarShards(str(shard_dir / "*.tar"), label_key=_labels, progress=False)
    want = np.asarray(ds.targets).tolist()
    folder = os.path.dirname(ds.targets._store.files[0])
    targets = ds.targets
    copy = pickle.loads(pickle.dumps(ds))
    pid = os.fork()
    if pid == 0:  # a forked child whose exit runs the folder's finalizer
        try:
            targets._store._expect.__self__.folder.remove()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.path.isdir(folder)
    del ds
    gc.collect()
    assert np.asarray(targets).tolist() == want
    del targets
    gc.collect()
    assert np.asarray(copy.targets).tolist() == want
    del copy
    gc.collect()
    assert not os.path.exists(folder)


def test_a_killed_process_label_folder_is_swept(shard_dir, tmp_path):
    cache = tmp_path / "cache"
    code = f"""
import os, sys
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_field_records import _labels
from ringloader.datasets.shards import ShardError, TarShards
ds = TarShards({str(shard_dir / "*.tar")!r}, label_key=_labels,
               cache_dir={str(cache)!r}, progress=False)
print(os.path.dirname(ds.targets._store.files[0]), flush=True)
os._exit(0)  # as a kill: no finalizer runs
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    left = done.stdout.strip()
    assert done.returncode == 0 and os.path.isdir(left), done.stderr[-2000:]
    TarShards(
        str(shard_dir / "*.tar"), label_key=_labels, cache_dir=cache, progress=False
    )
    assert not os.path.exists(left)
