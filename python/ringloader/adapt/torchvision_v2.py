"""torchvision's ``transforms.v2`` classes as neutral steps: its own
conversions (ToImage, ToPureTensor, ToDtype, with v2's per-type dtypes
the image's entry) and, for the classes v1 has too, ``torchvision_v1``'s
descriptions (the same attributes; v2's RandomCrop pads once and its
fills may be per type: ``torchvision_pad`` tells them apart)."""

from __future__ import annotations

import math
from typing import Any

from .. import _core
from .._steps import (
    Convert,
    IoUCrop,
    RandomCrop,
    Resize,
    Source,
    Step,
    Unfused,
    ZoomOut,
    pack,
)
from ..errors import UnsupportedTransform
from . import torchvision_v1
from .torchvision_pad import PadIfSmallerCrop, _fill_rgb, tensor_fills


def claims(t: Any) -> bool:
    module = type(t).__module__
    return module.startswith("torchvision.transforms.v2") or isinstance(
        t, PadIfSmallerCrop
    )


flatten = torchvision_v1.flatten


def describe(t: Any) -> Step:
    name = type(t).__name__
    if isinstance(t, PadIfSmallerCrop):
        fields, fills = t.fields()
        return RandomCrop("PadIfSmaller+RandomCrop", fields, fills=fills)
    if name == "ToImage":
        return Convert(name, "tensor", on_tensor="image")
    if name == "PILToTensor":  # a tensor passes v2's by
        return Convert(name, "tensor", on_tensor="pass")
    if name == "ToTensor":
        return Convert(
            name, "dtype", "float32", scale=True, from_uint8=True, on_tensor="pass"
        )
    if name == "ToPureTensor":
        return Convert(name, "pure", on_pil="pass")
    if name == "ToDtype":
        dtype = getattr(t, "dtype", None)
        scale = bool(getattr(t, "scale", False))
        if isinstance(dtype, dict):
            return _per_type(t, dtype, scale)
        return Convert(name, "dtype", dtype, scale=scale, on_pil="pass")
    if name == "ConvertImageDtype":  # v2's: ToDtype(dtype, scale=True)
        return Convert(
            name, "dtype", getattr(t, "dtype", None), scale=True, on_pil="pass"
        )
    drawn = _DRAWN_RESIZES.get(name)
    if drawn is not None:
        try:
            filt = torchvision_v1.resize_filter(t)
        except UnsupportedTransform as e:
            return Unfused(name, str(e), geometry=True)
        return drawn(t, name, filt)
    if name == "RandomIoUCrop":
        return _iou_crop(t)
    if name == "RandomPhotometricDistort":
        return _photometric(t)
    if name == "RandomZoomOut":
        return _zoom_out(t)
    return torchvision_v1.describe(t)  # ToTensor, PILToTensor, the rest


def _photometric(t: Any) -> Step:
    """RandomPhotometricDistort: a source op (its ranges and p; the C op
    checks them), run on the whole image before the geometry."""
    name = type(t).__name__
    keys = ("brightness", "contrast", "saturation", "hue")
    values: dict[str, Any] = {k: tuple(getattr(t, k)) for k in keys}
    values["p"] = float(t.p)
    return Source(name, (("photometric_distort", pack("photometric_distort", values)),))


def _per_type(t: Any, dtypes: dict, scale: bool) -> Step:
    """ToDtype({type: dtype, ..., "others": dtype}): the image's entry, a
    tv_tensors.Image's or a plain tensor's (else "others"), chosen by the
    compiler from the conversion before it; the other types' entries
    (masks, boxes) are not the pixels' (a segmentation sample's mask runs
    the step itself)."""
    import torch
    from torchvision import tv_tensors

    name = type(t).__name__
    entries = []
    for kind, cls in (("image", tv_tensors.Image), ("tensor", torch.Tensor)):
        if cls in dtypes:
            entries.append((kind, dtypes[cls]))
        elif "others" in dtypes:
            entries.append((kind, dtypes["others"]))
        else:  # torchvision raises for such an image
            return Unfused(name, f"{name}: no dtype for the image and no 'others'")
    return Convert(
        name, "dtype", None, scale=scale, per_type=tuple(entries), on_pil="pass"
    )


def _random_resize(t: Any, name: str, filt: int) -> Step:
    """RandomResize(min_size, max_size): the shorter side drawn per
    sample in [min_size, max_size), as its torch.randint."""
    lo, hi = int(t.min_size), int(t.max_size)
    if not 0 < lo < hi:
        return Unfused(name, f"{name}({lo}, {hi}): needs 0 < min_size < max_size", True)
    return Resize(name, lo, filt, size_hi=hi)


def _random_shortest_size(t: Any, name: str, filt: int) -> Step:
    """RandomShortestSize(min_size, max_size): one of min_size drawn per
    sample, then its own rule (core/plan.c's shorter_side_size)."""
    sizes = tuple(int(s) for s in t.min_size)
    if not sizes or len(sizes) > _core.MAX_SHORT_SIZES or min(sizes) < 1:
        return Unfused(name, f"{name}: 1..{_core.MAX_SHORT_SIZES} sizes >= 1", True)
    return Resize(name, 0, filt, max_size=int(t.max_size or 0), choices=sizes)


def _scale_jitter(t: Any, name: str, filt: int) -> Step:
    """ScaleJitter(target_size, scale_range): the image resized by a
    factor drawn per sample (core/plan.c, with targets/draws.c's rule:
    torchvision reads target_size as (w, h), ``min(target_size[1] / H,
    target_size[0] / W)``)."""
    target = tuple(int(s) for s in t.target_size)
    scale = tuple(float(s) for s in t.scale_range)
    lo, hi = scale if len(scale) == 2 else (math.nan, math.nan)
    if len(target) != 2 or not 0 < min(target) <= max(target) <= _core.MAX_SIDE:
        return Unfused(
            name,
            f"{name}: target_size {target} needs two sides in 1..{_core.MAX_SIDE}",
            True,
        )
    if not (0 < lo <= hi and math.isfinite(hi)):
        return Unfused(name, f"{name}: scale_range {scale} needs 0 < low <= high", True)
    fields = (
        ("jitter_w", target[0]),
        ("jitter_h", target[1]),
        ("jitter_scale", (lo, hi)),
    )
    return Resize(name, 0, filt, jitter=fields)


# v2's resizes whose size is drawn per sample: (t, its name, its filter)
# to a step.
_DRAWN_RESIZES = {
    "RandomResize": _random_resize,
    "RandomShortestSize": _random_shortest_size,
    "ScaleJitter": _scale_jitter,
}


def _iou_crop(t: Any) -> Step:
    """RandomIoUCrop: its options as the spec's iou_* fields (the crop is
    drawn per sample from its boxes: core/plan_iou.c)."""
    name = type(t).__name__
    lo, hi = float(t.min_scale), float(t.max_scale)
    ar_lo, ar_hi = float(t.min_aspect_ratio), float(t.max_aspect_ratio)
    options = [float(o) for o in t.options]
    trials = int(t.trials)
    if not 0 <= lo <= hi <= 1 or not 0 <= ar_lo <= ar_hi or math.isinf(ar_hi):
        why = "needs 0 <= min_scale <= max_scale <= 1 (a crop inside the image)"
        return Unfused(name, f"{name}: {why} and finite aspect ratios", True)
    if not 1 <= len(options) <= _core.MAX_IOU_OPTIONS or any(map(math.isnan, options)):
        return Unfused(
            name, f"{name}: 1..{_core.MAX_IOU_OPTIONS} sampler_options, none NaN", True
        )
    if trials < 1:
        return Unfused(name, f"{name}: trials must be at least 1", True)
    fields = dict(
        iou_crop=1,
        iou_scale=(lo, hi),
        iou_aspect=(ar_lo, ar_hi),
        iou_options=options,
        iou_trials=trials,
    )
    return IoUCrop(name, fields)


def _zoom_out(t: Any) -> Step:
    """RandomZoomOut: its p, side_range and fill as the spec's zoom_* and
    fill fields (the canvas is drawn per sample: core/plan_iou.c); the
    fill the PIL image's, ``fills`` the converted image's entries."""
    name = type(t).__name__
    side = tuple(float(s) for s in t.side_range)
    p = float(t.p)
    if len(side) != 2 or not 1 <= side[0] <= side[1] < math.inf:
        return Unfused(name, f"{name}: side_range {side} needs 1 <= low <= high", True)
    if not 0 <= p <= 1:
        return Unfused(name, f"{name}: p {p} needs 0 <= p <= 1", True)
    try:
        rgb = _fill_rgb(t.fill, name)
    except UnsupportedTransform as e:
        return Unfused(name, str(e), True)
    fields = dict(zoom_out=1, zoom_p=p, zoom_side=side)
    fields.update(fill_r=rgb[0], fill_g=rgb[1], fill_b=rgb[2])
    return ZoomOut(name, fields, tensor_fills(t, name))
