"""timm's transform classes (``timm.data``) as neutral steps.

timm's ``create_transform`` mixes its own classes with torchvision's
(Resize, CenterCrop, the flips, ColorJitter, Normalize and Compose are
torchvision's, described by ``torchvision_v1``). Its own:

- ``RandomResizedCropAndInterpolation``: torchvision's box distribution
  (timm's differs only where a side rounds to 0 pixels, which timm would
  then fail to resize);
  ``interpolation="random"`` (bilinear or bicubic per sample) is drawn in C
  from the sample's own stream, after the box, as timm draws it;
- ``ResizeKeepRatio`` (the eval chain's ``crop_mode="center"`` for
  non-square sizes and ``"border"``), with its random scale and aspect
  (``train_crop_mode="rkrc"``/``"rkrr"``) drawn in C from the sample's own
  stream, in timm's order and distributions (``_keep_random``);
- ``CenterCropOrPad`` and ``RandomCropOrPad`` with any of numpy's padding
  modes (``rkrc``/``rkrr`` pad with ``"reflect"``, ``crop_mode="border"``
  with a constant fill): the window on the resized image, its padding
  copied or filled by the place stage (``rl_window`` in ``csrc/rl.h``);
- ``TrimBorder`` (the eval chain's ``crop_border_pixels``) as the first
  step: the C plan sees the image less its border (``rl_transform.trim``),
  decoded without DCT scaling;
- ``MaybeToTensor``, ``MaybePILToTensor``, ``ToNumpy`` (a CHW uint8 array,
  which collates to the same uint8 batch) and timm's ``ToTensor`` (no
  scaling);
- ``RandomErasing``, on the converted output: the C op ``timm_erase``
  (``csrc/augment/erase.c``) draws as timm does (probability, count, up to
  10 tries a box); its normal values match torch's in distribution only.
  ``num_splits`` acts on batches only (timm's PrefetchLoader), not here.

timm's augmentations (RandAugment, AutoAugment, AugMix) are ``timm_ops``'s
(see :func:`_augment_step`).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from .. import _core
from .._steps import (
    CenterCrop,
    Convert,
    Erase,
    Ops,
    RandomCrop,
    Resize,
    ResizedCrop,
    Step,
    Trim,
    Unfused,
)
from .._steps import Element, NotFused, pack
from ..errors import UnsupportedTransform
from . import timm_ops
from .torchvision_v1 import filter_of, pair

_RANDOM = {"bilinear", "bicubic"}  # timm's _RANDOM_INTERPOLATION


def claims(t: Any) -> bool:
    return type(t).__module__.startswith("timm.")


def flatten(t: Any) -> Any:
    return None  # timm composes with torchvision's Compose


def _interpolation(t: Any) -> tuple[int, bool]:
    """(filter, random) of a timm class's interpolation: one mode, or the
    (bilinear, bicubic) pair of interpolation="random"."""
    name = type(t).__name__
    mode = t.interpolation
    if isinstance(mode, (tuple, list)):
        names = {str(getattr(m, "value", m)) for m in mode}
        if names != _RANDOM or len(mode) != 2:
            raise UnsupportedTransform(
                f"{name} choosing among {sorted(names)} (only timm's random "
                "bilinear or bicubic is fused)"
            )
        return _core.INTERPOLATIONS.index("bilinear"), True
    return filter_of(name, mode), False


def _rrc(t: Any) -> Step:
    filt, random = _interpolation(t)
    return ResizedCrop(
        type(t).__name__,
        pair(t.size, "RandomResizedCropAndInterpolation"),
        (float(t.scale[0]), float(t.scale[1])),
        (float(t.ratio[0]), float(t.ratio[1])),
        filt,
        filter_random=random,
    )


def _factor_range(t: Any, attr: str) -> tuple[float, float]:
    """One of ResizeKeepRatio's random ranges as two positive floats (the
    C check's); raises UnsupportedTransform for another."""
    name = type(t).__name__
    rng = getattr(t, attr)
    try:
        lo, hi = (float(v) for v in rng)
    except (TypeError, ValueError):
        raise UnsupportedTransform(f"{name}({attr}={rng!r})") from None
    if not (0 < lo < math.inf and 0 < hi < math.inf):
        raise UnsupportedTransform(f"{name}({attr}={rng!r}): not positive")
    return lo, hi


def _keep_random(t: Any) -> tuple[tuple[str, Any], ...]:
    """ResizeKeepRatio's random scale and aspect (train_crop_mode "rkrc",
    "rkrr") as the C spec's fields, drawn in C from the sample's stream
    as timm's get_params draws them (rl_transform's keep_scale_*,
    keep_aspect_*); () without them."""
    name = type(t).__name__
    scale_p, aspect_p = float(t.random_scale_prob), float(t.random_aspect_prob)
    if not (0 <= scale_p and 0 <= aspect_p):
        raise UnsupportedTransform(f"{name} with a negative probability")
    fields: list[tuple[str, Any]] = []
    if scale_p > 0:
        fields += [
            ("keep_scale_p", min(scale_p, 1.0)),  # random() < p: 1 and over alike
            ("keep_scale", _factor_range(t, "random_scale_range")),
            ("keep_scale_area", int(bool(t.random_scale_area))),
        ]
    if aspect_p > 0:
        fields += [
            ("keep_aspect_p", min(aspect_p, 1.0)),
            ("keep_aspect", _factor_range(t, "random_aspect_range")),
        ]
    return tuple(fields)


def _resize_keep_ratio(t: Any) -> Step:
    name = type(t).__name__
    filt, random = _interpolation(t)
    return Resize(
        name,
        pair(t.size, name),
        filt,
        filter_random=random,
        keep_longest=float(t.longest),
        keep_random=_keep_random(t),
    )


def _fill3(fill: Any) -> Optional[tuple[int, int, int]]:
    """A constant padding's (R, G, B) as Pillow fills an RGB image, or None
    for a fill that is not 1 or 3 numbers."""
    values = list(fill) if isinstance(fill, (list, tuple)) else [fill]
    if len(values) == 1:
        values *= 3
    if len(values) != 3 or not all(isinstance(v, (int, float)) for v in values):
        return None
    ints = [min(255, max(0, int(v))) for v in values]
    return ints[0], ints[1], ints[2]


def _crop_or_pad(t: Any, window: str) -> Step:
    """timm's CenterCropOrPad (window "center_crop_or_pad") or
    RandomCropOrPad ("random_crop_or_pad") on the image before it: a
    window of its size, each axis smaller than it padded with
    ``padding_mode`` (numpy's modes, as timm's F.pad on a PIL image) or the
    constant ``fill``; a CenterCropOrPad with a constant fill is a
    CenterCrop."""
    name = type(t).__name__
    size = pair(t.size, name)
    mode = t.padding_mode
    fill = _fill3(t.fill) if mode == "constant" else (0, 0, 0)
    if mode not in _core.PAD_MODES or fill is None:
        reason = f"{name}(padding_mode={mode!r}, fill={t.fill!r})"
        return Unfused(name, reason, geometry=True)
    if window == "center_crop_or_pad" and mode == "constant":
        return CenterCrop(name, size, fill)
    fields = {
        "out_h": size[0],
        "out_w": size[1],
        "window": _core.WINDOWS.index(window),
        "pad_mode": _core.PAD_MODES.index(mode),
        "fill_r": fill[0],
        "fill_g": fill[1],
        "fill_b": fill[2],
    }
    return RandomCrop(name, fields)


_MODES = {"": 0, "const": 0, "rand": 1, "pixel": 2}


def erase_of(t: Any, dtype: str) -> Element:
    """timm's RandomErasing as the C op timm_erase on an output of dtype;
    raises NotFused."""
    most = _core.OP_LIMITS["timm_erase"]["max_count"]
    if t.mode not in _MODES:
        raise NotFused(f"RandomErasing(mode={t.mode!r})")
    if t.max_count > most:
        raise NotFused(f"RandomErasing(max_count={t.max_count}): at most {most}")
    if _MODES[t.mode] and dtype == "uint8":
        raise NotFused(f"RandomErasing(mode={t.mode!r}) on a uint8 image")
    fields = {
        "p": t.probability,
        "area": [t.min_area, t.max_area],
        "log_aspect": list(t.log_aspect_ratio),
        "count": [t.min_count, t.max_count],
        "mode": _MODES[t.mode],
    }
    if not all(math.isfinite(v) for v in fields["log_aspect"]):
        raise NotFused("RandomErasing with an aspect of 0")
    return "timm_erase", pack("timm_erase", fields)


def _augment_step(t: Any) -> Optional[Step]:
    """timm's augmentations (RandAugment, AutoAugment, AugMix) as C ops
    (``timm_ops``: Pillow's kernels, timm's draws), or None for a class
    it does not take."""
    if not timm_ops.handles(t):
        return None
    return Ops(type(t).__name__, lambda h, w: timm_ops.ops_of(t, h, w))


def describe(t: Any) -> Step:
    name = type(t).__name__
    try:
        if name == "RandomResizedCropAndInterpolation":
            return _rrc(t)
        if name == "ResizeKeepRatio":
            return _resize_keep_ratio(t)
    except UnsupportedTransform as e:
        return Unfused(name, str(e), geometry=True)
    if name == "TrimBorder":
        border = t.border_size
        if not isinstance(border, int) or border < 0:
            return Unfused(name, f"{name}({border!r})", geometry=True)
        return Trim(name, border)
    if name == "CenterCropOrPad":
        return _crop_or_pad(t, "center_crop_or_pad")
    if name == "RandomCropOrPad":
        return _crop_or_pad(t, "random_crop_or_pad")
    # (on a tensor the Maybe classes return it as it is; the others take
    # PIL images)
    if name == "MaybeToTensor":
        return Convert(
            name, "dtype", "float32", scale=True, from_uint8=True, on_tensor="pass"
        )
    if name in ("MaybePILToTensor", "ToNumpy"):
        on_tensor = "pass" if name == "MaybePILToTensor" else "unfused"
        return Convert(name, "tensor", on_tensor=on_tensor)
    if name == "ToTensor":  # timm's: the 8-bit values, unscaled
        return Convert(
            name,
            "dtype",
            getattr(t, "dtype", None),
            from_uint8=True,
            on_tensor="unfused",
        )
    if name == "RandomErasing":
        return Erase(name, lambda dtype: erase_of(t, dtype))
    step = _augment_step(t)
    if step is not None:
        return step
    return Unfused(name, f"{name} has no C op")
