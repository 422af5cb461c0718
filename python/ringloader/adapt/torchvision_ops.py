"""torchvision's augmentation transforms as ops of the C augment stage
(the elements of ``_steps.Ops`` and ``_steps.Erase`` steps that the
torchvision adapters describe).

:func:`op_of` turns one transform object (``torchvision.transforms`` or
``transforms.v2``) into ``(name, args)`` for the C op table
(``csrc/augment/``), or raises :class:`NotFused` with the reason it cannot
be fused. :func:`ops_of` does the same for any transform the C chain runs,
the composition classes (``RandomApply``, ``RandomChoice``, ``RandomOrder``,
nested, with a ``Compose`` inside) included: the elements of the chain it
makes, children before their group (``csrc/augment/group.c``). The op then draws its parameters per sample from the sample's own
random stream, with torchvision's distributions, and computes the pixels
torchvision's ``transforms.v2.functional`` kernels compute on a uint8 tensor
(see the README's list of fused ops for each op's tolerance).

The policies' magnitude tables are made here, with the user's torch and the
transform object's own table functions, as torchvision makes them per call:
their last bits depend on torch's vector code, and the C side only indexes
them.

Each op's arguments are packed by field name (``_steps.pack``) from the
layout the C op declares (``_core.OP_ARGS``: the fields in order, each a
count of numbers or of records); the sizes, bins and limits come from there and from
``_core.OP_LIMITS``, so no position or count is written here twice.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from .. import _core
from .._steps import Element, NotFused, pack

NAN = float("nan")

# The policies' sub-ops by kind number (csrc/augment/policy.c), and the
# ones with a magnitude table, in the order of the tables' rows.
POLICY_KINDS: tuple[str, ...] = _core.POLICY_KINDS
_MAG_OPS: tuple[str, ...] = _core.POLICY_TABLE_KINDS


def _fields(op: str, *records: str) -> tuple:
    """The fields of op's arguments, or of the records of its field
    records[0] (and so on, inward)."""
    fields = _core.OP_ARGS[op]
    for name in records:
        fields = next(rec for n, _, rec in fields if n == name)
    return fields


def _count(op: str, *path: str) -> int:
    """The count of op's field path[-1], within the records of path[:-1]:
    ``_count("augmix", "space", "magnitudes")`` is AugMix's bins."""
    *records, name = path
    return next(c for n, c, _ in _fields(op, *records) if n == name)


def _is_v2(t: Any) -> bool:
    return ".v2." in type(t).__module__ + "."


def _interp(t: Any) -> float:
    mode = getattr(t, "interpolation", "nearest")
    name = str(getattr(mode, "value", mode)).lower()
    if name in ("nearest", "0"):
        return 0.0
    if name in ("bilinear", "2"):
        return 1.0
    raise NotFused(
        f"{type(t).__name__}(interpolation={name!r}): only nearest and "
        "bilinear are fused"
    )


def _fill(t: Any) -> list[float]:
    """Three fill values, or three NaN for fill=None."""
    fill = getattr(t, "fill", None)
    if isinstance(fill, dict):
        # transforms.v2: a fill per input type; images use the entry for
        # tv_tensors.Image, else the default ("others", as v2's _get_fill,
        # or a None key)
        from torchvision import tv_tensors

        fill = fill.get(tv_tensors.Image, fill.get("others", fill.get(None)))
    if fill is None:
        return [NAN] * 3
    vals = [float(v) for v in (fill if isinstance(fill, (list, tuple)) else [fill])]
    if len(vals) == 1:
        vals *= 3
    if len(vals) != 3 or not all(0 <= v <= 255 for v in vals):
        raise NotFused(f"{type(t).__name__}(fill={fill!r}): fill must be 1 or 3 values")
    return vals


def _range(value: Any) -> list[float]:
    if value is None:
        return [NAN, NAN]
    lo, hi = (float(v) for v in value)
    return [lo, hi]


# An op's maker gives the values of its fields by name (see ``_steps.pack``).
Fields = dict[str, Any]


def _color_jitter(t: Any, h: int, w: int) -> Fields:
    return {
        name: _range(getattr(t, name))
        for name in ("brightness", "contrast", "saturation", "hue")
    }


def _grayscale(t: Any, h: int, w: int) -> Fields:
    if type(t).__name__ == "Grayscale":
        if int(getattr(t, "num_output_channels", 1)) != 3:
            raise NotFused(
                "Grayscale(num_output_channels=1) changes the number of "
                "channels; use Grayscale(num_output_channels=3)"
            )
        return {"p": 1.0}
    return {"p": t.p}


def _gaussian_blur(t: Any, h: int, w: int) -> Fields:
    kx, ky = (int(k) for k in t.kernel_size)
    most = _core.OP_LIMITS["gaussian_blur"]["max_kernel_size"]
    if max(kx, ky) > most:
        raise NotFused(f"GaussianBlur(kernel_size={t.kernel_size}): at most {most}")
    return {"kernel_size": [kx, ky], "sigma": [t.sigma[0], t.sigma[1]]}


def _p(t: Any, h: int, w: int) -> Fields:
    return {"p": t.p}


def _posterize(t: Any, h: int, w: int) -> Fields:
    return {"bits": t.bits, "p": t.p}


def _solarize(t: Any, h: int, w: int) -> Fields:
    if not 0 <= float(t.threshold) <= 255:
        # torch wraps a negative int threshold to uint8 and refuses one
        # above 255: neither is a threshold on 8-bit pixels
        raise NotFused(f"RandomSolarize(threshold={t.threshold}) outside 0..255")
    return {"threshold": t.threshold, "p": t.p}


def _sharpness(t: Any, h: int, w: int) -> Fields:
    return {"sharpness_factor": t.sharpness_factor, "p": t.p}


def _center(t: Any) -> list[float]:
    center = getattr(t, "center", None)
    return [NAN, NAN] if center is None else [float(c) for c in center]


def _rotation(t: Any, h: int, w: int) -> Fields:
    if getattr(t, "expand", False):
        raise NotFused("RandomRotation(expand=True) changes the image size per sample")
    return {
        "degrees": _range(t.degrees),
        "interpolation": _interp(t),
        "center": _center(t),
        "fill": _fill(t),
    }


def _affine(t: Any, h: int, w: int) -> Fields:
    translate = [NAN, NAN] if t.translate is None else [float(v) for v in t.translate]
    shear = [NAN] * _count("affine", "shear")
    if t.shear is not None:
        s = [float(v) for v in t.shear]
        shear = s + [NAN, NAN] if len(s) == 2 else s
    return {
        "degrees": _range(t.degrees),
        "translate": translate,
        "scale": _range(t.scale),
        "shear": shear,
        "interpolation": _interp(t),
        "center": _center(t),
        "fill": _fill(t),
    }


def _perspective(t: Any, h: int, w: int) -> Fields:
    return {
        "distortion_scale": float(t.distortion_scale),
        "p": float(t.p),
        "interpolation": _interp(t),
        "fill": _fill(t),
    }


def _magnitudes(t: Any, name: str, bins: int, h: int, w: int) -> list[float]:
    """The magnitude table of sub-op name, as the transform itself makes it
    for an h x w image; solarize as thresholds in pixel values."""
    if _is_v2(t):
        values = type(t)._AUGMENTATION_SPACE[name][0](bins, h, w)
        scale = 255.0 if name == "Solarize" else 1.0
    else:
        if type(t).__name__ == "TrivialAugmentWide":
            space = t._augmentation_space(bins)
        else:
            space = t._augmentation_space(bins, (h, w))
        values, scale = space[name][0], 1.0
    return [scale * float(v) for v in values.reshape(-1).tolist()]


def _policy_head(t: Any) -> Fields:
    return {"interpolation": _interp(t), "fill": _fill(t)}


def _padded(row: list[float], n: int) -> list[float]:
    return row + [0.0] * (n - len(row))


def _trivial_augment(t: Any, h: int, w: int) -> Fields:
    bins = int(t.num_magnitude_bins)
    most = _count("trivial_augment", "table", "magnitudes")
    if not 1 <= bins <= most:
        raise NotFused(
            f"TrivialAugmentWide(num_magnitude_bins={bins}): at most "
            f"{most} bins are fused"
        )
    table = [
        {"magnitudes": _padded(_magnitudes(t, name, bins, h, w), most)}
        for name in _MAG_OPS
    ]
    return {"num_magnitude_bins": bins, **_policy_head(t), "table": table}


def _rand_augment(t: Any, h: int, w: int) -> Fields:
    most = _core.OP_LIMITS["rand_augment"]["max_num_ops"]
    if not 0 <= int(t.num_ops) <= most:
        raise NotFused(f"RandAugment(num_ops={t.num_ops}): at most {most} are fused")
    bins, m = int(t.num_magnitude_bins), int(t.magnitude)
    if not 0 <= m < bins:
        raise NotFused(f"RandAugment(magnitude={m}) outside its {bins} bins")
    mags = [_magnitudes(t, name, bins, h, w)[m] for name in _MAG_OPS]
    return {"num_ops": t.num_ops, **_policy_head(t), "magnitudes": mags}


def _auto_augment(t: Any, h: int, w: int) -> Fields:
    policy = str(getattr(t.policy, "value", t.policy)).lower()
    if policy not in _core.AUTO_AUGMENT_POLICIES:
        raise NotFused(f"AutoAugment(policy={policy!r}) is not one of torchvision's")
    bins = _count("auto_augment", "table", "magnitudes")
    table = [{"magnitudes": _magnitudes(t, name, bins, h, w)} for name in _MAG_OPS]
    return {
        "policy": _core.AUTO_AUGMENT_POLICIES.index(policy),
        **_policy_head(t),
        "table": table,
    }


# AugMix (csrc/augment/augmix.c): the magnitude bins of its tables
# (torchvision's _PARAMETER_MAX), the sub-ops its augmentation space may
# hold, the per-sample parameters its chains may take (per chain a weight
# and one slot a sub-op) and the slots of a chain of random depth.
_AUGMIX_BINS = _count("augmix", "space", "magnitudes")
_AUGMIX_MAX_KINDS = _count("augmix", "space")
_AUGMIX_CHAIN_PARAMS = _core.OP_LIMITS["augmix"]["chain_params"]
_AUGMIX_RANDOM_DEPTH = _core.OP_LIMITS["augmix"]["random_depth_slots"]


def _augmix_space(t: Any, h: int, w: int) -> list[tuple[str, bool, Optional[list]]]:
    """(name, signed, magnitudes or None) of each sub-op of AugMix t's
    augmentation space for an h x w image, in the order its forward draws
    from, each table made by the object itself; v2's Solarize in pixel
    values, as its forward scales it."""
    bins = int(t._PARAMETER_MAX)
    out = []
    if _is_v2(t):
        space = t._AUGMENTATION_SPACE if t.all_ops else t._PARTIAL_AUGMENTATION_SPACE
        for name, (make, signed) in space.items():
            values = make(bins, h, w)
            mags = None
            if values is not None:
                scale = 255.0 if name == "Solarize" else 1.0
                mags = [scale * float(v) for v in values.reshape(-1).tolist()]
            out.append((name, bool(signed), mags))
    else:
        for name, (values, signed) in t._augmentation_space(bins, (h, w)).items():
            mags = None
            if values.ndim > 0:  # AutoContrast, Equalize: a 0-d placeholder
                mags = [float(v) for v in values.reshape(-1).tolist()]
            out.append((name, bool(signed), mags))
    return out


def _augmix(t: Any, h: int, w: int) -> Fields:
    severity, width = int(t.severity), int(t.mixture_width)
    depth = int(t.chain_depth)  # <= 0: uniform in 1..3 per chain
    slots = depth if depth > 0 else _AUGMIX_RANDOM_DEPTH
    if width < 0 or width * (1 + slots) > _AUGMIX_CHAIN_PARAMS:
        raise NotFused(
            f"AugMix(mixture_width={width}, chain_depth={depth}): "
            f"mixture_width * (1 + depth) must be at most "
            f"{_AUGMIX_CHAIN_PARAMS} to be fused (depth "
            f"{_AUGMIX_RANDOM_DEPTH} when random: up to "
            f"{_AUGMIX_CHAIN_PARAMS // (1 + _AUGMIX_RANDOM_DEPTH)} chains)"
        )
    alpha = float(t.alpha)
    if not (math.isfinite(alpha) and alpha > 0):
        raise NotFused(f"AugMix(alpha={t.alpha}): alpha must be positive")
    if not 1 <= severity <= _AUGMIX_BINS:
        raise NotFused(f"AugMix(severity={severity}) outside 1..{_AUGMIX_BINS}")
    space = _augmix_space(t, h, w)
    if not 1 <= len(space) <= _AUGMIX_MAX_KINDS:
        raise NotFused(f"AugMix: {len(space)} sub-ops in its augmentation space")
    # per sub-op of the space, in its order: the C kernel's kind, signed,
    # has a table, the table's first bins; unused rows are zeros
    rows: list[Fields] = []
    for name, signed, mags in space:
        if name not in POLICY_KINDS:
            raise NotFused(f"AugMix: sub-op {name} has no C kernel")
        if mags is not None and len(mags) < severity:
            raise NotFused(f"AugMix: {name} has fewer than {severity} magnitudes")
        row = [] if mags is None else mags[:_AUGMIX_BINS]
        rows.append(
            {
                "kind": POLICY_KINDS.index(name),
                "signed": signed,
                "has_table": mags is not None,
                "magnitudes": _padded(row, _AUGMIX_BINS),
            }
        )
    unused = {
        "kind": 0,
        "signed": 0,
        "has_table": 0,
        "magnitudes": [0.0] * _AUGMIX_BINS,
    }
    rows += [unused] * (_AUGMIX_MAX_KINDS - len(space))
    return {
        "severity": severity,
        "mixture_width": width,
        "chain_depth": max(depth, -1),
        "alpha": alpha,
        **_policy_head(t),
        "space_size": len(space),
        "space": rows,
    }


# torchvision class name -> (op name, maker of its fields' values)
IMAGE_OPS = {
    "ColorJitter": ("color_jitter", _color_jitter),
    "Grayscale": ("grayscale", _grayscale),
    "RandomGrayscale": ("grayscale", _grayscale),
    "GaussianBlur": ("gaussian_blur", _gaussian_blur),
    "RandomAutocontrast": ("autocontrast", _p),
    "RandomEqualize": ("equalize", _p),
    "RandomInvert": ("invert", _p),
    "RandomPosterize": ("posterize", _posterize),
    "RandomSolarize": ("solarize", _solarize),
    "RandomAdjustSharpness": ("sharpness", _sharpness),
    "RandomRotation": ("rotation", _rotation),
    "RandomAffine": ("affine", _affine),
    "RandomPerspective": ("perspective", _perspective),
    "TrivialAugmentWide": ("trivial_augment", _trivial_augment),
    "RandAugment": ("rand_augment", _rand_augment),
    "AutoAugment": ("auto_augment", _auto_augment),
    "AugMix": ("augmix", _augmix),
}


def op_of(t: Any, h: int, w: int) -> tuple[str, list[float]]:
    """(name, args) of the C op for image transform t on h x w samples;
    raises NotFused."""
    name = type(t).__name__
    if name not in IMAGE_OPS:
        raise NotFused(f"{name} has no C op")
    op, make = IMAGE_OPS[name]
    return op, pack(op, make(t, h, w))


def erase_of(t: Any, dtype: str) -> tuple[str, list[float]]:
    """(name, args) of the output op for RandomErasing t on an output of
    dtype (in place or not: the sample is the loader's own); raises
    NotFused."""
    import torch

    value: Optional[Any] = getattr(t, "value", 0)
    if isinstance(value, str) or value is None:
        if dtype == "uint8":
            raise NotFused("RandomErasing(value='random') on a uint8 image")
        values, random = [0.0, 0.0, 0.0], 1.0
    else:
        values = [
            float(v) for v in (value if isinstance(value, (list, tuple)) else [value])
        ]
        if len(values) == 1:
            values *= 3
        if len(values) != 3:
            raise NotFused(f"RandomErasing(value={value!r}): 1 or 3 values")
        if not all(math.isfinite(v) for v in values):
            raise NotFused(f"RandomErasing(value={value!r}) is not finite")
        random = 0.0
    log_ratio = torch.log(torch.tensor([float(r) for r in t.ratio])).tolist()
    fields = {
        "p": t.p,
        "scale": [t.scale[0], t.scale[1]],
        "log_ratio": log_ratio,
        "random": random,
        "value": values,
    }
    return "erase", pack("erase", fields)


# ---- the composition classes: groups of the chain (csrc/augment/group.c) ----

# torchvision's composition classes (transforms and transforms.v2), which
# ops_of makes groups of; a Compose inside one of them is a group too.
GROUPS = ("RandomApply", "RandomChoice", "RandomOrder")
# The classes ops_of takes as a step of a pipeline.
CLASSES = frozenset(IMAGE_OPS) | frozenset(GROUPS)

_MAX_CHILDREN = _count("random_choice", "weights")


def _group(op: str, kids: list[list[Element]], **values: Any) -> list[Element]:
    """The sub-chain of group op over the sub-chains kids: theirs, then
    its own element."""
    if len(kids) > _MAX_CHILDREN:
        raise NotFused(f"{len(kids)} transforms in a group: at most {_MAX_CHILDREN}")
    values["children"] = len(kids)
    return [e for kid in kids for e in kid] + [(op, pack(op, values))]


def _one(t: Any, h: int, w: int) -> list[list[Element]]:
    """t as one child of a RandomChoice or RandomOrder: one sub-chain (a
    Compose of several made a group), or none where t does nothing."""
    kids = _subchains(t, h, w)
    return kids if len(kids) <= 1 else [_group("compose", kids)]


def _random_apply(t: Any, h: int, w: int) -> list[list[Element]]:
    p = float(t.p)
    if not math.isfinite(p):
        raise NotFused(f"RandomApply(p={t.p}) is not finite")
    # transforms (v1) runs them when torch.rand(1) <= p, for any p; v2
    # when torch.rand(1) < p, p in [0, 1]: the same but on a null set
    kids = [kid for c in t.transforms for kid in _subchains(c, h, w)]
    if not kids:
        return []  # transforms' RandomApply([]): nothing to run
    return [_group("random_apply", kids, p=min(max(p, 0.0), 1.0))]


def _random_choice(t: Any, h: int, w: int) -> list[list[Element]]:
    n = len(t.transforms)
    weights = [1.0] * n if t.p is None else [float(v) for v in t.p]
    if len(weights) != n or n == 0:
        raise NotFused(f"RandomChoice of {n} transforms with {len(weights)} weights")
    if not all(math.isfinite(v) and v >= 0 for v in weights) or sum(weights) <= 0:
        raise NotFused(f"RandomChoice(p={t.p}): weights must be >= 0, some > 0")
    weights = [v / sum(weights) for v in weights]  # as v2 keeps them
    kids = []
    for c in t.transforms:
        kid = _one(c, h, w)
        if not kid:
            raise NotFused(f"RandomChoice: {type(c).__name__} does nothing")
        kids += kid
    return [_group("random_choice", kids, weights=_padded(weights, _MAX_CHILDREN))]


def _random_order(t: Any, h: int, w: int) -> list[list[Element]]:
    # a child that does nothing does so in any order
    kids = [kid for c in t.transforms for kid in _one(c, h, w)]
    return [_group("random_order", kids)] if kids else []


_GROUP_MAKERS = {
    "RandomApply": _random_apply,
    "RandomChoice": _random_choice,
    "RandomOrder": _random_order,
}


def _subchains(t: Any, h: int, w: int) -> list[list[Element]]:
    """The sub-chains t runs as, in order: one for an op or a group, one
    per step of a Compose; raises NotFused."""
    name = type(t).__name__
    if not type(t).__module__.startswith(("torchvision.", "ringloader.")):
        raise NotFused(f"{name} is not a torchvision transform")
    if name == "Compose":
        return [kid for c in t.transforms for kid in _subchains(c, h, w)]
    if name not in _GROUP_MAKERS:
        return [[op_of(t, h, w)]]
    try:
        return _GROUP_MAKERS[name](t, h, w)
    except NotFused as e:
        raise NotFused(f"{name}: {e}") from None


def ops_of(t: Any, h: int, w: int) -> list[Element]:
    """The elements of the C chain for step t (an op, or a group after its
    children) on h x w samples; raises NotFused, naming the transform
    inside a group that cannot be fused."""
    return [e for kid in _subchains(t, h, w) for e in kid]
