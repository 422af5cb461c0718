"""timm's augmentations (``timm.data.auto_augment``) as ops of the C
augment stage.

:func:`ops_of` turns timm's ``RandAugment``, ``AutoAugment`` and
``AugMixAugment`` objects (what ``rand_augment_transform``,
``auto_augment_transform`` and ``augment_and_mix_transform`` make from
config strings such as ``rand-m9-mstd0.5-inc1``, ``v0r-mstd0.5`` or
``augmix-m5-w4-d2``) into elements of the C chain, in the format of
``torchvision_ops.ops_of``. The C ops (``csrc/augment/timm.c``) reproduce timm's
``AugmentOp`` calls: its probability, magnitude noise and clipping, the
random negation and resampling filter, its level functions, and its ops on
Pillow's kernels (``csrc/augment/pil.c``), so the pixels are Pillow's. The
op names and function names come from the C side (``_core.TIMM_KINDS``,
``_core.TIMM_FUNCS``), the layouts from ``_core.OP_ARGS``.

One difference from timm with Pillow 13: timm's posterize at 0 bits (which
its RandAugment draws) raises there, as Pillow now checks ``bits``; the C op
gives what Pillow gave before, a black image.

timm need not be installed: nothing here imports it.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _core
from .._steps import Element, NotFused, pack

# timm's classes this module turns into C ops (timm.data.auto_augment).
CLASSES = frozenset({"RandAugment", "AutoAugment", "AugMixAugment"})
_MODULE = "timm.data.auto_augment"

KINDS: tuple[str, ...] = _core.TIMM_KINDS
FUNCS: tuple[str, ...] = _core.TIMM_FUNCS
_LIMITS = _core.OP_LIMITS["timm_rand_augment"]
MAX_ROWS: int = _LIMITS["max_rows"]
SLOT_SCALE: int = _LIMITS["slot_scale"]
_MAX_FILTERS = next(c for n, c, _ in _core.OP_ARGS["timm_augmix"] if n == "filters")
_LEVEL_DENOM = 10.0  # timm's default upper bound of a magnitude

# Pillow's Resampling numbers the C ops take.
_FILTERS = {2: "bilinear", 3: "bicubic"}


def handles(t: Any) -> bool:
    """Whether t is one of timm's augmentation classes this module fuses."""
    return type(t).__module__ == _MODULE and type(t).__name__ in CLASSES


def _filters(resample: Any) -> list[int]:
    """timm's AugmentOp resample (one Pillow filter or a tuple to choose
    from per call) as Pillow's numbers."""
    items = list(resample) if isinstance(resample, (list, tuple)) else [resample]
    out = []
    for r in items:
        v = int(getattr(r, "value", r))
        if v not in _FILTERS:
            raise NotFused(
                f"timm augmentation with resample={r!r}: only bilinear and bicubic are fused"
            )
        out.append(v)
    if not 1 <= len(out) <= _MAX_FILTERS:
        raise NotFused(
            f"timm augmentation with {len(out)} resampling filters to choose from"
        )
    return out


def _head(ops: list[Any]) -> dict[str, Any]:
    """The head of a policy's arguments (csrc/augment/timm.h) from its
    AugmentOps, which must share their hparams."""
    if not 1 <= len(ops) <= MAX_ROWS:
        raise NotFused(
            f"timm augmentation of {len(ops)} ops: 1 to {MAX_ROWS} are fused"
        )
    heads = []
    rows = []
    for op in ops:
        if op.name not in KINDS:
            raise NotFused(f"timm op {op.name} has no C op")
        hp = op.hparams
        std = float(op.magnitude_std or 0)
        upper = float(op.magnitude_max or _LEVEL_DENOM)
        fill = op.kwargs.get("fillcolor", (128, 128, 128))
        fill = list(fill) if isinstance(fill, (list, tuple)) else [fill] * 3
        if len(fill) != 3 or not all(
            float(v) == int(v) and 0 <= v <= 255 for v in fill
        ):
            raise NotFused(
                f"timm augmentation with img_mean={fill!r}: three integers 0..255"
            )
        heads.append(
            (
                std,
                upper,
                float(hp.get("translate_const", 250)),
                float(hp.get("translate_pct", 0.45)),
                tuple(int(v) for v in fill),
                tuple(_filters(op.kwargs.get("resample"))),
            )
        )
        prob, mag = float(op.prob), float(op.magnitude)
        if not (math.isfinite(prob) and math.isfinite(mag)):
            raise NotFused(
                f"timm op {op.name}(p={op.prob}, m={op.magnitude}) is not finite"
            )
        rows.append({"kind": KINDS.index(op.name), "prob": prob, "magnitude": mag})
    if len(set(heads)) != 1:
        raise NotFused("timm augmentation whose ops have different hparams")
    std, upper, tconst, tpct, fill, filters = heads[0]
    if not 0 <= upper <= _LIMITS["max_upper"]:
        raise NotFused(
            f"timm augmentation with mmax={upper}: at most {_LIMITS['max_upper']}"
        )
    unused = {"kind": 0, "prob": 0.0, "magnitude": 0.0}
    return {
        "magnitude_std": std,
        "magnitude_upper": upper,
        "translate_const": tconst,
        "translate_pct": tpct,
        "fill": list(fill),
        "n_filters": len(filters),
        "filters": list(filters) + [0] * (_MAX_FILTERS - len(filters)),
        "n_rows": len(rows),
        "rows": rows + [unused] * (MAX_ROWS - len(rows)),
    }


def _rand_augment(t: Any) -> Element:
    n = int(t.num_layers)
    if not 0 <= n <= _LIMITS["max_layers"]:
        raise NotFused(
            f"RandAugment(n={n}): at most {_LIMITS['max_layers']} layers are fused"
        )
    head = _head(list(t.ops))
    weights = [0.0] * MAX_ROWS
    weighted = t.choice_weights is not None
    if weighted:
        p = [float(v) for v in t.choice_weights]
        if len(p) != len(t.ops) or not all(math.isfinite(v) and v >= 0 for v in p):
            raise NotFused("RandAugment: choice_weights must be one weight >= 0 per op")
        if sum(v > 0 for v in p) < n:
            raise NotFused(
                f"RandAugment: {n} layers without replacement from fewer ops"
            )
        weights[: len(p)] = p
    op = "timm_rand_augment"
    return op, pack(
        op, {**head, "num_layers": n, "weighted": float(weighted), "weights": weights}
    )


def _auto_augment(t: Any) -> Element:
    subs = [list(sp) for sp in t.policy]
    k = len(subs[0]) if subs else 0
    if not subs or any(len(sp) != k for sp in subs):
        raise NotFused("AutoAugment: sub-policies of different lengths")
    most = _core.OP_LIMITS["timm_auto_augment"]["max_ops_per_sub"]
    if not 1 <= k <= most:
        raise NotFused(f"AutoAugment: sub-policies of {k} ops (at most {most})")
    head = _head([op for sp in subs for op in sp])
    op = "timm_auto_augment"
    return op, pack(op, {**head, "n_sub": len(subs), "ops_per_sub": k})


def _augmix(t: Any) -> Element:
    width, depth, alpha = int(t.width), int(t.depth), float(t.alpha)
    limits = _core.OP_LIMITS["timm_augmix"]
    slots = depth if depth > 0 else limits["random_depth_slots"]
    if (
        width < 1
        or width * (1 + slots) + 1 > limits["params"]
        or abs(depth) > limits["params"]
    ):
        raise NotFused(
            f"AugMixAugment(width={width}, depth={depth}): width * (1 + depth) + 1 "
            f"must be at most {limits['params']} (depth {limits['random_depth_slots']} "
            "when random)"
        )
    if not (math.isfinite(alpha) and alpha > 0):
        raise NotFused(f"AugMixAugment(alpha={t.alpha}): alpha must be positive")
    head = _head(list(t.ops))
    op = "timm_augmix"
    values = {
        "width": width,
        "depth": depth,
        "alpha": alpha,
        "blended": float(t.blended),
    }
    return op, pack(op, {**head, **values})


_MAKERS = {
    "RandAugment": _rand_augment,
    "AutoAugment": _auto_augment,
    "AugMixAugment": _augmix,
}


def ops_of(t: Any, h: int, w: int) -> list[Element]:
    """The elements of the C chain for timm augmentation t on h x w samples
    (one element: timm's policies draw per sample, whatever the size);
    raises NotFused with the reason."""
    name = type(t).__name__
    if not handles(t):
        raise NotFused(f"{name} is not one of timm's augmentations ({sorted(CLASSES)})")
    return [_MAKERS[name](t)]


def timm_op(
    func: str, arg: float, resample: int = 3, fill: Any = (128, 128, 128)
) -> Element:
    """The element running timm's op function `func` (auto_augment.py's
    name: "rotate", "posterize", ...) with its argument fixed: what the
    tests compare with timm's own function."""
    fill = list(fill) if isinstance(fill, (list, tuple)) else [fill] * 3
    values = {
        "func": FUNCS.index(func),
        "arg": float(arg),
        "resample": resample,
        "fill": fill,
    }
    return "timm_op", pack("timm_op", values)


def decode_slot(slot: float) -> tuple[int, float, int, bool] | None:
    """(row, magnitude, filter index, negated) of one drawn call of a timm
    policy (csrc/augment/timm.h), or None where the op did not run."""
    if not slot > 0:
        return None
    code, magnitude = divmod(slot, SLOT_SCALE)
    c = int(code) - 1
    row, rest = c % MAX_ROWS, c // MAX_ROWS
    return row, magnitude, rest % 3, rest // 3 != 0
