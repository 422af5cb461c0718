"""ringloader.Parquet: Parquet files (as the Hugging Face Hub stores data
sets) whose image column the C file source reads from an extract made once
per file. Files are written here with pyarrow (each codec, struct and
binary image columns, many row groups): no network. Batches are compared
with FileList over the same images written as files, which gives the same
bytes to the same pipeline: bit-exact."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import ringloader
import torch
from ringloader import transforms as T

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
from batches import assert_resumes, assert_same, collect  # noqa: E402
from images import mixed_images  # noqa: E402

N = 26
GROUP = 4  # rows a row group: 7 row groups
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32)])
TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _images() -> list[bytes]:
    return mixed_images(N)


LABELS = np.array([(7 * i) % 5 for i in range(N)])


def _write(path, images, compression="snappy", struct=True, group=GROUP, **cols):
    column = (
        pa.array([{"bytes": b, "path": None} for b in images], IMAGE)
        if struct
        else pa.array(images, pa.binary())
    )
    table = pa.table({"image": column, "label": LABELS[: len(images)].tolist(), **cols})
    pq.write_table(table, str(path), row_group_size=group, compression=compression)
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(folder, the image files as FileList reads them)."""
    tmp = tmp_path_factory.mktemp("parquet")
    files = []
    for i, b in enumerate(_images()):
        path = os.path.join(str(tmp), f"img{i:02d}.{'png' if i % 3 == 0 else 'jpg'}")
        with open(path, "wb") as f:
            f.write(b)
        files.append(path)
    return tmp, files


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGLOADER_CACHE_DIR", str(tmp_path / "cache"))


def _batches(dataset, transform=EVAL, **kw):
    return collect(dataset, transform, **kw)


def _same(a, b):
    assert_same(a, b)


def _ref(files, rows=None):
    rows = np.arange(N) if rows is None else np.asarray(rows)
    return ringloader.FileList([files[r] for r in rows], LABELS[rows])


@pytest.mark.parametrize("compression", ["snappy", "zstd", "gzip", "none"])
@pytest.mark.parametrize("struct", [True, False])
def test_batches_equal_file_list(data, tmp_path, compression, struct):
    tmp, files = data
    path = _write(tmp_path / "d.parquet", _images(), compression, struct)
    ds = ringloader.Parquet(path)
    assert len(ds) == N and ds.targets.tolist() == LABELS.tolist()
    assert ds.ringloader_shards().tolist() == [0, 4, 8, 12, 16, 20, 24, 26]
    for shuffle in (False, True):
        for transform in (EVAL, TRAIN):
            got, stats = _batches(ds, transform, shuffle=shuffle)
            want, _ = _batches(_ref(files), transform, shuffle=shuffle)
            _same(got, want)
    assert stats["decodes_png"] and stats["decodes_jpeg"]
    x, y = ds[7]
    xr, yr = _ref(files)[7]
    assert torch.equal(x, xr) and y == yr


def test_several_files_a_glob_and_dataloader(data, tmp_path):
    tmp, files = data
    images = _images()
    _write(tmp_path / "train-0.parquet", images[:10], "zstd")
    pq.write_table(
        pa.table(
            {
                "image": pa.array(
                    [{"bytes": b, "path": None} for b in images[10:]], IMAGE
                ),
                "label": LABELS[10:].tolist(),
            }
        ),
        str(tmp_path / "train-1.parquet"),
        row_group_size=5,
    )
    ds = ringloader.Parquet(str(tmp_path / "train-*.parquet"), transform=EVAL)
    assert len(ds) == N
    assert ds.ringloader_shards().tolist() == [0, 4, 8, 10, 15, 20, 25, 26]
    assert "train-1.parquet: row group 1, row 2 (file row 7)" in ds.describe(17)
    loader = ringloader.DataLoader(ds, batch_size=6, shuffle=True)
    assert isinstance(loader, ringloader.DataLoader)
    got = [(x.clone(), y.clone()) for x, y in loader]
    want, _ = _batches(_ref(files), EVAL, batch_size=6, shuffle=True)
    assert sorted(torch.cat([y for _, y in got]).tolist()) == sorted(LABELS.tolist())
    same = ringloader.Parquet(
        [tmp_path / "train-0.parquet", tmp_path / "train-1.parquet"]
    )
    _same(_batches(same)[0], _batches(_ref(files))[0])


def test_stream_order_by_row_group_deterministic_and_exactly_once(data, tmp_path):
    path = _write(tmp_path / "d.parquet", _images(), group=2, uid=list(range(N)))
    ds = ringloader.Parquet(path, target="uid")  # a unique id a sample

    def order(epoch, seed=3):
        loader = ringloader.Loader(
            ds, batch_size=4, transform=EVAL, shuffle="stream", seed=seed
        )
        loader.set_epoch(epoch)
        ids = torch.cat([y for _, y in loader]).tolist()
        loader.close()
        return ids

    a = order(0)
    assert sorted(a) == list(range(N))
    assert order(0) == a
    assert order(1) != a or order(2) != a
    assert order(0, seed=4) != a


def test_distributed_split(data, tmp_path):
    tmp, files = data
    path = _write(tmp_path / "d.parquet", _images(), uid=list(range(N)))
    ds = ringloader.Parquet(path)
    seen = []
    for rank in range(2):
        kw = dict(shuffle=True, distributed=True, rank=rank, world_size=2)
        got, _ = _batches(ds, TRAIN, **kw)
        want, _ = _batches(_ref(files), TRAIN, **kw)
        _same(got, want)
        seen += torch.cat([y for _, y in got]).tolist()
    assert sorted(seen) == sorted(LABELS.tolist())
    by_id = ringloader.Parquet(path, target="uid")  # a unique id a sample
    streamed = []
    for rank in range(2):
        kw = dict(shuffle="stream", distributed=True, rank=rank, world_size=2)
        got, _ = _batches(by_id, TRAIN, **kw)
        streamed += torch.cat([y for _, y in got]).tolist()
    assert sorted(streamed) == list(range(N))


@pytest.mark.parametrize("shuffle", [True, "stream"])
def test_resume_mid_epoch(data, tmp_path, shuffle):
    ds = ringloader.Parquet(_write(tmp_path / "d.parquet", _images(), group=3))

    def make():
        return ringloader.Loader(
            ds, batch_size=4, transform=TRAIN, shuffle=shuffle, seed=5, num_threads=2
        )

    assert_resumes(make)


def test_columns_come_beside_image_and_target(data, tmp_path):
    tmp, files = data
    captions = [f"caption {i}" for i in range(N)]
    path = _write(
        tmp_path / "d.parquet",
        _images(),
        caption=captions,
        score=[i / 4 for i in range(N)],
    )
    ds = ringloader.Parquet(path, transform=EVAL, columns=("caption", "score"))
    loader = ringloader.Loader(ds, batch_size=5, num_threads=2, shuffle=True, seed=3)
    ref, _ = _batches(_ref(files), EVAL, shuffle=True)
    got = list(loader)
    assert len(got) == len(ref)
    for (images, y, caps, scores), (xr, yr) in zip(got, ref):
        assert torch.equal(images, xr) and torch.equal(y, yr)
        for c, s in zip(caps, scores.tolist()):
            assert c == f"caption {int(s * 4)}"
    item = ringloader.Parquet(path, columns=("caption",))[3]
    assert item[1:] == (LABELS[3], "caption 3")
    d = ringloader.Parquet(
        path, target=None, columns=("caption",), as_dict="pixel_values"
    )
    batch = next(iter(ringloader.Loader(d, batch_size=4, transform=EVAL)))
    assert batch["caption"] == captions[:4] and batch["pixel_values"].shape[0] == 4


def test_targets_of_other_kinds(data, tmp_path):
    images = _images()[:6]
    table = pa.table(
        {
            "image": pa.array([{"bytes": b, "path": None} for b in images], IMAGE),
            "score": [0.5 * i for i in range(6)],
            "box": [[i, i + 1.0] for i in range(6)],
        }
    )
    pq.write_table(table, str(tmp_path / "t.parquet"), row_group_size=4)
    ds = ringloader.Parquet(tmp_path / "t.parquet", target="score")
    (_, y), *_ = ringloader.Loader(ds, batch_size=6, transform=EVAL)
    assert y.tolist() == [0.5 * i for i in range(6)]
    ds = ringloader.Parquet(tmp_path / "t.parquet", target="box")
    (_, y), *_ = ringloader.Loader(ds, batch_size=6, transform=EVAL)
    assert y.shape == (6, 2) and y[5].tolist() == [5.0, 6.0]


def test_rows_naming_files_and_null_rows(data, tmp_path):
    tmp, files = data
    images = _images()
    named = [i % 3 == 1 for i in range(N)]  # these rows name their file
    column = [
        {"bytes": None if f else b, "path": p if f else None}
        for f, b, p in zip(named, images, files)
    ]
    table = pa.table({"image": pa.array(column, IMAGE), "label": LABELS.tolist()})
    pq.write_table(table, str(tmp_path / "m.parquet"), row_group_size=GROUP)
    ds = ringloader.Parquet(tmp_path / "m.parquet")
    for transform in (EVAL, TRAIN):
        got, _ = _batches(ds, transform, shuffle=True)
        want, _ = _batches(_ref(files), transform, shuffle=True)
        _same(got, want)
    assert ds.describe(1).endswith(files[1])
    column[2] = None
    table = pa.table({"image": pa.array(column, IMAGE), "label": LABELS.tolist()})
    pq.write_table(table, str(tmp_path / "n.parquet"), row_group_size=GROUP)
    ds = ringloader.Parquet(tmp_path / "n.parquet")
    with pytest.raises(ringloader.DecodeError, match="row 2 .*'image' is null"):
        list(ringloader.Loader(ds, batch_size=4, transform=EVAL))


def test_a_bad_row_names_file_row_group_and_row(data, tmp_path):
    images = _images()[:8]
    images[5] = b"this is not an image at all"
    path = _write(tmp_path / "bad.parquet", images, "zstd")
    ds = ringloader.Parquet(path)
    loader = ringloader.Loader(ds, batch_size=4, transform=EVAL, num_threads=2)
    with pytest.raises(ringloader.DecodeError) as e:
        list(loader)
    assert "bad.parquet: row group 1, row 1 (file row 5)" in str(e.value)
    with pytest.warns(ringloader.DataWarning):
        got, stats = _batches(ds, EVAL, batch_size=4, on_error="skip")
    assert stats["skipped"] == 1
    assert (
        torch.cat([y for _, y in got]).tolist()
        == LABELS[[0, 1, 2, 3, 4, 6, 6, 7]].tolist()
    )


def test_bad_files_are_refused_clearly(data, tmp_path):
    path = _write(tmp_path / "d.parquet", _images())
    with pytest.raises(
        ValueError, match=r"no target or field column 'cls'.*\['image', 'label'\]"
    ):
        ringloader.Parquet(path, target="cls")
    with pytest.raises(
        ValueError, match=r"no image column 'jpg'.*\['image', 'label'\]"
    ):
        ringloader.Parquet(path, image="jpg")
    with pytest.raises(TypeError, match="column 'label' holds int64, not images"):
        ringloader.Parquet(path, image="label", target=None)
    with pytest.raises(FileNotFoundError, match="nope-.*no file matches"):
        ringloader.Parquet(str(tmp_path / "nope-*.parquet"))
    # A damaged footer.
    raw = open(path, "rb").read()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(raw[:-20] + b"\0" * 20)
    with pytest.raises(ValueError, match="cut.parquet: its footer cannot be read"):
        ringloader.Parquet(cut)
    cut.write_bytes(b"PAR1 nothing")
    with pytest.raises(ValueError, match="cut.parquet: its footer cannot be read"):
        ringloader.Parquet(cut)


def test_a_damaged_page_names_file_and_row_group(data, tmp_path):
    path = _write(tmp_path / "d.parquet", _images(), "snappy")
    meta = pq.ParquetFile(path).metadata
    chunk = meta.row_group(3).column(0)  # the image's bytes
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    raw = bytearray(open(path, "rb").read())
    for k in range(start + 40, start + chunk.total_compressed_size - 8, 7):
        raw[k] ^= 0x5A
    (tmp_path / "damaged.parquet").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="damaged.parquet: row group 3 cannot be read"):
        ringloader.Parquet(tmp_path / "damaged.parquet")
    assert not [f for f in os.listdir(tmp_path / "cache") if f.endswith(".tmp")]


def test_the_extract_is_made_once_and_remade_for_a_changed_file(data, tmp_path):
    tmp, files = data
    path = _write(tmp_path / "d.parquet", _images())
    first = ringloader.Parquet(path)
    extract = first._extracts[0].bin
    made = os.stat(extract).st_mtime_ns
    again = ringloader.Parquet(path)
    assert again._extracts[0].bin == extract and os.stat(extract).st_mtime_ns == made
    _write(path, _images()[::-1])
    changed = ringloader.Parquet(path)
    assert changed._extracts[0].bin != extract
    got, _ = _batches(changed)
    want, _ = _batches(ringloader.FileList(files[::-1], LABELS.tolist()), EVAL)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, want))
    os.unlink(changed._extracts[0].bin)
    with pytest.raises(ValueError, match="the extract of .*d.parquet is gone"):
        ringloader.Loader(changed, batch_size=4, transform=EVAL)


def test_memory_is_bounded_by_a_row_group(tmp_path):
    """A file of 160 row groups of 0.5 MB is extracted with a few resident:
    pyarrow's peak allocation stays a tenth of the column's size (reading
    the whole column at once peaks above it)."""
    rng = np.random.default_rng(0)
    blobs = [rng.bytes(100_000) for _ in range(800)]  # 80 MB, 5 rows a group
    path = tmp_path / "big.parquet"
    table = pa.table({"image": pa.array(blobs, pa.binary()), "label": list(range(800))})
    pq.write_table(table, str(path), row_group_size=5, compression="zstd")
    script = (
        "import sys, pyarrow as pa, ringloader, pyarrow.parquet as pq\n"
        "if sys.argv[2] == 'whole':\n"
        "    t = pq.read_table(sys.argv[1], columns=['image'])\n"
        "else:\n"
        "    ds = ringloader.Parquet(sys.argv[1])\n"
        "    assert len(ds) == 800 and len(ds.ringloader_shards()) == 161\n"
        "print(pa.default_memory_pool().max_memory())\n"
    )
    env = dict(os.environ, RINGLOADER_CACHE_DIR=str(tmp_path / "cache"))

    def peak(how):
        out = subprocess.run(
            [sys.executable, "-c", script, str(path), how],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.split()[-1])

    assert peak("whole") > 80_000_000
    assert peak("extract") < 8_000_000


def test_pyarrow_is_imported_only_when_parquet_is_used():
    code = "import sys, ringloader; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False"


def _halve(image):
    """A transform ringloader cannot fuse: torch's DataLoader runs it."""
    return image.resize((image.width // 2, image.height // 2)).crop((0, 0, 16, 16))


def test_a_transform_it_cannot_fuse_runs_in_torchs_workers(data, tmp_path):
    """ringloader.DataLoader falls back to torch's, whose worker processes
    get the dataset pickled and index it (the extract, read in Python)."""
    from torchvision.transforms import v2

    tmp, files = data
    path = _write(tmp_path / "d.parquet", _images())
    tf = v2.Compose([_halve, v2.PILToTensor()])
    ds = ringloader.Parquet(path, transform=tf, columns=("label",), target=None)
    with pytest.warns(ringloader.FallbackWarning):
        loader = ringloader.DataLoader(ds, batch_size=N, num_workers=2)
    images, labels = next(iter(loader))
    ref = ringloader.FileList(files, LABELS, transform=tf)
    assert labels.tolist() == LABELS.tolist()
    assert torch.equal(images, torch.stack([ref[i][0] for i in range(N)]))


def test_a_bar_counts_the_row_groups_extracted(tmp_path, monkeypatch):
    from ringloader.datasets import parquet

    bars = []

    class Bar:
        def __init__(self, total, **kw):
            self.total, self.done, self.closed, self.kw = total, 0, False, kw
            bars.append(self)

        def update(self, k):
            self.done += k

        def close(self):
            self.closed = True

    monkeypatch.setattr(parquet, "progress_bar", Bar)
    path = _write(tmp_path / "d.parquet", _images())
    for _ in range(2):  # extracted, then read from the cache
        ringloader.Parquet([path, path])
    assert [(b.total, b.done, b.closed) for b in bars] == [(14, 14, True)] * 2
    assert bars[0].kw["unit"] == "row group"
    ringloader.Parquet(path, progress=False)
    assert len(bars) == 2


def _tiny(path, labels, ltype=None):
    """A file of len(labels) rows (the first images) with those labels."""
    images = _images()[: len(labels)]
    column = pa.array([{"bytes": b, "path": None} for b in images], IMAGE)
    label = pa.array(labels, ltype) if ltype is not None else labels
    pq.write_table(pa.table({"image": column, "label": label}), str(path))
    return str(path)


@pytest.mark.parametrize("rows", [2, 3])
def test_a_file_changed_while_read_is_refused_not_mispaired(
    tmp_path, monkeypatch, rows
):
    """A file rewritten after its labels were read and before its images
    are extracted: an error naming it, never labels paired with the other
    revision's images (fewer rows, or as many with another mtime)."""
    from ringloader.datasets import parquet as P

    a = _tiny(tmp_path / "a.parquet", [1, 2, 3])
    b = _tiny(tmp_path / "b.parquet", [10, 11, 12])
    made = P._Extract.__init__

    def rewrite_b_first(self, path, *args, **kw):
        if path.endswith("b.parquet"):
            _tiny(b, list(range(20, 20 + rows)))
            os.utime(b, ns=(1, 10**18 + rows))
        made(self, path, *args, **kw)

    monkeypatch.setattr(P._Extract, "__init__", rewrite_b_first)
    with pytest.raises(ValueError, match="b.parquet.*changed while it was read"):
        ringloader.Parquet([a, b])


def test_a_stale_temporary_of_a_dead_process_is_removed(tmp_path):
    """A process killed while it wrote an extract leaves its temporary
    (named after the extract and its pid); the next making removes it."""
    path = _tiny(tmp_path / "d.parquet", [0, 1, 2])
    extract = ringloader.Parquet(path)._extracts[0]
    os.unlink(extract.bin)
    os.unlink(extract.index)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"{extract.bin}.{dead.pid}.tmp"
    with open(stale, "wb") as f:
        f.write(b"x" * 1000)
    assert len(ringloader.Parquet(path)) == 3
    assert not os.path.exists(stale)
    assert not [f for f in os.listdir(tmp_path / "cache") if f.endswith(".tmp")]


def test_a_null_label_is_named_in_its_own_file_and_row(tmp_path):
    a = _tiny(tmp_path / "a.parquet", [0, 1, 2])
    b = _tiny(tmp_path / "b.parquet", [3, None])
    with pytest.raises(ValueError, match=r"b.parquet: column 'label': row 1 is null"):
        ringloader.Parquet([a, b])


def test_compatible_schemas_are_promoted_others_name_both_files(tmp_path):
    a = _tiny(tmp_path / "a.parquet", [0, 1, 2])
    b = _tiny(tmp_path / "b.parquet", [3, 4], pa.int32())
    ds = ringloader.Parquet([a, b])
    assert ds.targets.tolist() == [0, 1, 2, 3, 4]
    c = _tiny(tmp_path / "c.parquet", ["x", "y"])
    with pytest.raises(ValueError, match=r"a.parquet.*c.parquet.*'label'"):
        ringloader.Parquet([a, c])


def test_a_full_disk_names_the_file_and_the_cache(tmp_path, monkeypatch):
    import errno

    from ringloader.datasets import parquet as P

    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(P, "atomic_file", full)
    path = _tiny(tmp_path / "d.parquet", [0, 1])
    with pytest.raises(OSError, match=r"d.parquet.*cache.*No space left") as e:
        ringloader.Parquet(path)
    assert e.value.errno == errno.ENOSPC


def test_an_empty_row_group_does_not_shift_the_next_files_groups(tmp_path):
    first = str(tmp_path / "e1.parquet")
    table = pa.table({"image": pa.array(_images()[:2], pa.binary()), "label": [0, 1]})
    with pq.ParquetWriter(first, table.schema) as w:
        w.write_table(table)
        w.write_table(table.slice(0, 0))  # an empty row group
    second = _tiny(tmp_path / "e2.parquet", [5, 6])
    ds = ringloader.Parquet([first, second])
    assert ds.ringloader_shards().tolist() == [0, 2, 2, 4]
    assert "e2.parquet: row group 0, row 0 (file row 0)" in ds.describe(2)


def test_a_relative_glob_and_folder_give_absolute_paths(tmp_path, monkeypatch):
    _tiny(tmp_path / "d.parquet", [0, 1])
    monkeypatch.chdir(tmp_path)
    for spec in ("*.parquet", "."):
        assert ringloader.Parquet(spec).files == [str(tmp_path / "d.parquet")]


def test_a_cache_without_locks_extracts_with_a_warning(tmp_path, monkeypatch, caplog):
    import errno

    from ringloader.datasets import parquet as P

    def no_lock(fd, op):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(P.fcntl, "flock", no_lock)
    path = _tiny(tmp_path / "d.parquet", [0, 1, 2])
    assert ringloader.Parquet(path).targets.tolist() == [0, 1, 2]
    assert "no lock on the cache" in caplog.text
