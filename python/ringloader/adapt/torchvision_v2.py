"""torchvision's ``transforms.v2`` classes as neutral steps: its own
conversions (ToImage, ToPureTensor, ToDtype, with v2's per-type dtypes
not fused) and, for the classes v1 has too, ``torchvision_v1``'s
descriptions (the same attributes; v2's RandomCrop pads once and its
fills may be per type: ``torchvision_pad`` tells them apart)."""

from __future__ import annotations

from typing import Any

from .._steps import Convert, Step
from . import torchvision_v1


def claims(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.transforms.v2")


flatten = torchvision_v1.flatten


def describe(t: Any) -> Step:
    name = type(t).__name__
    if name == "ToImage":
        return Convert(name, "tensor")
    if name == "ToPureTensor":
        return Convert(name, "pure")
    if name == "ToDtype":
        dtype = getattr(t, "dtype", None)
        if isinstance(dtype, dict):
            dtype = None  # per-type dtypes
        return Convert(name, "dtype", dtype, scale=bool(getattr(t, "scale", False)))
    return torchvision_v1.describe(t)  # ToTensor, PILToTensor, the rest
