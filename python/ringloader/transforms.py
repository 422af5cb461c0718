"""Transforms that ringloader fuses into the JPEG decode.

Supported (as ringloader objects, or the torchvision ``transforms`` /
``transforms.v2`` objects of the same name, antialiased as Pillow's
``Image.resize``, which torchvision calls on the PIL images datasets give):

- ``Resize(size)``: ``size`` an int (shorter side, aspect kept) or (h, w);
- ``CenterCrop(size)``;
- ``Resize(...)`` followed by ``CenterCrop(...)``, e.g. the ImageNet eval
  pipeline ``Compose([Resize(256), CenterCrop(224)])``;
- ``RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3/4, 4/3))``;
- interpolations, for ``Resize`` and ``RandomResizedCrop``: ``"bilinear"``
  (the default), ``"bicubic"`` (Pillow's cubic, a = -0.5; its bytes are
  Pillow's) and ``"nearest"`` (the pixel Pillow picks; torchvision's
  ``NEAREST_EXACT`` is the same on a PIL image), given as torchvision's
  ``InterpolationMode``, Pillow's int codes (0 nearest, 2 bilinear,
  3 bicubic) or, for ringloader's classes, the name; ``BOX``, ``HAMMING``
  and ``LANCZOS`` are not fused;
- ``RandomCrop(size, padding, pad_if_needed, fill=0,
  padding_mode="constant")``, alone or after ``Resize``, e.g. the classic
  ``Compose([Resize(256), RandomCrop(224)])``: every ``padding_mode``
  (``"constant"``, ``"edge"``, ``"reflect"``, ``"symmetric"``, as numpy
  pads, repeated where the padding is wider than the image) and ``fill``
  (a number or an (R, G, B) tuple in 8-bit units, truncated to ints and
  clipped as Pillow fills a PIL image; v2's per-type dict gives its
  ``PIL.Image.Image`` or ``"others"`` entry);
- v2's ``RandomPhotometricDistort`` after ``ToImage`` (or ``PILToTensor``)
  and before any of the above: it runs on the whole decoded image before
  the geometry, as torchvision runs it (a source op);
- ``RandomHorizontalFlip(p=0.5)`` and ``RandomVerticalFlip(p=0.5)`` after
  any of the above;
- then torchvision's augmentation transforms, in the user's order, run by
  the C augment stage on the 8-bit image (``adapt.torchvision_ops.CLASSES``): ColorJitter,
  Grayscale(3), RandomGrayscale, GaussianBlur, RandomAutocontrast,
  RandomEqualize, RandomInvert, RandomPosterize, RandomSolarize,
  RandomAdjustSharpness, RandomRotation, RandomAffine, TrivialAugmentWide,
  RandAugment, AutoAugment and AugMix, and torchvision's composition
  classes over any of them, nested: ``RandomApply(transforms, p)``,
  ``RandomChoice(transforms, p)``, ``RandomOrder(transforms)``, with a
  ``Compose`` inside (a flip may also follow the ops that act on pixels
  alone);
- then output conversion: ``ToTensor``, ``PILToTensor``, ``ToImage``,
  ``ConvertImageDtype``, ``ToDtype(float32 | float16 | bfloat16,
  scale=...)`` and ``Normalize(mean, std)``, computed in C while the sample
  is still in cache;
- then ``RandomErasing``, on the converted output (after Normalize, as users
  write it);
- ``MultiView(*views)``: several such transforms (views) of one image, as
  self-supervised recipes crop and augment it (SimCLR, DINO): the image is
  read and decoded once, each view cropped, resampled and augmented from it.

timm's classes (``timm.data``: RandomResizedCropAndInterpolation with
its random interpolation, ResizeKeepRatio with its random scale and aspect,
CenterCropOrPad, RandomCropOrPad, TrimBorder, MaybeToTensor,
MaybePILToTensor, ToNumpy, RandomErasing) are fused as well: see
``ringloader/adapt/timm.py``. Each library's classes are read by its
adapter (``ringloader/adapt/``) into neutral steps (``_steps``), from which
:func:`compile_transform` has the compiler (``_compiler``) build the plan.

The output is a batch of a fixed size: uint8 unless a conversion asks for
floats. A transform without a crop (a shorter-side ``Resize`` alone, or only
flips and conversions, as torchvision's detection presets) gives each image
its own size: a Loader yields those as a list of (C, h, w) tensors. The geometry follows
torchvision exactly (same boxes, same rounding); random draws come from a
generator keyed by (seed, epoch, sample index), so augmentations do not
depend on thread count or timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from . import _core, adapt
from ._compiler import Compiled, compile_steps
from .errors import UnsupportedTransform

Size = Union[int, Sequence[int]]

__all__ = [
    "Compose",
    "MultiView",
    "ToDtype",
    "Normalize",
    "Resize",
    "CenterCrop",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "RandomCrop",
    "compile_transform",
    "UnsupportedTransform",
]


@dataclass(frozen=True)
class Resize:
    """Resize the shorter side to ``size`` (int) or the image to (h, w),
    antialiased, as torchvision's ``Resize`` on a PIL image;
    ``interpolation`` is "bilinear", "bicubic" or "nearest"."""

    size: Size
    interpolation: str = "bilinear"


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
    interpolation: str = "bilinear"


@dataclass(frozen=True)
class RandomHorizontalFlip:
    """Mirror left-right with probability ``p``."""

    p: float = 0.5


@dataclass(frozen=True)
class RandomVerticalFlip:
    """Mirror top-bottom with probability ``p``."""

    p: float = 0.5


@dataclass(frozen=True)
class RandomCrop:
    """torchvision's ``RandomCrop``: pad (``padding``: an int, (left/right,
    top/bottom) or (left, top, right, bottom); ``pad_if_needed``), then a
    window of ``size`` at a random offset; ``fill`` and ``padding_mode`` as
    torchvision's on a PIL image."""

    size: Size
    padding: Optional[Union[int, Sequence[int]]] = None
    pad_if_needed: bool = False
    fill: Any = 0
    padding_mode: str = "constant"


@dataclass(frozen=True)
class ToDtype:
    """Convert to ``dtype`` (torch.float32, float16 or bfloat16); with
    ``scale=True`` map 0..255 to 0..1, as torchvision's ``ToDtype``."""

    dtype: Any
    scale: bool = False


@dataclass(frozen=True)
class Normalize:
    """``(x - mean) / std`` per channel, on a float output."""

    mean: Sequence[float]
    std: Sequence[float]


class Compose:
    """A sequence of transforms, as torchvision's ``Compose``."""

    def __init__(self, transforms: Sequence[Any]) -> None:
        self.transforms = list(transforms)

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


class MultiView:
    """Several views of one image, each its own transform: a torchvision
    ``Compose`` (v1 or v2) or ringloader's, with its own geometry, ops,
    output size and dtype. As self-supervised recipes write it::

        MultiView(global_view, global_view, *[local_view] * 8)  # DINO

    Under ringloader's loaders, each image is read and decoded once (the
    region covering every view's box, at the finest DCT scale any view
    needs) and each view is cropped, resampled and augmented from it; a
    batch is ``(views, labels)``, ``views`` a list of tensors, one per view,
    each ``(B, C, H_i, W_i)``. View ``i`` of a sample draws its randomness
    from (seed, epoch, sample, i). A view ringloader cannot fuse entirely
    finishes in Python, as a single transform does.

    Called on one image (a PIL image or a tensor, as torch's DataLoader
    calls a dataset's transform), it returns the list of each view's
    output, so the same object works under ``torch.utils.data.DataLoader``
    (whose ``default_collate`` makes the same list of batches).
    """

    def __init__(self, *views: Any) -> None:
        if len(views) == 1 and isinstance(views[0], (list, tuple)):
            views = tuple(views[0])
        if not 1 <= len(views) <= _core.MAX_VIEWS:
            raise ValueError(
                f"MultiView takes 1..{_core.MAX_VIEWS} views, not {len(views)}"
            )
        self.views = list(views)

    def __call__(self, image: Any) -> list[Any]:
        return [view(image) for view in self.views]

    def __repr__(self) -> str:
        inner = ", ".join(repr(v) for v in self.views)
        return f"MultiView({inner})"


def compile_views(transform: Any, varying: bool = False) -> list["Compiled"]:
    """:func:`compile_transform` of each view of a :class:`MultiView`, or of
    ``transform`` alone as its one view (``varying``: that one may give
    each sample its own size; a MultiView's views may not). Raises
    UnsupportedTransform naming the view (``view 1: ...``) when one of them
    has no fixed size."""
    if not isinstance(transform, MultiView):
        return [compile_transform(transform, varying)]
    out = []
    for i, view in enumerate(transform.views):
        try:
            out.append(compile_transform(view))
        except UnsupportedTransform as e:
            raise UnsupportedTransform(f"view {i}: {e}") from None
    return out


def compile_transform(transform: Any, varying: bool = False) -> Compiled:
    """Turn a transform (ringloader's, torchvision's or timm's) into the C
    core's plan.

    The one place adapters and compiler meet: the transform is flattened
    and each user transform described by its library's adapter
    (``ringloader.adapt``) as a neutral step (``ringloader._steps``), which
    the compiler (``ringloader._compiler``) reads in order; the longest
    prefix of steps that can be fused is fused: geometry (a resize,
    a centre or random crop, or a random resized crop), the flips,
    augmentation ops, output conversions, then output ops (RandomErasing).
    What follows is returned in ``rest``, with the ``reason`` its first
    transform was not fused. Raises :class:`UnsupportedTransform` with a
    one-line reason when nothing with a fixed output size can be fused.

    ``varying``: the caller takes images of varying sizes (the Loader,
    which yields them as a list): a transform with no crop (a shorter-side
    ``Resize``, or only flips and conversions, as torchvision's detection
    presets) compiles to a spec with ``varying`` 1 and no output size,
    each sample the size of its image after the resize. Such a transform
    is fused whole or refused: what would run after it (augmentation ops,
    a Python tail) needs a fixed size.
    """
    if isinstance(transform, MultiView):
        raise UnsupportedTransform(
            "a MultiView is several transforms: compile each (compile_views)"
        )
    items = adapt.flatten(transform)  # the user's transforms, in order
    steps = map(adapt.describe, items)  # each one's step, as it is read
    compiled = compile_steps(steps, varying)  # the longest fused prefix
    compiled.rest = items[len(compiled.fused) :]
    return compiled
