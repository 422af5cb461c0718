"""torchvision's segmentation reference with ``--dataset coco``, without
``--use-v2``, through ringloader.DataLoader, the DataLoader line alone
changed: an unwrapped CocoDetection (in the Subset of the images with
annotations, as the reference makes it) given the reference's Compose of
its category filter, its polygon-to-mask merge and its v1 preset
(``reference_pairs``). Read natively: eval batches equal torch's
DataLoader's (images within 1 LSB, int64 masks identical: each kept
annotation rasterized at the sampled pixels, its category's place in the
filter's list, 255 where two overlap); train items equal Pillow's ops on
the reference's own full-size mask in the preset's order with the
sample's plan. A compressed RLE, which the reference's merge cannot read,
is an error naming the annotation (skipped under on_error="skip"); an
images entry of another size than its image is refused naming it; merges
and filters that do otherwise fall back saying why."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch.utils.data import Subset
from torchvision import datasets

import ringloader

import reference_pairs as R
from detection_data import coco_json, write_coco
from test_dropin import fused
from test_segment_frontdoor import items, padded_collate, planned_items
from test_segment_pairs import (
    BASE,
    CROP,
    SEED,
    expected,
    same_batches,
    same_image,
    same_mask,
)


def _uncompressed(data):
    """``data`` with each compressed RLE as its counts list (what the
    reference's merge reads)."""
    from pycocotools import mask as coco_mask

    data = copy.deepcopy(data)
    for ann in data["annotations"]:
        seg = ann["segmentation"]
        if isinstance(seg, dict) and isinstance(seg["counts"], str):
            rle = {"size": seg["size"], "counts": seg["counts"].encode()}
            flat = coco_mask.decode(rle).ravel(order="F")
            bounds = np.flatnonzero(np.diff(np.concatenate([[0], flat, [2]])))
            runs = np.diff(np.concatenate([[0], bounds])).tolist()
            runs[-1] = flat.size - sum(runs[:-1])
            seg["counts"] = [int(v) for v in runs]
    return data


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    data = _uncompressed(coco_json(16, seed=SEED))
    return write_coco(tmp_path_factory.mktemp("coco"), 16, seed=SEED, data=data)


def dataset(coco, preset, categories=R.VOC_FROM_COCO, subset=True):
    images, ann = coco
    transforms = None if preset is None else R.coco_transforms(preset, categories)
    ds = datasets.CocoDetection(images, ann, transforms=transforms)
    if not subset:
        return ds
    keep = [k for k, i in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=i)]
    return Subset(ds, keep)


@pytest.mark.parametrize("collate", [items, padded_collate])
def test_eval_batches_equal_torchs(coco, collate):
    seen = same_batches(dataset(coco, R.eval_preset(BASE)), collate)
    if collate is items:  # classes, overlaps (255) and the background seen
        assert {0, 255} < seen and len(seen) > 4, seen


def test_train_items_follow_the_plan(coco):
    ds = dataset(coco, R.train_preset(BASE, CROP), subset=False)
    raw = dataset(coco, None, subset=False)
    merge = R.Compose(
        [R.FilterAndRemapCocoCategories(R.VOC_FROM_COCO), R.ConvertCocoPolysToMask()]
    )
    seen = {"flipped": 0, "padded": 0, "overlaps": 0}
    for spec, epoch, i, image, mask in planned_items(ds, 2, SEED):
        assert image.shape == (3, CROP, CROP) and mask.shape == (CROP, CROP)
        want_image, want_mask, p = expected(*merge(*raw[i]), spec, epoch, i)
        same_mask(mask, want_mask)
        same_image(image, want_image)
        seen["flipped"] += p["flip"]
        seen["padded"] += min(p["rw"], p["rh"]) < CROP
        seen["overlaps"] += bool((want_mask[: min(p["rh"], CROP)] == 255).any())
    assert all(seen.values()), seen


def test_a_compressed_rle_is_an_error_naming_it_or_skipped(tmp_path):
    data = coco_json(10, seed=3)
    bad = [
        a
        for a in data["annotations"]
        if isinstance(a["segmentation"], dict)
        and isinstance(a["segmentation"]["counts"], str)
        and a["category_id"] in R.VOC_FROM_COCO  # others are filtered out first
    ]
    assert bad
    ds = dataset(write_coco(tmp_path, 10, seed=3, data=data), R.eval_preset(BASE))
    with pytest.raises(ValueError, match=f"annotation {bad[0]['id']}: a compressed"):
        list(fused(ds, batch_size=2, collate_fn=items))
    with pytest.raises(ValueError, match="invalid literal"):  # torch's, too
        list(torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=items))
    with pytest.warns(ringloader.DataWarning, match="compressed RLE"):
        batches = list(fused(ds, batch_size=2, collate_fn=items, on_error="skip"))
    images = {a["image_id"] for a in bad}
    assert sum(len(b) for b in batches) == len(ds) - len(images)


def test_an_images_entry_of_another_size_is_refused_naming_it(tmp_path):
    data = _uncompressed(coco_json(4, seed=2))
    data["images"][1]["height"] += 3
    ds = dataset(write_coco(tmp_path, 4, seed=2, data=data), R.eval_preset(BASE))
    ds = ds.dataset
    # the file is written at the size given; the entry is changed after
    entry = data["images"][1]
    entry["height"] -= 3
    ds.coco.imgs[entry["id"]]["height"] += 3
    name = entry["file_name"]
    with pytest.raises(ValueError, match=f"{name}: the image is .* but .* gives"):
        list(fused(ds, batch_size=4, collate_fn=items))


def _no_overlaps(self, image, anno):
    image, mask = R.ConvertCocoPolysToMask()(image, anno[:1])
    return image, mask


SkipsOverlaps = type("ConvertCocoPolysToMask", (), {"__call__": _no_overlaps})


def _keep_small_ids(self, image, anno):
    """Keeps ids under 10 as well: only an unlisted small id shows it."""
    kept = [
        a for a in anno if a["category_id"] in self.categories or a["category_id"] < 10
    ]
    kept = copy.deepcopy(kept)
    for a in kept:
        a["category_id"] = (self.categories + [a["category_id"]]).index(
            a["category_id"]
        )
    return image, kept


KeepsSmallIds = type(
    "FilterAndRemapCocoCategories",
    (R.FilterAndRemapCocoCategories,),
    {"__call__": _keep_small_ids},
)


@pytest.mark.parametrize(
    "transforms, why",
    [
        (
            R.Compose(
                [R.FilterAndRemapCocoCategories(R.VOC_FROM_COCO), SkipsOverlaps()]
                + R.eval_preset(BASE).transforms.transforms
            ),
            "ConvertCocoPolysToMask does not do what",
        ),
        (
            R.Compose([R.ConvertCocoPolysToMask(), R.eval_preset(BASE)]),
            "begin with ConvertCocoPolysToMask, RandomResize: natively",
        ),
        (
            R.Compose(
                [R.FilterAndRemapCocoCategories([1, 300]), R.ConvertCocoPolysToMask()]
                + [R.eval_preset(BASE)]
            ),
            None,  # remapped: 0 and 1, read natively
        ),
        (
            R.Compose(
                [
                    R.FilterAndRemapCocoCategories([1, 300], remap=False),
                    R.ConvertCocoPolysToMask(),
                    R.eval_preset(BASE),
                ]
            ),
            "keeps values past 0..255",
        ),
        (R.eval_preset(BASE), "not wrapped by wrap_dataset_for_transforms_v2"),
        (
            R.Compose(
                [KeepsSmallIds(R.VOC_FROM_COCO), R.ConvertCocoPolysToMask()]
                + [R.eval_preset(BASE)]
            ),
            "FilterAndRemapCocoCategories does not do what",
        ),
    ],
)
def test_other_coco_transforms_fall_back_saying_why(coco, transforms, why):
    images, ann = coco
    ds = datasets.CocoDetection(images, ann, transforms=transforms)
    if why is None:
        fused(ds, batch_size=2, collate_fn=items)
        return
    with pytest.warns(ringloader.FallbackWarning, match=why):
        ringloader.DataLoader(ds, batch_size=2, collate_fn=items)


def _odd_annotations(data):
    """``data`` with annotations the tables refuse, most of which the
    reference never reads: a dropped category (8) with an empty or a
    missing segmentation, kept ones with a bad bbox, a bad area, or a
    second polygon of 4 numbers; and image 3's kept annotation without a
    segmentation, which the reference's merge fails on."""
    data = copy.deepcopy(data)
    by_image = {}
    for a in data["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    images = [i["id"] for i in data["images"]]
    odd = [
        (0, {"category_id": 8, "segmentation": []}),
        (1, {"category_id": 8}),
        (2, {"category_id": 5, "bbox": None}),
        (5, {"category_id": 2, "area": "x"}),
        (6, {"category_id": 3, "segmentation": [[2, 2, 9, 2, 9, 9], [1, 1, 3, 3]]}),
        (3, {"category_id": 1}),
    ]
    next_id = 10**6
    for k, fields in odd:
        ann = {
            "id": next_id,
            "image_id": images[k],
            "bbox": [1, 1, 4, 4],
            "area": 16.0,
            "iscrowd": 0,
            "segmentation": [[1, 1, 6, 1, 6, 6, 1, 6]],
        }
        ann.update(fields)
        if "segmentation" not in fields and fields.get("category_id") in (8, 1):
            del ann["segmentation"]
        data["annotations"].append(ann)
        next_id += 1
    return data


def test_annotations_the_reference_never_reads_do_not_fail_their_image(tmp_path):
    """Equal to torch's DataLoader where the reference runs; the image whose
    kept annotation has no segmentation raises under both, named by
    ringloader, and is left out under on_error="skip"."""
    data = _odd_annotations(_uncompressed(coco_json(10, seed=4)))
    images, ann = write_coco(tmp_path, 10, seed=4, data=data)
    ds = datasets.CocoDetection(
        images, ann, transforms=R.coco_transforms(R.eval_preset(BASE))
    )
    bad = 3
    good = Subset(ds, [k for k in range(len(ds)) if k != bad])
    ours = list(fused(good, batch_size=3, collate_fn=items))
    theirs = list(torch.utils.data.DataLoader(good, batch_size=3, collate_fn=items))
    for got, want in zip(ours, theirs):
        for (image, mask), (ref_image, ref_mask) in zip(got, want):
            same_image(image, ref_image)
            same_mask(mask, ref_mask)
    only = Subset(ds, [bad])
    with pytest.raises(KeyError):
        list(torch.utils.data.DataLoader(only, batch_size=1, collate_fn=items))
    name = data["images"][bad]["file_name"]
    with pytest.raises(ValueError, match=f"{name} .*raised KeyError"):
        list(fused(only, batch_size=1, collate_fn=items))
    with pytest.warns(ringloader.DataWarning, match="raised KeyError"):
        kept = list(fused(ds, batch_size=10, collate_fn=items, on_error="skip"))
    assert sum(len(b) for b in kept) == len(ds) - 1
