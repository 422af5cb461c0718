"""``ringloader.transforms_v2.FixedSizeCrop``: the detection reference's
lsj crop for v2's targets (the reference's own class edits v1's plain
targets and fails on v2's: tests/test_detect_geometry.py). The lsj preset
with it in the reference's place runs under torch's DataLoader, and
natively: each item equals the class's own ``transform`` with the plan's
scale, offsets and padding, then the flip, on the unaugmented item
(images within the resize's tolerance, boxes within 1e-3 px, masks padded
with 0, labels and SanitizeBoundingBoxes' drops identical); its offsets
come from one r, as the reference draws them."""

from __future__ import annotations

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core
from ringloader.transforms_v2 import FixedSizeCrop

from detection_data import coco_json, write_coco
from test_detect_frontdoor import Preset, coco, collate_fn, dataset
from test_detect_geometry import KEYS, LSJ, LSJ_FILL, TAIL, check_items, each, pair

FILL = {tv_tensors.Mask: 0, "others": LSJ_FILL["others"]}
__all__ = ["coco"]  # the fixture, shared


def lsj(flip_first=False, fill=None, size=LSJ, head=None):
    """The reference's lsj preset (v2, tv_tensor backend), LSJ small, with
    FixedSizeCrop from ringloader in its class's place."""
    crop = FixedSizeCrop(size, fill=dict(FILL) if fill is None else fill)
    flip = v2.RandomHorizontalFlip(p=0.5)
    geometry = [flip, crop] if flip_first else [crop, flip]
    return Preset(
        [head or v2.ToImage(), v2.ScaleJitter(target_size=size, antialias=True)]
        + geometry
        + TAIL
    )


def fixed_reference(seen, size=LSJ, fill=None):
    """ScaleJitter to the plan's size, then the class's own transform
    with the plan's offsets (and the padding its size gives)."""
    crop = FixedSizeCrop(size, fill=dict(FILL) if fill is None else fill)

    def apply(image, target, p, spec):
        resized = [p["rh"], p["rw"]]
        seen.append(tuple(resized))
        image, target = each(
            lambda x: F.resize(x, resized, antialias=True), image, target
        )
        h, w = min(resized[0], size[0]), min(resized[1], size[1])
        params = dict(
            cropped=(h, w) != tuple(resized),
            top=p["wy"],
            left=p["wx"],
            height=h,
            width=w,
            padding=[0, 0, size[1] - w, size[0] - h],
        )
        return each(lambda x: crop.transform(x, params), image, target)

    return apply


def all_cases(seen, size):
    """Both sides cropped, both padded, and one of each, among the sizes
    the samples were resized to."""
    (sh, sw), cases = size, set()
    for h, w in seen:
        cases.add((h > sh, w > sw))
    assert {(True, True), (False, False)} <= cases
    assert (True, False) in cases or (False, True) in cases


@pytest.mark.parametrize("seed", [7, 11])
def test_lsj_with_fixed_size_crop_runs_natively(coco, seed):
    seen = []
    ds, ref = pair(coco, lsj())
    _, dropped = check_items(ds, ref, fixed_reference(seen), seed=seed)
    all_cases(seen, LSJ)
    assert dropped > 0


@pytest.fixture(scope="module")
def coco_past_edges(tmp_path_factory):
    """Every other box past its image's right and bottom edges by a
    fraction of a pixel, as COCO's boxes often are."""
    data = coco_json(24, 5)
    sizes = {im["id"]: (im["height"], im["width"]) for im in data["images"]}
    for k, a in enumerate(data["annotations"]):
        h, w = sizes[a["image_id"]]
        x, y = a["bbox"][:2]
        if k % 2 == 0:
            a["bbox"] = [x, y, w - x + 0.6, h - y + 0.4]
    root = tmp_path_factory.mktemp("coco-edges")
    return write_coco(root, 24, seed=5, data=data)


@pytest.mark.parametrize(
    "size, fill",
    [((40, 56), None), ((56, 40), {tv_tensors.Mask: 3, "others": 9})],
    ids=["wide", "tall-mask-fill"],
)
def test_boxes_past_the_edge_are_clamped_to_the_crop_first(coco_past_edges, size, fill):
    """A box past the image's edge, on an axis padded and not cropped,
    ends at the image's edge (the crop's clamp), not in the padding; a
    size that is not square; a Mask fill of its own."""
    seen = []
    ds, ref = pair(coco_past_edges, lsj(fill=fill, size=size))
    check_items(ds, ref, fixed_reference(seen, size, fill), seed=3)
    all_cases(seen, size)


def test_a_plain_fill_pads_the_image_only():
    """As the reference's: fill=mean pads the image, masks with 0."""
    crop = FixedSizeCrop((6, 5), fill=(10, 20, 30))
    image = tv_tensors.Image(torch.full((3, 4, 4), 200, dtype=torch.uint8))
    mask = tv_tensors.Mask(torch.full((1, 4, 4), 7, dtype=torch.uint8))
    image, mask = crop(image, mask)
    assert image.shape == (3, 6, 5) and mask.shape == (1, 6, 5)
    assert image[:, 4:, :].flatten(1).unique(dim=1).tolist() == [[10], [20], [30]]
    assert (mask[:, 4:, :] == 0).all() and (mask[:, :4, :4] == 7).all()


def test_it_runs_under_torchs_dataloader(coco):
    """Where the reference's class raises (tests/test_detect_geometry.py),
    this one gives every item at the crop's size, its boxes inside."""
    ds = dataset(coco, lsj(), KEYS)
    torch.manual_seed(0)
    n = 0
    for images, targets in torch.utils.data.DataLoader(
        ds, batch_size=4, collate_fn=collate_fn
    ):
        for image, target in zip(images, targets):
            assert image.shape == (3, *LSJ)
            boxes = target["boxes"]
            assert (boxes[:, 0::2] <= LSJ[1]).all() and (boxes[:, 1::2] <= LSJ[0]).all()
            assert target["masks"].shape[-2:] == LSJ
            n += 1
    assert n == len(ds)


def test_the_offsets_come_from_one_r():
    """Both offsets int((n - size) * r) of one float32 r: the intervals
    that top and left each allow for r overlap, for every plan."""
    spec = dict(
        kind="resize_random_crop",
        out_h=100,
        out_w=100,
        window=_core.WINDOWS.index("fixed_size_crop"),
    )
    tops = set()
    for key in range(2000):
        p = _core.plan_window(spec, 1100, 350, 3, 0, key)
        top, left = p["wy"], p["wx"]
        oh, ow = 250, 1000
        lo, hi = max(top / oh, left / ow), min((top + 1) / oh, (left + 1) / ow)
        assert lo < hi, (top, left)
        tops.add(top)
    assert len(tops) > 200  # spread over the 250 offsets


def test_a_flip_before_it_falls_back_saying_why(coco):
    why = "FixedSizeCrop is not fused after RandomHorizontalFlip .* flip after it"
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(
            dataset(coco, lsj(flip_first=True), KEYS),
            batch_size=2,
            collate_fn=collate_fn,
        )
    assert not isinstance(loader, ringloader.Loader)


@pytest.mark.parametrize(
    "fill, why",
    [({tv_tensors.Mask: 3.5, "others": 0}, "fill 3.5 for masks")],
)
def test_a_mask_fill_it_cannot_say_falls_back(coco, fill, why):
    with pytest.warns(ringloader.FallbackWarning, match=why):
        ringloader.DataLoader(
            dataset(coco, lsj(fill=fill), KEYS), batch_size=2, collate_fn=collate_fn
        )
