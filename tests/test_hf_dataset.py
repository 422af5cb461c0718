"""HFDataset: a Hugging Face datasets.Dataset whose image bytes the C file
source reads straight from the dataset's Arrow files. Datasets are made
here (Dataset.from_dict with real JPEG and PNG bytes, save_to_disk in
several shards, load_from_disk): no network. Batches are compared with
FileList over the same images written as files, which must give the same
bytes to the same pipeline: bit-exact."""

from __future__ import annotations

import gc
import os
import tracemalloc
import warnings

import numpy as np
import pytest
import ringloader
import torch
from ringloader import transforms as T

datasets = pytest.importorskip("datasets")
from datasets import ClassLabel, Features, Image, Value  # noqa: E402
from batches import assert_same, collect  # noqa: E402
from images import mixed_images  # noqa: E402
from PIL import Image as PILImage  # noqa: E402

N = 24
EVAL = T.Compose([T.Resize(40), T.CenterCrop(32)])
TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])


def _images() -> list[bytes]:
    return mixed_images(N)


def _save(tmp, name, columns, features, shards=3):
    ds = datasets.Dataset.from_dict(columns, features=Features(features))
    folder = os.path.join(str(tmp), name)
    ds.save_to_disk(folder, num_shards=shards)
    return datasets.load_from_disk(folder)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(dataset, the image files, labels, captions): the same images as an
    HF dataset in 3 Arrow shards and as files."""
    tmp = tmp_path_factory.mktemp("hf")
    images = _images()
    files = []
    for i, b in enumerate(images):
        path = os.path.join(str(tmp), f"img{i:02d}.{'png' if i % 3 == 0 else 'jpg'}")
        with open(path, "wb") as f:
            f.write(b)
        files.append(path)
    labels = [(7 * i) % 5 for i in range(N)]
    captions = [f"caption {i}" for i in range(N)]
    ds = _save(
        tmp,
        "ds",
        {
            "image": [
                {"bytes": b, "path": f"orig{i}.jpg"} for i, b in enumerate(images)
            ],
            "label": labels,
            "caption": captions,
            "score": [i / 4 for i in range(N)],
        },
        {
            "image": Image(),
            "label": ClassLabel(num_classes=5),
            "caption": Value("string"),
            "score": Value("float32"),
        },
    )
    return ds, files, np.array(labels), captions


def _batches(dataset, transform=EVAL, **kw):
    return collect(dataset, transform, **kw)


def _same(a, b):
    assert_same(a, b)


def _files(files, labels, rows):
    return ringloader.FileList([files[r] for r in rows], labels[rows])


def test_batches_equal_file_list_in_any_order(data):
    ds, files, labels, _ = data
    hf = ringloader.HFDataset(ds)
    ref = _files(files, labels, np.arange(N))
    assert len(hf) == N and hf.targets.dtype == np.int64
    assert hf.targets.tolist() == labels.tolist()
    for shuffle in (False, True):
        for transform in (EVAL, TRAIN):
            got, stats = _batches(hf, transform, shuffle=shuffle)
            want, _ = _batches(ref, transform, shuffle=shuffle)
            _same(got, want)
    assert stats["decodes_png"] and stats["decodes_jpeg"]
    # Three Arrow files, read as three runs: nothing per row but arrays.
    assert len(ds.cache_files) == 3
    assert len(hf.paths.shards) == 3 and hf.paths.starts.tolist()[-1] == N


def test_indices_mappings_are_followed(data):
    ds, files, labels, _ = data
    for mapped in (
        ds.shuffle(seed=5),
        ds.select([20, 3, 3, 9, 0, 17, 11]),
        ds.filter(lambda row: row["label"] != 2),
        ds.train_test_split(test_size=0.25, seed=1)["test"],
        ds.select(range(4, 19)),  # a slice of the table, no mapping
    ):
        rows = (
            mapped._indices.column(0).to_numpy()
            if mapped._indices is not None
            else np.arange(4, 19)
        )
        hf = ringloader.HFDataset(mapped)
        assert len(hf) == len(rows)
        for shuffle in (False, True):
            got, _ = _batches(hf, TRAIN, shuffle=shuffle)
            want, _ = _batches(_files(files, labels, rows), TRAIN, shuffle=shuffle)
            _same(got, want)
        # Indexing gives what FileList's gives.
        k = len(rows) // 2
        x, y = hf[k]
        xr, yr = _files(files, labels, rows)[k]
        assert torch.equal(x, xr) and y == yr


def test_scattered_rows_name_their_file_each(data):
    """A mapping that alternates files costs a name a sample (one blob),
    cheaper than a run a sample: still the same batches."""
    ds, files, labels, _ = data
    rows = np.array([0, 10, 20, 1, 11, 21, 2, 12, 22] * 2)
    hf = ringloader.HFDataset(ds.select(rows.tolist()))
    assert not hasattr(hf.paths, "starts")
    assert hf.paths[1] == ds.cache_files[1]["filename"]
    got, _ = _batches(hf, EVAL)
    want, _ = _batches(_files(files, labels, rows), EVAL)
    _same(got, want)


def test_a_random_split_of_it(data):
    ds, files, labels, _ = data
    hf = ringloader.HFDataset(ds.shuffle(seed=3))
    part = torch.utils.data.random_split(hf, [16, 8], torch.Generator().manual_seed(0))[
        1
    ]
    rows = hf._rows[part.indices]
    got, _ = _batches(part, TRAIN, shuffle=True)
    want, _ = _batches(_files(files, labels, rows), TRAIN, shuffle=True)
    _same(got, want)


def test_distributed_shards_like_file_list(data):
    ds, files, labels, _ = data
    hf = ringloader.HFDataset(ds.shuffle(seed=2))
    rows = hf._rows
    seen = []
    for rank in range(2):
        kw = dict(shuffle=True, distributed=True, rank=rank, world_size=2)
        got, _ = _batches(hf, TRAIN, **kw)
        want, _ = _batches(_files(files, labels, rows), TRAIN, **kw)
        _same(got, want)
        seen += torch.cat([y for _, y in got]).tolist()
    assert sorted(seen) == sorted(labels[rows].tolist())


def test_dataloader_reads_it_natively(data):
    ds, files, labels, _ = data
    hf = ringloader.HFDataset(ds, transform=EVAL)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = ringloader.DataLoader(hf, batch_size=6)
    assert isinstance(loader, ringloader.DataLoader)
    got = [(x.clone(), y.clone()) for x, y in loader]
    want, _ = _batches(_files(files, labels, np.arange(N)), EVAL, batch_size=6)
    _same(got, want)


def test_dataloader_names_hfdataset_for_a_raw_dataset(data):
    ds = data[0]
    with pytest.warns(ringloader.FallbackWarning) as caught:
        loader = ringloader.DataLoader(ds, batch_size=4)
    assert not isinstance(loader, ringloader.Loader)
    message = str(caught[0].message)
    assert "ringloader.HFDataset(ds, transform=...)" in message, message
    with pytest.warns(ringloader.FallbackWarning, match=r"HFDataset\(ds\['test'\]"):
        ringloader.DataLoader(datasets.DatasetDict({"test": ds}), batch_size=4)
    with pytest.warns(
        ringloader.FallbackWarning, match=r"HFDataset\(ds, image='photo'"
    ):
        ringloader.DataLoader(ds.rename_column("image", "photo"), batch_size=4)


def test_getitem_decodes_and_transforms_as_torchvision(data):
    ds, files, labels, _ = data
    hf = ringloader.HFDataset(ds, target_transform=lambda y: y + 100)
    x, y = hf[4]
    with PILImage.open(files[4]) as im:
        want = torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)
    assert x.dtype == torch.uint8 and x.shape == want.shape
    assert (x.int() - want.int()).abs().max() <= 1  # libjpeg-turbo vs Pillow's
    assert y == labels[4] + 100
    seen = []
    hf = ringloader.HFDataset(ds, transform=lambda im: seen.append(im.size) or 0)
    assert hf[0] == (0, labels[0]) and seen == [(44, 30)]
    assert "data-00000-of-00003.arrow: table row 0 (bytes" in hf.describe(0)
    assert repr(hf).startswith("ringloader.HFDataset(24 rows in 3 Arrow file(s)")


def test_targets_of_other_kinds(data, tmp_path):
    ds, files, labels, _ = data
    hf = ringloader.HFDataset(ds, target="score")
    assert hf.targets.dtype == np.float32
    [(x, y)], _ = _batches(hf, EVAL, batch_size=N)
    assert y.tolist() == [i / 4 for i in range(N)]
    hf = ringloader.HFDataset(ds, target=None)
    assert hf.targets.tolist() == [-1] * N
    rows = _save(
        tmp_path,
        "rows",
        {
            "image": [{"bytes": b, "path": None} for b in _images()[:4]],
            "soft": [[i, 1.0 - i] for i in range(4)],
        },
        {"image": Image(), "soft": datasets.Sequence(Value("float64"))},
        shards=1,
    )
    hf = ringloader.HFDataset(rows, target="soft")
    assert hf.targets.shape == (4, 2)
    holed = rows.map(
        lambda r, i: {"soft": [None, 1.0] if i == 2 else r["soft"]}, with_indices=True
    )
    with pytest.raises(ValueError, match="column 'soft': row 2 holds a null"):
        ringloader.HFDataset(holed, target="soft")
    [(x, y)], _ = _batches(hf, EVAL, batch_size=4)
    assert y.tolist() == [[i, 1.0 - i] for i in range(4)]
    # With a target_transform, batched as default_collate batches its results.
    hf = ringloader.HFDataset(rows, target="soft", target_transform=lambda t: t.sum())
    [(x, y)], _ = _batches(hf, EVAL, batch_size=4)
    assert y.tolist() == [1.0] * 4


def test_fields_come_beside_image_and_target(data):
    ds, files, labels, captions = data
    mapped = ds.shuffle(seed=9)
    rows = mapped._indices.column(0).to_numpy()
    item = ringloader.HFDataset(mapped, fields=("caption", "score"))[3]
    hf = ringloader.HFDataset(mapped, fields=("caption", "score"), transform=EVAL)
    assert item[1:] == (labels[rows[3]], captions[rows[3]], rows[3] / 4)
    loader = ringloader.Loader(hf, batch_size=5, num_threads=2, shuffle=True, seed=3)
    ref, _ = _batches(_files(files, labels, rows), EVAL, shuffle=True)
    got = list(loader)
    assert len(got) == len(ref)
    for (images, y, caps, scores), (xr, yr) in zip(got, ref):
        assert torch.equal(images, xr) and torch.equal(y, yr)
        assert isinstance(caps, list) and len(caps) == len(y)
        assert scores.dtype == torch.float64
        for c, s in zip(caps, scores.tolist()):
            assert c == f"caption {int(s * 4)}"
    # A collate_fn gets the samples as indexing gives them.
    from torchvision.transforms import v2

    tv = v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.PILToTensor()])
    hf = ringloader.HFDataset(
        mapped, fields=("caption",), transform=tv, target_transform=str
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = ringloader.DataLoader(hf, batch_size=3, collate_fn=list)
    items = next(iter(loader))
    for i, (image, target, caption) in enumerate(items):
        assert (target, caption) == (str(labels[rows[i]]), captions[rows[i]])
        assert image.shape == (3, 32, 32)
    hf = ringloader.HFDataset(ds, target=None, fields=("caption",), transform=EVAL)
    images, caps = next(iter(ringloader.Loader(hf, batch_size=4)))
    assert caps == captions[:4] and images.shape == (4, 3, 32, 32)


def _arrow_file(tmp, name, columns, features):
    """An Arrow stream file written as datasets writes its cache (the
    features in the schema's metadata), loaded with Dataset.from_file:
    the rows as given (save_to_disk would embed the files of path rows)."""
    import pyarrow as pa

    schema = Features(features).arrow_schema
    path = os.path.join(str(tmp), f"{name}.arrow")
    table = pa.table(columns, schema=schema)
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        for batch in table.to_batches(max_chunksize=5):
            w.write_batch(batch)
    return datasets.Dataset.from_file(path)


def test_rows_given_as_paths_read_their_files(data, tmp_path):
    """An imagefolder-style column (bytes null, path set) beside rows with
    bytes: each path row reads its file."""
    ds, files, labels, _ = data
    images = _images()
    column = [
        {"bytes": None, "path": files[i]}
        if i % 2
        else {"bytes": images[i], "path": None}
        for i in range(N)
    ]
    features = {"image": Image(), "label": ClassLabel(num_classes=5)}
    mixed = _arrow_file(tmp_path, "mixed", {"image": column, "label": labels}, features)
    hf = ringloader.HFDataset(mixed)
    for transform in (EVAL, TRAIN):
        got, _ = _batches(hf, transform, shuffle=True)
        want, _ = _batches(_files(files, labels, np.arange(N)), transform, shuffle=True)
        _same(got, want)
    assert hf.describe(1).startswith(files[1])
    assert "mixed.arrow: table row 2" in hf.describe(2)
    assert torch.equal(hf[1][0], ringloader.FileList(files, labels)[1][0])
    # With fields, a path row's file is measured for the C side.
    hf = ringloader.HFDataset(mixed, target=None, fields=("label",))
    assert hf.lengths[1] == os.path.getsize(files[1])
    (images, got), *_ = ringloader.Loader(hf, batch_size=N, transform=EVAL)
    want, _ = _batches(_files(files, labels, np.arange(N)), EVAL, batch_size=N)
    assert torch.equal(images, want[0][0]) and got.tolist() == labels.tolist()
    # Paths only, in memory (no Arrow file is needed for them).
    paths = datasets.Dataset.from_dict(
        {"image": files, "label": labels.tolist()}, features=Features(features)
    )
    got, _ = _batches(ringloader.HFDataset(paths.shuffle(seed=4)), EVAL)
    rows = paths.shuffle(seed=4)._indices.column(0).to_numpy()
    want, _ = _batches(_files(files, labels, rows), EVAL)
    _same(got, want)


def test_a_binary_column_of_encoded_images(data, tmp_path):
    ds, files, labels, _ = data
    raw = _arrow_file(
        tmp_path,
        "raw",
        {"jpg": _images(), "cls": labels},
        {"jpg": Value("binary"), "cls": Value("int64")},
    )
    hf = ringloader.HFDataset(raw, image="jpg", target="cls")
    got, _ = _batches(hf, TRAIN, shuffle=True)
    want, _ = _batches(_files(files, labels, np.arange(N)), TRAIN, shuffle=True)
    _same(got, want)


def test_a_bad_row_names_its_arrow_file_and_row(data, tmp_path):
    images = _images()[:8]
    images[5] = b"this is not an image at all"
    bad = _save(
        tmp_path,
        "bad",
        {
            "image": [{"bytes": b, "path": None} for b in images],
            "label": list(range(8)),
        },
        {"image": Image(), "label": Value("int64")},
        shards=2,
    )
    hf = ringloader.HFDataset(bad)
    loader = ringloader.Loader(hf, batch_size=4, transform=EVAL, num_threads=2)
    with pytest.raises(ringloader.DecodeError) as e:
        list(loader)
    assert "data-00001-of-00002.arrow" in str(e.value)
    assert "table row 5" in str(e.value)
    with pytest.warns(ringloader.DataWarning):
        got, stats = _batches(hf, EVAL, batch_size=4, on_error="skip")
    assert stats["skipped"] == 1
    assert torch.cat([y for _, y in got]).tolist() == [0, 1, 2, 3, 4, 6, 6, 7]


def test_a_null_image_fails_its_sample(data, tmp_path):
    images = _images()[:4]
    nulls = _save(
        tmp_path,
        "nulls",
        {
            "image": [{"bytes": b, "path": None} for b in images[:2]]
            + [None]
            + [{"bytes": images[3], "path": None}],
            "label": [0, 1, 2, 3],
        },
        {"image": Image(), "label": Value("int64")},
        shards=1,
    )
    hf = ringloader.HFDataset(nulls)
    assert "is null" in hf.describe(2)
    with pytest.raises(
        ringloader.DecodeError, match="table row 2, whose 'image' is null"
    ):
        list(ringloader.Loader(hf, batch_size=4, transform=EVAL))


def test_bad_datasets_are_refused_clearly(data, tmp_path):
    ds = data[0]
    with pytest.raises(
        ValueError,
        match=r"no image column 'img'; its columns are \['image', 'label', 'caption', 'score'\]",
    ):
        ringloader.HFDataset(ds, image="img")
    with pytest.raises(ValueError, match="no target column 'labels'"):
        ringloader.HFDataset(ds, target="labels")
    with pytest.raises(ValueError, match="no field column 'text'"):
        ringloader.HFDataset(ds, fields=("text",))
    with pytest.raises(TypeError, match="column 'label' holds int64, not images"):
        ringloader.HFDataset(ds, image="label")
    with pytest.raises(TypeError, match=r"pick one, HFDataset\(ds\['train'\]"):
        ringloader.HFDataset(datasets.DatasetDict({"train": ds, "test": ds}))
    with pytest.raises(TypeError, match="takes a Hugging Face datasets.Dataset"):
        ringloader.HFDataset([1, 2])
    memory = datasets.Dataset.from_dict(
        {"image": [{"bytes": _images()[1], "path": None}], "label": [0]},
        features=Features({"image": Image(), "label": Value("int64")}),
    )
    with pytest.raises(ValueError, match=r"held in memory.*ds.save_to_disk\(folder\)"):
        ringloader.HFDataset(memory)
    custom = ds.with_transform(lambda batch: batch)
    with pytest.raises(ValueError, match="set_transform or with_transform"):
        ringloader.HFDataset(custom)


def test_a_changed_arrow_file_is_not_misread(data, tmp_path):
    images = _images()[:6]
    ds = _save(
        tmp_path,
        "changing",
        {
            "image": [{"bytes": b, "path": None} for b in images],
            "label": list(range(6)),
        },
        {"image": Image(), "label": Value("int64")},
        shards=2,
    )
    hf = ringloader.HFDataset(ds)
    path = ds.cache_files[1]["filename"]
    with open(path, "ab") as f:  # changed after the HFDataset was made
        f.write(b"\0" * 8)
    with pytest.raises(
        ValueError, match="data-00001-of-00002.arrow: the Arrow file changed"
    ):
        ringloader.Loader(hf, batch_size=2, transform=EVAL)
    with pytest.raises(ValueError, match="the Arrow file changed"):
        hf[4]
    # A file replaced under the dataset's map (another file, same name):
    # refused when the HFDataset is made, naming it.
    other = tmp_path / "other.arrow"
    with open(path, "rb") as f:
        other.write_bytes(f.read()[:-8])
    os.replace(other, path)
    with pytest.raises(
        ValueError,
        match="data-00001-of-00002.arrow: the Arrow file the dataset mapped was deleted or replaced",
    ):
        ringloader.HFDataset(ds)
    fresh = datasets.load_from_disk(str(tmp_path / "changing"))
    got, _ = _batches(ringloader.HFDataset(fresh), EVAL, batch_size=6)
    assert got[0][1].tolist() == list(range(6))  # loaded again: the file it maps now


def test_no_python_object_per_row(tmp_path):
    """200,000 rows of tiny bytes: making the HFDataset keeps numpy arrays
    (offsets, lengths, targets: 24 bytes a row) and a handful of objects,
    not an object per row (a list of tuples or str would keep 200,000
    blocks and well over 50 bytes a row)."""
    import pyarrow as pa

    n = 200_000
    tiny = pa.array([b"\xff\xd8" + i.to_bytes(4, "little") for i in range(n)])
    table = pa.table(
        {
            "image": pa.StructArray.from_arrays(
                [tiny, pa.nulls(n, pa.string())], ["bytes", "path"]
            ),
            "label": pa.array(np.arange(n) % 10, pa.int64()),
        }
    )
    features = Features({"image": Image(), "label": Value("int64")})
    ds = datasets.Dataset(
        datasets.table.InMemoryTable(table),
        info=datasets.DatasetInfo(features=features),
    )
    ds.save_to_disk(str(tmp_path / "big"), num_shards=4)
    ds = datasets.load_from_disk(str(tmp_path / "big"))
    for mapped in (ds, ds.shuffle(seed=1).flatten_indices(), ds.select(range(10, n))):
        gc.collect()
        tracemalloc.start()
        hf = ringloader.HFDataset(mapped)
        kept, _ = tracemalloc.get_traced_memory()
        blocks = len(tracemalloc.take_snapshot().traces)
        tracemalloc.stop()
        assert len(hf) == len(mapped)
        assert blocks < 2000, blocks
        assert kept / len(hf) < 40, kept / len(hf)
        del hf
