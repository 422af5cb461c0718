"""Bad annotations through ringloader.DataLoader over torchvision's
detection reference (a CocoDetection wrapped for transforms v2, its eval
preset, ``collate_fn=tuple(zip(*batch))``): what torchvision passes through
gives the items torch's DataLoader gives; what it fails on (or would get
silently wrong) raises, at the batch that reads that image, a ValueError
naming the image and the annotation, after a DataWarning when the loader
is made; with ``on_error="skip"`` the next image is read in its place and
every other item is torch's. An image that does not decode, under
``on_error="skip"`` with a random flip, is replaced with its target and
flipped with it."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch
from detection_data import coco_json, write_coco
from test_detect_frontdoor import (
    JPEG_TOL,
    collate_fn,
    eval_preset,
    hflip_preset,
    same_image,
    same_target,
)
from test_dropin import fused
from torch.utils.data import BatchSampler, SequentialSampler, Subset
from torchvision import datasets
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)

KEYS = ["boxes", "labels", "masks", "image_id"]


def _annotated(data, k=0):
    """The k-th image with a polygon annotation, and that annotation."""
    anns = [a for a in data["annotations"] if isinstance(a["segmentation"], list)]
    ann = sorted(anns, key=lambda a: a["image_id"])[k]
    image = next(e for e in data["images"] if e["id"] == ann["image_id"])
    return image, ann


def sanitizing():
    """The eval preset with the boxes sanitized, as the train presets end."""
    return v2.Compose(
        [
            v2.ToImage(),
            v2.ToDtype(torch.float, scale=True),
            v2.SanitizeBoundingBoxes(),
            v2.ToPureTensor(),
        ]
    )


def wrapped(tmp_path, change, keys=KEYS, n=10, transforms=None):
    """The wrapped dataset, its json as ``change`` leaves it, and the json
    as it was (to find what was changed)."""
    data = coco_json(n, seed=11)
    root, ann = write_coco(tmp_path, n, seed=11, data=data)
    given = copy.deepcopy(data)
    change(data)
    with open(ann, "w") as f:
        json.dump(data, f)
    transforms = eval_preset() if transforms is None else transforms
    ds = datasets.CocoDetection(root, ann, transforms=transforms)
    return datasets.wrap_dataset_for_transforms_v2(ds, target_keys=keys), given


def batches(ds, loader=None, **kw):
    sampler = BatchSampler(SequentialSampler(ds), 2, drop_last=False)
    kw = dict(batch_sampler=sampler, collate_fn=collate_fn, **kw)
    if loader is None:
        return fused(ds, **kw)
    return loader(ds, **kw)


def same_items(ours, theirs):
    for (images, targets), (ref_images, ref_targets) in zip(ours, theirs):
        for x, y in zip(images, ref_images):
            same_image(x, y)
        for t, r in zip(targets, ref_targets):
            same_target(t, r)


def _box_outside(data):
    image, ann = _annotated(data)
    ann["bbox"] = [-40.0, image["height"] - 3.0, image["width"] + 90.0, 30.0]
    image, ann = _annotated(data, 1)
    ann["bbox"] = [image["width"] + 5.0, 2.0, 10.0, 10.0]  # wholly outside


def _nan_box(data):
    _annotated(data)[1]["bbox"] = [1.0, float("nan"), 4.0, float("inf")]


def _unknown_category(data):
    _annotated(data)[1]["category_id"] = 999


def _self_crossing(data):
    image, ann = _annotated(data)
    w, h = image["width"], image["height"]
    ann["segmentation"] = [[0, 0, w - 1, h - 1, w - 1, 0, 0, h - 1]]  # a bow tie


def _unused_segmentation(data):
    _annotated(data)[1]["segmentation"] = [[1, 1, 5, 5]]


PASSED = {
    "box_outside": (_box_outside, KEYS),
    "nan_box": (_nan_box, KEYS),
    "unknown_category": (_unknown_category, KEYS),
    "self_crossing_polygon": (_self_crossing, KEYS),
    "unused_segmentation": (_unused_segmentation, ["boxes", "labels", "image_id"]),
}


@pytest.mark.parametrize("case", sorted(PASSED))
def test_what_torchvision_passes_through_gives_torchs_items(tmp_path, case):
    change, keys = PASSED[case]
    ds, _ = wrapped(tmp_path, change, keys, transforms=sanitizing())
    # as the reference's train set: the images without annotations removed
    ds = Subset(ds, [i for i, x in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=x)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.DataWarning)
        ours = list(batches(ds))
    theirs = list(batches(ds, torch.utils.data.DataLoader))
    assert len(ours) == len(theirs) == 4
    same_items(ours, theirs)


def _polygon_of_2_points(data):
    _annotated(data, 1)[1]["segmentation"] = [[1, 1, 5, 5]]


def _rle_of_another_size(data):
    image, ann = _annotated(data, 1)
    h, w = image["height"] + 3, image["width"]
    ann["segmentation"] = {"size": [h, w], "counts": [h * w]}


def _bbox_of_3(data):
    _annotated(data, 1)[1]["bbox"] = [1, 2, 3]


BAD = {
    "polygon_of_2_points": (_polygon_of_2_points, "polygon 0 has 4 numbers"),
    "rle_of_another_size": (_rle_of_another_size, "RLE size"),
    "bbox_of_3": (_bbox_of_3, "bbox [1, 2, 3] is not 4 numbers"),
}


def _bad_image(ds, data):
    image, ann = _annotated(data, 1)
    return ds.ids.index(image["id"]), image, ann


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_annotation_raises_at_its_batch_naming_it(tmp_path, case):
    change, what = BAD[case]
    ds, data = wrapped(tmp_path, change)
    row, image, ann = _bad_image(ds, data)
    with pytest.warns(ringloader.DataWarning, match="1 image.* cannot be read"):
        loader = batches(ds)
    # torch's DataLoader fails there too, each case its own way
    with pytest.raises((TypeError, RuntimeError, ValueError)):
        list(batches(ds, torch.utils.data.DataLoader))
    got = []
    with pytest.raises(ValueError) as e:
        for batch in loader:
            got.append(batch)
    assert len(got) == row // 2  # the batches before it were delivered
    text = str(e.value)
    assert f"image id {image['id']} ({image['file_name']})" in text
    assert f"annotation id {ann['id']}: {what}" in text
    reference = torch.utils.data.DataLoader(
        torch.utils.data.Subset(ds, range(2 * len(got))),
        batch_size=2,
        collate_fn=collate_fn,
    )
    same_items(got, list(reference))


def test_under_a_subset_the_bad_image_raises_where_the_subset_reads_it(tmp_path):
    """The reference's Subset: its positions are not the dataset's rows. A
    Subset without the bad image reads as torch's DataLoader does; one
    that moves it raises at the batch holding it, naming it."""
    ds, data = wrapped(tmp_path, _bbox_of_3)
    row, image, ann = _bad_image(ds, data)
    without = Subset(ds, [i for i in range(len(ds)) if i != row])
    with pytest.warns(ringloader.DataWarning):
        ours = list(batches(without))
    same_items(ours, list(batches(without, torch.utils.data.DataLoader)))
    moved = Subset(ds, [row] + [i for i in range(len(ds)) if i != row])
    loader = batches(moved)  # (the dataset warned once, above)
    with pytest.raises(ValueError, match=f"annotation id {ann['id']}: bbox"):
        next(iter(loader))


@pytest.mark.parametrize("case", sorted(BAD))
def test_skip_reads_the_next_image_in_its_place(tmp_path, case):
    change, _ = BAD[case]
    ds, data = wrapped(tmp_path, change)
    row, _, _ = _bad_image(ds, data)
    with pytest.warns(ringloader.DataWarning):
        ours = [item for b in batches(ds, on_error="skip") for item in zip(*b)]
    assert len(ours) == len(ds)
    for i, (image, target) in enumerate(ours):
        ref_image, ref_target = ds[i + 1 if i == row else i]
        same_image(image, ref_image)
        same_target(target, ref_target)


def test_skip_reads_the_next_readable_image_wrapping_to_the_first(tmp_path):
    def all_bad(data):
        for a in data["annotations"]:
            a["bbox"] = None

    ds, data = wrapped(tmp_path, all_bad)
    with pytest.warns(ringloader.DataWarning):
        loader = batches(ds, on_error="skip")
    # every image with an annotation is bad; the others are read as they are
    empty = [i for i, img in enumerate(ds.ids) if not ds.coco.getAnnIds(imgIds=img)]
    assert empty
    items = [item for b in loader for item in zip(*b)]
    assert [t["image_id"] for _, t in items] == [ds.ids[empty[0]]] * (empty[0] + 1) + [
        ds.ids[next((e for e in empty if e >= i), empty[0])]
        for i in range(empty[0] + 1, len(ds))
    ]


def test_a_replaced_image_and_its_target_are_flipped_together(tmp_path):
    """on_error="skip" with the hflip preset: the core replaces the images
    that do not decode, each replacement drawing its own flip; its target
    is flipped exactly when its pixels are."""
    keys = ["boxes", "labels", "masks", "image_id"]
    root, ann = write_coco(tmp_path, 24, seed=11)
    ds = datasets.wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(root, ann, transforms=hflip_preset()),
        target_keys=keys,
    )
    ref = datasets.wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(
            root,
            ann,
            transforms=v2.Compose([v2.ToImage(), v2.ToDtype(torch.float, scale=True)]),
        ),
        target_keys=keys,
    )
    has = [i for i, x in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=x)]
    broken = has[1::3]  # each replaced by the next image, which is kept
    for i in broken:
        with open(f"{root}/{ds.coco.imgs[ds.ids[i]]['file_name']}", "wb") as f:
            f.write(b"not an image")
    ds, ref = Subset(ds, has), Subset(ref, has)
    by_id = {ref.dataset.ids[i]: k for k, i in enumerate(has)}
    loader = fused(ds, batch_size=4, collate_fn=collate_fn, on_error="skip", seed=2)
    with pytest.warns(ringloader.DataWarning, match="skipped"):
        items = [item for b in loader for item in zip(*b)]
    assert len(items) == len(ds)
    flips = []
    for image, target in items:
        want_image, want = ref[by_id[target["image_id"]]]
        flip = F.horizontal_flip(want_image)
        flipped = (image - flip).abs().max() < (image - want_image).abs().max()
        if flipped:
            want_image = flip
            want = {
                k: F.horizontal_flip(v) if k in ("boxes", "masks") else v
                for k, v in want.items()
            }
        want_image, want = v2.SanitizeBoundingBoxes()(want_image, want)
        assert (image - want_image).abs().max().item() <= JPEG_TOL
        same_target(target, v2.ToPureTensor()(want_image, want)[1])
        flips.append(bool(flipped))
    assert loader.stats()["skipped"] == len(broken) >= 4
    assert set(flips) == {True, False}
