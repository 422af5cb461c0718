"""ringloader.timm.create_loader against timm's own create_loader, on the
datasets timm's create_dataset makes (a folder, a .tar of images, a folder
of per-class .tar files): the same labels in the same order, the same
images (eval: within 1 LSB of the 8-bit value, normalised), the same kinds
of objects back (PrefetchLoader-like, mixup as timm applies it), and timm's
own loader, with one warning, where ringloader cannot stand in."""

import os
import tarfile
import warnings

import numpy as np
import pytest
import torch


import ringloader
from ringloader.datasets.timmdata import readable
from ringloader.timm import create_loader

from images import KINDS, jpeg_bytes

timm_data = pytest.importorskip("timm.data")
from timm.data import AugMixDataset, FastCollateMixup, create_dataset  # noqa: E402
from timm.data import create_loader as timm_create_loader  # noqa: E402

CPU = torch.device("cpu")
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
SIZE = (3, 48, 48)


def make_folder(root, per_class=5, classes=3):
    """Small JPEGs (50..90 px: no DCT scaling to 48 px), every kind."""
    rng = np.random.default_rng(0)
    kinds = list(KINDS)
    k = 0
    for c in range(classes):
        d = root / f"class_{c}"
        d.mkdir(parents=True)
        for i in range(per_class):
            h, w = (int(v) for v in rng.integers(50, 90, 2))
            (d / f"{i}.jpg").write_bytes(
                jpeg_bytes(kinds[k % len(kinds)], h, w, seed=k)
            )
            k += 1
    return str(root)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("timm") / "train")


@pytest.fixture(scope="module")
def tar_root(folder, tmp_path_factory):
    """A .tar of the folder's class folders (timm's tar reader)."""
    path = tmp_path_factory.mktemp("timmtar") / "train.tar"
    with tarfile.open(path, "w") as tf:
        tf.add(folder, arcname=".")
    return str(path)


@pytest.fixture(scope="module")
def tars_root(folder, tmp_path_factory):
    """A .tar of one .tar per class (timm's tar reader: tars in a tar, the
    class the inner tar's name)."""
    root = tmp_path_factory.mktemp("timmtars")
    for cls in sorted(os.listdir(folder)):
        with tarfile.open(root / f"{cls}.tar", "w") as tf:
            tf.add(os.path.join(folder, cls), arcname=".")
    path = root / "train.tar"
    with tarfile.open(path, "w") as tf:
        for cls in sorted(os.listdir(folder)):
            tf.add(root / f"{cls}.tar", arcname=f"{cls}.tar")
    return str(path)


def batches(loader):
    xs, ys = zip(*[(x.float(), y) for x, y in loader])
    return torch.cat(xs), torch.cat(ys)


@pytest.mark.parametrize("where", ["folder", "tar_root", "tars_root"])
@pytest.mark.parametrize("prefetcher", [True, False])
@pytest.mark.parametrize(
    "recipe",
    [
        dict(interpolation="bicubic", crop_pct=0.95),
        dict(interpolation="bilinear", crop_pct=0.875, crop_mode="border"),
    ],
)
def test_eval_loader_gives_timms_batches(request, where, prefetcher, recipe):
    root = request.getfixturevalue(where)
    compare_eval(lambda: create_dataset("", root=root), prefetcher, recipe)


def compare_eval(make_dataset, prefetcher, recipe):
    """ringloader's eval loader and timm's, each over a dataset of
    ``make_dataset()``: the same labels, the same images within 1 LSB of
    the 8-bit value, no FallbackWarning. Returns the labels."""
    kwargs = dict(
        input_size=SIZE,
        batch_size=4,
        is_training=False,
        use_prefetcher=prefetcher,
        device=CPU,
        num_workers=0,
        **recipe,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        ours = create_loader(make_dataset(), **kwargs)
    theirs = timm_create_loader(make_dataset(), **kwargs)
    assert len(ours) == len(theirs)
    (x, y), (tx, ty) = batches(ours), batches(theirs)
    assert torch.equal(y, ty)
    assert x.shape == tx.shape and x.dtype == tx.dtype == torch.float32
    # within 1 LSB of the 8-bit value, in normalised units
    assert float(((x - tx).abs() * STD * 255).max()) <= 1.0 + 1e-3
    return y


def test_train_loader_draws_and_normalises(folder):
    """The train recipe (random interpolation, erasing): timm's shapes,
    normalised values, every label once an epoch but the dropped last
    batch, reshuffled the next epoch."""
    ds = create_dataset("", root=folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = create_loader(
            ds,
            input_size=SIZE,
            batch_size=4,
            is_training=True,
            re_prob=0.25,
            interpolation="random",
            device=CPU,
        )
    epochs = [batches(loader) for _ in range(2)]
    for x, y in epochs:
        assert x.shape == (12, *SIZE) and y.shape == (12,)
        assert -3 < float(x.mean()) < 3 and float(x.std()) > 0.3
    assert not torch.equal(epochs[0][1], epochs[1][1])


def test_mixup_collate_as_timm(folder):
    """FastCollateMixup: soft targets as timm's loader gives them, and
    train.py's switch (loader.mixup_enabled = False) turns it off."""
    mix = FastCollateMixup(
        mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=3
    )
    loader = create_loader(
        create_dataset("", root=folder),
        input_size=SIZE,
        batch_size=4,
        is_training=True,
        collate_fn=mix,
        device=CPU,
    )
    x, y = next(iter(loader))
    assert x.shape == (4, *SIZE) and x.dtype == torch.float32
    assert y.shape == (4, 3) and torch.allclose(y.sum(1), torch.ones(4))
    assert loader.mixup_enabled
    loader.mixup_enabled = False
    _, y = next(iter(loader))
    # smoothing only: each row one class at 1 - 0.1 + 0.1 / 3
    assert torch.allclose(y.max(1).values, torch.full((4,), 0.9 + 0.1 / 3))


def test_img_dtype_and_device(folder):
    loader = create_loader(
        create_dataset("", root=folder),
        input_size=SIZE,
        batch_size=4,
        img_dtype=torch.bfloat16,
        device=CPU,
    )
    x, y = next(iter(loader))
    assert x.dtype == torch.bfloat16 and x.device == CPU and y.dtype == torch.int64


def test_what_it_cannot_do_falls_back_to_timms_loader_once(folder):
    ds = AugMixDataset(create_dataset("", root=folder), num_splits=2)
    with pytest.warns(ringloader.FallbackWarning, match="num_aug_splits=2") as w:
        loader = create_loader(
            ds,
            input_size=SIZE,
            batch_size=4,
            is_training=True,
            num_aug_splits=2,
            auto_augment="augmix-m5-w4-d2",
            device=CPU,
        )
    assert len(w) == 1
    assert type(loader).__module__.startswith("timm.")
    x, _ = next(iter(loader))
    assert x.shape == (8, *SIZE)


def test_a_broken_image_names_its_file(tmp_path):
    root = make_folder(tmp_path / "train", per_class=2, classes=2)
    bad = os.path.join(root, "class_1", "1.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8 not a jpeg")
    loader = create_loader(
        create_dataset("", root=root), input_size=SIZE, batch_size=4, device=CPU
    )
    with pytest.raises(ringloader.DecodeError, match="1.jpg"):
        next(iter(loader))


def test_a_worker_seeding_function_is_said_not_to_be_called(folder):
    with pytest.warns(ringloader.FallbackWarning, match="worker_seeding"):
        create_loader(
            create_dataset("", root=folder),
            input_size=SIZE,
            batch_size=4,
            device=CPU,
            worker_seeding=lambda info: 0,
        )


@pytest.mark.parametrize("where", ["folder", "tar_root"])
def test_timms_dataset_given_to_ringloaders_dataloader(request, where):
    """timm's ImageDataset (folder and tar readers) given as it is to
    ringloader.DataLoader, not through create_loader: the C pipeline reads
    its files (no fallback), with its transform (and follows it when
    replaced); the batches are torch's DataLoader's over the same dataset,
    within 1 LSB. Before, it fell back ("ImageDataset is not an
    ImageFolder-like dataset of files")."""
    from timm.data import create_transform

    ds = create_dataset("", root=request.getfixturevalue(where))
    ds.transform = create_transform(SIZE, interpolation="bicubic", crop_pct=0.95)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        ours = ringloader.DataLoader(ds, batch_size=4)
    assert isinstance(ours, ringloader.Loader)
    theirs = torch.utils.data.DataLoader(ds, batch_size=4)
    (x, y), (tx, ty) = batches(ours), batches(theirs)
    assert torch.equal(y, ty) and x.shape == tx.shape == (15, *SIZE)
    assert float(((x - tx).abs() * STD * 255).max()) <= 1.0 + 1e-3
    ds.transform = create_transform((3, 40, 40), interpolation="bilinear")
    x, _ = next(iter(ours))
    assert x.shape == (4, 3, 40, 40)
    # listed once per reader and samples list
    assert readable(ds) is readable(ds) is ours._data
    if where == "folder":  # (the tar reader keeps its targets apart)
        ds.reader.samples = ds.reader.samples[:5]
        assert readable(ds) is not ours._data and len(readable(ds)) == 5


def test_a_timm_dataset_it_cannot_read_falls_back_saying_why(folder):
    ds = create_dataset("", root=folder, input_img_mode="L")
    with pytest.warns(ringloader.FallbackWarning, match="input_img_mode='L'"):
        loader = ringloader.DataLoader(ds, batch_size=4)
    assert not isinstance(loader, ringloader.Loader)
