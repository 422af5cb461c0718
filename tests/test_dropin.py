"""The drop-in's reach (ringloader.DataLoader): torch's index maps over
ImageFolders (Subset, random_split, ConcatDataset) are fused, as are an
explicit default_collate; pin_memory behaves as DataLoader's."""

from __future__ import annotations

import io
import tarfile
import warnings

import pytest
import torch
from torch.utils.data import ConcatDataset, Subset, random_split

import ringloader
from ringloader import transforms as T
from ringloader.datasets.shards import TarShards

from images import jpeg_bytes

tv = pytest.importorskip("torchvision")
from torchvision import datasets  # noqa: E402
from torchvision import transforms as v1  # noqa: E402

STD = [0.229, 0.224, 0.225]


def eval_tf():
    return v1.Compose(
        [
            v1.Resize(72),
            v1.CenterCrop(64),
            v1.ToTensor(),
            v1.Normalize([0.485, 0.456, 0.406], STD),
        ]
    )


def fused(dataset, **kw):
    """ringloader.DataLoader over dataset, failing on any fallback."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = ringloader.DataLoader(dataset, **kw)
    assert isinstance(loader, ringloader.Loader)
    return loader


def compositions(folder):
    """(name, dataset, base index of each of its samples) for the index maps
    the drop-in fuses, over torchvision's ImageFolder."""
    ds = datasets.ImageFolder(folder, transform=eval_tf())
    train, val = random_split(ds, [10, 8], generator=torch.Generator().manual_seed(1))
    nested = Subset(Subset(train, [9, 4, 0, 7]), [3, -1, 0])  # negative: as Python
    # A second ImageFolder with an equal transform (a distinct object).
    other = datasets.ImageFolder(folder, transform=eval_tf())
    concat = ConcatDataset([nested, val, Subset(other, [17, 2])])
    nested_base = [train.indices[i] for i in (7, 7, 9)]  # -1 is the last: 7
    return [
        ("random_split", train, list(train.indices)),
        ("nested Subset", nested, nested_base),
        ("ConcatDataset", concat, nested_base + list(val.indices) + [17, 2]),
    ]


def test_subsets_and_concat_are_fused_and_match_dataloader(folder):
    """Labels equal torch's DataLoader over the same composition, images
    within 35 dB of it (the drop-in's eval promise, as
    test_eval_drop_in_agrees_pixelwise measures it), and bit-equal to the
    loader over the base dataset at the mapped indices: the right files."""
    base = datasets.ImageFolder(folder, transform=eval_tf())
    for name, dataset, mapped in compositions(folder):
        ours = list(fused(dataset, batch_size=4, num_workers=2))
        ref = list(torch.utils.data.DataLoader(dataset, batch_size=4))
        direct = ringloader.Loader(base, batch_size=4, sampler=mapped, num_threads=2)
        assert len(ours) == len(ref) == len(direct), name
        for (a, la), (b, lb), (c, lc) in zip(ours, ref, direct):
            assert a.shape == b.shape and a.dtype == b.dtype, name
            assert torch.equal(la, lb) and torch.equal(la, lc), name
            rms = ((a - b) * torch.tensor(STD).view(1, 3, 1, 1)).pow(2).mean().sqrt()
            assert rms.item() * 255 < 4.5, (name, rms.item() * 255)
            assert torch.equal(a, c), name
        labels = torch.cat([lb for _, lb in ours]).tolist()
        print(name, len(labels), "samples, labels", labels)


def test_subset_of_ringloader_datasets(folder, tmp_path):
    """ringloader's own datasets under a Subset: its ImageFolder, and tar
    shards, whose errors name the member of the right sample."""
    ds = ringloader.ImageFolder(folder, transform=T.Compose([T.Resize((40, 48))]))
    sub = Subset(ds, [5, 1, 16])
    images, labels = next(iter(fused(sub, batch_size=3)))
    ref_images, ref_labels = next(
        iter(ringloader.Loader(ds, batch_size=3, sampler=[5, 1, 16]))
    )
    assert torch.equal(images, ref_images) and torch.equal(labels, ref_labels)

    good = jpeg_bytes("baseline", 60, 80, seed=3)
    with tarfile.open(tmp_path / "shard-0.tar", "w") as tf:
        for i, data in enumerate([good, good, b"\xff\xd8\xff not a jpeg", good]):
            for ext, blob in (("cls", str(i).encode()), ("jpg", data)):
                info = tarfile.TarInfo(f"s{i}.{ext}")
                info.size = len(blob)
                tf.addfile(info, io.BytesIO(blob))
    shards = TarShards(str(tmp_path / "shard-*.tar"), progress=False)
    loader = ringloader.Loader(
        Subset(shards, [3, 2]), batch_size=2, transform=T.Resize((32, 32))
    )
    with pytest.raises(ringloader.DecodeError, match=r"shard-0\.tar\[s2\]") as e:
        next(iter(loader))
    assert e.value.index == 1  # the Subset's index, as the user indexes it
    print(e.value)

    # Byte ranges of tar shards next to whole files, with the loader's own
    # transform (the parts' transforms differ, and are not read).
    mixed = ConcatDataset([Subset(shards, [3, 0]), Subset(ds, [16, 2])])
    resize = T.Resize((32, 32))
    images, labels = next(
        iter(ringloader.Loader(mixed, batch_size=4, transform=resize))
    )
    tar_images, tar_labels = next(
        iter(ringloader.Loader(shards, batch_size=2, sampler=[3, 0], transform=resize))
    )
    folder_images, folder_labels = next(
        iter(ringloader.Loader(ds, batch_size=2, sampler=[16, 2], transform=resize))
    )
    assert torch.equal(images, torch.cat([tar_images, folder_images]))
    assert (
        labels.tolist() == tar_labels.tolist() + folder_labels.tolist() == [3, 0, 2, 0]
    )


def test_subset_errors_name_the_file(folder, tmp_path):
    bad = tmp_path / "class_x"
    bad.mkdir()
    (bad / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 broken")
    ds = datasets.ImageFolder(tmp_path, transform=eval_tf())
    good = datasets.ImageFolder(folder, transform=eval_tf())
    concat = ConcatDataset([Subset(good, [0, 1]), ds])
    with pytest.raises(ringloader.DecodeError, match="broken.jpg") as e:
        list(fused(concat, batch_size=3))
    assert e.value.index == 2


def test_subset_is_deterministic_and_resumes(folder):
    ds = datasets.ImageFolder(
        folder,
        transform=v1.Compose(
            [v1.RandomResizedCrop(48), v1.RandomHorizontalFlip(), v1.PILToTensor()]
        ),
    )
    train, _ = random_split(ds, [12, 6], generator=torch.Generator().manual_seed(2))
    sub = Subset(train, list(range(11, -1, -1)))

    def loader():
        return fused(sub, batch_size=3, shuffle=True, num_workers=2, generator=gen(7))

    def gen(seed):
        return torch.Generator().manual_seed(seed)

    first = [(x.clone(), y) for x, y in loader()]
    again = [(x.clone(), y) for x, y in loader()]
    assert all(
        torch.equal(a, b) and torch.equal(la, lb)
        for (a, la), (b, lb) in zip(first, again)
    )

    partial = loader()
    it = iter(partial)
    next(it), next(it)
    state = partial.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(first) - 2
    for (a, la), (b, lb) in zip(rest, first[2:]):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_a_replaced_subset_index_list_is_followed(folder):
    ds = datasets.ImageFolder(folder, transform=eval_tf())
    sub = Subset(ds, [0, 1, 2, 3])
    loader = fused(sub, batch_size=4)
    assert next(iter(loader))[1].tolist() == [0, 0, 0, 0]
    sub.indices = [17, 16]
    assert [y.tolist() for _, y in loader] == [[2, 2]]


def test_what_is_not_an_index_map_of_files_falls_back(folder):
    ds = datasets.ImageFolder(folder, transform=eval_tf())

    class Shifted(Subset):
        def __getitem__(self, i):
            return super().__getitem__(i + 1)

        def __getitems__(self, indices):
            return [self[i] for i in indices]

    class Custom(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return torch.zeros(3, 8, 8), i

    other = datasets.ImageFolder(folder, transform=v1.Compose([v1.Resize((8, 8))]))
    for dataset, why in [
        (Shifted(ds, [0, 1]), "Shifted overrides __getitem__"),
        (Subset(Custom(), [0, 1]), "Custom is not an ImageFolder-like dataset"),
        (ConcatDataset([ds, other]), "different transforms"),
        (Subset(ds, [0, 99]), "out of range"),
    ]:
        with pytest.warns(ringloader.FallbackWarning, match=why):
            loader = ringloader.DataLoader(dataset, batch_size=2)
        assert type(loader) is torch.utils.data.DataLoader, why


@pytest.mark.parametrize(
    "collate",
    [
        torch.utils.data.default_collate,
        torch.utils.data._utils.collate.default_collate,
    ],
)
def test_explicit_default_collate_is_fused(folder, collate):
    ds = datasets.ImageFolder(folder, transform=eval_tf())
    ours = fused(ds, batch_size=6, collate_fn=collate)
    assert ours.collate_fn is torch.utils.data.default_collate
    ref = torch.utils.data.DataLoader(ds, batch_size=6, collate_fn=collate)
    for (_, la), (_, lb) in zip(ours, ref):
        assert torch.equal(la, lb)
    # Another collate_fn is called on the samples, still fused.
    other = fused(ds, batch_size=6, collate_fn=lambda b: b)
    assert len(next(iter(other))) == 6


def _accelerator() -> bool:
    acc = getattr(torch, "accelerator", None)
    return acc.is_available() if acc is not None else torch.cuda.is_available()


@pytest.mark.skipif(_accelerator(), reason="needs a machine without an accelerator")
def test_pin_memory_without_accelerator_warns_once_as_torch(folder):
    ds = datasets.ImageFolder(folder, transform=eval_tf())
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        list(torch.utils.data.DataLoader(ds, batch_size=6, pin_memory=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = ringloader.DataLoader(ds, batch_size=6, pin_memory=True)
        assert isinstance(loader, ringloader.Loader) and loader.pin_memory
        for _ in range(2):  # two epochs, one warning
            for images, labels in loader:
                assert not images.is_pinned() and not labels.is_pinned()
    ours = [w for w in caught if "pin_memory" in str(w.message)]
    assert len(ours) == 1 and len(caught) == 1, [str(w.message) for w in caught]
    ref = [w for w in theirs if "pin_memory" in str(w.message)][0]
    assert ours[0].category is ref.category is UserWarning
    assert str(ours[0].message) == str(ref.message)
    assert ours[0].filename == __file__  # said where the loop is
    print(ours[0].category.__name__, str(ours[0].message))


def test_pin_memory_with_an_accelerator_pins_each_batch(folder, monkeypatch):
    """Where an accelerator is available, every batch (images and labels)
    goes through torch's pin_memory. Without one, the decision is forced
    and torch's pin_memory recorded instead of run (it needs a device)."""
    ds = datasets.ImageFolder(folder, transform=eval_tf())
    pinned = []
    if not _accelerator():
        monkeypatch.setattr(
            ringloader.dataloader, "_pinning", lambda asked: (asked, None)
        )

        def record(batch):
            pinned.append(batch)
            return batch

        monkeypatch.setattr(ringloader.loader, "pin_memory", record)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = fused(ds, batch_size=4, pin_memory=True)
        batches = list(loader)
    for images, labels in batches:
        assert _accelerator() or any(images is b[0] and labels is b[1] for b in pinned)
        if _accelerator():
            assert images.is_pinned() and labels.is_pinned()
    assert len(batches) == 5
    unpinned = list(fused(ds, batch_size=4))
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(batches, unpinned))


def test_dataloader_reads_ringloaders_own_datasets(tmp_path):
    """TarShards and FileList (local here; over HTTP and S3 in
    test_http_source.py and the README) go through the C pipeline, with
    the dataset's transform, and no FallbackWarning."""
    good = [jpeg_bytes("baseline", 60 + i, 80, seed=i) for i in range(5)]
    with tarfile.open(tmp_path / "s.tar", "w") as tf:
        for i, data in enumerate(good):
            for ext, blob in (("cls", str(i).encode()), ("jpg", data)):
                info = tarfile.TarInfo(f"k{i}.{ext}")
                info.size = len(blob)
                tf.addfile(info, io.BytesIO(blob))
    tf_ = v1.Compose([v1.Resize((32, 32)), v1.PILToTensor()])
    shards = TarShards(str(tmp_path / "s.tar"), progress=False, transform=tf_)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = ringloader.DataLoader(shards, batch_size=5)
        images, labels = next(iter(loader))
    assert isinstance(loader, ringloader.Loader)
    ref_images, ref_labels = next(iter(ringloader.Loader(shards, batch_size=5)))
    assert torch.equal(images, ref_images) and labels.tolist() == [0, 1, 2, 3, 4]
