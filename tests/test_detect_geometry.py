"""torchvision's detection presets whose geometry the C plan fuses, run
natively through ringloader.DataLoader (no FallbackWarning): the reference's
multiscale train preset (ToImage, RandomShortestSize(480..800 by 32,
max_size=1333), RandomHorizontalFlip, ToDtype, ConvertBoundingBoxFormat,
SanitizeBoundingBoxes, ToPureTensor), its lsj preset (ScaleJitter, a
RandomCrop padded where smaller with the mean, masks with 0, the flip and
the same tail) and a RandomResize, RandomCrop (pad_if_needed, the masks'
fill from a fill dict) and flip chain. Each
item equals torchvision's v2 functional ops applied to the unaugmented
wrapped item with the parameters the plan drew (``_core.plan_window``):
the image within the resize's bound (1 LSB, as test_shortest_size, beside
the JPEG decoders' 1 LSB), boxes within 1e-3 px (int64 boxes truncated as
torchvision truncates them), labels, image_id and masks identical, so
SanitizeBoundingBoxes drops the same boxes."""

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
    Preset,
    coco,
    collate_fn,
    dataset,
    same_target,
    wrapped_coco,
)
from test_dropin import fused

__all__ = ["coco"]  # the fixture, shared

KEYS = ("boxes", "labels", "masks", "image_id")
MULTISCALE = tuple(range(480, 801, 32))
TAIL = [
    v2.ToDtype(torch.float, scale=True),
    v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
    v2.SanitizeBoundingBoxes(),
    v2.ToPureTensor(),
]
RESIZE_TOL = 2 / 255 + 1e-6  # the resize's 1 LSB over the decoders' 1 LSB


def multiscale_preset():
    """DetectionPresetTrain(data_augmentation="multiscale", use_v2=True,
    backend="tv_tensor")."""
    return Preset(
        [
            v2.ToImage(),
            v2.RandomShortestSize(min_size=MULTISCALE, max_size=1333, antialias=True),
            v2.RandomHorizontalFlip(p=0.5),
        ]
        + TAIL
    )


def cropped_preset(fill):
    return Preset(
        [
            v2.ToImage(),
            v2.RandomResize(20, 60),
            v2.RandomCrop(40, pad_if_needed=True, fill=fill),
            v2.RandomHorizontalFlip(p=0.5),
        ]
        + TAIL
    )


def each(fn, image, target):
    """fn on the image and on the target's boxes and masks, as a v2
    transform dispatches."""
    moved = {
        k: fn(v) if isinstance(v, (tv_tensors.BoundingBoxes, tv_tensors.Mask)) else v
        for k, v in target.items()
    }
    return fn(image), moved


def multiscale_reference(image, target, p, spec):
    size = [p["vh"], p["vw"]]
    return each(lambda x: F.resize(x, size, antialias=True), image, target)


def cropped_reference(fill, crop_size=40, seen=None):
    """RandomResize or ScaleJitter to the plan's size, then RandomCrop at
    the plan's window; seen, if given, collects each resized size."""

    def apply(image, target, p, spec):
        size = [p["rh"], p["rw"]]
        if seen is not None:
            seen.append(tuple(size))
        image, target = each(lambda x: F.resize(x, size, antialias=True), image, target)
        crop = v2.RandomCrop(crop_size, pad_if_needed=True, fill=fill)
        params = crop.make_params([image])
        params["top"] = p["wy"] + params["padding"][1]
        params["left"] = p["wx"] + params["padding"][0]
        return each(lambda x: crop.transform(x, params), image, target)

    return apply


def same_pixels(ours, ref):
    assert type(ours) is type(ref)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert (ours - ref).abs().max().item() <= RESIZE_TOL


def check_items(ds, ref, reference, seed=7):
    """Every item of the loader over ds against torchvision's functional
    ops on ref's (the unaugmented item) with the plan's parameters:
    (int64 boxes seen, boxes SanitizeBoundingBoxes dropped)."""
    sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
    loader = fused(ds, batch_sampler=sampler, collate_fn=collate_fn, seed=seed)
    spec = loader._plans[0].compiled.spec
    position = 0
    flips, ints, dropped = set(), 0, 0
    for images, targets in loader:
        for image, target in zip(images, targets):
            want_image, want = ref[position]
            h, w = want_image.shape[-2:]
            p = _core.plan_window(spec, w, h, seed, 0, position)
            want_image, want = reference(want_image, want, p, spec)
            if p["flip"]:
                want_image, want = each(F.horizontal_flip, want_image, want)
            flips.add(bool(p["flip"]))
            before = len(want["boxes"])
            for step in TAIL:
                want_image, want = step(want_image, want)
            dropped += before - len(want["boxes"])
            ints += want["boxes"].dtype == torch.int64
            same_pixels(image, want_image)
            same_target(target, want)
            position += 1
    assert position == len(ds)
    assert flips == {True, False}
    return ints, dropped


def pair(coco, transforms):
    """The dataset with transforms, and the same unaugmented."""
    return dataset(coco, transforms, KEYS), dataset(coco, v2.ToImage(), KEYS)


def test_multiscale_preset_runs_natively(coco):
    check_items(*pair(coco, multiscale_preset()), multiscale_reference)


@pytest.mark.parametrize("fill", [0, {tv_tensors.Mask: 3, "others": 0}])
def test_random_resize_crop_flip_runs_natively(coco, fill):
    ds, ref = pair(coco, cropped_preset(fill))
    _, dropped = check_items(ds, ref, cropped_reference(fill))
    assert dropped > 0  # boxes the crop leaves out: SanitizeBoundingBoxes' drops


LSJ = (64, 64)  # the reference's 1024 square, small
LSJ_FILL = {tv_tensors.Mask: 0, "others": [123.0, 117.0, 104.0]}


def lsj_preset():
    """DetectionPresetTrain(data_augmentation="lsj", use_v2=True,
    backend="tv_tensor") as benchmarks/bench_detect.py writes it, the
    target size small."""
    return Preset(
        [
            v2.ToImage(),
            v2.ScaleJitter(target_size=LSJ, antialias=True),
            v2.RandomCrop(LSJ, pad_if_needed=True, fill=LSJ_FILL),
            v2.RandomHorizontalFlip(p=0.5),
        ]
        + TAIL
    )


@pytest.mark.parametrize("seed", [7, 11])
def test_lsj_preset_runs_natively(coco, seed):
    """ScaleJitter then a padded RandomCrop: every item at the crop's size,
    equal to torchvision's ops with the plan's scale and window, both
    padded (the image with the mean, masks with 0) and cropped samples."""
    seen = []
    ds, ref = pair(coco, lsj_preset())
    reference = cropped_reference(LSJ_FILL, LSJ, seen)
    _, dropped = check_items(ds, ref, reference, seed=seed)
    assert any(h < LSJ[0] or w < LSJ[1] for h, w in seen)  # padded
    assert any(h > LSJ[0] or w > LSJ[1] for h, w in seen)  # cropped
    assert dropped > 0


def test_lsj_pads_the_image_with_the_mean_and_masks_with_zero(coco):
    ds = dataset(coco, lsj_preset(), KEYS)
    loader = fused(ds, batch_size=4, collate_fn=collate_fn)
    mean = torch.tensor(LSJ_FILL["others"]).view(3, 1, 1) / 255
    padded = 0
    for images, targets in loader:
        for image, target in zip(images, targets):
            assert image.shape == (3, *LSJ)
            corner = image[:, -1:, -1:]
            if torch.allclose(corner, mean, atol=1e-6):
                padded += 1
                assert not target["masks"][:, -1, -1].any()
    assert padded > 0


def _whole_boxes(data):
    for a in data["annotations"]:
        a["bbox"] = [max(1, int(v)) for v in a["bbox"]]


@pytest.mark.parametrize("preset", ["multiscale", "cropped"])
def test_int64_boxes_are_truncated_as_torchvisions(tmp_path, preset):
    """Boxes of JSON integers are int64: torchvision's resize truncates its
    float32 products (plan_boxes' ``whole``)."""
    transforms = multiscale_preset() if preset == "multiscale" else cropped_preset(0)
    reference = multiscale_reference if preset == "multiscale" else cropped_reference(0)
    data = coco_json(20, 3)
    ds = wrapped_coco(tmp_path / "a", data, transforms, KEYS, _whole_boxes)
    ref = wrapped_coco(tmp_path / "b", data, v2.ToImage(), KEYS, _whole_boxes)
    # as the reference's train set: images without annotations removed
    ids = [i for i, img_id in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=img_id)]
    ints, _ = check_items(Subset(ds, ids), Subset(ref, ids), reference)
    assert ints > 4


def test_masks_pad_with_the_fill_dicts_mask_entry(coco):
    """Padded rows and columns of the masks hold the fill dict's Mask
    value; the image's padding its "others" value."""
    fill = {tv_tensors.Mask: 3, "others": 0}
    chain = Preset([v2.ToImage(), v2.RandomCrop(60, pad_if_needed=True, fill=fill)])
    ds = dataset(coco, chain, KEYS)
    loader = fused(ds, batch_size=4, collate_fn=collate_fn)
    padded = 0
    for _, targets in loader:
        for t in targets:
            if "masks" in t and len(t["masks"]):
                padded += int((t["masks"] == 3).any())
                assert set(torch.unique(t["masks"]).tolist()) <= {0, 1, 3}
    assert padded > 0


@pytest.mark.parametrize(
    "step, why",
    [
        # the warps follow each image's own size too (test_detect_affine),
        # but not a rotation that changes it, nor one on float pixels
        (
            v2.RandomRotation(10, expand=True),
            "RandomRotation after .* to one size first",
        ),
        (v2.ElasticTransform(), "ElasticTransform is not followed"),
        (
            v2.Compose([v2.ToDtype(torch.float, scale=True), v2.RandomAffine(5)]),
            "RandomAffine after .* to one size first",
        ),
        (
            v2.RandomCrop(30, pad_if_needed=True, padding_mode="reflect"),
            "padding_mode='reflect'",
        ),
    ],
)
def test_geometry_the_targets_do_not_follow_falls_back(coco, step, why):
    tf = Preset([v2.ToImage(), step, v2.ToDtype(torch.float, scale=True)])
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(
            dataset(coco, tf), batch_size=2, collate_fn=collate_fn
        )
    assert not isinstance(loader, ringloader.Loader)


def test_resize_alone_keeps_the_sizes_of_the_images(coco):
    """Resize(24, max_size=40) alone: each item its own size, torchvision's
    size rule, boxes on that canvas."""
    chain = Preset([v2.ToImage(), v2.Resize(24, max_size=40)] + TAIL[1:])
    ds, ref = pair(coco, chain)
    loader = fused(ds, batch_size=5, collate_fn=collate_fn)
    items = [item for images, targets in loader for item in zip(images, targets)]
    for k, (image, target) in enumerate(items):
        want_image, want = each(
            lambda x: F.resize(x, [24], max_size=40, antialias=True), *ref[k]
        )
        for step in TAIL[1:]:
            want_image, want = step(want_image, want)
        assert image.shape == want_image.shape
        diff = (image.int() - want_image.int()).abs().max().item()
        assert diff <= 2
        same_target(target, want)
    assert len(items) == len(ds)
    assert np.unique([tuple(im.shape) for im, _ in items], axis=0).shape[0] > 1


def test_the_size_is_read_from_the_header_where_the_output_hides_it(tmp_path):
    """A resize hides the decoded size: each image's header is read once;
    an images entry without a size takes it, one that differs is refused
    naming the file."""
    data = coco_json(6, 3)
    image = data["images"][2]

    def edit(data):
        del data["images"][0]["height"], data["images"][0]["width"]
        image["width"] += 2
        data["annotations"] = [
            a
            for a in data["annotations"]
            if a["image_id"] != image["id"] or isinstance(a["segmentation"], list)
        ]

    ds = wrapped_coco(tmp_path, data, multiscale_preset(), KEYS, edit)
    loader = fused(ds, batch_size=2, collate_fn=collate_fn)
    batches = iter(loader)
    _, targets = next(batches)  # the entry without a size: from the header
    assert targets[0]["image_id"] == data["images"][0]["id"]
    with pytest.raises(ValueError, match=f"{image['file_name']}: the image is"):
        next(batches)


class FixedSizeCrop(torch.nn.Module):
    """The detection reference's own FixedSizeCrop, as its transforms.py
    writes it for v1 targets: crop where larger (one torch.rand(1) for
    both offsets), boxes shifted and clamped in place and the invalid
    ones dropped by a boolean index, then pad at the bottom and right."""

    def __init__(self, size, fill=0):
        super().__init__()
        self.crop_height, self.crop_width = size
        self.fill = fill

    def forward(self, img, target):
        from torchvision.transforms import functional as F1

        _, height, width = F1.get_dimensions(img)
        new_h, new_w = min(height, self.crop_height), min(width, self.crop_width)
        if (new_h, new_w) != (height, width):
            r = torch.rand(1)
            top = int(max(height - self.crop_height, 0) * r)
            left = int(max(width - self.crop_width, 0) * r)
            img = F1.crop(img, top, left, new_h, new_w)
            boxes = target["boxes"]
            boxes[:, 0::2] -= left
            boxes[:, 1::2] -= top
            boxes[:, 0::2].clamp_(min=0, max=new_w)
            boxes[:, 1::2].clamp_(min=0, max=new_h)
            valid = (boxes[:, 0] < boxes[:, 2]) & (boxes[:, 1] < boxes[:, 3])
            target["boxes"] = boxes[valid]
            target["labels"] = target["labels"][valid]
            if "masks" in target:
                masks = target["masks"][valid]
                target["masks"] = F1.crop(masks, top, left, new_h, new_w)
        pad = [0, 0, max(self.crop_width - new_w, 0), max(self.crop_height - new_h, 0)]
        if any(pad):
            img = F1.pad(img, pad, self.fill)
            if "masks" in target:
                target["masks"] = F1.pad(target["masks"], pad, 0)
        return img, target


def test_the_references_own_fixed_size_crop_falls_back_saying_why(coco):
    """The lsj preset as the reference writes it for v2 (PIL backend):
    torch's DataLoader runs it, and its FixedSizeCrop leaves a cropped
    sample's boxes a plain tensor, which SanitizeBoundingBoxes raises on;
    ringloader falls back with that reason rather than give boxes the
    reference does not."""
    preset = Preset(
        [
            v2.ScaleJitter(target_size=LSJ, antialias=True),
            FixedSizeCrop(LSJ, fill=(123.0, 117.0, 104.0)),
            v2.RandomHorizontalFlip(p=0.5),
            v2.ToImage(),
        ]
        + TAIL
    )
    ds = dataset(coco, preset, KEYS)
    with pytest.warns(
        ringloader.FallbackWarning, match="FixedSizeCrop .* plain tensor"
    ):
        loader = ringloader.DataLoader(ds, batch_size=2, collate_fn=collate_fn)
    assert not isinstance(loader, ringloader.Loader)
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="No bounding boxes were found"):
        list(loader)
