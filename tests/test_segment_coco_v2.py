"""torchvision's segmentation reference with ``--dataset coco --use-v2``
through ringloader.DataLoader, the DataLoader line alone changed: a
CocoDetection given the reference's Compose of its own
``CocoDetectionToVOCSegmentation`` (``reference_extras``) and a v2 preset,
wrapped by ``wrap_dataset_for_transforms_v2(target_keys={"masks",
"labels"})``, in the Subset of the images with annotations. Read natively
with every backend: eval batches equal torch's DataLoader's (images within
1 LSB, masks identical, compressed RLEs included); train items equal
torchvision's ops on the reference's own merged mask with the sample's
plan. Other target keys and converters that do otherwise fall back saying
why."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Subset
from torchvision import datasets

import ringloader

import reference_pairs as R
import test_segment_padifsmaller as P
from detection_data import coco_json, write_coco
from test_segment_pairs_coco import _odd_annotations
from reference_extras import CocoDetectionToVOCSegmentation
from test_dropin import fused
from test_segment_frontdoor import (
    eval_preset,
    items,
    padded_collate,
    planned_items,
    same_image,
    same_mask,
)

KEYS = {"masks", "labels"}


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    data = coco_json(16, seed=P.SEED)
    return write_coco(tmp_path_factory.mktemp("coco"), 16, seed=P.SEED, data=data)


def dataset(coco, preset, keys=KEYS, first=None):
    images, ann = coco
    steps = [first or CocoDetectionToVOCSegmentation(), preset]
    transforms = None if preset is None else R.Compose(steps)
    ds = datasets.CocoDetection(images, ann, transforms=transforms)
    wrapped = datasets.wrap_dataset_for_transforms_v2(ds, target_keys=keys)
    keep = [k for k, i in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=i)]
    return Subset(wrapped, keep)


@pytest.mark.parametrize("collate", [items, padded_collate])
@pytest.mark.parametrize("backend", ["tv_tensor", "tensor"])
def test_eval_batches_equal_torchs(coco, backend, collate):
    ds = dataset(coco, eval_preset(backend))
    ours = list(fused(ds, batch_size=4, collate_fn=collate))
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=collate))
    assert len(ours) == len(theirs) == 4
    seen = set()
    for got, want in zip(ours, theirs):
        pairs = [got] if collate is padded_collate else got
        wanted = [want] if collate is padded_collate else want
        for (image, mask), (ref_image, ref_mask) in zip(pairs, wanted):
            same_image(image, ref_image)
            same_mask(mask, ref_mask)
            assert mask.shape[-2:] == image.shape[-2:] and mask.dim() == image.dim() - 1
            seen.update(mask.unique().tolist())
    assert {0, 255} < seen and len(seen) > 4, seen


@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_train_items_follow_the_plan(coco, backend):
    ds = dataset(coco, P.reference_train(backend))
    raw = dataset(coco, None)
    merge = CocoDetectionToVOCSegmentation()
    padded = 0
    for spec, epoch, i, image, mask in planned_items(ds, 2, P.SEED):
        assert image.shape == (3, P.CROP, P.CROP) and mask.shape == (P.CROP, P.CROP)
        raw_image, raw_mask = merge(*raw[i])
        want = P.expected(raw_image, raw_mask, spec, epoch, i, True)
        same_mask(mask, want[1])
        same_image(image, want[0])
        padded += bool((mask == 255).all(dim=-1).any())
    assert padded


def _no_overlaps(self, image, target):
    image, mask = CocoDetectionToVOCSegmentation()(image, target)
    mask[mask == 255] = 0
    return image, mask


SkipsOverlaps = type(
    "CocoDetectionToVOCSegmentation",
    (CocoDetectionToVOCSegmentation,),
    {"forward": _no_overlaps},
)


def _blank_masks(self, image, target):
    image, mask = R.Compose.__call__(self, image, target)
    return image, mask * 0


# Holds its steps as the reference's Compose does, but blanks the masks.
Blanks = type("Compose", (R.Compose,), {"__call__": _blank_masks})


def test_an_outer_compose_that_does_more_falls_back(coco):
    images, ann = coco
    steps = [CocoDetectionToVOCSegmentation(), eval_preset("tv_tensor")]
    ds = datasets.CocoDetection(images, ann, transforms=Blanks(steps))
    ds = datasets.wrap_dataset_for_transforms_v2(ds, target_keys=KEYS)
    with pytest.warns(ringloader.FallbackWarning, match="called whole, they do not"):
        ringloader.DataLoader(ds, batch_size=2, collate_fn=items)


@pytest.mark.parametrize(
    "kw, why",
    [
        (dict(keys={"masks", "boxes"}), "lack masks or labels"),
        (dict(first=SkipsOverlaps()), "does not do what the segmentation reference"),
        (
            dict(
                first=R.Compose(
                    [R.RandomHorizontalFlip(0.5), CocoDetectionToVOCSegmentation()]
                )
            ),
            "do not begin with CocoDetectionTo",
        ),
    ],
)
def test_other_targets_and_converters_fall_back_saying_why(coco, kw, why):
    ds = dataset(coco, eval_preset("tv_tensor"), **kw)
    with pytest.warns(ringloader.FallbackWarning, match=why):
        ringloader.DataLoader(ds, batch_size=2, collate_fn=items)


def test_annotations_the_wrapper_never_reads_do_not_fail_their_image(tmp_path):
    """Images with annotations the tables refuse (_odd_annotations) are made
    by the v2 wrapper's own target function and the user's converter: each
    equal to torch's DataLoader's where torch reads it, an error naming the
    image where torch raises."""
    data = _odd_annotations(coco_json(10, seed=4))
    images, ann = write_coco(tmp_path, 10, seed=4, data=data)
    steps = [CocoDetectionToVOCSegmentation(), eval_preset("tv_tensor")]
    ds = datasets.CocoDetection(images, ann, transforms=R.Compose(steps))
    ds = datasets.wrap_dataset_for_transforms_v2(ds, target_keys=KEYS)
    raised = 0
    for k in range(len(ds)):
        one = Subset(ds, [k])
        try:
            ((want,),) = list(torch.utils.data.DataLoader(one, collate_fn=items))
        except Exception:  # noqa: BLE001 - whatever torch's raises
            raised += 1
            name = data["images"][k]["file_name"]
            with pytest.raises(ValueError, match=f"{name} .*making its mask raised"):
                list(fused(one, collate_fn=items))
            continue
        ((got,),) = list(fused(one, collate_fn=items))
        same_image(got[0], want[0])
        same_mask(got[1], want[1])
    # image 3 (its kept annotation has no segmentation) raises, and any
    # other whose lists torch's wrapper misaligns; the rest are read
    assert 0 < raised < len(ds) // 2
