"""The output conversions of a transform (``_steps.Convert``: torchvision's
``ToTensor``, ``PILToTensor``, ``ToImage``, ``ConvertImageDtype``,
``ToDtype``, ``Normalize``, timm's ``MaybeToTensor`` and the like, as the
adapters describe them), folded into one per-channel multiply-add and an
output dtype that the C store stage applies while the sample is in cache
(transforms.py's compiler calls :func:`fold` for each conversion step after
the geometry and ops)."""

from __future__ import annotations

from typing import Any

from ._steps import Convert
from .errors import UnsupportedTransform

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


def dtype_name(dtype: Any) -> str:
    """torch.float32 -> "float32" (a name passes through)."""
    return _dtype_name(dtype)


def fold(step: Convert, state: dict) -> bool:
    """Folds a conversion into state (dtype, mul, add); False if it is not
    one fused at this point (state is then unaltered)."""
    kind = step.kind
    if kind == "pure":
        return True
    if kind == "tensor":
        return state["dtype"] == "uint8"
    if kind == "dtype":
        if step.dtype is None or (step.from_uint8 and state["dtype"] != "uint8"):
            return False
        target = _dtype_name(step.dtype)
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
