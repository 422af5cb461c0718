"""The segmentation reference's train preset as it is written for v2
(``--use-v2``): its own ``PadIfSmaller(crop_size, fill={Mask: 255,
"others": 0})`` (``references/segmentation/v2_extras.py``, not on PyPI:
``benchmarks/reference_extras.py`` writes one that behaves as the
reference's, a v2.Transform padding the missing rows and columns at the
bottom and right) before
``RandomCrop(crop_size)``, after the flip. Fused: no FallbackWarning;
each train item equals torchvision's functional ops run in the preset's
order (flip, then the user's PadIfSmaller object itself, then the crop)
with the sample's plan (``_core.plan_window``); a PadIfSmaller that pads
otherwise, or before another crop, falls back saying why."""

from __future__ import annotations

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core

from detection_data import write_voc
from reference_extras import PadIfSmaller  # benchmarks/: the reference's class
from test_dropin import fused
from test_segment_frontdoor import (
    BASE,
    CROP,
    MEAN,
    SEED,
    STD,
    Preset,
    dataset,
    items,
    same_image,
    same_mask,
)

FILL = {tv_tensors.Mask: 255, "others": 0}


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return write_voc(tmp_path_factory.mktemp("voc"), 14, seed=SEED)


def reference_train(backend, p=0.5, pad=None, flip_first=True):
    """SegmentationPresetTrain(use_v2=True) as written: backend "pil" (no
    head; PILToTensor after the crop), "tensor" or "tv_tensor"."""
    head = {"tv_tensor": [v2.ToImage()], "tensor": [v2.PILToTensor()], "pil": []}
    image = tv_tensors.Image if backend == "tv_tensor" else torch.Tensor
    flip = [v2.RandomHorizontalFlip(p)]
    crop = [pad or PadIfSmaller(CROP, fill=dict(FILL)), v2.RandomCrop(CROP)]
    return Preset(
        head[backend]
        + [v2.RandomResize(BASE // 2, BASE * 2)]
        + (flip + crop if flip_first else crop + flip)
        + ([v2.PILToTensor()] if backend == "pil" else [])
        + [
            v2.ToDtype(
                {image: torch.float32, tv_tensors.Mask: torch.int64, "others": None},
                scale=True,
            ),
            v2.Normalize(MEAN, STD),
            v2.ToPureTensor(),
        ]
    )


def expected(raw_image, raw_mask, spec, epoch, key, flip_first):
    """The preset's order with the sample's plan: resize to the drawn
    size, the flip, PadIfSmaller (the object itself), the window (on the
    flipped image, at the mirror of the offset the core drew on the
    unflipped one: the same uniform draw), the conversions."""
    h, w = raw_mask.shape[-2:]
    p = _core.plan_window(spec, w, h, SEED, epoch, key)
    image = tv_tensors.Image(F.pil_to_tensor(raw_image))
    mask = raw_mask
    image = F.resize(image, [p["rh"], p["rw"]], antialias=True)
    mask = F.resize(mask, [p["rh"], p["rw"]])

    def flip(image, mask):
        if p["flip"]:
            return F.horizontal_flip(image), F.horizontal_flip(mask)
        return image, mask

    if flip_first:
        image, mask = flip(image, mask)
    image, mask = PadIfSmaller(CROP, fill=dict(FILL))(image, mask)
    pw = image.shape[-1]
    wx = pw - CROP - p["wx"] if flip_first and p["flip"] else p["wx"]
    image = F.crop(image, p["wy"], wx, CROP, CROP)
    mask = F.crop(mask, p["wy"], wx, CROP, CROP)
    if not flip_first:
        image, mask = flip(image, mask)
    image = F.normalize(F.to_dtype(image, torch.float32, scale=True), MEAN, STD)
    mask = F.to_dtype(mask, torch.int64)
    return image.as_subclass(torch.Tensor), mask.as_subclass(torch.Tensor), p


@pytest.mark.parametrize("flip_first", [True, False], ids=["flip-pad", "pad-flip"])
@pytest.mark.parametrize("backend", ["pil", "tensor", "tv_tensor"])
def test_train_items_pad_at_the_bottom_and_right(voc, backend, flip_first):
    ds = dataset(voc, reference_train(backend, flip_first=flip_first))
    raw = dataset(voc, None)
    seen = {"flipped and padded": 0, "cropped": 0}
    for epoch in range(3):
        loader = fused(ds, batch_size=5, collate_fn=items, seed=SEED)
        loader.set_epoch(epoch)
        spec = loader._plans[0].compiled.spec
        assert spec["pad_if_needed"] == 2
        assert spec["pad_flips_first"] == int(flip_first)
        i = 0
        for batch in loader:
            for image, mask in batch:
                assert image.shape == (3, CROP, CROP) and mask.shape == (1, CROP, CROP)
                want = expected(*raw[i], spec, epoch, i, flip_first)
                same_mask(mask, want[1])
                same_image(image, want[0])
                p = want[2]
                padded = p["rw"] < CROP or p["rh"] < CROP
                seen["flipped and padded"] += bool(p["flip"] and padded)
                seen["cropped"] += p["rw"] > CROP and p["rh"] > CROP
                i += 1
        assert i == len(ds)
    assert all(seen.values()), seen


@pytest.mark.parametrize("flip_first", [True, False], ids=["flip-pad", "pad-flip"])
def test_a_narrow_image_keeps_its_padding_where_the_preset_puts_it(voc, flip_first):
    """Every image resized narrower than the crop and taller: the width
    padded, the height cropped, flipped or not; each item equals the
    preset's own ops with the plan's draws, its padding at the right
    unless a flip after the pad moved it."""
    flip = [v2.RandomHorizontalFlip(0.5)]
    crop = [PadIfSmaller(CROP, fill=dict(FILL)), v2.RandomCrop(CROP)]
    preset = Preset(
        [v2.ToImage(), v2.Resize((CROP + 6, CROP - 8))]
        + (flip + crop if flip_first else crop + flip)
        + [
            v2.ToDtype(
                {
                    tv_tensors.Image: torch.float32,
                    tv_tensors.Mask: torch.int64,
                    "others": None,
                },
                scale=True,
            ),
            v2.Normalize(MEAN, STD),
            v2.ToPureTensor(),
        ]
    )
    ds, raw = dataset(voc, preset), dataset(voc, None)
    loader = fused(ds, batch_size=5, collate_fn=items, seed=SEED)
    spec = loader._plans[0].compiled.spec
    flips = []
    for k, (image, mask) in enumerate(x for batch in loader for x in batch):
        want_image, want_mask, p = expected(*raw[k], spec, 0, k, flip_first)
        same_mask(mask, want_mask)
        same_image(image, want_image)
        # the pad's columns: at the right, but where a later flip moved them
        pad = slice(0, 8) if p["flip"] and not flip_first else slice(CROP - 8, None)
        assert (mask[0, :, pad] == 255).all() and p["rw"] == CROP - 8
        flips.append(p["flip"])
    assert any(flips) and not all(flips)


def test_padding_lands_where_the_reference_puts_it(voc):
    """Without any draw to replay: every item padded on a side is padded
    (255 in its mask) at the bottom or right only, never at the top or
    left, as PadIfSmaller pads after the flip."""
    ds = dataset(voc, reference_train("tv_tensor", p=1.0))
    edges = {"right": 0, "bottom": 0}
    loader = fused(ds, batch_size=7, collate_fn=items, seed=SEED)
    for epoch in range(6):
        loader.set_epoch(epoch)
        masks = [mask for batch in loader for _, mask in batch]
        for mask in masks:
            m = mask[0] == 255
            assert not m[:, 0].all() and not m[0, :].all()
            edges["right"] += bool(m[:, -1].all())
            edges["bottom"] += bool(m[-1, :].all())
    assert all(edges.values()), edges


class BothSides(PadIfSmaller):
    """Named PadIfSmaller, but pads on the left too."""

    def transform(self, inpt, params):
        fill = self.fill.get(type(inpt), self.fill.get("others"))
        left = F.pad(inpt, padding=[params["right"], 0, 0, 0], fill=fill)
        return super().transform(left, params)


BothSides.__name__ = "PadIfSmaller"  # as a user's class of that name


@pytest.mark.parametrize(
    "pad, crop, why",
    [
        (
            BothSides(CROP, fill=dict(FILL)),
            CROP,
            "does not pad as the segmentation reference",
        ),
        (
            PadIfSmaller(CROP + 2, fill=dict(FILL)),
            CROP,
            r"directly before a v2.RandomCrop\(26\)",
        ),
        (
            PadIfSmaller(CROP, fill=dict(FILL)),
            CROP - 4,
            r"directly before a v2.RandomCrop\(24\)",
        ),
        (PadIfSmaller(CROP, fill={"others": (1, 2, 3)}), CROP, r"PadIfSmaller\(24\): "),
    ],
    ids=["both-sides", "larger-pad", "smaller-crop", "rgb-fill-on-masks"],
)
def test_other_pads_fall_back_saying_why(voc, pad, crop, why):
    preset = Preset(
        [
            v2.ToImage(),
            v2.RandomResize(BASE // 2, BASE * 2),
            pad,
            v2.RandomCrop(crop),
            v2.ToPureTensor(),
        ]
    )
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(
            dataset(voc, preset), batch_size=2, collate_fn=items
        )
    assert not isinstance(loader, ringloader.Loader)


def _spec(**fields):
    base = dict(kind="resize_random_crop", out_h=CROP, out_w=CROP, pad_if_needed=2)
    return {**base, **fields}


@pytest.mark.parametrize(
    "fields",
    [
        dict(pad_left=1),
        dict(pad_bottom=2),
        dict(pad_mode=_core.PAD_MODES.index("edge")),
        dict(pad_if_needed=1, pad_flips_first=1),
        dict(pad_flips_first=4),
        dict(pad_if_needed=3),
        dict(kind="resize_crop", pad_flips_first=3),
    ],
)
def test_the_core_refuses_what_pad_if_needed_2_does_not_say(fields):
    with pytest.raises(ValueError, match="pad_if_needed"):
        _core.plan_window(_spec(**fields), 20, 30, SEED, 0, 0)


@pytest.mark.parametrize("flips_first", [0, 1, 2, 3])
def test_the_valid_rectangle_stays_at_the_top_left_after_earlier_flips(flips_first):
    """An image smaller than the window on both axes: the window covers
    the padded image whole, and the image's rectangle lies at the top
    left; flips after the pad move it, flips before it (pad_flips_first)
    do not."""
    spec = _spec(flip_p=1.0, vflip_p=1.0, pad_flips_first=flips_first)
    p = _core.plan_window(spec, 20, 15, SEED, 0, 0)
    assert (p["flip"], p["vflip"]) == (True, True)
    assert (p["wx"], p["wy"], p["rw"], p["rh"]) == (0, 0, 20, 15)
    x = 0 if flips_first & 1 else CROP - 20
    y = 0 if flips_first & 2 else CROP - 15
    assert (p["vx"], p["vy"], p["vw"], p["vh"]) == (x, y, 20, 15)


class Drawing(PadIfSmaller):
    """The reference's class, drawing from every global generator as it
    pads (as a user's might: the padding stays the reference's)."""

    def make_params(self, flat_inputs):
        import random

        import numpy as np

        torch.rand(1), random.random(), np.random.random()
        return super().make_params(flat_inputs)


Drawing.__name__ = "PadIfSmaller"


def test_the_probe_leaves_the_global_generators_as_they_were(voc):
    import random

    import numpy as np

    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    want = torch.rand(1), random.random(), np.random.random()
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    ds = dataset(voc, reference_train("tv_tensor", pad=Drawing(CROP, fill=dict(FILL))))
    fused(ds, batch_size=4, collate_fn=items, seed=SEED)  # fused: the probe passed
    assert (torch.rand(1), random.random(), np.random.random()) == want
