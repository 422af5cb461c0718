"""Targets of any kind (floats, multi-hot rows, bools, tuples, strings) for
ImageFolder, FileList (and its CSV) and TarShards: the loader batches them
as torch's DataLoader batches the same dataset (default_collate), with
target_transform as today."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
import ringloader
import torch
from images import jpeg_bytes
from torchvision import transforms as TV

# A transform the loader fuses whole and torch's DataLoader can run too.
SMALL = TV.Compose([TV.Resize(24), TV.CenterCrop(16), TV.PILToTensor()])


def _loader_batches(dataset, **kw):
    loader = ringloader.Loader(dataset, batch_size=4, num_threads=2, **kw)
    out = [(x.clone(), y) for x, y in loader]
    loader.close()
    return out


def _torch_batches(dataset):
    return list(torch.utils.data.DataLoader(dataset, batch_size=4))


def _same_targets(a, b):
    """Equal as default_collate makes them: same container, same tensors
    (dtype and shape included)."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
        assert torch.equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_targets(x, y)
    else:
        assert a == b


def _same_as_torch(dataset, **kw):
    ours, theirs = _loader_batches(dataset, **kw), _torch_batches(dataset)
    assert len(ours) == len(theirs)
    for (x, y), (tx, ty) in zip(ours, theirs):
        _same_targets(y, ty)
        assert x.shape == tx.shape
    return [y for _, y in ours]


TARGETS = {
    "float64": lambda n: np.linspace(0, 1, n),
    "float32 rows": lambda n: np.random.default_rng(1).random((n, 5), np.float32),
    "multi-hot bools": lambda n: np.random.default_rng(2).random((n, 4)) > 0.5,
    "tuples": lambda n: [(i % 3, float(i) / 7) for i in range(n)],
    "strings": lambda n: [f"caption {i}" for i in range(n)],
    "int64": lambda n: np.arange(n) % 3,
}


@pytest.mark.parametrize("kind", list(TARGETS))
def test_filelist_targets_batch_as_torch(folder, kind):
    ref = ringloader.ImageFolder(folder)
    paths = [p for p, _ in ref.samples]
    ds = ringloader.FileList(paths, TARGETS[kind](len(paths)), transform=SMALL)
    labels = _same_as_torch(ds)
    if kind == "int64":
        assert ds.targets.dtype == np.int64 and labels[0].dtype == torch.int64
    if kind == "float32 rows":
        assert labels[0].shape == (4, 5) and labels[0].dtype == torch.float32


@pytest.mark.parametrize("kind", ["float32 rows", "tuples"])
def test_image_folder_targets(folder, kind):
    ref = ringloader.ImageFolder(folder)
    values = TARGETS[kind](len(ref))
    ds = ringloader.ImageFolder(folder, transform=SMALL, targets=values)
    assert [p for p, _ in ds.samples] == [p for p, _ in ref.samples]
    _same_as_torch(ds)
    # A samples list with such targets (a torchvision ImageFolder whose
    # samples were replaced) batches the same way.
    again = ringloader.ImageFolder(folder, transform=SMALL)
    again.samples = list(ds.samples)
    _same_as_torch(again)


def test_target_transform_on_any_kind(folder):
    ref = ringloader.ImageFolder(folder)
    paths = [p for p, _ in ref.samples]
    rows = np.random.default_rng(3).random((len(paths), 3), np.float32)
    ds = ringloader.FileList(
        paths, rows, transform=SMALL, target_transform=lambda t: (t * 2, t.sum())
    )
    labels = _same_as_torch(ds)
    assert isinstance(labels[0], list) and labels[0][0].shape == (4, 3)


def test_csv_float_and_vector_labels(folder, tmp_path):
    ref = ringloader.ImageFolder(folder)
    paths = [p for p, _ in ref.samples]
    rows = np.random.default_rng(4).random((len(paths), 3))
    scores = tmp_path / "scores.csv"
    scores.write_text(
        "path,score\n" + "".join(f"{p},{r[0]:.17g}\n" for p, r in zip(paths, rows))
    )
    ds = ringloader.FileList.from_csv(scores, transform=SMALL)
    assert ds.targets.dtype == np.float64
    np.testing.assert_array_equal(ds.targets, rows[:, 0])
    _same_as_torch(ds)

    multi = tmp_path / "multi.csv"
    multi.write_text(
        "path,a,b,c,comment\n"
        + "".join(
            f"{p},{int(r[0] > 0.5)},{int(r[1] > 0.5)},{int(r[2] > 0.5)},x\n"
            for p, r in zip(paths, rows)
        )
    )
    ds = ringloader.FileList.from_csv(multi, transform=SMALL, label_columns=3)
    assert ds.targets.shape == (len(paths), 3) and ds.targets.dtype == np.int64
    np.testing.assert_array_equal(ds.targets, (rows > 0.5).astype(np.int64))
    labels = _same_as_torch(ds)
    assert labels[0].shape == (4, 3)

    short = tmp_path / "short.csv"
    short.write_text(f"{paths[0]},1,0\n")
    with pytest.raises(ValueError, match=r"short\.csv, line 1: expected path and 3"):
        ringloader.FileList.from_csv(short, label_columns=3)


def _shard(path, n: int) -> None:
    with tarfile.open(path, "w") as tf:
        for i in range(n):
            for name, body in (
                (f"s{i:03d}.jpg", jpeg_bytes("baseline", 40 + i, 50, seed=i)),
                (f"s{i:03d}.cls", str(i % 2).encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))


def test_shard_label_key_any_target(tmp_path):
    _shard(tmp_path / "a.tar", 10)
    box = {
        f"s{i:03d}": (i % 2, np.float32([i, i + 1, i + 2, i + 3])) for i in range(10)
    }
    ds = ringloader.TarShards(
        str(tmp_path / "a.tar"), label_key=box.__getitem__, transform=SMALL
    )
    assert isinstance(ds.targets, tuple) and ds.targets[1].shape == (10, 4)
    labels = _same_as_torch(ds)
    assert labels[0][1].dtype == torch.float32
    # The class member is read as before.
    plain = ringloader.TarShards(str(tmp_path / "a.tar"), transform=SMALL)
    assert plain.targets.dtype == np.int64


def test_concat_of_targets(folder):
    """A ConcatDataset (or Mix) of datasets with targets of one kind
    batches them; of different kinds, it says so."""
    ref = ringloader.ImageFolder(folder)
    paths = [p for p, _ in ref.samples]
    a = ringloader.FileList(
        paths, np.ones((len(paths), 2), np.float32), transform=SMALL
    )
    b = ringloader.FileList(
        paths, np.zeros((len(paths), 2), np.float32), transform=SMALL
    )
    both = torch.utils.data.ConcatDataset([a, b])
    _same_as_torch(both)
    c = ringloader.FileList(paths, np.arange(len(paths)), transform=SMALL)
    with pytest.raises(ValueError, match="targets differ in kind"):
        _loader_batches(torch.utils.data.ConcatDataset([a, c]))


def test_bad_targets_are_refused(folder):
    paths = [p for p, _ in ringloader.ImageFolder(folder).samples]
    with pytest.raises(ValueError, match="one target per sample"):
        ringloader.FileList(paths, [1])
    with pytest.raises(ValueError, match="same shape"):
        ringloader.FileList(paths[:2], [[1.0, 2.0], [3.0]])
    with pytest.raises(ValueError, match="tuple target must have 2"):
        ringloader.FileList(paths[:2], [(1, 2.0), (3,)])
