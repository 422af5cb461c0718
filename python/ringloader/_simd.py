"""The SIMD level of the C kernels (resampling, stores, colour ops, warps,
PNG rows) and what ``RINGLOADER_SIMD`` made of it. The accepted values
are the C core's (``_core.SIMD_LEVELS``, in any case; unset or empty: the
CPU's best); a value that names no level caps nothing, which the C core
cannot say itself, so this module warns once, when ringloader is
imported."""

from __future__ import annotations

import warnings
from typing import Optional

from . import _core


def unknown_setting() -> Optional[str]:
    """The RINGLOADER_SIMD value the C core read and could not use (it
    names no level), or None when it is unset, empty or a level."""
    value, cap = _core.resample_simd_env()
    return value if value and cap is None else None


def warn_unknown_setting() -> None:
    """A RuntimeWarning naming an unknown RINGLOADER_SIMD value, the
    values accepted, and the level in use instead."""
    value = unknown_setting()
    if value is None:
        return
    accepted = ", ".join(repr(name) for name in _core.SIMD_LEVELS)
    warnings.warn(
        f"RINGLOADER_SIMD={value!r} is not a SIMD level, so it caps nothing: "
        f"the C kernels use {_core.resample_simd()!r}, the best this CPU "
        f"runs. Accepted: {accepted} (in any case), or unset or empty for "
        "the best",
        RuntimeWarning,
        stacklevel=2,
    )


def describe() -> str:
    """The level in use, said for ``ringloader info``: which kernels, and
    why (the CPU, the cap, or an unknown value that capped nothing)."""
    level = _core.resample_simd()
    text = {
        "avx2": "AVX2 (CPU has avx2)",
        "sse2": "SSE2 (x86-64 baseline)",
        "c": "portable C",
    }[level]
    value, cap = _core.resample_simd_env()
    if cap is not None and cap != "avx2":
        return f"{text} (capped by RINGLOADER_SIMD={value})"
    if unknown_setting() is not None:
        return f"{text} (RINGLOADER_SIMD={value!r} ignored: not a level)"
    if level == "c":
        return f"{text} (no SIMD kernels for this architecture)"
    return text
