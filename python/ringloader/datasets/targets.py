"""Targets of any kind: one per sample, kept as arrays, batched as torch's
``default_collate`` batches what indexing the dataset gives.

A dataset's targets (``Sources.targets``) are either

- one numpy array whose first axis is the sample: int64 class indices (the
  common case, and the fastest: a batch is ``torch.from_numpy(t[idx])``),
  floats (regression), a row per sample (multi-hot or soft labels, boxes),
  bools; or an object array (strings, anything else), batched as a list;
- a tuple of such arrays, one per element of a per-sample tuple target
  (``(class, score)``): batched as a list of batches, as ``default_collate``
  batches tuples.

Indexing a dataset gives sample i's target as :func:`item` makes it: a
Python int for int64 class indices (as torchvision's datasets give), else
the array's element (a numpy scalar or row), or a tuple of those. Torch's
DataLoader over the dataset therefore batches exactly as the loader does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import numpy as np

__all__ = ["Targets", "as_targets", "batch", "concat", "is_arrow", "item", "take"]

Targets = Union[np.ndarray, tuple]


def _column(values: Any, n: int, what: str) -> np.ndarray:
    """One array of ``n`` targets from an array or a sequence of per-sample
    values (numbers, bools, arrays or sequences of one shape, strings)."""
    if isinstance(values, np.ndarray):
        arr = values
    else:
        values = list(values)
        if values and isinstance(values[0], (str, bytes)):
            arr = np.empty(len(values), dtype=object)
            arr[:] = values
        else:
            try:
                arr = np.asarray(values)
            except ValueError as e:  # ragged rows
                raise ValueError(
                    f"{what}: every target must have the same shape ({e})"
                ) from None
    if arr.ndim == 0 or len(arr) != n:
        raise ValueError(
            f"{what}: {n} samples but targets of shape {arr.shape}: give one "
            "target per sample"
        )
    if arr.dtype.kind in "iu":
        # As Python ints collate (and what the C-side tables hold).
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind in "fbc" or arr.dtype == object:
        return arr
    if arr.dtype.kind in "US":
        out = np.empty(len(arr), dtype=object)
        out[:] = arr.tolist()
        return out
    raise TypeError(f"{what}: targets of dtype {arr.dtype} cannot be batched")


def is_arrow(x: Any) -> bool:
    """Whether ``x`` is a pyarrow Array or ChunkedArray (pyarrow is not
    imported for it: one cannot have been made without it)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(x, (pa.Array, pa.ChunkedArray))


def _from_arrow(values: Any, what: str) -> np.ndarray:
    """An Arrow array of targets as numpy (no copy for numbers without
    nulls); ValueError naming the row of a null."""
    if values.null_count:
        nulls = values.is_null().to_numpy(zero_copy_only=False)
        raise ValueError(f"{what}: row {int(np.argmax(nulls))} is null, not a target")
    return np.asarray(values.to_numpy(zero_copy_only=False))


def as_targets(values: Any, n: int, what: str = "targets") -> Targets:
    """The targets of ``n`` samples from what a user gives: an array (one
    row per sample), a sequence of per-sample values, or a sequence of
    per-sample tuples (kept as a tuple of arrays, one per element). Raises
    ValueError (naming ``what``) when there is not one target per sample
    or their shapes differ, TypeError for a dtype that cannot be batched.
    A pyarrow array is taken as the numpy array it converts to (a null is
    refused naming its row)."""
    if is_arrow(values):
        values = _from_arrow(values, what)
    if not isinstance(values, np.ndarray):
        values = values if isinstance(values, Sequence) else list(values)
        if len(values) and isinstance(values[0], tuple):
            width = len(values[0])
            if any(not isinstance(v, tuple) or len(v) != width for v in values):
                raise ValueError(f"{what}: every tuple target must have {width} items")
            return tuple(
                _column([v[k] for v in values], n, f"{what}[{k}]") for k in range(width)
            )
        if len(values) == n and n and isinstance(values[0], (int, np.integer)):
            try:  # the common case, without an intermediate list
                return np.fromiter(values, dtype=np.int64, count=len(values))
            except (TypeError, ValueError):
                pass  # not all ints: as any other sequence
    return _column(values, n, what)


def item(targets: Targets, i: int) -> Any:
    """Sample ``i``'s target as indexing a dataset gives it: an int for
    int64 class indices, else the element (numpy scalar or row), or a tuple
    of those."""
    if isinstance(targets, tuple):
        return tuple(item(c, i) for c in targets)
    if targets.ndim == 1 and targets.dtype == np.int64:
        return int(targets[i])
    return targets[i]


def take(targets: Targets, idx: Any) -> Targets:
    """The targets of the samples ``idx`` (any numpy index), kept as
    targets."""
    if isinstance(targets, tuple):
        return tuple(c[idx] for c in targets)
    return targets[idx]


def batch(
    targets: Targets, idx: Sequence[int], transform: Optional[Callable] = None
) -> Any:
    """The batch of targets of the samples ``idx``, as torch's DataLoader
    batches the dataset's items: a tensor for numbers and arrays (int64
    class indices straight from the array), a list of batches for tuples,
    and objects (strings) as ``default_collate`` leaves them, in the tuple
    that a batch of (image, target) pairs transposes to; with
    ``transform`` (a target_transform), applied to each item first and the
    results collated so."""
    import torch

    if transform is not None:
        return _collate(tuple(transform(item(targets, i)) for i in idx))
    if isinstance(targets, tuple):
        return [batch(c, idx) for c in targets]
    if targets.dtype == object:
        return _collate(tuple(targets[i] for i in idx))
    return torch.from_numpy(targets[idx])


def _collate(values: tuple) -> Any:
    from torch.utils.data import default_collate

    return default_collate(values)


def _signature(targets: Targets) -> Any:
    if isinstance(targets, tuple):
        return tuple(_signature(c) for c in targets)
    return targets.shape[1:], targets.dtype.kind == "O"


def concat(parts: list, part: np.ndarray, index: np.ndarray, what: str) -> Targets:
    """``parts[part[i]][index[i]]`` for every i: the targets of a
    composition of datasets. Parts must have targets of one kind (the same
    tuple width and row shape; numeric dtypes are promoted, int64 and
    float32 to float64); else ValueError naming ``what``."""
    sig = _signature(parts[0])
    for p in parts[1:]:
        if _signature(p) != sig:
            raise ValueError(
                f"{what}: the datasets' targets differ in kind "
                f"({_describe(parts[0])} and {_describe(p)}); give every "
                "dataset targets of one shape"
            )
    if isinstance(parts[0], tuple):
        return tuple(
            concat([p[k] for p in parts], part, index, what)
            for k in range(len(parts[0]))
        )
    if len(parts) == 1:
        return parts[0][index]
    dtype = np.result_type(*parts)
    out = np.empty((len(part),) + parts[0].shape[1:], dtype=dtype)
    for p, values in enumerate(parts):
        sel = part == p
        out[sel] = values[index[sel]]
    return out


def _describe(targets: Targets) -> str:
    if isinstance(targets, tuple):
        return "tuples of " + ", ".join(_describe(c) for c in targets)
    shape = "x".join(str(d) for d in targets.shape[1:])
    return f"{targets.dtype}" + (f" rows of {shape}" if shape else "")
