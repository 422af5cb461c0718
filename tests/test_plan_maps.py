"""A mask through a sample's plan (csrc/targets/plan_maps.c,
``_core.plan_maps``): the index maps of the geometry the sample's pixels
went through, for every transform the compiler fuses (torchvision v2's and
v1's Resize with and without max_size, RandomResize, RandomShortestSize,
CenterCrop, RandomCrop with each padding mode and pad_if_needed,
RandomResizedCrop and flips; timm's ResizeKeepRatio, CenterCropOrPad,
RandomCropOrPad and TrimBorder), alone (varying sizes) and cropped, built
from the real objects by ``compile_transform``, on random image sizes and
keys: ``mask[row_map][:, col_map]`` (the fill where a map holds -1) is
np.array_equal to torchvision.transforms.v2.functional's ops on a
tv_tensors.Mask with the parameters the plan drew
(``_core.plan_window``): torch's nearest resize, the window's padding in
its mode (v1's RandomCrop pads twice, as its image), crops and flips."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision import transforms as v1
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from ringloader import _core
from ringloader.transforms import compile_transform

from test_plan_boxes import (
    CASES,
    SEED,
    _crop_or_pad,
    _crop_unless_whole,
    _flips,
    _resized_size,
    _size,
    draws,
)

MODES = ["constant", "edge", "reflect", "symmetric"]
FILL = 0  # the masks hold 1..255, so a padded pixel is told apart


def _cropped(rng, lib, resize):
    pad = [int(v) for v in rng.integers(0, 12, size=4 if lib is v2 else 2)]
    mode = MODES[int(rng.integers(4))]
    crop = lib.RandomCrop(
        (_size(rng), _size(rng)), padding=pad, pad_if_needed=True, padding_mode=mode
    )
    return [resize, crop]


# Beside test_plan_boxes' cases: the resizes whose size is a rule or a
# draw (Resize(max_size), RandomResize, RandomShortestSize), alone (each
# image its own size) and before a crop.
MORE = {
    "v2_max_size_center": (
        lambda rng: [
            v2.Resize(_size(rng, 8, 40), max_size=_size(rng, 41, 90)),
            v2.CenterCrop((_size(rng), _size(rng))),
        ],
        v2,
        False,
    ),
    "v1_max_size_crop": (
        lambda rng: _cropped(rng, v1, v1.Resize(_size(rng, 8, 40), max_size=60)),
        v1,
        False,
    ),
    "v2_max_size_alone": (
        lambda rng: [v2.Resize(None, max_size=_size(rng, 8, 120))],
        v2,
        True,
    ),
    "v2_random_resize_alone": (
        lambda rng: [v2.RandomResize(_size(rng, 8, 40), _size(rng, 41, 90))],
        v2,
        True,
    ),
    "v2_random_resize_crop": (
        lambda rng: _cropped(rng, v2, v2.RandomResize(_size(rng, 8, 40), 60)),
        v2,
        False,
    ),
    "v2_shortest_alone": (
        lambda rng: [
            v2.RandomShortestSize(
                [int(v) for v in rng.integers(8, 90, size=3)],
                None if rng.random() < 0.3 else _size(rng, 90, 160),
            )
        ],
        v2,
        True,
    ),
    "v2_shortest_crop": (
        lambda rng: _cropped(rng, v2, v2.RandomShortestSize([16, 24, 40], 80)),
        v2,
        False,
    ),
}
ALL = {**{k: (make, lib, False) for k, (make, lib) in CASES.items()}, **MORE}


def spec_of(rng, case):
    make, lib, varying = ALL[case]
    compiled = compile_transform(
        lib.Compose(make(rng) + _flips(rng, lib)), varying=varying
    )
    assert not compiled.rest, compiled.reason  # fused whole
    return compiled.spec


# ---- the reference: torchvision v2's functional on a Mask ----


def _pad(t, pad, mode):
    """F.pad in the window's mode (left, top, right, bottom). torch's
    mirrors take fewer pixels than the axis has; past that numpy's
    repeated mirror (as torchvision pads a PIL image, and the pixels)."""
    if not any(pad):
        return t
    try:
        return F.pad(t, list(pad), fill=FILL, padding_mode=mode)
    except (RuntimeError, IndexError):
        assert mode in ("reflect", "symmetric")
        left, top, right, bottom = pad
        out = np.pad(t.numpy(), ((top, bottom), (left, right)), mode=mode)
        return tv_tensors.Mask(torch.from_numpy(out))


def _resized(spec, p, t):
    """The resize with the size torchvision's own rule gives, or the size
    the plan drew (RandomResize, RandomShortestSize, a random
    ResizeKeepRatio: test_shortest_size and test_plan_boxes hold the draws
    to torchvision's and timm's)."""
    h, w = t.shape[-2:]
    drawn = spec.get("short_sizes") or spec.get("resize_short_hi")
    if drawn and spec.get("varying"):
        return F.resize(t, [p["vh"], p["vw"]])
    if drawn:
        return F.resize(t, [p["rh"], p["rw"]])
    if spec.get("resize_short") or spec.get("resize_max"):
        short = spec.get("resize_short") or None
        return F.resize(
            t,
            None if short is None else [short],
            max_size=spec.get("resize_max") or None,
        )
    size = _resized_size(spec, p, h, w)
    return t if size == (h, w) else F.resize(t, list(size))


def _random_crop(spec, p, t, mode):
    """RandomCrop: its padding (pad_if_needed's on both sides; v1 pads
    twice, as its image), then the plan's window."""
    oh, ow = spec["out_h"], spec["out_w"]
    pad = [spec[f"pad_{k}"] for k in ("left", "top", "right", "bottom")]
    if spec.get("pad_twice"):
        t = _pad(t, pad, mode)
        pad = [0, 0, 0, 0]
    h, w = t.shape[-2] + pad[1] + pad[3], t.shape[-1] + pad[0] + pad[2]
    if spec["pad_if_needed"]:
        dh, dw = max(oh - h, 0), max(ow - w, 0)
        pad = [pad[0] + dw, pad[1] + dh, pad[2] + dw, pad[3] + dh]
    before = (spec.get("pad_left", 0), spec.get("pad_top", 0))
    top = p["wy"] + pad[1] + (before[1] if spec.get("pad_twice") else 0)
    left = p["wx"] + pad[0] + (before[0] if spec.get("pad_twice") else 0)
    return _crop_unless_whole(_pad(t, pad, mode), top, left, oh, ow)


def _center_or_pad(t, oh, ow, mode):
    nh, nw = t.shape[-2:]
    dh, dw = max(oh - nh, 0), max(ow - nw, 0)
    t = _pad(t, [dw // 2, dh // 2, (dw + 1) // 2, (dh + 1) // 2], mode)
    nh, nw = t.shape[-2:]
    top, left = int(round((nh - oh) / 2.0)), int(round((nw - ow) / 2.0))
    return _crop_unless_whole(t, top, left, oh, ow)


def reference(spec, p, mask):
    """mask (a tv_tensors.Mask on the source) through the pixels' chain
    with the plan's parameters."""
    oh, ow = spec.get("out_h"), spec.get("out_w")
    mode = MODES[spec.get("pad_mode", 0)]
    trim = spec.get("trim", 0)
    if trim:
        h, w = mask.shape[-2:]
        mask = F.crop(mask, trim, trim, h - 2 * trim, w - 2 * trim)
    if spec["kind"] == "random_crop":
        mask = F.resized_crop(
            mask, int(p["y"]), int(p["x"]), int(p["h"]), int(p["w"]), [oh, ow]
        )
    else:
        mask = _resized(spec, p, mask)
        window = spec.get("window", 0)
        if spec.get("varying"):
            pass
        elif spec["kind"] == "resize_crop":
            mask = F.center_crop(mask, [oh, ow])  # torchvision's own, 0 padded
        elif window == 0:
            mask = _random_crop(spec, p, mask, mode)
        elif window == 1:
            mask = _center_or_pad(mask, oh, ow, mode)
        else:
            mask = _crop_or_pad(
                mask, p["wy"], p["wx"], oh, ow, lambda t, pad: _pad(t, pad, mode)
            )
    if p["flip"]:
        mask = F.horizontal_flip(mask)
    if p["vflip"]:
        mask = F.vertical_flip(mask)
    return mask.numpy()


def sampled(mask, rows, cols):
    """mask[rows][:, cols], FILL where a map holds -1."""
    out = mask[np.clip(rows, 0, None)][:, np.clip(cols, 0, None)]
    out[rows < 0, :] = FILL
    out[:, cols < 0] = FILL
    return out


# ---- the tests ----


@pytest.mark.parametrize("case", list(ALL))
def test_masks_follow_the_plan(case):
    flips = padded = 0
    for spec, w, h, index, view, p, rng in draws(case, 60, spec_of):
        rows, cols = _core.plan_maps(spec, w, h, SEED, 0, index, view)
        rows, cols = np.frombuffer(rows, np.int32), np.frombuffer(cols, np.int32)
        mask = rng.integers(1, 256, size=(h, w), dtype=np.uint8)
        want = reference(spec, p, tv_tensors.Mask(torch.from_numpy(mask)))
        got = sampled(mask, rows, cols)
        assert got.shape == want.shape, (spec, w, h, p)
        assert np.array_equal(got, want), (spec, w, h, p)
        _, canvas = _core.plan_boxes(
            spec, w, h, SEED, 0, index, view, np.zeros((0, 4)), "XYXY"
        )
        assert canvas == got.shape
        flips += p["flip"]
        padded += bool((rows < 0).any() or (cols < 0).any())
    assert flips > 5, case


def test_mirrored_padding_takes_the_images_pixels():
    """Every padding mode is drawn above; edge, reflect and symmetric
    padding read the mask's own pixels (no -1), constant fills."""
    rng = np.random.default_rng(3)
    seen = set()
    for mode in MODES:
        tf = v2.RandomCrop(
            40, padding=[6, 3, 5, 2], pad_if_needed=True, padding_mode=mode
        )
        spec = compile_transform(tf).spec
        rows, cols = _core.plan_maps(spec, 30, 33, SEED, 0, int(rng.integers(99)))
        rows, cols = np.frombuffer(rows, np.int32), np.frombuffer(cols, np.int32)
        filled = (rows < 0).any() or (cols < 0).any()
        assert filled == (mode == "constant"), mode
        seen.add(mode)
    assert seen == set(MODES)


def test_view_is_optional_and_keyword():
    spec = compile_transform(
        v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip()])
    ).spec
    assert _core.plan_maps(spec, 50, 40, SEED, 1, 7) == _core.plan_maps(
        spec, 50, 40, SEED, 1, 7, view=0
    )
    assert _core.plan_maps(spec, 50, 40, SEED, 1, 7, 2) == _core.plan_maps(
        spec, width=50, height=40, seed=SEED, epoch=1, index=7, view=2
    )


def test_bad_arguments_raise():
    spec = compile_transform(v2.CenterCrop(10)).spec
    with pytest.raises(ValueError, match="invalid transform"):
        _core.plan_maps(spec, 0, 20, SEED, 0, 0)
    with pytest.raises(ValueError, match="larger than the 20x20 image"):
        _core.plan_maps(compile_transform(v2.RandomCrop(30)).spec, 20, 20, SEED, 0, 0)
    with pytest.raises(TypeError):
        _core.plan_maps(spec, 20, 20, SEED, 0)
    with pytest.raises(TypeError):
        _core.plan_maps(spec, "20", 20, SEED, 0, 0)
    with pytest.raises((TypeError, ValueError)):
        _core.plan_maps({"kind": "nope"}, 20, 20, SEED, 0, 0)
