"""torchvision's detection reference ssdlite preset (ToImage, RandomIoUCrop,
RandomHorizontalFlip, ToDtype, ConvertBoundingBoxFormat,
SanitizeBoundingBoxes, ToPureTensor) over a wrapped CocoDetection under a
Subset of the images with annotations, run natively through
ringloader.DataLoader (no FallbackWarning): each sample's crop is drawn in
C from its boxes (the front door's boxes table, ``Sources.plan_boxes``),
and its target follows the same plan. Each item equals torchvision's v2
ops applied to the unaugmented wrapped item with the plan's parameters
(``_core.plan_window``: RandomIoUCrop's transform with that crop, then the
flip): the image within the JPEG decoders' 1 LSB, boxes within 1e-3 px,
labels, image_id and masks identical, so SanitizeBoundingBoxes drops the
same boxes. A composition (Subset, ConcatDataset) gathers its leaves'
boxes tables in its own order."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, SequentialSampler, Subset
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core

from detection_data import coco_json
from test_detect_frontdoor import (
    JPEG_TOL,
    Preset,
    collate_fn,
    same_target,
    wrapped_coco,
)
from test_dropin import fused

KEYS = ("boxes", "labels", "masks", "image_id")
SEED = 3
TAIL = [
    v2.ToDtype(torch.float, scale=True),
    v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
    v2.SanitizeBoundingBoxes(),
    v2.ToPureTensor(),
]


def ssdlite_preset():
    """DetectionPresetTrain(data_augmentation="ssdlite", use_v2=True,
    backend="tv_tensor")."""
    head = [v2.ToImage(), v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=0.5)]
    return Preset(head + TAIL)


def _nan_boxes(data):
    """The first annotated image's boxes all NaN (carried by torchvision,
    never in its draw): it is left whole."""
    first = data["annotations"][0]["image_id"]
    for a in data["annotations"]:
        if a["image_id"] == first:
            a["bbox"] = [float("nan")] * 4


def annotated(ds):
    """As the reference's train set: the images with annotations."""
    return [i for i, img_id in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=img_id)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The ssdlite dataset and the same unaugmented, under one Subset."""
    root = tmp_path_factory.mktemp("ioucrop")
    data = coco_json(40, SEED)
    ds = wrapped_coco(root / "a", data, ssdlite_preset(), KEYS, _nan_boxes)
    ref = wrapped_coco(root / "b", data, v2.ToImage(), KEYS, _nan_boxes)
    ids = annotated(ds)
    return Subset(ds, ids), Subset(ref, ids)


def each(fn, image, target):
    moved = {
        k: fn(v) if isinstance(v, (tv_tensors.BoundingBoxes, tv_tensors.Mask)) else v
        for k, v in target.items()
    }
    return fn(image), moved


def plan_rows(boxes):
    """The boxes a sample's draw reads: its finite XYXY boxes, float64."""
    rows = boxes.as_subclass(torch.Tensor).double().numpy()
    return np.ascontiguousarray(rows[np.isfinite(rows).all(axis=1)])


def reference(image, target, p):
    """torchvision's RandomIoUCrop.transform with the plan's crop (none:
    the pair as it is), then its flip where the plan drew one."""
    if p["iou_crop"]:
        x, y, w, h = (int(p[k]) for k in "xywh")
        boxes = target["boxes"]
        cx = 0.5 * (boxes[..., 0] + boxes[..., 2])
        cy = 0.5 * (boxes[..., 1] + boxes[..., 3])
        inside = (x < cx) & (cx < x + w) & (y < cy) & (cy < y + h)
        params = dict(top=y, left=x, height=h, width=w, is_within_crop_area=inside)
        crop = v2.RandomIoUCrop()
        image, target = each(lambda v: crop.transform(v, params), image, target)
    if p["flip"]:
        image, target = each(F.horizontal_flip, image, target)
    return image, target


def check_items(
    ds, ref_of, ref=reference, seed=SEED, epoch=0, spec_key="iou_crop", **kw
):
    """Every item of the loader over ds (epoch ``epoch``) against the
    reference ops ``ref`` on ``ref_of(k)`` (the unaugmented item its
    pixels are read from) with the plan its key k drew: what was seen
    (zoom-outs, crops, flips, samples reaching into the fill, boxes
    dropped, items whose boxes were all non-finite)."""
    sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
    loader = fused(ds, batch_sampler=sampler, collate_fn=collate_fn, seed=seed, **kw)
    spec = loader._plans[0].compiled.spec
    assert spec[spec_key] == 1
    seen = {"zoom": set(), "crop": set(), "flip": set(), "in_fill": 0}
    seen.update(dropped=0, whole=0)
    for _ in range(epoch + 1):
        items = [it for images, ts in loader for it in zip(images, ts)]
    for k, (image, target) in enumerate(items):
        want_image, want = ref_of(k)
        h, w = want_image.shape[-2:]
        rows = plan_rows(want["boxes"])
        p = _core.plan_window(spec, w, h, seed, epoch, k, 0, rows)
        want_image, want = ref(want_image, want, p)
        seen["zoom"].add(bool(p["zoom_out"]))
        seen["crop"].add(bool(p["iou_crop"]))
        seen["flip"].add(bool(p["flip"]))
        seen["in_fill"] += (p["vw"], p["vh"]) != tuple(image.shape[-1:-3:-1])
        if len(rows) == 0:
            assert not p["iou_crop"]
            assert p["zoom_out"] or image.shape[-2:] == (h, w)
            seen["whole"] += 1
        before = len(want["boxes"])
        for step in TAIL:
            want_image, want = step(want_image, want)
        seen["dropped"] += before - len(want["boxes"])
        assert type(image) is type(want_image) and image.shape == want_image.shape
        assert (image - want_image).abs().max().item() <= JPEG_TOL
        same_target(target, want)
    assert len(items) == len(ds)
    return seen


@pytest.mark.parametrize("epoch", [0, 1])
def test_ssdlite_preset_runs_natively(pair, epoch):
    ds, ref = pair
    seen = check_items(ds, ref.__getitem__, epoch=epoch)
    assert seen["crop"] == {True, False} and seen["flip"] == {True, False}
    assert seen["dropped"] > 0  # boxes whose centre the crop leaves out
    assert seen["whole"] == 1  # the image whose boxes are all NaN


def test_the_table_follows_the_rows_of_images_with_a_problem(tmp_path):
    """on_error="skip": an image whose annotation cannot be read is read as
    the next image without a problem, its crop drawn from that image's
    boxes (the boxes table follows the sources' rows)."""
    data = coco_json(16, SEED)
    ids = [k for k, im in enumerate(data["images"]) if k % 5 != 4]
    # an annotated image whose next one is annotated too
    j = next(j for j in range(1, len(ids)) if ids[j] + 1 in ids)
    bad_id = data["images"][ids[j]]["id"]

    def broken(data):
        bad = next(a for a in data["annotations"] if a["image_id"] == bad_id)
        bad["bbox"] = [1.0, 2.0, 3.0]  # not 4 numbers: torchvision fails on it

    ds = wrapped_coco(tmp_path / "a", data, ssdlite_preset(), KEYS, broken)
    ref = wrapped_coco(tmp_path / "b", data, v2.ToImage(), KEYS, lambda d: None)
    assert annotated(ds) == ids
    rows = list(ids)
    rows[j] = ids[j] + 1
    with pytest.warns(ringloader.DataWarning, match="cannot be read"):
        seen = check_items(Subset(ds, ids), lambda k: ref[rows[k]], on_error="skip")
    assert seen["crop"] == {True, False}


def test_an_iou_crop_the_compiler_does_not_fuse_falls_back(tmp_path):
    """A resize before the crop is not in the plan: the loader falls back."""
    tf = Preset([v2.ToImage(), v2.Resize(30), v2.RandomIoUCrop()] + TAIL)
    ds = wrapped_coco(tmp_path, coco_json(6, SEED), tf, KEYS, lambda d: None)
    with pytest.warns(ringloader.FallbackWarning, match="RandomIoUCrop"):
        loader = ringloader.DataLoader(
            Subset(ds, annotated(ds)), batch_size=2, collate_fn=collate_fn
        )
    assert not isinstance(loader, ringloader.Loader)


def test_a_composition_gathers_its_leaves_tables(tmp_path):
    """A Subset (out of order) of a ConcatDataset of two datasets with
    boxes tables: each sample's crop is drawn from its own leaf's rows."""
    from PIL import Image
    from test_iou_crop_plan import BoxedFiles, boxes_table

    from images import write_png_jpeg

    files = write_png_jpeg(tmp_path, [(60, 80), (90, 70), (45, 120), (77, 51)])
    transform = v2.Compose([v2.RandomIoUCrop(sampler_options=[0.0]), v2.PILToTensor()])
    sets_a, table_a = boxes_table(files[:3], seed=8)
    sets_b, table_b = boxes_table(files[1:], seed=30)
    a = BoxedFiles(files[:3], table_a, transform=transform)
    b = BoxedFiles(files[1:], table_b, transform=transform)
    order = [5, 0, 3, 1, 4, 2]  # into ConcatDataset([a, b])
    leaf = [
        (files[:3], sets_a, i) if i < 3 else (files[1:], sets_b, i - 3) for i in order
    ]
    ds = Subset(torch.utils.data.ConcatDataset([a, b]), order)
    with ringloader.Loader(ds, seed=SEED, batch_size=3) as ld:
        images = [im for batch, _ in ld for im in batch]
    spec = ld._plans[0].compiled.spec
    crops = 0
    for key, (image, (paths, sets, i)) in enumerate(zip(images, leaf)):
        pil = Image.open(paths[i]).convert("RGB")
        p = _core.plan_window(spec, pil.width, pil.height, SEED, 0, key, 0, sets[i])
        want = v2.PILToTensor()(pil)
        if p["iou_crop"]:
            want = F.crop(want, int(p["y"]), int(p["x"]), int(p["h"]), int(p["w"]))
            crops += 1
        assert image.shape == want.shape, (key, p)
        assert (image.int() - want.int()).abs().max().item() <= 1
    assert crops >= 4  # (the third file of each leaf has no boxes: whole)
