"""MDS: folders written by MosaicML Streaming's own MDSWriter read in place
by the C file source. The same JPEG and PNG images are written as files; a
FileList of them must give the same batches through the same transform
(bit-exact), and Streaming's own StreamingDataset the same samples."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import ringloader
import batches
from batches import assert_same, collect
import torch
from ringloader import transforms as T
from torchvision.transforms import v2

streaming = pytest.importorskip("streaming")
from images import (  # noqa: E402
    jpeg_bytes,
    labelled_data,
    opened_rows,
    photo_like,
    png_bytes,
    some_as_png,
)
from PIL import Image  # noqa: E402
from streaming import MDSWriter, StreamingDataset  # noqa: E402

N = 22
COLUMNS = {"image": "jpeg", "label": "int", "caption": "str"}
EVAL = v2.Compose([v2.Resize(40), v2.CenterCrop(32)])
TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])


def _write(folder, rows, columns=COLUMNS, size_limit=12000, **kw):
    """An MDS folder of ``rows`` (dicts), written by Streaming's writer:
    several shards of a few samples each."""
    with MDSWriter(out=str(folder), columns=columns, size_limit=size_limit, **kw) as w:
        for row in rows:
            w.write(row)
    return str(folder)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """labelled_data's JPEGs (as opened: MDS's "jpeg" encoding keeps an
    opened JPEG's file bytes), written by MDSWriter with its options."""
    return labelled_data(tmp_path_factory.mktemp("mds"), N, _write)


def _shards(folder) -> list[dict]:
    return json.load(open(os.path.join(folder, "index.json")))["shards"]


def test_batches_equal_file_list(data):
    files, labels, _, write = data
    mds = ringloader.MDS(write("plain"))
    shards = _shards(mds.root)
    assert shards[0]["column_encodings"] == ["str", "jpeg", "int"]  # sorted names
    assert len(shards) >= 3 and len(mds.paths.shards) == len(shards)
    assert len(mds) == N and mds.targets.tolist() == labels.tolist()
    stats = batches.assert_same_epochs(
        mds, ringloader.FileList(files, labels), (EVAL, TRAIN)
    )
    assert stats["decodes_jpeg"] == N
    assert "shard.00001.mds: sample 0 of the shard" in mds.describe(
        int(shards[0]["samples"])
    )


def test_zstd_shards_are_inflated_once_into_the_cache(data, tmp_path):
    files, labels, _, write = data
    folder = write("zstd", compression="zstd")
    shards = _shards(folder)
    assert shards[0]["zip_data"]["basename"] == "shard.00000.mds.zstd"
    assert not os.path.exists(os.path.join(folder, "shard.00000.mds"))
    cache = tmp_path / "cache"
    mds = ringloader.MDS(folder, cache_dir=cache)
    inflated = sorted(f for f in os.listdir(cache / "mds") if f.endswith(".bin"))
    assert len(inflated) == len(shards)
    assert "shard.00000.mds.zstd: sample 0 of the shard (inflated to" in mds.describe(0)
    want, _ = collect(ringloader.FileList(files, labels), TRAIN, shuffle=True)
    assert_same(collect(mds, TRAIN, shuffle=True)[0], want)
    mtimes = [os.stat(cache / "mds" / f).st_mtime_ns for f in inflated]
    again = ringloader.MDS(folder, cache_dir=cache)
    assert [os.stat(cache / "mds" / f).st_mtime_ns for f in inflated] == mtimes
    # A copy cut short by a crash is inflated again.
    with open(cache / "mds" / inflated[1], "r+b") as f:
        f.truncate(100)
    again = ringloader.MDS(folder, cache_dir=cache)
    assert_same(collect(again, TRAIN, shuffle=True)[0], want)


def test_png_and_bytes_columns(data, tmp_path):
    files, labels, _, _ = data
    paths = some_as_png(files, tmp_path)
    want, _ = collect(ringloader.FileList(paths, labels), TRAIN, shuffle=True)
    rows = [
        {"image": open(p, "rb").read(), "label": int(y)} for p, y in zip(paths, labels)
    ]
    columns = {"image": "bytes", "label": "int"}
    mds = ringloader.MDS(_write(tmp_path / "bytes", rows, columns))
    got, stats = collect(mds, TRAIN, shuffle=True)
    assert_same(got, want)
    assert stats["decodes_png"] == 8 and stats["decodes_jpeg"] == N - 8
    # "png": the writer encodes a PIL image; lossless, so the same pixels.
    pngs = [png_bytes(30 + i, 44 + i, i) for i in range(N)]
    ref = []
    for i, b in enumerate(pngs):
        ref.append(os.path.join(str(tmp_path), f"all{i:02d}.png"))
        with open(ref[-1], "wb") as f:
            f.write(b)
    rows = [{"image": Image.open(p), "label": int(y)} for p, y in zip(ref, labels)]
    folder = _write(tmp_path / "png", rows, {"image": "png", "label": "int8"})
    mds = ringloader.MDS(folder)
    assert mds.targets.dtype == np.int64
    got, stats = collect(mds, TRAIN, shuffle=True)
    assert_same(got, collect(ringloader.FileList(ref, labels), TRAIN, shuffle=True)[0])
    assert stats["decodes_png"] == N


def test_same_samples_as_streaming_dataset(data, tmp_path):
    """Streaming's StreamingDataset (local, split) over the same folder:
    the same labels, captions and pixels, sample by sample."""
    files, labels, captions, _ = data
    for compression in (None, "zstd"):
        root = tmp_path / f"root-{compression}"
        with opened_rows(files, labels, captions) as rows:
            _write(root / "train", rows, compression=compression)
        mds = ringloader.MDS(
            root, split="train", fields=("caption",), cache_dir=tmp_path / "c"
        )
        theirs = StreamingDataset(local=str(root), split="train", batch_size=1)
        assert len(theirs) == len(mds) == N
        for i in range(N):
            image, label, caption = mds[i]
            sample = theirs[i]
            assert (label, caption) == (sample["label"], sample["caption"])
            pil = np.array(sample["image"].convert("RGB"))
            want = torch.from_numpy(pil).permute(2, 0, 1)
            assert image.shape == want.shape
            assert (image.int() - want.int()).abs().max() <= 1  # libjpeg-turbo's
        del theirs


def test_fields_ranks_resume_and_dataloader(data):
    files, labels, captions, write = data
    mds = ringloader.MDS(write("fields"), fields=("caption",))
    x, y, c = mds[7]
    assert (y, c) == (labels[7], captions[7]) and x.shape == (3, 40 + 7, 36 + 14)
    batches.assert_fields_epoch(mds, labels, captions, EVAL)
    batches.assert_ranks_split(mds, ringloader.FileList(files, labels), TRAIN)
    plain = ringloader.MDS(mds.root)
    batches.assert_resumes(
        lambda: ringloader.Loader(
            plain, batch_size=4, transform=TRAIN, shuffle=True, seed=3
        ),
        skip=2,
    )
    # ringloader.DataLoader reads it natively.
    plain.transform = EVAL
    batches.assert_native_dataloader(
        plain, ringloader.FileList(files, labels, transform=EVAL)
    )


def test_bad_folders_are_refused_clearly(data, tmp_path):
    _, _, _, write = data
    folder = write("good")
    for kw, match in [
        ({"split": "val"}, "val/index.json: no such file"),
        ({"image": "img"}, r"its columns are \['caption', 'image', 'label'\]"),
        ({"fields": ("text",)}, "no field column 'text'"),
        ({"image": "caption"}, "image column 'caption' has encoding 'str'"),
        ({"target": "caption"}, "target column 'caption' has encoding 'str'"),
    ]:
        with pytest.raises(ValueError, match=match):
            ringloader.MDS(folder, **kw)
    with pytest.raises(ValueError, match="index.json: no such file"):
        ringloader.MDS(tmp_path)
    cut = shutil.copytree(folder, tmp_path / "cut")
    shard = cut / "shard.00001.mds"
    whole = shard.read_bytes()
    shard.write_bytes(whole[:-100])
    with pytest.raises(
        ValueError,
        match=r"shard.00001.mds: \d+ bytes where its sample table ends at \d+: "
        "the shard is cut short",
    ):
        ringloader.MDS(cut)
    shard.write_bytes(whole[:10])
    with pytest.raises(ValueError, match="shard.00001.mds: 10 bytes, cut short"):
        ringloader.MDS(cut)
    os.unlink(shard)
    with pytest.raises(
        ValueError, match="shard.00001.mds: index.json lists this shard but the file"
    ):
        ringloader.MDS(cut)
    (cut / "index.json").write_text("{not json")
    with pytest.raises(ValueError, match="index.json: not an MDS index"):
        ringloader.MDS(cut)
    # A compressed shard cut short: named when it is inflated.
    zipped = shutil.copytree(write("zbad", compression="zstd"), tmp_path / "zbad")
    shard = zipped / "shard.00002.mds.zstd"
    shard.write_bytes(shard.read_bytes()[:-30])
    with pytest.raises(ValueError, match="shard.00002.mds.zstd: cannot inflate"):
        ringloader.MDS(zipped, cache_dir=tmp_path / "cache")


def test_raw_pixels_and_bad_images(data, tmp_path):
    rows = [
        {"image": Image.fromarray(photo_like(20, 24, i)), "label": i} for i in range(3)
    ]
    folder = _write(tmp_path / "pil", rows, {"image": "pil", "label": "int"})
    with pytest.raises(
        ValueError, match=r"column 'image' holds raw PIL pixels \(encoding 'pil'\)"
    ):
        ringloader.MDS(folder)
    # Bytes that are not an image fail when decoded, naming the shard.
    rows = [
        {"image": jpeg_bytes("baseline", 20, 20, seed=i), "label": i} for i in range(8)
    ]
    rows[6]["image"] = b"not an image at all"
    mds = ringloader.MDS(
        _write(tmp_path / "bad", rows, {"image": "bytes", "label": "int"}, 1 << 20)
    )
    loader = ringloader.Loader(mds, batch_size=4, transform=EVAL, num_threads=2)
    with pytest.raises(ringloader.DecodeError) as e:
        list(loader)
    loader.close()
    assert "shard.00000.mds: sample 6 of the shard" in str(e.value)
    # A shard rewritten after the dataset was made is not misread.
    os.utime(os.path.join(mds.root, "shard.00000.mds"), ns=(0, 0))
    with pytest.raises(ValueError, match="shard.00000.mds: the shard file changed"):
        mds[1]


def test_dataloader_points_streaming_dataset_at_mds(data, tmp_path):
    """A StreamingDataset over MDS shards falls back to torch's DataLoader,
    its warning naming ringloader.MDS with the folder and split."""
    files, labels, captions, _ = data
    with opened_rows(files, labels, captions) as rows:
        _write(tmp_path / "root" / "train", rows)
    theirs = StreamingDataset(local=str(tmp_path / "root"), split="train", batch_size=4)
    want = rf"ringloader\.MDS\('{tmp_path}/root', split='train', transform=\.\.\.\)"
    with pytest.warns(ringloader.FallbackWarning, match=want):
        loader = ringloader.DataLoader(theirs, batch_size=4)
    assert isinstance(loader, torch.utils.data.DataLoader)


def test_gz_and_bz2_shards_and_ones_not_read(data, tmp_path):
    files, labels, _, write = data
    want, _ = collect(ringloader.FileList(files, labels), EVAL)
    for compression in ("gz", "bz2"):
        folder = write(f"z-{compression}", compression=compression)
        mds = ringloader.MDS(folder, cache_dir=tmp_path / "cache")
        assert f"shard.00000.mds.{compression}: sample 0" in mds.describe(0)
        assert_same(collect(mds, EVAL)[0], want)
    with pytest.raises(
        ValueError, match=r"shard.00000.mds.br: compressed with 'br'; MDS reads zstd"
    ):
        ringloader.MDS(write("z-br", compression="br"), cache_dir=tmp_path / "c")
    # An index whose sample count disagrees with the shard's table.
    wrong = shutil.copytree(write("count"), tmp_path / "count")
    index = json.loads((wrong / "index.json").read_text())
    index["shards"][1]["samples"] += 2
    (wrong / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="shard.00001.mds: holds \\d+ samples where"):
        ringloader.MDS(wrong)
    del index["shards"][0]["column_sizes"]
    (wrong / "index.json").write_text(json.dumps(index))
    with pytest.raises(
        ValueError, match=r"index.json: not an MDS index \(KeyError.*column_sizes"
    ):
        ringloader.MDS(wrong)
