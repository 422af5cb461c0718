"""The scripts people run over a Hugging Face dataset, with the one-line
change that puts ringloader under them.

timm: ``create_dataset("hfds/<folder>", root=cache, split=...)`` loads the
dataset with ``datasets.load_dataset`` (here a folder of Parquet files,
as the Hub serves them, converted into Arrow files in the cache ``root``:
no network), and ``ringloader.timm.create_loader`` reads it natively
through HFDataset: timm's own loader's labels in its order and its images
(within 1 LSB of the 8-bit value where timm's transform resamples), with
no FallbackWarning.

transformers' image-classification example: its ``with_transform``
dataset becomes ``HFDataset(split, transform=<its Compose>,
as_dict="pixel_values")`` and its DataLoader ringloader's; its
``collate_fn`` then gets dict items as the example's function makes them,
and its batches are those of torch's DataLoader over the example's own
dataset (within the drop-in's eval promise, the same labels).
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import ringloader
from ringloader.timm import create_loader

from images import jpeg_bytes
from test_timm_loader import batches, compare_eval, make_folder

datasets = pytest.importorskip("datasets")
pytest.importorskip("timm")
from datasets import ClassLabel, Features, Image  # noqa: E402
from timm.data import create_dataset, create_transform  # noqa: E402
from timm.data import create_loader as timm_create_loader  # noqa: E402

CPU = torch.device("cpu")
SIZE = (3, 48, 48)


def to_parquet(folders: dict[str, str], out: str) -> str:
    """Image folders (split -> folder of class folders) as a folder of
    Parquet files, one a split, named as the Hub names them
    (``data/<split>-00000-of-00001.parquet``; ``load_dataset`` takes the
    split from the name): an ``Image`` column of the files' bytes and a
    ``ClassLabel`` column of the class folders, in their sorted order."""
    for split, folder in folders.items():
        classes = sorted(os.listdir(folder))
        rows = [
            (os.path.join(folder, c, f), k)
            for k, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(folder, c)))
        ]
        features = Features({"image": Image(), "label": ClassLabel(names=classes)})
        images = []
        for path, _ in rows:
            with open(path, "rb") as f:
                images.append(f.read())
        ds = datasets.Dataset.from_dict(
            {"image": images, "label": [k for _, k in rows]}, features=features
        )
        os.makedirs(os.path.join(out, "data"), exist_ok=True)
        ds.to_parquet(os.path.join(out, "data", f"{split}-00000-of-00001.parquet"))
    return out


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """(name, cache root): timm's ``hfds/`` name of a Parquet dataset of a
    train and a validation split, and the cache ``load_dataset`` writes
    its Arrow files in."""
    tmp = tmp_path_factory.mktemp("hfds")
    train = make_folder(tmp / "images" / "train", per_class=6)
    val = make_folder(tmp / "images" / "validation", per_class=3)
    src = to_parquet({"train": train, "validation": val}, str(tmp / "src"))
    return f"hfds/{src}", str(tmp / "cache")


def hfds(hub, split="validation", **kwargs):
    name, root = hub
    return create_dataset(name, root=root, split=split, **kwargs)


@pytest.mark.parametrize("prefetcher", [True, False])
@pytest.mark.parametrize(
    "recipe",
    [
        dict(interpolation="bicubic", crop_pct=0.95),
        dict(interpolation="bilinear", crop_pct=0.875, crop_mode="border"),
    ],
)
def test_hfds_eval_loader_gives_timms_batches(hub, prefetcher, recipe):
    assert type(hfds(hub).reader).__name__ == "ReaderHfds"
    y = compare_eval(lambda: hfds(hub), prefetcher, recipe)
    assert y.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_hfds_read_from_the_arrow_files(hub):
    """The loader's table is the cache's Arrow file (byte ranges of it),
    and a sample is named by its Arrow file and row, through timm's
    dataset as the loader is given it."""
    ds = hfds(hub)
    ds.transform = create_transform(SIZE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = ringloader.DataLoader(ds, batch_size=3)
    images = loader._data
    sources = images.ringloader_sources()
    assert {str(p) for p in sources.paths} == {
        f["filename"] for f in ds.reader.dataset.cache_files
    }
    assert sources.lengths is not None and (sources.lengths > 0).all()
    assert images.describe(4).endswith(
        f"table row 4 (bytes {sources.offsets[4]}..{sources.offsets[4] + sources.lengths[4]})"
    )


def test_hfds_class_map_as_timm_maps_it(hub):
    """A class_map (names to indices) remaps the labels as timm's reader
    does, sample by sample."""
    class_map = {"class_2": 0, "class_0": 1, "class_1": 2}
    kwargs = dict(input_size=SIZE, batch_size=9, use_prefetcher=False, device=CPU)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        ours = create_loader(hfds(hub, class_map=class_map), **kwargs)
    theirs = timm_create_loader(hfds(hub, class_map=class_map), **kwargs)
    (_, y), (_, ty) = batches(ours), batches(theirs)
    assert torch.equal(y, ty) and y.tolist() == [1] * 3 + [2] * 3 + [0] * 3


def test_hfds_what_is_not_read_falls_back_naming_it(tmp_path):
    """Targets of several columns (timm's comma-separated target_key,
    multi-label) are not read: timm's loader, with the reason."""
    images = [jpeg_bytes("baseline", 50, 60, seed=i) for i in range(4)]
    columns = {"image": images, "cat": [1, 0, 1, 0], "dog": [0, 1, 1, 0]}
    ds = datasets.Dataset.from_dict(columns).cast_column("image", Image())
    os.makedirs(tmp_path / "src" / "data")
    ds.to_parquet(str(tmp_path / "src" / "data" / "train-00000-of-00001.parquet"))
    timm_ds = create_dataset(
        f"hfds/{tmp_path / 'src'}",
        root=str(tmp_path / "cache"),
        split="train",
        target_key="cat,dog",
    )
    with pytest.warns(ringloader.FallbackWarning, match="'cat', 'dog'") as w:
        loader = create_loader(timm_ds, input_size=SIZE, batch_size=4, device=CPU)
    assert len(w) == 1 and type(loader).__module__.startswith("timm.")


def test_hfds_broken_image_names_its_arrow_file_and_row(tmp_path):
    folder = make_folder(tmp_path / "images" / "train", per_class=2, classes=2)
    with open(os.path.join(folder, "class_1", "0.jpg"), "wb") as f:
        f.write(b"\xff\xd8 not a jpeg")
    src = to_parquet({"train": folder}, str(tmp_path / "src"))
    ds = create_dataset(f"hfds/{src}", root=str(tmp_path / "cache"), split="train")
    loader = create_loader(ds, input_size=SIZE, batch_size=4, device=CPU)
    with pytest.raises(ringloader.DecodeError, match=r"\.arrow: table row 2 \(bytes"):
        list(loader)


def test_hfds_without_resampling_bit_exact(tmp_path):
    """Images of the input size (crop_pct 1: nothing resampled): timm's
    batches exactly, as uint8 values before normalisation."""
    folder = tmp_path / "images" / "train"
    for c in range(2):
        (folder / f"class_{c}").mkdir(parents=True)
        for i in range(3):
            data = jpeg_bytes("baseline", 48, 48, seed=10 * c + i)
            (folder / f"class_{c}" / f"{i}.jpg").write_bytes(data)
    src = to_parquet({"train": str(folder)}, str(tmp_path / "src"))
    kwargs = dict(
        input_size=SIZE,
        batch_size=3,
        crop_pct=1.0,
        use_prefetcher=False,
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
        device=CPU,
    )

    def dataset():
        return create_dataset(
            f"hfds/{src}", root=str(tmp_path / "cache"), split="train"
        )

    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        (x, y) = batches(create_loader(dataset(), **kwargs))
    (tx, ty) = batches(timm_create_loader(dataset(), **kwargs))
    assert torch.equal(y, ty)
    assert torch.equal((x * 255).round().byte(), (tx * 255).round().byte())


# transformers' image-classification example (run_image_classification*.py):
# its transforms and functions as it builds them (torchvision v1, the
# image column's PIL image converted to RGB, "pixel_values" added to the
# batch of rows), rewritten here by what they do. Its one-line change:
#     train_dataset = dataset["train"].with_transform(preprocess_train)
# becomes
#     train_dataset = ringloader.HFDataset(
#         dataset["train"], transform=train_transforms, as_dict="pixel_values")
# with ringloader's DataLoader in place of torch's; collate_fn unchanged.
MEAN, DEV = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)  # a ViT image processor's


def example(size, image_column="image", label_column="label"):
    """(train_transforms, val_transforms, preprocess_train,
    preprocess_val, collate_fn) as the example makes them."""
    from torchvision.transforms import (
        CenterCrop,
        Compose,
        Normalize,
        RandomHorizontalFlip,
        RandomResizedCrop,
        Resize,
        ToTensor,
    )

    norm = Normalize(mean=MEAN, std=DEV)
    train_tf = Compose(
        [RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(), norm]
    )
    val_tf = Compose([Resize(size), CenterCrop(size), ToTensor(), norm])

    def with_pixels(tf):
        def preprocess(rows):
            images = rows[image_column]
            rows["pixel_values"] = [tf(im.convert("RGB")) for im in images]
            return rows

        return preprocess

    def collate_fn(examples):
        return {
            "pixel_values": torch.stack([e["pixel_values"] for e in examples]),
            "labels": torch.tensor([e[label_column] for e in examples]),
        }

    return train_tf, val_tf, with_pixels(train_tf), with_pixels(val_tf), collate_fn


@pytest.fixture(scope="module")
def dataset(hub):
    """``load_dataset(name)`` as the example calls it: a DatasetDict of
    the Parquet dataset's splits, in Arrow files of the cache."""
    name, root = hub
    return datasets.load_dataset(name[len("hfds/") :], cache_dir=root)


def close(ours, ref):
    """Within ringloader's eval promise against torchvision's PIL path
    (under 4.5 LSB RMS, as test_frontdoor measures it), per image."""
    assert ours.shape == ref.shape and ours.dtype == ref.dtype == torch.float32
    for x, y in zip(ours, ref):
        rms = ((x - y) * DEV[0]).pow(2).mean().sqrt()
        assert rms.item() * 255 < 4.5, rms.item() * 255


def test_example_eval_dataloader_with_the_one_line_change(dataset):
    _, val_tf, _, preprocess_val, collate_fn = example(32)
    theirs = torch.utils.data.DataLoader(
        dataset["validation"].with_transform(preprocess_val),
        collate_fn=collate_fn,
        batch_size=4,
    )
    eval_dataset = ringloader.HFDataset(
        dataset["validation"], transform=val_tf, as_dict="pixel_values"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        ours = ringloader.DataLoader(eval_dataset, collate_fn=collate_fn, batch_size=4)
        assert type(ours) is ringloader.DataLoader
        got = list(ours)
    ref = list(theirs)
    assert len(got) == len(ref) == 3
    for a, b in zip(got, ref):
        assert set(a) == set(b) == {"pixel_values", "labels"}
        assert torch.equal(a["labels"], b["labels"])
        close(a["pixel_values"], b["pixel_values"])


def test_example_train_loop(dataset):
    """The example's training loop (shuffle=True, its collate_fn,
    ``model(**batch)`` with a loss): every sample once an epoch, in
    another order the next, the dict batches on ringloader's path."""
    train_tf, _, _, _, collate_fn = example(32)
    train_dataset = ringloader.HFDataset(
        dataset["train"], transform=train_tf, as_dict="pixel_values"
    )

    class Model(torch.nn.Module):  # a classifier as transformers' take args
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(3 * 32 * 32, 3)

        def forward(self, pixel_values, labels):
            logits = self.head(pixel_values.flatten(1))
            return torch.nn.functional.cross_entropy(logits, labels)

    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = ringloader.DataLoader(
            train_dataset, shuffle=True, collate_fn=collate_fn, batch_size=6
        )
        orders = []
        for _ in range(2):
            seen = []
            for batch in loader:
                assert batch["pixel_values"].shape == (6, 3, 32, 32)
                loss = model(**batch)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                assert torch.isfinite(loss)
                seen += batch["labels"].tolist()
            orders.append(seen)
    labels = dataset["train"]["label"]
    assert all(sorted(o) == sorted(labels) for o in orders)
    assert orders[0] != orders[1]


def test_as_dict_items_and_batches_as_torch_gives_them(dataset):
    """Indexing gives the dict; without a collate_fn the loader yields the
    dict default_collate makes of those (torch's DataLoader over the same
    HFDataset, which indexes it)."""
    _, val_tf, _, _, _ = example(32)
    ds = ringloader.HFDataset(
        dataset["validation"], transform=val_tf, as_dict="pixel_values"
    )
    item = ds[4]
    assert set(item) == {"pixel_values", "label"} and item["label"] == 1
    assert item["pixel_values"].shape == (3, 32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        ours = list(ringloader.DataLoader(ds, batch_size=5))
    ref = list(torch.utils.data.DataLoader(ds, batch_size=5))
    assert len(ours) == len(ref) == 2
    for a, b in zip(ours, ref):
        assert set(a) == set(b) == {"pixel_values", "label"}
        assert a["label"].dtype == torch.int64 and torch.equal(a["label"], b["label"])
        close(a["pixel_values"], b["pixel_values"])
    with pytest.raises(ValueError, match="as_dict='label' is also the name"):
        ringloader.HFDataset(dataset["validation"], as_dict="label")


def test_a_with_transform_dataset_names_the_change(dataset):
    """The example's dataset as it is (with_transform): torch's
    DataLoader, the warning naming the change; HFDataset over it says the
    same."""
    _, _, _, preprocess_val, collate_fn = example(32)
    formatted = dataset["validation"].with_transform(preprocess_val)
    with pytest.warns(ringloader.FallbackWarning, match="as_dict='pixel_values'"):
        loader = ringloader.DataLoader(formatted, collate_fn=collate_fn, batch_size=4)
    assert next(iter(loader))["pixel_values"].shape == (4, 3, 32, 32)
    with pytest.raises(ValueError, match="as_dict='pixel_values'"):
        ringloader.HFDataset(formatted)
