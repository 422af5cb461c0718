"""torchvision's detection reference ssd preset's geometry (ToImage,
RandomZoomOut with the preset's fill dict, RandomIoUCrop,
RandomHorizontalFlip, then ToDtype, ConvertBoundingBoxFormat,
SanitizeBoundingBoxes, ToPureTensor), and RandomZoomOut with the flip
alone, over a wrapped CocoDetection under a Subset of the images with
annotations, run natively through ringloader.DataLoader (no
FallbackWarning): each sample's canvas is drawn in C first, the IoU crop
on it from the image's boxes moved by the canvas's offset, and its target
follows the same plan. Each item equals torchvision's v2 transforms
applied to the unaugmented wrapped item with the plan's parameters
(``_core.plan_window``: RandomZoomOut's padding with the fill dict's
entries, RandomIoUCrop's crop, the flip): the image within the JPEG
decoders' 1 LSB, boxes within 1e-3 px, labels, image_id and masks (padded
with the Mask entry) identical, so SanitizeBoundingBoxes drops the same
boxes. (The preset's RandomPhotometricDistort is left out here.)"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Subset
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader

from detection_data import coco_json, write_coco
from test_detect_frontdoor import Preset, collate_fn, dataset, wrapped_coco
from test_dropin import fused
from test_detect_ioucrop import KEYS, SEED, TAIL, annotated, check_items, each
from test_iou_crop_plan import iou_params

MEAN = (123.0, 117.0, 104.0)
FILL = {tv_tensors.Mask: 0, "others": list(MEAN)}


def ssd_preset(fill=FILL, iou=True):
    """DetectionPresetTrain(data_augmentation="ssd", use_v2=True) without
    its RandomPhotometricDistort (iou False: no RandomIoUCrop)."""
    head = [v2.ToImage(), v2.RandomZoomOut(fill=fill)]
    head += [v2.RandomIoUCrop()] if iou else []
    return Preset(head + [v2.RandomHorizontalFlip(p=0.5)] + TAIL)


def reference(image, target, p, fill=FILL):
    """torchvision's RandomZoomOut.transform with the plan's padding, then
    RandomIoUCrop.transform with its crop (the centre test on the padded
    boxes), then the flip, where the plan drew each."""
    zoom = v2.RandomZoomOut(fill=fill)
    if p["zoom_out"]:
        h, w = image.shape[-2:]
        left, top, cw, ch = p["zoom_canvas"]
        pad = dict(padding=[left, top, cw - w - left, ch - h - top])
        image, target = each(lambda v: zoom.transform(v, pad), image, target)
    if p["iou_crop"]:
        boxes = target["boxes"].as_subclass(torch.Tensor).numpy()
        params = iou_params(boxes, *p["iou_box"])
        crop = v2.RandomIoUCrop()
        image, target = each(lambda v: crop.transform(v, params), image, target)
    if p["flip"]:
        image, target = each(v2.functional.horizontal_flip, image, target)
    return image, target


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """The ssd-geometry dataset, the zoom-out-and-flip one and the same
    unaugmented, under one Subset."""
    root = tmp_path_factory.mktemp("zoomout")
    data = coco_json(40, SEED)
    ref = wrapped_coco(root / "r", data, v2.ToImage(), KEYS, lambda d: None)
    ids = annotated(ref)
    out = {"ref": Subset(ref, ids)}
    for name, iou in (("ssd", True), ("zoom", False)):
        ds = wrapped_coco(root / name, data, ssd_preset(iou=iou), KEYS, lambda d: None)
        out[name] = Subset(ds, ids)
    return out


@pytest.mark.parametrize("epoch", [0, 1])
def test_ssd_geometry_runs_natively(pairs, epoch):
    seen = check_items(pairs["ssd"], pairs["ref"].__getitem__, reference, epoch=epoch)
    assert seen["zoom"] == {True, False} and seen["crop"] == {True, False}
    assert seen["flip"] == {True, False} and seen["in_fill"] > 0
    assert seen["dropped"] > 0  # boxes whose centre the crop leaves out


def test_zoom_out_and_flip_run_natively(pairs):
    seen = check_items(
        pairs["zoom"], pairs["ref"].__getitem__, reference, spec_key="zoom_out"
    )
    assert seen["zoom"] == {True, False} and seen["flip"] == {True, False}
    assert seen["crop"] == {False}


def test_masks_pad_with_the_fill_dicts_mask_entry(coco_dir):
    """The Mask entry of the fill dict pads the masks (3 here), the image
    entry the pixels."""
    fill = {tv_tensors.Mask: 3, "others": 0}
    tf = ssd_preset(fill=fill, iou=False)
    tf.transforms.transforms[1].p = 1.0  # every sample zoomed out
    ds = dataset(coco_dir, tf, KEYS)
    loader = fused(ds, batch_size=2, collate_fn=collate_fn, seed=SEED)
    padded = 0
    for _, targets in loader:
        for t in targets:
            assert set(torch.unique(t["masks"]).tolist()) <= {0, 1, 3}
            padded += int((t["masks"] == 3).any())
    assert padded > 0


def test_a_mask_fill_the_targets_do_not_follow_falls_back(coco_dir):
    fill = {tv_tensors.Mask: 300, "others": 0}
    tf = v2.Compose([v2.ToImage(), v2.RandomZoomOut(fill=fill)])
    with pytest.warns(ringloader.FallbackWarning, match="RandomZoomOut's fill 300"):
        loader = ringloader.DataLoader(
            dataset(coco_dir, tf), batch_size=2, collate_fn=collate_fn
        )
    assert not isinstance(loader, ringloader.Loader)


@pytest.fixture(scope="module")
def coco_dir(tmp_path_factory):
    return write_coco(tmp_path_factory.mktemp("coco"), 12, seed=SEED)
