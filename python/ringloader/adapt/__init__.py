"""The adapters: each library's transform classes, one file a library,
translated into the neutral steps of ``ringloader._steps`` that
``transforms.compile_transform`` builds the C core's plan from.

An adapter module has:

- ``claims(t) -> bool``: t is one of its library's objects (by module: a
  user's own class called Resize may mean something else entirely);
- ``flatten(t) -> list | None``: the transforms of a composition class that
  runs its children in order (a ``Compose``), or None;
- ``describe(t) -> Step``: the step t stands for, or ``Unfused`` with why.

The first adapter in :data:`ADAPTERS` that claims an object describes it.
Adding a library is adding its file here (docs/ARCHITECTURE.md, "Adding a
library's transforms").
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Optional

from .._steps import Step, Unfused
from . import native, timm, torchvision_v1, torchvision_v2

# v2 before v1: v2's modules are under v1's package name.
ADAPTERS: tuple[ModuleType, ...] = (native, torchvision_v2, torchvision_v1, timm)


def adapter_of(t: Any) -> Optional[ModuleType]:
    """The adapter whose library t belongs to, or None."""
    for adapter in ADAPTERS:
        if adapter.claims(t):
            return adapter
    return None


def flatten(transform: Any) -> list[Any]:
    """The user's transforms in the order they run: compositions of a known
    library (and lists) opened, recursively."""
    if transform is None:
        return []
    if isinstance(transform, (list, tuple)):
        return [t for item in transform for t in flatten(item)]
    adapter = adapter_of(transform)
    inner = adapter.flatten(transform) if adapter is not None else None
    if inner is None:
        return [transform]
    return [t for item in inner for t in flatten(item)]


def describe(t: Any) -> Step:
    """The step of one (flattened) user transform."""
    adapter = adapter_of(t)
    if adapter is None:
        name = type(t).__name__
        return Unfused(name, f"{name} is not a torchvision or timm transform")
    return adapter.describe(t)
