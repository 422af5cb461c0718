"""The output conversion of a transform (``ToTensor``, ``PILToTensor``,
``ToImage``, ``ConvertImageDtype``, ``ToDtype``, ``Normalize``), folded
into one per-channel multiply-add and an output dtype that the C store
stage applies while the sample is in cache (transforms.py's compiler calls
:func:`fold_conversion` for each transform after the geometry and ops)."""

from __future__ import annotations

from typing import Any

from .errors import UnsupportedTransform

CONVERSIONS = (
    "PILToTensor",
    "ToImage",
    "ToPureTensor",
    "ToTensor",
    "ToDtype",
    "ConvertImageDtype",
    "Normalize",
)

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


def fold_conversion(t: Any, state: dict) -> bool:
    """Folds an output conversion into state; False if t is not one we fuse
    at this point."""
    name = type(t).__name__
    if name in ("PILToTensor", "ToImage", "ToPureTensor"):
        if state["dtype"] != "uint8" and name != "ToPureTensor":
            return False
        return True
    if name == "ToTensor":
        if state["dtype"] != "uint8":
            return False
        state.update(dtype="float32", mul=[1 / 255.0] * 3, add=[0.0] * 3)
        return True
    if name in ("ToDtype", "ConvertImageDtype"):
        dtype = getattr(t, "dtype", None)
        if isinstance(dtype, dict):
            return False  # per-type dtypes of transforms.v2
        target = _dtype_name(dtype)
        scale = name == "ConvertImageDtype" or bool(getattr(t, "scale", False))
        if target == "uint8":
            return state["dtype"] == "uint8"
        if target not in _FLOAT_DTYPES:
            return False
        if state["dtype"] == "uint8" and scale:
            state.update(mul=[m / 255.0 for m in state["mul"]])
        state["dtype"] = target
        return True
    if name == "Normalize":
        if state["dtype"] == "uint8" or getattr(t, "inplace", False) not in (
            False,
            None,
        ):
            return False
        mean = _channels(t.mean, "Normalize mean")
        std = _channels(t.std, "Normalize std")
        if any(s == 0 for s in std):
            raise UnsupportedTransform("Normalize with a zero std")
        state["mul"] = [m / s for m, s in zip(state["mul"], std)]
        state["add"] = [(a - m) / s for a, m, s in zip(state["add"], mean, std)]
        return True
    return False
