"""A detection or segmentation dataset whose transforms the training
script replaces after the loader was made (a schedule of sizes, an
augmentation switched off for the last epochs), as torch's DataLoader
follows it: an epoch whose transforms ringloader does not run natively is
read by torch's DataLoader, with a FallbackWarning naming the step, in the
loader's own order (shuffled, sharded over ranks), each item what indexing
the dataset gives; once the transforms are native again the next epoch is
read natively, equal to a loader that never left them. Replaced within an
epoch, the epoch goes on as it began."""

from __future__ import annotations

import warnings

import pytest
import torch
from torchvision import datasets
from torchvision.transforms import v2

import ringloader

import reference_pairs as R
from detection_data import write_coco, write_voc
from test_segment_pairs import Jitter

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)

NATIVE = v2.Compose([v2.ToImage(), v2.Resize((24, 20)), v2.RandomHorizontalFlip()])
# A step ringloader does not follow on the targets (and no draws: each
# item is what indexing the dataset gives again).
OTHER = v2.Compose([v2.ToImage(), v2.Resize((24, 20)), v2.Lambda(lambda x: x)])
KW = dict(batch_size=3, num_workers=2, seed=7)


def collate_fn(batch):
    return tuple(zip(*batch))


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return write_coco(tmp_path_factory.mktemp("coco"), 14, seed=3)


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return write_voc(tmp_path_factory.mktemp("voc"), 10, seed=3)


def wrapped_coco(coco, transforms):
    ds = datasets.CocoDetection(*coco, transforms=transforms)
    return datasets.wrap_dataset_for_transforms_v2(
        ds, target_keys=["boxes", "labels", "image_id"]
    )


def epoch(loader, fallback):
    """One epoch's batches, and that it warned (FallbackWarning) exactly
    where ``fallback`` says it should, naming the replaced step."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        batches = list(loader)
    said = [w for w in seen if issubclass(w.category, ringloader.FallbackWarning)]
    if fallback:
        assert len(said) == 1, [str(w.message) for w in said]
        message = str(said[0].message)
        assert "this epoch is read by torch.utils.data.DataLoader" in message
        assert "Lambda" in message or "Jitter" in message, message
        assert said[0].filename == __file__  # the user's loop
    else:
        assert not said, [str(w.message) for w in said]
    return batches


def ids(batches):
    return [int(t["image_id"]) for _, targets in batches for t in targets]


def same(ours, ref):
    """Items (or batches) equal: tensors of one type, dtype and value."""
    assert type(ours) is type(ref)
    if isinstance(ref, torch.Tensor):
        assert ours.dtype == ref.dtype and torch.equal(ours, ref)
    elif isinstance(ref, dict):
        assert ours.keys() == ref.keys()
        for key in ref:
            same(ours[key], ref[key])
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            same(a, b)
    else:
        assert ours == ref


def as_indexed(batches, ds):
    """Segmentation batches (in order) are what indexing ``ds`` gives."""
    pairs = [pair for images, masks in batches for pair in zip(images, masks)]
    same(pairs, [ds[i] for i in range(len(ds))])


@pytest.mark.parametrize(
    "shard", [{}, dict(distributed=True, rank=1, world_size=2)], ids=["one", "rank-1"]
)
def test_a_detection_epoch_with_other_transforms_is_torchs_in_the_same_order(
    coco, shard
):
    kw = dict(KW, shuffle=True, collate_fn=collate_fn, **shard)
    ds = wrapped_coco(coco, NATIVE)
    loader = ringloader.DataLoader(ds, **kw)
    assert isinstance(loader, ringloader.DataLoader)
    never = ringloader.DataLoader(wrapped_coco(coco, NATIVE), **kw)
    want = [epoch(never, fallback=False) for _ in range(3)]

    same(epoch(loader, fallback=False), want[0])
    ds.transforms = OTHER
    got = epoch(loader, fallback=True)
    assert ids(got) == ids(want[1])  # the loader's order and shard
    by_id = {int(ds[i][1]["image_id"]): i for i in range(len(ds))}
    for images, targets in got:
        items = [ds[by_id[int(t["image_id"])]] for t in targets]
        same((images, targets), collate_fn(items))  # what indexing gives
    ds.transforms = NATIVE
    same(epoch(loader, fallback=False), want[2])


def test_a_segmentation_epoch_with_other_transforms_is_torchs(voc):
    def make(transforms):
        ds = datasets.VOCSegmentation(voc, "2012", "train", transforms=transforms)
        return datasets.wrap_dataset_for_transforms_v2(ds)

    ds = make(NATIVE)
    loader = ringloader.DataLoader(ds, collate_fn=collate_fn, **KW)
    never = ringloader.DataLoader(make(NATIVE), collate_fn=collate_fn, **KW)
    want = [epoch(never, fallback=False) for _ in range(3)]
    same(epoch(loader, fallback=False), want[0])
    ds.transforms = OTHER
    as_indexed(epoch(loader, fallback=True), ds)
    ds.transforms = NATIVE
    same(epoch(loader, fallback=False), want[2])


def test_the_segmentation_references_preset_replaced(voc):
    """The reference's own v1 classes on an unwrapped VOCSegmentation, its
    eval preset replaced by one with a step of the user's own."""
    preset = R.eval_preset(24)
    other = R.Preset([*preset.transforms.transforms, Jitter()])
    ds = datasets.VOCSegmentation(voc, "2012", "train", transforms=preset)
    loader = ringloader.DataLoader(
        ds, batch_size=2, num_workers=2, collate_fn=collate_fn
    )
    assert isinstance(loader, ringloader.DataLoader)
    first = epoch(loader, fallback=False)
    ds.transforms = other
    as_indexed(epoch(loader, fallback=True), ds)
    ds.transforms = preset
    same(epoch(loader, fallback=False), first)  # the eval preset draws nothing


def test_transforms_replaced_within_an_epoch_apply_from_the_next(coco):
    ds = wrapped_coco(coco, NATIVE)
    loader = ringloader.DataLoader(ds, collate_fn=collate_fn, **KW)
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        for images, _ in loader:
            seen += len(images)
            ds.transforms = OTHER  # the epoch goes on as it began
    assert seen == len(ds)
    got = epoch(loader, fallback=True)
    assert sum(len(images) for images, _ in got) == len(ds)
