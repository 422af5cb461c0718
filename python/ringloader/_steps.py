"""The neutral description of a transform: what each user transform asks
of the C core, whatever library it comes from.

A library's adapter (``ringloader/adapt/``: torchvision v1, torchvision v2,
timm, ringloader's own classes) turns each of its transform objects into
one :class:`Step` of the vocabulary below; the compiler (``_compiler``)
builds the C core's plan from the steps alone, and never looks at a user's
class. Adapters and compiler meet here only: neither imports the other
(``transforms.compile_transform`` hands the one's steps to the other). A
new library is a new adapter file; a new kind of step is a new class here
and its case in the compiler.

An augment-stage element (:data:`Element`) is a C op's name and its
arguments, packed by :func:`pack` from the layout the C op declares
(``_core.OP_ARGS``); a step that cannot say its elements raises
:class:`NotFused`.

Every step keeps ``name``, the user's class name, for the messages that say
what was fused and why the rest was not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from . import _core

# One element of the C augment chain: (op name, packed arguments).
Element = tuple[str, list[float]]


class NotFused(ValueError):
    """This transform cannot run in the C augment stage (the message says
    why)."""


def _pack(fields: tuple, values: dict[str, Any], where: str) -> list[float]:
    """The numbers laid out by fields, from values by field name: a number,
    or a sequence of exactly the field's count (of numbers, or of dicts for
    a field of records)."""
    unknown = set(values) - {name for name, _, _ in fields}
    if unknown:
        raise KeyError(f"{where} has no field {sorted(unknown)}")
    out: list[float] = []
    for name, count, record in fields:
        if name not in values:
            raise KeyError(f"{where}: field {name} not given")
        value = values[name]
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(items) != count:
            raise ValueError(f"{where}.{name}: {count} values, not {len(items)}")
        for item in items:
            if record is None:
                out.append(float(item))
            else:
                out += _pack(record, item, f"{where}.{name}")
    return out


def pack(op: str, values: dict[str, Any]) -> list[float]:
    """The arguments of C op ``op`` from its fields' values, by name (the
    fields in order, each a count of numbers or of records, as
    ``_core.OP_ARGS`` declares them)."""
    return _pack(_core.OP_ARGS[op], values, op)


@dataclass(frozen=True)
class Step:
    """Base of every step: the user's class name; ``unwraps``: whether
    its torch ops make a tv_tensors.Image a plain tensor ("never": v2's
    and ringloader's classes, a v1 or timm erase, a step of p 0;
    "sometimes": a v1 or timm step of 0 < p < 1, on the samples it acts
    on; "always": the other v1 and timm steps; ``adapt._unwraps``)."""

    name: str
    unwraps: str = field(default="always", kw_only=True)


@dataclass(frozen=True)
class Resize(Step):
    """Resize to ``size``: an int (the shorter side, the longer as
    torchvision truncates it) or (h, w); ``max_size`` > 0 with an int size:
    torchvision's limit on the longer side (size 0: the longer side to it,
    v2's Resize(None, max_size)); ``size_hi`` > size: the shorter side
    drawn per sample in [size, size_hi) (v2's RandomResize); ``choices``:
    v2's RandomShortestSize's min_size list (size 0, ``max_size`` its own);
    ``jitter``: v2's ScaleJitter as the C spec's fields (``jitter_w``,
    ``jitter_h``, ``jitter_scale``; size 0), its size drawn per sample;
    ``keep_longest`` not None: timm's
    ResizeKeepRatio to (h, w), each side rounded, scaled by the axes'
    ratios weighted ``keep_longest`` on the larger; ``keep_random``: its
    random scale and aspect as the C spec's fields (``keep_scale_p``,
    ``keep_scale``, ``keep_scale_area``, ``keep_aspect_p``,
    ``keep_aspect``), drawn per sample."""

    size: Union[int, tuple[int, int]]
    filter: int
    filter_random: bool = False
    keep_longest: Optional[float] = None
    keep_random: tuple[tuple[str, Any], ...] = ()
    max_size: int = 0
    size_hi: int = 0
    choices: tuple[int, ...] = ()
    jitter: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Trim(Step):
    """Cut ``border`` pixels from each side of the image before anything
    else (timm's TrimBorder, the eval chain's ``crop_border_pixels``)."""

    border: int


@dataclass(frozen=True)
class CenterCrop(Step):
    """The centre (h, w), padded with ``fill`` (R, G, B) where the image is
    smaller."""

    size: tuple[int, int]
    fill: tuple[int, int, int] = (0, 0, 0)


@dataclass(frozen=True)
class RandomCrop(Step):
    """A window after padding: torchvision's RandomCrop (``fields`` from
    ``adapt.torchvision_pad.random_crop_fields``) or, with the C spec's ``window`` field,
    timm's CenterCropOrPad or RandomCropOrPad; ``fields`` are the C
    spec's. ``fills``: a v2 fill per type's constant for an image converted
    before the crop ((kind, (r, g, b) or None) by the conversion's
    ``image`` kind; ``fields`` hold the PIL image's)."""

    fields: dict
    fills: tuple = ()


@dataclass(frozen=True)
class ResizedCrop(Step):
    """A random box (area fraction in ``scale``, aspect in ``ratio``, as
    torchvision's and timm's RandomResizedCrop draw it) resized to
    ``size``; ``filter_random``: bilinear or bicubic drawn per sample."""

    size: tuple[int, int]
    scale: tuple[float, float]
    ratio: tuple[float, float]
    filter: int
    filter_random: bool = False


@dataclass(frozen=True)
class IoUCrop(Step):
    """v2's RandomIoUCrop: a crop drawn per sample from its boxes, each
    sample the size of its crop (a varying output); ``fields`` are the C
    spec's (``iou_scale``, ``iou_aspect``, ``iou_options``, ``iou_trials``)."""

    fields: dict


@dataclass(frozen=True)
class ZoomOut(Step):
    """v2's RandomZoomOut: the image placed on a canvas drawn per sample,
    the rest a constant fill (a varying output; a RandomIoUCrop may
    follow); ``fields`` are the C spec's (``zoom_out``, ``zoom_p``,
    ``zoom_side`` and the PIL image's fill as ``fill_r``, ``fill_g``,
    ``fill_b``), ``fills`` as a RandomCrop's: a v2 fill per type's entry
    for an image converted before it."""

    fields: dict
    fills: tuple = ()


@dataclass(frozen=True)
class Flip(Step):
    """Mirror with probability ``p``, left-right or top-bottom."""

    p: float
    vertical: bool = False


@dataclass(frozen=True)
class Ops(Step):
    """Ops of the C augment stage on the 8-bit image: ``make(h, w)`` gives
    the chain's elements for h x w samples or raises :class:`NotFused`."""

    make: Callable[[int, int], list[Element]] = field(compare=False)


@dataclass(frozen=True)
class Source(Step):
    """Source ops of the C augment stage (``augment.h``): ``elements`` run
    on the whole decoded image before any geometry, as torchvision runs a
    colour transform written before the crops and resizes (v2's
    RandomPhotometricDistort: its contrast's mean is the whole image's, a
    zoom-out's or crop's padding is never coloured)."""

    elements: tuple = ()


@dataclass(frozen=True)
class Convert(Step):
    """An output conversion, folded into one multiply-add and a dtype
    (``_compiler``'s ``fold``): ``kind`` is "tensor" (an image to a uint8 tensor,
    only from uint8), "pure" (a tensor stays one), "dtype" (to ``dtype``,
    scaling 0..255 to 0..1 when ``scale``; ``dtype`` None: not fusable;
    ``from_uint8``: only from a uint8 image, as ToTensor) or "normalize"
    (``mean``, ``std``; ``inplace`` is not fused). ``per_type``: v2's
    ToDtype with a dtype per type, the image's entry by the type the
    conversion before made ((("image", d), ("tensor", d)): a
    tv_tensors.Image's, a plain tensor's; d None leaves it). ``on_pil``:
    what the step does to the PIL image the dataset gives, met before any
    conversion: "convert" it, "pass" it by unchanged (v2's ToDtype,
    ConvertImageDtype and ToPureTensor) or "unfused" (left to Python, as
    v1's ConvertImageDtype, which takes tensors only and raises there as
    under torch). ``on_tensor``: what a conversion from a PIL image does to
    an image a conversion before it made a tensor: "convert" (the dtype
    and normalize kinds act on tensors), "pass" (v2's PILToTensor and
    ToTensor, timm's MaybeToTensor and MaybePILToTensor return it as it
    is), "image" (v2's ToImage: the same values, a tv_tensors.Image) or
    "unfused" (v1's ToTensor and PILToTensor, timm's ToTensor and ToNumpy,
    which take PIL images)."""

    kind: str
    dtype: Optional[str] = None
    per_type: tuple = ()
    on_pil: str = "convert"
    on_tensor: str = "convert"
    scale: bool = False
    from_uint8: bool = False
    mean: Any = None
    std: Any = None
    inplace: bool = False


@dataclass(frozen=True)
class Erase(Step):
    """An output op after the conversion (RandomErasing): ``make(dtype)``
    gives its element for an output of that dtype or raises
    :class:`NotFused`."""

    make: Callable[[str], Element] = field(compare=False)


@dataclass(frozen=True)
class Unfused(Step):
    """A transform no C step stands for; ``reason`` says why.
    ``geometry``: it is a resize or crop with parameters the core has not
    (a transform starting with it is refused with that reason)."""

    reason: str
    geometry: bool = False
