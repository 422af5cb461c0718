"""The transform compiler: neutral steps (``_steps``) to the C core's plan.

It reads steps only, never a user's object nor an adapter: whatever
library a step was described from, the same rules of order hold (a crop
before a flip, ops once the size is fixed, conversions after them, output
ops after the conversion). :func:`compile_steps` takes the steps one at a
time, fusing while it can (:func:`_fuse`, a function per kind of step),
then writes the spec from what was fused (:func:`_spec`).

The output conversions (``_steps.Convert``: torchvision's ``ToTensor``,
``PILToTensor``, ``ToImage``, ``ConvertImageDtype``, ``ToDtype``,
``Normalize``, timm's ``MaybeToTensor`` and the like) fold into one
per-channel multiply-add and an output dtype (:func:`fold`) that the C
store stage applies while the sample is in cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from . import _core, _steps
from ._steps import Element, NotFused, Step
from .errors import UnsupportedTransform

# Ops that act on each pixel alone (or on the whole image's histogram):
# they commute with a horizontal flip, so a flip may follow them.
FLIP_SAFE = {
    "color_jitter",
    "grayscale",
    "gaussian_blur",
    "autocontrast",
    "equalize",
    "invert",
    "posterize",
    "solarize",
    "sharpness",
    # a group commutes with a flip when its children do, and they are in
    # the chain with it
    "random_apply",
    "random_choice",
    "random_order",
    "compose",
}

_FLOAT_DTYPES = {"float32", "float16", "bfloat16"}


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _channels(values: Any, name: str) -> tuple[float, float, float]:
    vals = [float(v) for v in (values if hasattr(values, "__len__") else [values])]
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) != 3:
        raise UnsupportedTransform(
            f"{name} needs 1 or 3 channel values, got {len(vals)}"
        )
    return vals[0], vals[1], vals[2]


def fold(step: _steps.Convert, state: dict) -> bool:
    """Folds a conversion into state (dtype, mul, add); False if it is not
    one fused at this point (state is then unaltered)."""
    kind = step.kind
    if kind == "pure":
        if "image" in state:
            state["image"] = "tensor"  # a tv_tensors.Image made plain
        return True
    if kind == "tensor":
        if state["dtype"] != "uint8":
            return False
        # v2's ToImage makes a tv_tensors.Image, the others a plain tensor:
        # a ToDtype with a dtype per type takes that type's entry.
        state["image"] = "image" if step.name == "ToImage" else "tensor"
        return True
    if kind == "dtype":
        dtype = step.dtype
        if step.per_type:
            if "image" not in state:
                return False  # on a PIL image: v2's ToDtype leaves it
            entries = dict(step.per_type)
            kind = state["image"]
            if kind == "mixed":
                # an Image on some samples, a plain tensor on others
                if entries["image"] != entries["tensor"]:
                    return False
                kind = "image"  # (either entry: the same)
            dtype = entries[kind]
            if dtype is None:
                return True  # v2 leaves the image as it is
        if dtype is None or (step.from_uint8 and state["dtype"] != "uint8"):
            return False
        target = _dtype_name(dtype)
        if target == "uint8":
            return state["dtype"] == "uint8"
        if target not in _FLOAT_DTYPES:
            return False
        if state["dtype"] == "uint8" and step.scale:
            state.update(mul=[m / 255.0 for m in state["mul"]])
        state["dtype"] = target
        return True
    if kind == "normalize":
        if state["dtype"] == "uint8" or step.inplace:
            return False
        mean = _channels(step.mean, "Normalize mean")
        std = _channels(step.std, "Normalize std")
        if any(s == 0 for s in std):
            raise UnsupportedTransform("Normalize with a zero std")
        state["mul"] = [m / s for m, s in zip(state["mul"], std)]
        state["add"] = [(a - m) / s for a, m, s in zip(state["add"], mean, std)]
        return True
    return False


@dataclass
class Compiled:
    """What the compiler makes of a transform.

    ``spec`` is the C core's geometry; ``dtype``, ``mul`` and ``add`` the
    output conversion (float value = v * mul[c] + add[c] for the 8-bit v);
    ``fused`` names the fused transforms; ``rest`` lists the transforms left
    to run in Python, in order, and ``reason`` says why its first could not
    be fused; ``spec["ops"]`` lists the C augment stage's ops; ``tensor_out``
    says whether the fused part ends in a tensor (a conversion was fused)
    rather than an image; ``image`` is "image" where that tensor is a
    ``tv_tensors.Image`` (v2's ToImage, not made plain after), "mixed"
    where ``mixed`` (a random v1 or timm step) made it plain on some
    samples only; ``passed`` names the fused steps that passed a PIL image
    by (v2's ToDtype...).
    """

    spec: dict
    dtype: str = "uint8"
    mul: tuple = (1.0, 1.0, 1.0)
    add: tuple = (0.0, 0.0, 0.0)
    fused: list = field(default_factory=list)
    rest: list = field(default_factory=list)
    tensor_out: bool = False
    reason: str = ""  # why rest[0] was not fused
    image: str = ""
    passed: list = field(default_factory=list)
    mixed: str = ""


@dataclass
class _Plan:
    """What the steps fused so far ask of the core."""

    resize: Optional[_steps.Resize] = None
    crop: Optional[tuple[int, int]] = None  # a centre crop's size
    fill: tuple[int, int, int] = (0, 0, 0)  # a centre crop's padding
    rcrop: Optional[dict] = None  # a RandomCrop step's spec fields
    box: dict = field(default_factory=dict)  # a ResizedCrop's whole spec
    iou: Optional[dict] = None  # a RandomIoUCrop's spec fields (varying)
    zoom: Optional[dict] = None  # a RandomZoomOut's spec fields (varying)
    flip_p: float = 0.0
    vflip_p: float = 0.0
    flipped: bool = False
    vflipped: bool = False
    trim: int = 0  # timm's TrimBorder, before everything
    out: dict = field(
        default_factory=lambda: {"dtype": "uint8", "mul": [1.0] * 3, "add": [0.0] * 3}
    )
    ops: list[Element] = field(default_factory=list)
    source: list[Element] = field(default_factory=list)  # before the geometry
    converted: bool = False
    erased: bool = False
    names: list[str] = field(default_factory=list)  # the fused steps
    # of them, the steps that left the PIL image as it was
    passed: list[str] = field(default_factory=list)
    # the step after which the image is an Image on some samples and a
    # plain tensor on others (a random v1 step after ToImage)
    mixed: str = ""
    # The caller takes samples of their own sizes (a Loader): a transform
    # without a crop (a shorter-side Resize, or no geometry at all) is
    # then fused as a varying spec rather than refused.
    varying: bool = False

    @property
    def untouched(self) -> bool:
        """Whether the image is as the dataset gave it: no step fused so
        far but ones that passed the PIL image by."""
        return len(self.names) == len(self.passed)

    @property
    def geometric(self) -> bool:
        """Whether a resize or crop was fused."""
        return (
            self.resize is not None
            or self.crop is not None
            or self.rcrop is not None
            or bool(self.box)
            or self.iou is not None
            or self.zoom is not None
        )

    @property
    def zoomed_only(self) -> bool:
        """Whether a RandomZoomOut is the only geometry so far (a
        RandomIoUCrop may follow it)."""
        return (
            self.zoom is not None
            and self.iou is None
            and not (self.resize or self.crop or self.rcrop or self.box)
        )

    @property
    def sized(self) -> bool:
        """Whether flips and conversions may follow: a resize or crop was
        fused, or the caller takes varying sizes (the image as it is)."""
        return self.geometric or self.varying

    def size(self) -> Optional[tuple[int, int]]:
        """The (h, w) every sample has after the geometry so far, or None."""
        if self.box:
            return self.box["out_h"], self.box["out_w"]
        if self.rcrop is not None:
            return self.rcrop["out_h"], self.rcrop["out_w"]
        if self.crop is not None:
            return self.crop
        resize = self.resize
        if resize is not None and resize.keep_longest is None:
            if not isinstance(resize.size, int):
                return resize.size
        return None


def _too_many(name: str) -> str:
    return f"{name}: more than {_core.AUGMENT_MAX_OPS} ops and groups"


def _erase(plan: _Plan, step: _steps.Erase) -> Optional[str]:
    """An output op, after the conversion."""
    if not plan.converted:
        return f"{step.name} before the conversion to a tensor"
    try:
        element = step.make(plan.out["dtype"])
    except NotFused as e:
        return str(e)
    if len(plan.ops) >= _core.AUGMENT_MAX_OPS:
        return _too_many(step.name)
    plan.ops.append(element)
    plan.erased = True
    return None


def _convert(plan: _Plan, step: _steps.Convert) -> Optional[str]:
    """An output conversion, after the geometry and before output ops (or
    to a uint8 tensor first, which geometry may follow: _tensor_geometry)."""
    if not plan.converted and step.on_pil != "convert":
        # Still the dataset's PIL image: torchvision passes it by or raises.
        if step.on_pil == "unfused":
            return (
                f"{step.name} takes a tensor image, not the PIL image the "
                "dataset gives: convert it first (PILToTensor; v2: ToImage)"
            )
        plan.passed.append(step.name)
        return None
    if plan.converted and step.on_tensor != "convert":
        # A conversion from a PIL image, met by a tensor.
        if step.on_tensor == "unfused":
            return (
                f"{step.name} takes a PIL image, not the tensor the steps "
                "before it make"
            )
        if step.on_tensor == "image":
            plan.out["image"] = "image"
        return None
    geometric = plan.sized or (step.kind == "tensor" and plan.untouched)
    if not geometric or plan.erased or not fold(step, plan.out):
        if plan.erased and geometric:
            return f"{step.name} after RandomErasing"
        return f"{step.name} is not fused at this point"
    plan.converted = True
    return None


# Two sizes a varying plan's ops are made for: ops whose arguments are the
# same for both draw and run on each sample's own size (the C chain gets
# it), as torchvision's do on each image; others (a policy's magnitude
# tables in pixels) are made for one size.
_PROBE_SIZES = ((61, 97), (203, 149))


def _elements(plan: _Plan, step: _steps.Ops) -> Any:
    """The chain's elements for step on the geometry's size, or on a
    varying plan's samples of their own sizes; a str saying why not."""
    size = plan.size()
    try:
        if size is not None:
            return step.make(*size)
        if not plan.varying:
            return f"{step.name} needs a fixed image size before it"
        made = [step.make(*probe) for probe in _PROBE_SIZES]
    except NotFused as e:
        return str(e)
    if any(m != made[0] for m in made):
        return (
            f"{step.name}'s arguments depend on the image size (its magnitudes "
            "in pixels): it needs a fixed image size before it"
        )
    return made[0]


def _augment(plan: _Plan, step: _steps.Ops) -> Optional[str]:
    """Augment-stage ops, made for the size the geometry gives (or each
    sample's own, in a varying plan)."""
    elements = _elements(plan, step)
    if isinstance(elements, str):
        return elements
    if len(plan.ops) + len(elements) > _core.AUGMENT_MAX_OPS:
        return _too_many(step.name)
    plan.ops += elements
    return None


def _source(plan: _Plan, step: _steps.Source) -> Optional[str]:
    """Source ops (on the whole decoded image, before the geometry): on a
    uint8 tensor (the kernels are torchvision's tensor ones, not Pillow's),
    before any geometry, flip or op."""
    out = plan.out
    if (
        "image" not in out
        or out["dtype"] != "uint8"
        or out["mul"] != [1.0] * 3
        or out["add"] != [0.0] * 3
    ):
        where = (
            "put ToImage (or PILToTensor) before it"
            if not plan.converted
            else "put it right after ToImage (or PILToTensor), before the "
            "conversion to float"
        )
        return f"{step.name} is fused on a uint8 tensor image: {where}"
    if plan.geometric or plan.flipped or plan.vflipped or plan.ops or plan.trim:
        return f"{step.name} is fused before any geometry, flip or op"
    if len(plan.source) + len(step.elements) > _core.AUGMENT_MAX_OPS:
        return _too_many(step.name)
    plan.source += list(step.elements)
    return None


def _place(plan: _Plan, step: Step) -> bool:
    """A trim, resize or crop, in the order the place stage runs them;
    False where it does not fit."""
    # (No geometry after a flip: only a varying plan fuses a flip first.)
    flipped = plan.flipped or plan.vflipped
    if plan.iou is not None:
        return False  # RandomIoUCrop is the whole geometry
    if isinstance(step, (_steps.IoUCrop, _steps.ZoomOut)):
        return _canvas(plan, step)
    if plan.zoom is not None:
        return False  # a RandomIoUCrop alone may follow RandomZoomOut
    elif isinstance(step, _steps.Trim) and plan.untouched:
        plan.trim = step.border
    elif plan.ops:
        # The C chain runs after the geometry: a varying plan may have
        # taken ops before any.
        return False
    elif isinstance(step, _steps.Resize) and not plan.geometric and not flipped:
        plan.resize = step
    elif (
        isinstance(step, (_steps.CenterCrop, _steps.RandomCrop))
        and plan.crop is None
        and plan.rcrop is None
        and not plan.box
        and (not (plan.flipped or plan.vflipped) or _mirrors(plan, step))
    ):
        # (After a flip, an odd margin would put a centre crop one column
        # off: torchvision rounds the left edge, not the mirrored one.)
        if isinstance(step, _steps.CenterCrop):
            plan.crop, plan.fill = step.size, step.fill
        else:
            fields = _crop_fields(plan, step)
            if fields is None:
                return False
            if fields.get("pad_if_needed") == 2:
                # PadIfSmaller's pad after the flips so far: it stays at
                # the bottom and right of the output (core/plan.c).
                flips = int(plan.flipped) | 2 * int(plan.vflipped)
                fields = {**fields, "pad_flips_first": flips}
            plan.rcrop = fields
    elif isinstance(step, _steps.ResizedCrop) and not plan.geometric and not flipped:
        h, w = step.size
        plan.box = {
            "kind": "random_crop",
            "out_h": h,
            "out_w": w,
            "scale": step.scale,
            "ratio": step.ratio,
            "filter": step.filter,
            "filter_random": int(step.filter_random),
        }
    else:
        return False
    return True


def _canvas(plan: _Plan, step: Step) -> bool:
    """A RandomZoomOut first, or a RandomIoUCrop first or after it: the
    whole geometry of a varying plan, before the flips (core/plan_iou.c);
    False where it does not fit."""
    flipped = plan.flipped or plan.vflipped
    if not plan.varying or flipped or plan.trim or plan.ops:
        return False
    if isinstance(step, _steps.ZoomOut):
        fields = None if plan.geometric else _crop_fields(plan, step)
        if fields is None:
            return False
        plan.zoom = fields
    elif plan.geometric and not plan.zoomed_only:
        return False
    else:
        plan.iou = step.fields
    return True


def _crop_fields(plan: _Plan, step: Any) -> Optional[dict]:
    """A RandomCrop's (or RandomZoomOut's) spec fields, its constant fill
    the entry of the image's type where a conversion came before (v2's
    fill per type); None where that entry is refused."""
    image = plan.out.get("image")
    if image is None or not step.fills:
        return step.fields
    fills = dict(step.fills)
    if image == "mixed":  # an Image on some samples, a plain tensor on others
        if fills["image"] != fills["tensor"]:
            return None
        image = "image"
    rgb = fills[image]
    if rgb is None:
        return None
    return {**step.fields, "fill_r": rgb[0], "fill_g": rgb[1], "fill_b": rgb[2]}


def _mirrors(plan: _Plan, step: Step) -> bool:
    """Whether a RandomCrop after the flips so far gives what the core's
    crop then flip gives (the segmentation presets flip before their
    crop): its padding is the same on both sides of each flipped axis
    (pad_if_needed's is), and its window, drawn uniformly, is as likely
    at any offset of the flipped image as at its mirror of the unflipped
    one. A CenterCrop is not: its rounding is not mirrored."""
    if not isinstance(step, _steps.RandomCrop):
        return False
    f = step.fields
    if f.get("pad_if_needed") == 2:
        return True  # PadIfSmaller's: the core pads after the flips too
    if _fixed_size_crop(step):
        return False  # its offsets and padding are not mirrored
    if plan.flipped and f["pad_left"] != f["pad_right"]:
        return False
    return not (plan.vflipped and f["pad_top"] != f["pad_bottom"])


def _flip(plan: _Plan, step: Step) -> bool:
    """A flip after the geometry, once of each kind; False where it does
    not fit. The C core flips before the ops: a flip may follow ops that
    act on pixels alone, which it commutes with."""
    if (
        not isinstance(step, _steps.Flip)
        or (plan.vflipped if step.vertical else plan.flipped)
        or not plan.sized
        or not all(op in FLIP_SAFE for op, _ in plan.ops)
    ):
        return False
    if step.vertical:
        plan.vflip_p, plan.vflipped = step.p, True
    else:
        plan.flip_p, plan.flipped = step.p, True
    return True


def _flip_converted(plan: _Plan, step: Step) -> bool:
    """Whether a flip (or a RandomIoUCrop, before any other geometry)
    after the conversion may be fused: in a varying plan (no size fixed:
    torchvision's detection presets flip after ToImage), a flip or a crop
    commutes with the per-channel conversion, not with output ops."""
    canvas = isinstance(step, (_steps.IoUCrop, _steps.ZoomOut))
    canvas = canvas and (not plan.geometric or plan.zoomed_only)
    return (
        (isinstance(step, _steps.Flip) or canvas)
        and plan.varying
        and plan.size() is None
        and not plan.erased
    )


def _tensor_geometry(plan: _Plan, step: Step) -> bool:
    """Whether a geometric step may follow the conversion: while that is
    only to a uint8 tensor (ToImage, PILToTensor: the detection and
    segmentation presets convert first) with nothing but geometry and
    flips after it so far, torchvision's crops, pads and flips move the
    same pixels as on the PIL image, and its antialiased bilinear and
    bicubic resize of a uint8 tensor is Pillow's within 1 LSB; its nearest
    picks other pixels (floor(dst * in / out), not the centre's), and a
    colour op is not Pillow's either: not fused."""
    out = plan.out
    if (
        out["dtype"] != "uint8"
        or out["mul"] != [1.0] * 3
        or out["add"] != [0.0] * 3
        or plan.ops
        or plan.erased
    ):
        return False
    if isinstance(step, (_steps.Resize, _steps.ResizedCrop)):
        nearest = _core.INTERPOLATIONS.index("nearest")
        return step.filter != nearest and not step.filter_random
    return isinstance(step, (_steps.CenterCrop, _steps.RandomCrop, _steps.Flip))


# The C ops that are torchvision's own tensor kernels on a uint8 image
# (augment/geometry.c, perspective.c, warp.c: rotate_image's,
# affine_image's and perspective_image's grids; color.c's colour ops,
# tests/test_augment_color.py), and the groups that hold them.
_TENSOR_OPS = frozenset(
    {"affine", "rotation", "perspective"}
    | {"random_apply", "random_choice", "random_order", "compose"}
    | {"color_jitter", "grayscale", "gaussian_blur", "autocontrast", "equalize"}
    | {"invert", "posterize", "solarize", "sharpness"}
)


def _tensor_warp(plan: _Plan, step: Step) -> bool:
    """Whether ops after the conversion may be fused: RandomAffine,
    RandomRotation, RandomPerspective and the colour ops (in groups too) on
    the uint8 tensor of a fixed size or of each sample's own (the detection
    presets convert first), which the C ops compute as torchvision's tensor
    kernels do on it (affine_image, rotate_image, perspective_image,
    adjust_*)."""
    out = plan.out
    if (
        not isinstance(step, _steps.Ops)
        or out["dtype"] != "uint8"
        or out["mul"] != [1.0] * 3
        or out["add"] != [0.0] * 3
        or plan.erased
    ):
        return False
    elements = _elements(plan, step)
    if isinstance(elements, str):
        return False
    return all(name in _TENSOR_OPS for name, _ in elements)


def _fuse(plan: _Plan, step: Step) -> Optional[str]:
    """Fuses step into plan: None, or why it cannot be fused after the
    steps before it (plan is then as it was)."""
    if isinstance(step, _steps.Unfused):
        return step.reason
    if isinstance(step, (_steps.IoUCrop, _steps.ZoomOut)) and not plan.varying:
        return _canvas_varying(step)
    if isinstance(step, _steps.Erase):
        return _erase(plan, step)
    if isinstance(step, _steps.Convert):
        return _convert(plan, step)
    if isinstance(step, _steps.Source):
        return _source(plan, step)
    if (
        plan.converted
        and not _flip_converted(plan, step)
        and not _tensor_geometry(plan, step)
        and not _tensor_warp(plan, step)
    ):
        return f"{step.name} after the conversion to a tensor"
    if isinstance(step, _steps.Ops):
        return _augment(plan, step)
    if _place(plan, step) or _flip(plan, step):
        return None
    reason = f"{step.name} is not fused after {plan.names[-1] if plan.names else ''}"
    if _fixed_size_crop(step) and (plan.flipped or plan.vflipped):
        reason += (
            " (its offsets and padding are not mirrored: flip after it, as "
            "the lsj preset does)"
        )
    if isinstance(step, _steps.Flip) and plan.ops:
        reason += " (the C core flips before the ops; put the flip first)"
    return reason


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
        if resize.max_size:
            fields["resize_max"] = resize.max_size
        if resize.size_hi:
            fields["resize_short_hi"] = resize.size_hi
        if resize.choices:
            fields["short_sizes"] = list(resize.choices)
        fields.update(resize.jitter)
    else:
        fields["resize_h"], fields["resize_w"] = resize.size
    if resize.keep_longest is not None:
        fields.update(keep_ratio=1, keep_longest=resize.keep_longest)
        fields.update(resize.keep_random)
    return fields


def _canvas_varying(step: Step) -> str:
    """Why a RandomIoUCrop or RandomZoomOut is not fused for one size."""
    what = "crop" if isinstance(step, _steps.IoUCrop) else "canvas"
    return (
        f"{step.name} gives each sample the size of its {what}: it is fused "
        "where samples of varying sizes are taken (the Loader)"
    )


def _varying(plan: _Plan, first: Optional[Step]) -> Optional[dict]:
    """The spec of a plan whose output is the image after its resize, each
    sample its own size, where the caller takes that (``plan.varying``) and
    the geometry is a shorter-side Resize or none; else None."""
    resize = plan.resize
    if not plan.varying or plan.crop is not None or plan.rcrop is not None:
        return None
    if plan.iou is not None or plan.zoom is not None:  # the canvas, 1:1
        spec = {"kind": "resize_crop", "filter": 0, "varying": 1}
        return {**spec, **(plan.zoom or {}), **(plan.iou or {})}
    if resize is None and isinstance(first, _steps.Unfused) and first.geometry:
        return None  # refused as geometry, below
    if resize is not None and (
        not isinstance(resize.size, int) or resize.keep_longest is not None
    ):
        return None  # a fixed size, or timm's ResizeKeepRatio: below
    if plan.trim:
        raise UnsupportedTransform(
            "TrimBorder without a crop gives images of varying sizes, which "
            "are not fused with a trim; add a CenterCrop"
        )
    return {"kind": "resize_crop", **_resize_fields(resize), "varying": 1}


def _resize_crop(plan: _Plan, first: Optional[Step]) -> dict:
    """The spec of a resize and a centre or random crop (no ResizedCrop),
    or a varying one (:func:`_varying`); raises UnsupportedTransform where
    the output has no fixed size and the plan takes no varying one."""
    resize, crop, rcrop = plan.resize, plan.crop, plan.rcrop
    varying = _varying(plan, first)
    if varying is not None:
        return varying
    if resize is None and crop is None and rcrop is None:
        if isinstance(first, _steps.Unfused) and first.geometry:
            raise UnsupportedTransform(first.reason)
        if isinstance(first, (_steps.IoUCrop, _steps.ZoomOut)):
            raise UnsupportedTransform(_canvas_varying(first))
        head = first.name if first is not None else "no transform"
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
            if resize.max_size or resize.size_hi or resize.choices or resize.jitter:
                raise UnsupportedTransform(
                    f"{resize.name} alone gives images of varying sizes; add a crop"
                )
            raise UnsupportedTransform(
                f"Resize({size}) alone gives images of varying sizes; add "
                f"CenterCrop({size}) or use Resize(({size}, {size}))"
            )
    elif resize is not None and crop is None and rcrop is None:
        if resize.keep_longest is not None:
            raise UnsupportedTransform(
                f"{resize.name} alone gives images of varying sizes; add a CenterCrop"
            )
        crop = resize.size
    if rcrop is None:
        spec["out_h"], spec["out_w"] = crop
        spec["fill_r"], spec["fill_g"], spec["fill_b"] = plan.fill
    return spec


def _spec(plan: _Plan, first: Optional[Step]) -> dict:
    """The C core's spec of what plan fused (``first``: the first step,
    fused or not, for the message when nothing gives a fixed size)."""
    spec = plan.box or _resize_crop(plan, first)
    spec["flip_p"] = plan.flip_p
    if plan.trim:
        spec["trim"] = plan.trim
    if plan.vflip_p:
        spec["vflip_p"] = plan.vflip_p
    spec["passes"] = _pillow_passes()
    if plan.source or plan.ops:
        spec["ops"] = plan.source + plan.ops
    if spec.get("varying"):
        return spec
    for key in ("out_h", "out_w"):
        if not 0 < spec[key] <= _core.MAX_SIDE:
            raise UnsupportedTransform(f"output size {spec[key]} out of range")
    return spec


def _fixes_size(step: Step) -> bool:
    """Whether ``step`` gives every image one size (a crop, or a Resize to
    (h, w))."""
    if isinstance(step, _steps.Resize):
        return not isinstance(step.size, int) and step.keep_longest is None
    return isinstance(step, (_steps.CenterCrop, _steps.RandomCrop, _steps.ResizedCrop))


def _fixed_size_crop(step: Step) -> bool:
    """Whether step is a FixedSizeCrop (transforms_v2's), fused or not."""
    if isinstance(step, _steps.Unfused):
        return step.name == "FixedSizeCrop"
    fixed = _core.WINDOWS.index("fixed_size_crop")
    return isinstance(step, _steps.RandomCrop) and step.fields.get("window") == fixed


def compile_steps(steps: Iterable[Step], varying: bool = False) -> Compiled:
    """The C core's plan for a transform's steps, in order: the longest
    prefix that can be fused is, and the ``reason`` the next step was not.
    Steps are taken one at a time and none after that one, so a lazy
    iterable describes no more than the compiler reads. ``rest`` is left
    empty: the steps' objects are the caller's. Raises
    :class:`UnsupportedTransform` with a one-line reason when nothing with
    a fixed output size can be fused. ``varying``: the caller takes samples
    of their own sizes, so a transform without a crop (a shorter-side
    Resize, flips and conversions alone) gives a spec with ``varying`` 1
    and no output size; it must then be fused whole (what a step after it
    needs, a fixed size or a batch, it does not have)."""
    plan = _Plan(varying=varying)
    taken: list[Step] = []
    reason = ""
    for step in steps:
        taken.append(step)
        tensor = plan.converted
        why = _fuse(plan, step)
        if why is not None:
            reason = why
            break
        plan.names.append(step.name)
        passed = tensor and getattr(step, "on_tensor", "") == "pass"
        image = plan.out.get("image")
        if image in ("image", "mixed") and not passed and step.unwraps != "never":
            # a v1 or timm step's torch ops: a plain tensor on the samples
            # it acts on
            mixed = step.unwraps == "sometimes" or image == "mixed"
            plan.out["image"] = "mixed" if mixed else "tensor"
            if mixed:
                plan.mixed = plan.mixed or step.name
    # the first step that did more than pass the PIL image by, for what
    # is said of the transform's start
    lead = 0
    while lead < len(taken) and getattr(taken[lead], "on_pil", "") == "pass":
        lead += 1
    first = taken[lead if lead < len(taken) else 0] if taken else None
    try:
        spec = _spec(plan, first)
    except UnsupportedTransform:
        if reason and _fixed_size_crop(taken[-1]):
            # The crop meant to fix the size was not fused: say why.
            raise UnsupportedTransform(reason) from None
        raise
    if spec.get("varying") and reason:
        if _fixes_size(taken[-1]):
            # The user meant one size: say why that one was not fused.
            compile_steps(taken)
        if plan.untouched:
            raise UnsupportedTransform(reason)  # nothing but it to say
        raise UnsupportedTransform(
            f"{reason}; images of varying sizes (no crop) are fused only "
            "whole: resize and crop to one size first"
        )
    return Compiled(
        spec=spec,
        dtype=plan.out["dtype"],
        mul=tuple(plan.out["mul"]),
        add=tuple(plan.out["add"]),
        fused=plan.names,
        tensor_out=plan.converted,
        reason=reason,
        image=plan.out.get("image", "") if plan.converted else "",
        passed=plan.passed,
        mixed=plan.mixed if plan.out.get("image") == "mixed" else "",
    )
