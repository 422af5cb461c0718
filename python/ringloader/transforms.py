"""Transforms that ringloader fuses into the JPEG decode.

Supported (as ringloader objects, or the torchvision ``transforms`` /
``transforms.v2`` objects of the same name with default bilinear,
antialiased interpolation):

- ``Resize(size)``: ``size`` an int (shorter side, aspect kept) or (h, w);
- ``CenterCrop(size)``;
- ``Resize(...)`` followed by ``CenterCrop(...)``, e.g. the ImageNet eval
  pipeline ``Compose([Resize(256), CenterCrop(224)])``;
- ``RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3))``;
- ``RandomHorizontalFlip(p=0.5)`` after any of the above.

The output is a uint8 batch of a fixed size. The geometry follows
torchvision exactly (same boxes, same rounding); random draws come from a
generator keyed by (seed, epoch, sample index), so augmentations do not
depend on thread count or timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

Size = Union[int, Sequence[int]]

__all__ = [
    "Compose",
    "Resize",
    "CenterCrop",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "compile_transform",
    "UnsupportedTransform",
]


class UnsupportedTransform(ValueError):
    """The transform cannot be fused into the decode."""


def _pair(size: Size, name: str) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    size = tuple(int(s) for s in size)
    if len(size) == 1:
        return size[0], size[0]
    if len(size) != 2:
        raise ValueError(f"{name} size must be an int or (h, w), not {size!r}")
    return size[0], size[1]


@dataclass(frozen=True)
class Resize:
    """Resize the shorter side to ``size`` (int) or the image to (h, w),
    bilinear with antialiasing, as torchvision's ``Resize``."""

    size: Size


@dataclass(frozen=True)
class CenterCrop:
    """Crop the centre (h, w), zero-padding when the image is smaller."""

    size: Size


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision's ``RandomResizedCrop``: a random box with area fraction
    in ``scale`` and aspect ratio in ``ratio``, resized to ``size``."""

    size: Size
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)


@dataclass(frozen=True)
class RandomHorizontalFlip:
    """Mirror left-right with probability ``p``."""

    p: float = 0.5


class Compose:
    """A sequence of transforms, as torchvision's ``Compose``."""

    def __init__(self, transforms: Sequence[Any]) -> None:
        self.transforms = list(transforms)

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


def _flatten(transform: Any) -> list[Any]:
    if transform is None:
        return []
    inner = getattr(transform, "transforms", None)
    if type(transform).__name__ == "Compose" and inner is not None:
        out = []
        for t in inner:
            out.extend(_flatten(t))
        return out
    if isinstance(transform, (list, tuple)):
        out = []
        for t in transform:
            out.extend(_flatten(t))
        return out
    return [transform]


def _is_torchvision(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.")


def _check_interpolation(t: Any) -> None:
    """Only torchvision's default (bilinear, antialiased) resize is fused."""
    if not _is_torchvision(t):
        return
    mode = getattr(t, "interpolation", None)
    name = getattr(mode, "value", mode)
    if name not in (None, "bilinear", 2):
        raise UnsupportedTransform(
            f"{type(t).__name__} with interpolation={name!r} (only bilinear "
            "is fused)"
        )
    if getattr(t, "antialias", True) is False:
        raise UnsupportedTransform(
            f"{type(t).__name__}(antialias=False) (only antialiased resize "
            "is fused)"
        )
    if getattr(t, "max_size", None) is not None:
        raise UnsupportedTransform(f"{type(t).__name__}(max_size=...)")


def _size_of(t: Any) -> Size:
    size = t.size
    if isinstance(size, (list, tuple)) and len(size) == 1:
        return int(size[0])
    return size


@dataclass
class _Geometry:
    spec: dict
    rest: list


def compile_transform(transform: Any) -> _Geometry:
    """Turn a transform (ringloader or torchvision) into the C core's spec.

    Returns the spec of the fused geometric part and the list of the
    transforms after it that were not fused (``rest``). Raises
    :class:`UnsupportedTransform` with a one-line reason when the geometric
    part cannot be fused or gives no fixed output size.
    """
    items = _flatten(transform)
    spec: dict[str, Any] = {}
    resize: Optional[Any] = None
    crop: Optional[tuple[int, int]] = None
    flip_p = 0.0
    i = 0
    while i < len(items):
        t = items[i]
        name = type(t).__name__
        if name == "Resize" and resize is None and crop is None and not spec:
            _check_interpolation(t)
            resize = _size_of(t)
        elif name == "CenterCrop" and crop is None and not spec:
            crop = _pair(_size_of(t), "CenterCrop")
        elif name == "RandomResizedCrop" and resize is None and crop is None and not spec:
            _check_interpolation(t)
            h, w = _pair(_size_of(t), "RandomResizedCrop")
            scale = tuple(float(s) for s in t.scale)
            ratio = tuple(float(r) for r in t.ratio)
            spec = {"kind": "random_crop", "out_h": h, "out_w": w,
                    "scale": scale, "ratio": ratio}
        elif name == "RandomHorizontalFlip" and flip_p == 0.0 and (
            resize is not None or crop is not None or spec
        ):
            flip_p = float(t.p)
        else:
            break
        i += 1

    if not spec:
        if resize is None and crop is None:
            raise UnsupportedTransform(
                "no Resize, CenterCrop or RandomResizedCrop to fuse: ringloader "
                "needs a transform with a fixed output size, e.g. "
                "Compose([Resize(256), CenterCrop(224)])"
            )
        spec = {"kind": "resize_crop"}
        if isinstance(resize, int):
            if crop is None:
                raise UnsupportedTransform(
                    f"Resize({resize}) alone gives images of varying sizes; add "
                    f"CenterCrop({resize}) or use Resize(({resize}, {resize}))"
                )
            spec["resize_short"] = int(resize)
        elif resize is not None:
            rh, rw = _pair(resize, "Resize")
            spec["resize_h"], spec["resize_w"] = rh, rw
            if crop is None:
                crop = (rh, rw)
        spec["out_h"], spec["out_w"] = crop
    spec["flip_p"] = flip_p
    for key in ("out_h", "out_w"):
        if not 0 < spec[key] <= 65535:
            raise UnsupportedTransform(f"output size {spec[key]} out of range")
    return _Geometry(spec=spec, rest=items[i:])
