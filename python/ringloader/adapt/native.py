"""ringloader's own transform classes (``ringloader.transforms``: Resize,
CenterCrop, RandomResizedCrop, RandomCrop, the flips, ToDtype, Normalize,
Compose) as neutral steps. They take torchvision's attributes, with
interpolations by name and no antialias or max_size to refuse."""

from __future__ import annotations

from typing import Any

from .._steps import Convert, RandomCrop, Step, Unfused
from ..errors import UnsupportedTransform
from . import torchvision_v1
from .torchvision_pad import PadIfSmallerCrop, fixed_size_crop_fields


def claims(t: Any) -> bool:
    # (PadIfSmallerCrop holds torchvision objects: torchvision_v2's.)
    mine = type(t).__module__.startswith("ringloader.")
    return mine and not isinstance(t, PadIfSmallerCrop)


flatten = torchvision_v1.flatten


def _filter(t: Any) -> int:
    return torchvision_v1.filter_of(type(t).__name__, getattr(t, "interpolation", None))


def describe(t: Any) -> Step:
    name = type(t).__name__
    if name == "ToDtype":
        return Convert(name, "dtype", t.dtype, scale=bool(t.scale))
    if name in torchvision_v1.GEOMETRY or name == "Normalize":
        return torchvision_v1.describe_common(t, resize_filter=_filter)
    if name == "FixedSizeCrop":  # transforms_v2's
        try:
            fields, fills = fixed_size_crop_fields(t)
        except UnsupportedTransform as e:
            return Unfused(name, str(e), geometry=True)
        return RandomCrop(name, fields, fills=fills)
    return Unfused(name, f"{name} has no C op")
