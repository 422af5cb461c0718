"""FileList: images given by path and label, or by a CSV file."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import ringloader
from batches import assert_same
import torch
from ringloader import transforms as T
from ringloader.datasets.filelist import FileList

EVAL = T.Compose([T.Resize(64), T.CenterCrop(56)])


def _batches(dataset, **kw):
    loader = ringloader.Loader(
        dataset, batch_size=4, transform=EVAL, num_threads=2, seed=2, **kw
    )
    out = [(x.clone(), y.clone()) for x, y in loader]
    loader.close()
    return out


def test_paths_and_labels_match_image_folder(folder):
    ref = ringloader.ImageFolder(folder)
    paths = [p for p, _ in ref.samples]
    ours = FileList(paths, ref.targets)
    assert len(ours) == len(ref)
    assert list(ours.samples) == ref.samples
    assert ours.targets.dtype == np.int64
    for shuffle in (False, True):
        assert_same(_batches(ours, shuffle=shuffle), _batches(ref, shuffle=shuffle))


def test_any_order_and_labels(folder):
    ref = ringloader.ImageFolder(folder)
    paths = [p for p, _ in ref.samples][::-1]
    labels = np.arange(len(paths)) * 7
    ours = FileList(paths, labels)
    got = torch.cat([y for _, y in _batches(ours)])
    assert got.tolist() == labels.tolist()


def test_from_csv(folder, tmp_path):
    folder = shutil.copytree(folder, tmp_path / "data")  # a CSV is written in it
    ref = ringloader.ImageFolder(folder)
    rel = [os.path.relpath(p, folder) for p, _ in ref.samples]
    rows = [f"{p},{t}" for p, t in zip(rel, ref.targets)]
    # In the data folder, no header, relative paths: resolved against it.
    csv_in_folder = os.path.join(folder, "list.csv")
    with open(csv_in_folder, "w") as f:
        f.write("\n".join(rows) + "\n")
    ours = FileList.from_csv(csv_in_folder)
    assert list(ours.samples) == ref.samples
    # Elsewhere, with a header, extra columns and blank lines, and root=.
    other = tmp_path / "train.csv"
    other.write_text(
        "path,label,comment\n\n" + "\n".join(r + ",x" for r in rows) + "\n\n"
    )
    ours = FileList.from_csv(other, root=folder)
    assert list(ours.samples) == ref.samples
    assert_same(_batches(ours), _batches(ref))
    # Absolute paths are kept as they are.
    absolute = tmp_path / "abs.csv"
    absolute.write_text("\n".join(f"{p},{t}" for p, t in ref.samples))
    assert list(FileList.from_csv(absolute, root="/elsewhere").samples) == ref.samples


def test_csv_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("path,label\na.jpg,1\nb.jpg,two\n")
    with pytest.raises(ValueError, match=r"bad\.csv, line 3.*'two'"):
        FileList.from_csv(bad)
    short = tmp_path / "short.csv"
    short.write_text("a.jpg,1\nb.jpg\n")
    with pytest.raises(ValueError, match=r"line 2"):
        FileList.from_csv(short)


def test_argument_errors():
    with pytest.raises(ValueError, match="one target per sample"):
        FileList(["a.jpg", "b.jpg"], [1])
    # Floats are targets too (tests/test_targets.py); dates are not.
    with pytest.raises(TypeError, match="cannot be batched"):
        FileList(["a.jpg"], np.array(["2020-01-01"], dtype="datetime64[D]"))


def test_missing_file_names_it(folder, tmp_path):
    ref = ringloader.ImageFolder(folder)
    missing = str(tmp_path / "gone.jpg")
    ours = FileList([ref.samples[0][0], missing], [0, 1])
    with pytest.raises(OSError, match="gone.jpg"):
        _batches(ours)


def test_getitem(folder):
    ref = ringloader.ImageFolder(folder)
    ours = FileList([p for p, _ in ref.samples], ref.targets)
    image, target = ours[2]
    ref_image, ref_target = ref[2]
    assert target == ref_target and torch.equal(image, ref_image)
