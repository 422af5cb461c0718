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
- ``RandomHorizontalFlip(p=0.5)`` and ``RandomVerticalFlip(p=0.5)`` after
  any of the above;
- then torchvision's augmentation transforms, in the user's order, run by
  the C augment stage on the 8-bit image (``_ops.CLASSES``): ColorJitter,
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
:func:`compile_transform` builds the plan.

The output is a batch of a fixed size: uint8 unless a conversion asks for
floats. The geometry follows
torchvision exactly (same boxes, same rounding); random draws come from a
generator keyed by (seed, epoch, sample index), so augmentations do not
depend on thread count or timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from . import _core, _ops, _steps, adapt
from ._convert import fold
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


def compile_views(transform: Any) -> list["Compiled"]:
    """:func:`compile_transform` of each view of a :class:`MultiView`, or of
    ``transform`` alone as its one view. Raises UnsupportedTransform naming
    the view (``view 1: ...``) when one of them has no fixed size."""
    if not isinstance(transform, MultiView):
        return [compile_transform(transform)]
    out = []
    for i, view in enumerate(transform.views):
        try:
            out.append(compile_transform(view))
        except UnsupportedTransform as e:
            raise UnsupportedTransform(f"view {i}: {e}") from None
    return out


def _pillow_passes() -> int:
    """The order of the resize's passes torchvision gets from the Pillow
    installed: Pillow 13 resamples vertically first when the height shrinks
    by more than twice as many pixels as the width (0), older Pillows always
    horizontally first (1). The clipping between the passes makes it
    visible: bicubic across a sharp edge differs by over 20 LSB."""
    try:
        from PIL import __version__ as version
    except ImportError:
        return 0
    major = version.split(".")[0]
    return 0 if not major.isdigit() or int(major) >= 13 else 1


@dataclass
class Compiled:
    """What :func:`compile_transform` makes of a transform.

    ``spec`` is the C core's geometry; ``dtype``, ``mul`` and ``add`` the
    output conversion (float value = v * mul[c] + add[c] for the 8-bit v);
    ``fused`` names the fused transforms; ``rest`` lists the transforms left
    to run in Python, in order, and ``reason`` says why its first could not
    be fused; ``spec["ops"]`` lists the C augment stage's ops; ``tensor_out`` says whether the fused part
    ends in a tensor (a conversion was fused) rather than an image.
    """

    spec: dict
    dtype: str = "uint8"
    mul: tuple = (1.0, 1.0, 1.0)
    add: tuple = (0.0, 0.0, 0.0)
    fused: list = field(default_factory=list)
    rest: list = field(default_factory=list)
    tensor_out: bool = False
    reason: str = ""  # why rest[0] was not fused


def _out_size(spec: dict, resize: Any, crop: Any) -> Optional[tuple[int, int]]:
    """The (h, w) every sample has after the geometry so far, or None."""
    if spec:
        return spec["out_h"], spec["out_w"]
    if crop is not None:
        return crop
    if resize is not None and resize.keep_longest is None:
        if not isinstance(resize.size, int):
            return resize.size
    return None


def _resize_fields(resize: Optional[_steps.Resize]) -> dict:
    """The spec fields of a Resize step (none: a crop alone, 1:1)."""
    if resize is None:
        return {"filter": 0}  # bilinear: a CenterCrop alone resamples 1:1
    fields: dict[str, Any] = {
        "filter": resize.filter,
        "filter_random": int(resize.filter_random),
    }
    if isinstance(resize.size, int):
        fields["resize_short"] = resize.size
    else:
        fields["resize_h"], fields["resize_w"] = resize.size
    if resize.keep_longest is not None:
        fields.update(keep_ratio=1, keep_longest=resize.keep_longest)
        fields.update(resize.keep_random)
    return fields


def compile_transform(transform: Any) -> Compiled:
    """Turn a transform (ringloader's, torchvision's or timm's) into the C
    core's plan.

    Each user transform is described by its library's adapter
    (``ringloader.adapt``) as a neutral step (``ringloader._steps``); the
    longest prefix of steps that can be fused is fused: geometry (a resize,
    a centre or random crop, or a random resized crop), the flips,
    augmentation ops, output conversions, then output ops (RandomErasing).
    What follows is returned in ``rest``, with the ``reason`` its first
    transform was not fused. Raises :class:`UnsupportedTransform` with a
    one-line reason when nothing with a fixed output size can be fused.
    """
    if isinstance(transform, MultiView):
        raise UnsupportedTransform(
            "a MultiView is several transforms: compile each (compile_views)"
        )
    items = adapt.flatten(transform)
    spec: dict[str, Any] = {}
    resize: Optional[_steps.Resize] = None
    crop: Optional[tuple[int, int]] = None
    fill = (0, 0, 0)  # a centre crop's padding
    rcrop: Optional[dict] = None  # RandomCrop's fields
    flip_p = vflip_p = 0.0
    trim = 0  # timm's TrimBorder, before everything
    state: dict[str, Any] = {"dtype": "uint8", "mul": [1.0] * 3, "add": [0.0] * 3}
    ops: list[tuple[str, list[float]]] = []
    converted = erased = flipped = vflipped = False
    reason = ""
    first: Optional[_steps.Step] = None
    i = 0
    while i < len(items):
        step = adapt.describe(items[i])
        first = first or step
        name = step.name
        geometric = (
            resize is not None or crop is not None or rcrop is not None or bool(spec)
        )
        cropped = crop if rcrop is None else (rcrop["out_h"], rcrop["out_w"])
        if isinstance(step, _steps.Unfused):
            reason = step.reason
            break
        if isinstance(step, _steps.Erase) and converted:
            try:
                erase = step.make(state["dtype"])
            except _ops.NotFused as e:
                reason = str(e)
                break
            if len(ops) >= _core.AUGMENT_MAX_OPS:
                reason = f"{name}: more than {_core.AUGMENT_MAX_OPS} ops and groups"
                break
            ops.append(erase)
            erased = True
        elif isinstance(step, _steps.Erase):
            reason = f"{name} before the conversion to a tensor"
            break
        elif isinstance(step, _steps.Convert):
            if not geometric or erased or not fold(step, state):
                if erased and geometric:
                    reason = f"{name} after RandomErasing"
                else:
                    reason = f"{name} is not fused at this point"
                break
            converted = True
        elif converted:
            reason = f"{name} after the conversion to a tensor"
            break
        elif isinstance(step, _steps.Ops):
            size = _out_size(spec, resize, cropped)
            if size is None:
                reason = f"{name} needs a fixed image size before it"
                break
            try:
                elements = step.make(*size)
            except _ops.NotFused as e:
                reason = str(e)
                break
            if len(ops) + len(elements) > _core.AUGMENT_MAX_OPS:
                reason = f"{name}: more than {_core.AUGMENT_MAX_OPS} ops and groups"
                break
            ops += elements
        elif isinstance(step, _steps.Trim) and i == 0:
            trim = step.border
        elif isinstance(step, _steps.Resize) and not geometric:
            resize = step
        elif (
            isinstance(step, (_steps.CenterCrop, _steps.RandomCrop))
            and crop is None
            and rcrop is None
            and not spec
            and not flipped
            and not vflipped
            and not ops
        ):
            # (After a flip, an odd margin would put the crop one column
            # off: torchvision rounds the left edge, not the mirrored one;
            # a random window is drawn on the unflipped image.)
            if isinstance(step, _steps.CenterCrop):
                crop, fill = step.size, step.fill
            else:
                rcrop = step.fields
        elif isinstance(step, _steps.ResizedCrop) and not geometric:
            h, w = step.size
            spec = {
                "kind": "random_crop",
                "out_h": h,
                "out_w": w,
                "scale": step.scale,
                "ratio": step.ratio,
                "filter": step.filter,
                "filter_random": int(step.filter_random),
            }
        elif (
            isinstance(step, _steps.Flip)
            and not (vflipped if step.vertical else flipped)
            and geometric
            and all(op in _ops.FLIP_SAFE for op, _ in ops)
        ):
            # The C core flips before the ops: a flip may follow ops that
            # act on pixels alone, which it commutes with.
            if step.vertical:
                vflip_p, vflipped = step.p, True
            else:
                flip_p, flipped = step.p, True
        else:
            reason = f"{name} is not fused after " + type(items[i - 1]).__name__
            if isinstance(step, _steps.Flip) and ops:
                reason += " (the C core flips before the ops; put the flip first)"
            break
        i += 1

    if not spec:
        if resize is None and crop is None and rcrop is None:
            if isinstance(first, _steps.Unfused) and first.geometry:
                raise UnsupportedTransform(first.reason)
            head = type(items[0]).__name__ if items else "no transform"
            raise UnsupportedTransform(
                f"the transform starts with {head}, not Resize, CenterCrop or "
                "RandomResizedCrop: ringloader needs a fixed output size to fuse, "
                "e.g. Compose([Resize(256), CenterCrop(224)])"
            )
        spec = {"kind": "resize_crop", **_resize_fields(resize)}
        if rcrop is not None:
            spec.update(kind="resize_random_crop", **rcrop)
        if resize is not None and isinstance(resize.size, int):
            if crop is None and rcrop is None:
                size = resize.size
                raise UnsupportedTransform(
                    f"Resize({size}) alone gives images of varying sizes; add "
                    f"CenterCrop({size}) or use Resize(({size}, {size}))"
                )
        elif resize is not None and crop is None and rcrop is None:
            if resize.keep_longest is not None:
                raise UnsupportedTransform(
                    f"{resize.name} alone gives images of varying sizes; add a "
                    "CenterCrop"
                )
            crop = resize.size
        if rcrop is None:
            spec["out_h"], spec["out_w"] = crop
            spec["fill_r"], spec["fill_g"], spec["fill_b"] = fill
    spec["flip_p"] = flip_p
    if trim:
        spec["trim"] = trim
    if vflip_p:
        spec["vflip_p"] = vflip_p
    spec["passes"] = _pillow_passes()
    if ops:
        spec["ops"] = ops
    for key in ("out_h", "out_w"):
        if not 0 < spec[key] <= _core.MAX_SIDE:
            raise UnsupportedTransform(f"output size {spec[key]} out of range")
    return Compiled(
        spec=spec,
        dtype=state["dtype"],
        mul=tuple(state["mul"]),
        add=tuple(state["add"]),
        fused=[type(t).__name__ for t in items[:i]],
        rest=items[i:],
        tensor_out=converted,
        reason=reason if i < len(items) else "",
    )
