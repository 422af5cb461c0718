"""torchvision's ``transforms`` (v1) classes as neutral steps.

The geometry (Resize, CenterCrop, RandomResizedCrop, RandomCrop, the
flips), the augmentation ops (``torchvision_ops``: ColorJitter, RandAugment, the
composition classes...), the output conversions (ToTensor, PILToTensor,
ConvertImageDtype, Normalize) and RandomErasing. transforms.v2's classes of
the same names take the same attributes; ``torchvision_v2`` adds its own
and uses :func:`describe_common` for the rest.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _core
from .._steps import (
    CenterCrop,
    Convert,
    Erase,
    Flip,
    Ops,
    RandomCrop,
    Resize,
    ResizedCrop,
    Step,
    Unfused,
)
from ..errors import UnsupportedTransform
from . import torchvision_ops
from .torchvision_pad import random_crop_fields, tensor_fills

# What a resize's interpolation may be called (InterpolationMode's values,
# Pillow's int codes) -> the place stage's filter (_core.INTERPOLATIONS).
# NEAREST_EXACT on a PIL image is Pillow's NEAREST, as torchvision maps it.
INTERPOLATIONS = {
    None: "bilinear",
    "bilinear": "bilinear",
    2: "bilinear",
    "bicubic": "bicubic",
    3: "bicubic",
    "nearest": "nearest",
    "nearest-exact": "nearest",
    0: "nearest",
}


def claims(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.")


def flatten(t: Any) -> Any:
    if type(t).__name__ == "Compose" and hasattr(t, "transforms"):
        return list(t.transforms)
    return None


def filter_of(name: str, mode: Any) -> int:
    """The place stage's filter index for an interpolation (an
    InterpolationMode, a Pillow int code or a name); UnsupportedTransform
    for the others."""
    value = getattr(mode, "value", mode)
    key = value if isinstance(value, (str, int)) or value is None else repr(value)
    if key not in INTERPOLATIONS:
        raise UnsupportedTransform(
            f"{name} with interpolation={value!r} (only bilinear, "
            "bicubic and nearest are fused)"
        )
    return _core.INTERPOLATIONS.index(INTERPOLATIONS[key])


def resize_filter(t: Any) -> int:
    """A torchvision Resize's or RandomResizedCrop's filter, refusing what
    only torchvision's resize does (no antialias; RandomResizedCrop's
    max_size)."""
    name = type(t).__name__
    filt = filter_of(name, getattr(t, "interpolation", None))
    if getattr(t, "antialias", True) is False:
        raise UnsupportedTransform(
            f"{name}(antialias=False) (only antialiased resize is fused)"
        )
    if name == "RandomResizedCrop" and getattr(t, "max_size", None) is not None:
        raise UnsupportedTransform(f"{name}(max_size=...)")
    return filt


def pair(size: Any, name: str) -> tuple[int, int]:
    """(h, w) of an int or a one- or two-element sequence."""
    if isinstance(size, int):
        return size, size
    size = tuple(int(s) for s in size)
    if len(size) == 1:
        return size[0], size[0]
    if len(size) != 2:
        raise ValueError(f"{name} size must be an int or (h, w), not {size!r}")
    return size[0], size[1]


def size_of(t: Any) -> Any:
    """t.size, a one-element sequence as its int."""
    size = t.size
    if isinstance(size, (list, tuple)) and len(size) == 1:
        return int(size[0])
    return size


def _resize(t: Any, filt: int) -> Step:
    """Resize to (h, w) or of the shorter side, with torchvision's
    max_size on the longer (v2's size None: 0, the longer side alone)."""
    size = size_of(t)
    max_size = getattr(t, "max_size", None)
    if size is None and max_size is not None:
        size = 0
    elif not isinstance(size, int):
        size = pair(size, "Resize")
        if max_size is not None:
            raise UnsupportedTransform(
                "Resize((h, w), max_size=...) (max_size is for a shorter-side size)"
            )
    if max_size is not None and isinstance(size, int) and size >= max_size:
        raise UnsupportedTransform(
            f"Resize({size}, max_size={max_size}): max_size must be larger than size"
        )
    return Resize(type(t).__name__, size, filt, max_size=int(max_size or 0))


def _resized_crop(t: Any, filt: int) -> Step:
    return ResizedCrop(
        type(t).__name__,
        pair(size_of(t), "RandomResizedCrop"),
        (float(t.scale[0]), float(t.scale[1])),
        (float(t.ratio[0]), float(t.ratio[1])),
        filt,
    )


def _geometry(t: Any, resize_filter: Callable[[Any], int]) -> Step:
    name = type(t).__name__
    if name == "Resize":
        return _resize(t, resize_filter(t))
    if name == "RandomResizedCrop":
        return _resized_crop(t, resize_filter(t))
    if name == "CenterCrop":
        return CenterCrop(name, pair(size_of(t), "CenterCrop"))
    if name == "RandomCrop":
        fields = random_crop_fields(t, pair(size_of(t), "RandomCrop"))
        return RandomCrop(name, fields, fills=tensor_fills(t))
    if name == "RandomHorizontalFlip":
        return Flip(name, float(t.p))
    if name == "RandomVerticalFlip":
        return Flip(name, float(t.p), vertical=True)
    raise KeyError(name)


GEOMETRY = (
    "Resize",
    "CenterCrop",
    "RandomResizedCrop",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
)


def _ops_step(t: Any) -> Step:
    return Ops(type(t).__name__, lambda h, w: torchvision_ops.ops_of(t, h, w))


def _erase_step(t: Any) -> Step:
    return Erase(type(t).__name__, lambda dtype: torchvision_ops.erase_of(t, dtype))


def normalize_step(t: Any) -> Step:
    return Convert(
        type(t).__name__,
        "normalize",
        mean=t.mean,
        std=t.std,
        inplace=getattr(t, "inplace", False) not in (False, None),
    )


def describe_common(
    t: Any, resize_filter: Callable[[Any], int] = resize_filter
) -> Step:
    """The step of a class v1 and v2 share; Unfused for the others."""
    name = type(t).__name__
    try:
        if name in GEOMETRY:
            return _geometry(t, resize_filter)
    except UnsupportedTransform as e:
        return Unfused(name, str(e), geometry=True)
    if name in torchvision_ops.CLASSES:
        return _ops_step(t)
    if name == "RandomErasing":
        return _erase_step(t)
    if name == "Normalize":
        return normalize_step(t)
    return Unfused(name, f"{name} has no C op")


def describe(t: Any) -> Step:
    name = type(t).__name__
    if name == "ToTensor":  # (v1's on a tensor raises, v2's passes it)
        return Convert(
            name, "dtype", "float32", scale=True, from_uint8=True, on_tensor="unfused"
        )
    if name == "PILToTensor":
        return Convert(name, "tensor", on_tensor="unfused")
    if name == "ConvertImageDtype":  # on a PIL image torchvision raises
        return Convert(
            name, "dtype", getattr(t, "dtype", None), scale=True, on_pil="unfused"
        )
    return describe_common(t)
