"""LitData: folders written by litdata's own writer (BinaryWriter, what
litdata.optimize runs in each worker) read in place by the C file source.
The same JPEG and PNG files are written as files; a FileList of them must
give the same batches to the same pipeline: bit-exact."""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import ringloader
from batches import (
    assert_fields_epoch,
    assert_native_dataloader,
    assert_ranks_split,
    assert_same,
    assert_same_epochs,
    collect,
)
from subproc import run_python
import torch
from ringloader import transforms as T

litdata = pytest.importorskip("litdata")
from images import labelled_data, photo_like, some_as_png  # noqa: E402
from litdata.streaming.writer import BinaryWriter  # noqa: E402
from PIL import Image  # noqa: E402

N = 22
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32)])
TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])


def _write(folder, rows, chunk_size=5, **kw):
    """A LitData folder of ``rows`` (dicts), written by litdata's writer."""
    os.makedirs(folder, exist_ok=True)
    w = BinaryWriter(str(folder), chunk_size=chunk_size, **kw)
    for i, row in enumerate(rows):
        w[i] = row
    w.done()
    w.merge()
    return str(folder)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(the JPEG files, labels, captions, a function writing them as a
    LitData folder with the writer's options)."""
    # The JPEGs as opened: the "jpeg" encoding keeps the file's bytes.
    return labelled_data(tmp_path_factory.mktemp("litdata"), N, _write)


def _batches(dataset, transform=EVAL, **kw):
    return collect(dataset, transform, **kw)


def test_batches_equal_file_list(data):
    files, labels, _, write = data
    lit = ringloader.LitData(write("plain"))
    index = json.load(open(os.path.join(lit.root, "index.json")))
    assert index["config"]["data_format"] == ["jpeg", "int", "str"]
    assert len(lit) == N and lit.targets.tolist() == labels.tolist()
    # The chunk files as runs of samples: nothing per sample but arrays.
    assert len(lit.paths.shards) == 5 and lit.paths.starts.tolist()[-1] == N
    stats = assert_same_epochs(lit, ringloader.FileList(files, labels), (EVAL, TRAIN))
    assert stats["decodes_jpeg"] == N


@pytest.mark.parametrize("level", ["chunk", "batch", "sample"])
def test_zstd_chunks_are_inflated_once_into_the_cache(data, tmp_path, level):
    files, labels, _, write = data
    folder = write(f"zstd-{level}", compression="zstd", compression_level=level)
    cache = tmp_path / "cache"
    lit = ringloader.LitData(folder, cache_dir=cache)
    inflated = _inflated(cache)
    assert len(inflated) == 5
    assert "inflated to" in lit.describe(0)
    got, _ = _batches(lit, TRAIN, shuffle=True)
    want, _ = _batches(ringloader.FileList(files, labels), TRAIN, shuffle=True)
    assert_same(got, want)
    # A second dataset reuses the inflated chunks.
    mtimes = [os.stat(cache / "litdata" / f).st_mtime_ns for f in inflated]
    sizes = [os.path.getsize(cache / "litdata" / f) for f in inflated]
    again = ringloader.LitData(folder, cache_dir=cache)
    assert _inflated(cache) == inflated
    assert [os.stat(cache / "litdata" / f).st_mtime_ns for f in inflated] == mtimes
    want = _batches(ringloader.FileList(files, labels))[0]
    assert_same(_batches(again, EVAL)[0], want)
    _damage(cache, inflated)
    assert_same(_batches(ringloader.LitData(folder, cache_dir=cache), EVAL)[0], want)
    assert [os.path.getsize(cache / "litdata" / f) for f in inflated] == sizes


def _inflated(cache) -> list[str]:
    """The inflated chunks in ``cache`` (beside them, their lock files)."""
    return sorted(
        f for f in os.listdir(os.path.join(cache, "litdata")) if f.endswith(".bin")
    )


def _damage(cache, inflated) -> None:
    """What a crash may leave of inflated chunks: one cut short, one
    zero-filled (its size kept), one empty."""
    path = [os.path.join(cache, "litdata", f) for f in inflated]
    with open(path[0], "r+b") as f:
        f.truncate(os.path.getsize(path[0]) - 100)
    size = os.path.getsize(path[1])
    with open(path[1], "wb") as f:
        f.write(bytes(size))
    open(path[2], "wb").close()


# One rank of a job. Each round it waits for the start file, then makes
# a LitData of the round's folder into the round's (cold) cache: the ranks
# inflate the same chunks at once. When the other rank is done too, it
# reads an epoch of each with a DataLoader and saves the batches.
_RANK = """
import os, sys, time
import ringloader, torch
from ringloader import transforms as T

def wait(*paths):
    while not all(os.path.exists(p) for p in paths):
        time.sleep(0.0005)

rank, tmp, *folders = sys.argv[1:]
made = []
for j, folder in enumerate(folders):
    open(f"{tmp}/ready{j}.{rank}", "w").close()
    wait(f"{tmp}/go{j}")
    made.append(ringloader.LitData(folder, cache_dir=f"{tmp}/cache{j}",
                                   transform=T.Resize((16, 16))))
open(f"{tmp}/built.{rank}", "w").close()
wait(f"{tmp}/built.0", f"{tmp}/built.1")
epochs = []
for lit in made:
    loader = ringloader.DataLoader(lit, batch_size=4, num_workers=2)
    epochs.append([(x.clone(), y.clone()) for x, y in loader])
torch.save(epochs, f"{tmp}/rank{rank}.pt")
"""


def _wait_for(*paths, timeout=120.0):
    end = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        assert time.monotonic() < end, f"{paths}: not made in {timeout} s"
        time.sleep(0.001)


def test_ranks_starting_together_share_one_cold_cache(data, tmp_path):
    """Two processes inflate the same zstd chunks into one cache at the
    same moment (four rounds, a fresh cache each): neither replaces a
    chunk the other already uses, and both read every sample once."""
    files, labels, _, _ = data
    # Items of ~1 MB inflate for some milliseconds: the ranks overlap.
    pad = np.random.default_rng(0).integers(0, 4, 1 << 20, np.uint8).tobytes()
    folders = []
    for level in ("chunk", "sample"):
        opened = [Image.open(p) for p in files]
        rows = [
            {"image": im, "label": int(y), "pad": pad} for im, y in zip(opened, labels)
        ]
        kw = dict(compression="zstd", compression_level=level)
        folders.append(_write(tmp_path / level, rows, **kw))
        for im in opened:
            im.close()
    folders *= 2
    tmp = str(tmp_path)
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(run_python, _RANK, str(r), tmp, *folders) for r in range(2)]
        for j in range(len(folders)):
            _wait_for(f"{tmp}/ready{j}.0", f"{tmp}/ready{j}.1")
            open(f"{tmp}/go{j}", "w").close()
        procs = [r.result() for r in runs]
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    got = [torch.load(f"{tmp}/rank{r}.pt") for r in range(2)]
    for j in range(len(folders)):
        assert_same(got[0][j], got[1][j])
        assert sorted(torch.cat([y for _, y in got[0][j]]).tolist()) == list(range(N))
        assert len(_inflated(os.path.join(tmp, f"cache{j}"))) == 5


def test_png_and_encoded_bytes(data, tmp_path):
    """PNG and JPEG as litdata.Image (the file's bytes, "image:png") and
    as plain bytes (which litdata keeps as Arrow rows after the items)."""
    files, labels, _, _ = data
    paths = some_as_png(files, tmp_path)
    ref = ringloader.FileList(paths, labels)
    want, _ = _batches(ref, TRAIN, shuffle=True)
    rows = [
        {"image": litdata.Image(path=p), "label": int(y)} for p, y in zip(paths, labels)
    ]
    lit = ringloader.LitData(_write(tmp_path / "image", rows))
    got, stats = _batches(lit, TRAIN, shuffle=True)
    assert_same(got, want)
    assert stats["decodes_png"] == 8 and stats["decodes_jpeg"] == N - 8
    rows = [
        {"image": open(p, "rb").read(), "label": int(y), "caption": f"c{y}"}
        for p, y in zip(paths, labels)
    ]
    for name, kw in (("bytes", {}), ("zbytes", {"compression": "zstd"})):
        folder = _write(tmp_path / name, rows, **kw)
        head = open(os.path.join(folder, "chunk-0-0.bin"), "rb").read()
        assert head.endswith(b"LDARW01\0")  # the Arrow rows' layout
        lit = ringloader.LitData(folder, fields=("caption",), cache_dir=tmp_path)
        got, _ = _batches(lit, TRAIN, shuffle=True)
        assert_same(got, want)
        assert lit[4][1:] == (labels[4], f"c{labels[4]}")


def test_fields_and_indexing(data):
    files, labels, captions, write = data
    lit = ringloader.LitData(write("fields"), fields=("caption",))
    x, y, c = lit[7]
    assert (y, c) == (labels[7], captions[7]) and x.shape == (3, 40 + 7, 36 + 14)
    assert_fields_epoch(lit, labels, captions, EVAL)
    plain = ringloader.LitData(write("fields"), target=None)
    assert plain.targets.tolist() == [-1] * N
    full, _ = plain[3]
    with Image.open(files[3]) as im:
        want = torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)
    assert full.shape == want.shape
    assert (full.int() - want.int()).abs().max() <= 1  # libjpeg-turbo vs Pillow's


def test_shuffle_is_deterministic_and_resumes_exactly(data):
    files, labels, _, write = data
    lit = ringloader.LitData(write("order"))
    a, _ = _batches(lit, TRAIN, shuffle=True)
    b, _ = _batches(lit, TRAIN, shuffle=True)
    assert_same(a, b)
    assert torch.cat([y for _, y in a]).tolist() != labels.tolist()
    first = ringloader.Loader(lit, batch_size=5, transform=TRAIN, shuffle=True, seed=3)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    first.close()
    resumed = ringloader.Loader(
        lit, batch_size=5, transform=TRAIN, shuffle=True, seed=0
    )
    resumed.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in resumed]
    resumed.close()
    assert_same(rest, a[2:])


def test_distributed_ranks_split_like_file_list(data):
    files, labels, _, write = data
    lit = ringloader.LitData(write("ddp"))
    assert_ranks_split(lit, ringloader.FileList(files, labels), TRAIN)


def test_dataloader_reads_it_natively(data):
    files, labels, _, write = data
    lit = ringloader.LitData(write("dataloader"), transform=EVAL)
    assert_native_dataloader(lit, ringloader.FileList(files, labels, transform=EVAL))


def test_a_sample_that_is_not_an_image(data, tmp_path):
    files, labels, _, _ = data
    rows = []
    for i in range(8):
        b = open(files[i], "rb").read() if i != 6 else b"this is not an image"
        rows.append({"image": litdata.Image(bytes=b), "label": i})
    folder = _write(tmp_path / "bad", rows, chunk_size=4)
    lit = ringloader.LitData(folder)
    loader = ringloader.Loader(lit, batch_size=4, transform=EVAL, num_threads=2)
    with pytest.raises(ringloader.DecodeError) as e:
        list(loader)
    loader.close()
    assert "chunk-0-1.bin: sample 2 of the chunk" in str(e.value)
    with pytest.warns(ringloader.DataWarning):
        got, stats = _batches(lit, EVAL, batch_size=4, on_error="skip")
    assert stats["skipped"] == 1
    assert torch.cat([y for _, y in got]).tolist() == [0, 1, 2, 3, 4, 5, 7, 7]


def _copy(folder, tmp_path, name):
    out = tmp_path / name
    shutil.copytree(folder, out)
    return out


def test_bad_folders_are_refused_clearly(data, tmp_path):
    _, _, _, write = data
    folder = write("good")
    with pytest.raises(
        ValueError,
        match=r"no image column 'img'; its columns are \['image', 'label', 'caption'\]",
    ):
        ringloader.LitData(folder, image="img")
    with pytest.raises(ValueError, match="no field column 'text'"):
        ringloader.LitData(folder, fields=("text",))
    with pytest.raises(
        ValueError, match="target column 'caption' has data format 'str'"
    ):
        ringloader.LitData(folder, target="caption")
    with pytest.raises(ValueError, match="index.json: no such file"):
        ringloader.LitData(tmp_path)
    # A chunk cut short.
    cut = _copy(folder, tmp_path, "cut")
    chunk = cut / "chunk-0-2.bin"
    data_ = chunk.read_bytes()
    chunk.write_bytes(data_[: len(data_) - 100])
    with pytest.raises(
        ValueError,
        match=r"chunk-0-2.bin: \d+ bytes where its item table ends at \d+: the chunk is cut short",
    ):
        ringloader.LitData(cut)
    chunk.write_bytes(data_[:10])
    with pytest.raises(
        ValueError,
        match="chunk-0-2.bin: 10 bytes, cut short within its table of 5 items",
    ):
        ringloader.LitData(cut)
    # An index that disagrees with the files.
    wrong = _copy(folder, tmp_path, "wrong")
    index = json.loads((wrong / "index.json").read_text())
    index["chunks"][1]["chunk_size"] = 7
    (wrong / "index.json").write_text(json.dumps(index))
    with pytest.raises(
        ValueError, match="chunk-0-1.bin: holds 5 items where index.json says 7"
    ):
        ringloader.LitData(wrong)
    os.unlink(wrong / "chunk-0-3.bin")
    index["chunks"][1]["chunk_size"] = 5
    (wrong / "index.json").write_text(json.dumps(index))
    with pytest.raises(
        ValueError,
        match="chunk-0-3.bin: index.json lists this chunk but the file is not there",
    ):
        ringloader.LitData(wrong)
    (wrong / "index.json").write_text('{"chunks": [], "config": null}')
    with pytest.raises(ValueError, match="index.json: the folder holds no chunks"):
        ringloader.LitData(wrong)
    (wrong / "index.json").write_text("{not json")
    with pytest.raises(ValueError, match="index.json: not a LitData index"):
        ringloader.LitData(wrong)


def test_raw_pixels_are_refused_with_what_to_do(tmp_path):
    rows = [
        {"image": Image.fromarray(photo_like(20, 24, i)), "label": i} for i in range(3)
    ]
    folder = _write(tmp_path / "pil", rows)
    with pytest.raises(
        ValueError,
        match=r"column 'image' holds raw PIL pixels \(data format 'pil'\).*JpegImageFile",
    ):
        ringloader.LitData(folder)


def test_arrow_rows_with_compressed_buffers(data, tmp_path):
    """Rows whose text outweighs the image bytes: litdata compresses the
    Arrow rows' buffers (zstd), which are inflated into the cache."""
    files, labels, _, _ = data
    long = [f"{i} " + "words " * 2000 for i in range(N)]
    rows = [
        {"image": open(p, "rb").read(), "label": int(y), "text": t}
        for p, y, t in zip(files, labels, long)
    ]
    folder = _write(tmp_path / "ipc", rows, compression="zstd")
    index = json.load(open(os.path.join(folder, "index.json")))
    assert index["config"]["ipc_compression"] == "zstd"
    lit = ringloader.LitData(folder, fields=("text",), cache_dir=tmp_path / "cache")
    inflated = _inflated(tmp_path / "cache")
    assert len(inflated) == 5
    got, _ = _batches(lit, TRAIN, shuffle=True)
    want = _batches(ringloader.FileList(files, labels), TRAIN, shuffle=True)[0]
    assert_same(got, want)
    assert lit[9][1:] == (labels[9], long[9])
    # Inflated chunks a crash damaged are inflated again.
    sizes = [os.path.getsize(tmp_path / "cache" / "litdata" / f) for f in inflated]
    _damage(tmp_path / "cache", inflated)
    again = ringloader.LitData(folder, fields=("text",), cache_dir=tmp_path / "cache")
    assert_same(_batches(again, TRAIN, shuffle=True)[0], want)
    assert [
        os.path.getsize(tmp_path / "cache" / "litdata" / f) for f in inflated
    ] == sizes


def test_tuple_rows_and_a_changed_chunk(data, tmp_path):
    files, labels, _, _ = data
    with_files = [(Image.open(p), int(y)) for p, y in zip(files, labels)]
    folder = _write(tmp_path / "tuples", with_files)
    for im, _ in with_files:
        im.close()
    with pytest.raises(ValueError, match=r"its columns are \['0', '1'\]"):
        ringloader.LitData(folder)
    lit = ringloader.LitData(folder, image="0", target="1")
    got, _ = _batches(lit, EVAL)
    assert_same(got, _batches(ringloader.FileList(files, labels))[0])
    # A chunk rewritten after the dataset was made is not misread.
    chunk = os.path.join(folder, "chunk-0-1.bin")
    os.utime(chunk, ns=(0, 0))
    with pytest.raises(ValueError, match="chunk-0-1.bin: the chunk file changed"):
        lit[5]
    with pytest.raises(ValueError, match="chunk-0-1.bin: the chunk file changed"):
        ringloader.Loader(lit, batch_size=4, transform=EVAL)
