"""How ringloader.DataLoader stays itself inside training frameworks.

Lightning needs nothing here: ringloader.DataLoader is a subclass of
``torch.utils.data.DataLoader`` with its ``__init__`` signature, so
Lightning's ``_update_dataloader`` (which reads the loader's attributes and
calls ``type(loader)(**kwargs, sampler=DistributedSampler(...))``) builds a
ringloader.DataLoader with Lightning's sampler.

Accelerate's ``prepare()`` also takes the loader apart, but builds the new
one itself: ``DataLoaderShard(dataset, batch_sampler=BatchSamplerShard(...),
**attributes)`` wraps ``DataLoader(dataset, ...)`` where ``DataLoader`` is
the name ``accelerate.data_loader`` imported from torch (1.15: in
``DataLoaderAdapter.__init__`` and ``skip_first_batches``); it offers no
hook for a loader class of one's own. So ringloader replaces that one name
with :class:`AccelerateDataLoader`, a subclass of torch's whose
construction gives a ringloader.DataLoader for a dataset that a
ringloader.DataLoader was made with (so Accelerate's sharded batch sampler,
device placement, end-of-loader detection and skipping all run over the C
pipeline, with the options that loader was given: ``on_error``, ``seed``...),
and torch's own DataLoader, exactly as before, for every other.
The name is replaced only while it is torch's class (never over someone
else's replacement), when a ringloader.DataLoader is made or Accelerate
reads a loader's ``batch_sampler``.

Device placement: Accelerate's ``DataLoaderShard`` moves each batch to its
device with ``send_to_device`` as it iterates. For a ringloader.DataLoader
on a CUDA device the loader does it itself instead (pinned slots, its own
copy stream, conversion on the GPU), so ``send_to_device`` finds the
images already there. ``DataLoaderShard`` (the name ``prepare()`` and
``skip_first_batches`` build) is replaced, on the same terms as
``DataLoader``, by a subclass that hands its device to a ringloader base
loader once built.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import torch.utils.data.dataloader

# torch's own class, bound at import: see dataloader.py.
TorchDataLoader = torch.utils.data.dataloader.DataLoader

# ringloader.DataLoader, set by dataloader.py (which imports this module).
DataLoader: Any = None

# id(dataset) -> the ringloader.DataLoader made with it (the newest).
_MADE_WITH: "dict[int, weakref.ref]" = {}


def remember(loader: Any) -> None:
    """Note that ``loader`` (a ringloader.DataLoader) reads its dataset
    with the C pipeline, so that a framework rebuilding a loader over that
    dataset builds a ringloader.DataLoader too; hook Accelerate if it is
    imported."""
    key = id(loader.dataset)

    def forget(_ref: Any, key: int = key) -> None:
        if _MADE_WITH.get(key) is _ref:
            del _MADE_WITH[key]

    _MADE_WITH[key] = weakref.ref(loader, forget)
    hook_accelerate()


def made_with(dataset: Any) -> Any:
    """The live ringloader.DataLoader made with ``dataset`` (the newest),
    or None."""
    ref = _MADE_WITH.get(id(dataset))
    loader = ref() if ref is not None else None
    return loader if loader is not None and loader.dataset is dataset else None


class AccelerateDataLoader(TorchDataLoader):
    """What ``accelerate.data_loader.DataLoader`` names once hooked: never
    an instance itself; constructing it gives a ringloader.DataLoader for
    a dataset one was made with, else torch's DataLoader."""

    def __new__(cls, dataset: Any = None, *args: Any, **kwargs: Any):
        made = made_with(dataset)
        if made is not None:
            # Accelerate passes torch's arguments only: ringloader's own
            # options (on_error, ...) come from the loader it rebuilds.
            return DataLoader(dataset, *args, **{**made.options(), **kwargs})
        return TorchDataLoader(dataset, *args, **kwargs)


def _placing_shard(shard_class: type) -> type:
    """A subclass of Accelerate's ``DataLoaderShard`` that hands its CUDA
    device to a ringloader.DataLoader base loader."""

    class AccelerateShard(shard_class):  # type: ignore[misc, valid-type]
        _ringloader_placing = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            base = self.__dict__.get("base_dataloader")
            device = self.__dict__.get("device")
            if isinstance(base, DataLoader) and device is not None:
                base._place_on(device)

    AccelerateShard.__name__ = AccelerateShard.__qualname__ = shard_class.__name__
    AccelerateShard.__module__ = shard_class.__module__
    return AccelerateShard


def hook_accelerate() -> None:
    """Point ``accelerate.data_loader.DataLoader`` at AccelerateDataLoader
    and ``DataLoaderShard`` at its placing subclass, if Accelerate is
    imported and each name is still Accelerate's own."""
    module = sys.modules.get("accelerate.data_loader")
    if module is None:
        return
    if getattr(module, "DataLoader", None) is TorchDataLoader:
        module.DataLoader = AccelerateDataLoader
    shard = getattr(module, "DataLoaderShard", None)
    if (
        isinstance(shard, type)
        and shard.__module__ == module.__name__
        and not getattr(shard, "_ringloader_placing", False)
    ):
        module.DataLoaderShard = _placing_shard(shard)
