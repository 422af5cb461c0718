"""timm's ``ImageDataset`` (what its ``create_dataset`` makes over local
files) as a dataset the loader reads: :class:`TimmImages` gives the files
of its folder reader, or the byte ranges of its tar reader, as
:class:`~.base.Sources`. Used by ``ringloader.timm.create_loader`` and by
the loader itself, given timm's dataset as it is (:func:`readable`). Never
imports timm: a timm dataset exists only where timm is imported.

A reader whose data a higher layer reads (timm's ``ReaderHfds``: a Hugging
Face dataset, read by :mod:`.hf`) is registered there with
:func:`register_reader`: this module, below it, does not import it."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional

import numpy as np

from .base import ImageDataset, Sources

__all__ = ["TimmImages", "is_timm_images", "readable", "register_reader"]

# timm reader class name -> what makes, of such a reader, a dataset giving
# ``ringloader_sources()`` and ``describe(index)`` (register_reader).
_READERS: dict[str, Callable[[Any], Any]] = {}


def register_reader(kind: str, make: Callable[[Any], Any]) -> None:
    """Read timm's readers of class ``kind`` through ``make(reader)``: a
    dataset with ``ringloader_sources()`` (called each time the loader
    takes the table) and ``describe(index)``; ``make`` raises ValueError
    naming what it cannot read."""
    _READERS[kind] = make


class TimmImages(ImageDataset):
    """timm's ``ImageDataset`` over local files, read by the C pipeline:
    its reader's files (folder reader) or byte ranges of its tar files (tar
    reader) and its targets. ``transform`` and ``target_transform`` are the
    timm dataset's own (setting them here sets them there, so the loader
    follows a transform replaced on either); ``transform``, when given,
    replaces the timm dataset's. Indexed, it gives what timm's dataset
    gives. Raises ValueError naming what it cannot read."""

    def __init__(self, dataset: Any, transform: Optional[Callable] = None) -> None:
        self.dataset = dataset
        if transform is not None:
            dataset.transform = transform
        if getattr(dataset, "load_bytes", False):
            raise ValueError("the dataset gives bytes (load_bytes=True)")
        if getattr(dataset, "input_img_mode", "RGB") != "RGB":
            raise ValueError(f"input_img_mode={dataset.input_img_mode!r}, not 'RGB'")
        if getattr(dataset, "additional_features", None):
            raise ValueError("the dataset gives additional features")
        self._reader = dataset.reader
        self._samples = getattr(dataset.reader, "samples", None)
        make = _READERS.get(type(dataset.reader).__name__)
        # A registered reader's dataset (an HFDataset): its own table.
        self._inner = make(dataset.reader) if make is not None else None
        self._sources = _sources_of(dataset.reader) if self._inner is None else None

    @property  # type: ignore[override]
    def transform(self) -> Optional[Callable]:
        return getattr(self.dataset, "transform", None)

    @transform.setter
    def transform(self, value: Optional[Callable]) -> None:
        self.dataset.transform = value

    @property  # type: ignore[override]
    def target_transform(self) -> Optional[Callable]:
        return getattr(self.dataset, "target_transform", None)

    @target_transform.setter
    def target_transform(self, value: Optional[Callable]) -> None:
        self.dataset.target_transform = value

    def ringloader_sources(self) -> Sources:
        if self._inner is not None:
            return self._inner.ringloader_sources()
        return self._sources

    @property
    def describe(self) -> Optional[Callable[[int], str]]:
        """How a registered reader's dataset names sample i (a Hugging
        Face dataset's Arrow file, row and byte range); None for a folder
        or tar reader (the file names it)."""
        return getattr(self._inner, "describe", None)

    def __len__(self) -> int:
        if self._inner is not None:
            return len(self._inner)
        return len(self._sources)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.dataset[index]


def is_timm_images(dataset: Any) -> bool:
    """Whether ``dataset`` is timm's ``ImageDataset`` itself (a subclass
    overriding ``__getitem__`` is not: it may give something else)."""
    module = sys.modules.get("timm.data.dataset")
    cls = getattr(module, "ImageDataset", None)
    return (
        cls is not None
        and isinstance(dataset, cls)
        and type(dataset).__getitem__ is cls.__getitem__
    )


def readable(dataset: Any) -> Any:
    """What the loader reads for ``dataset``: a :class:`TimmImages` over
    timm's ``ImageDataset``, else ``dataset``. Raises ValueError (naming
    what) for a timm dataset it cannot read. The listing is made once per
    reader and samples list (kept on the timm dataset): a DataLoader asks
    for it several times while it is made, and ImageNet's takes seconds."""
    if not is_timm_images(dataset):
        return dataset
    cached = dataset.__dict__.get("_ringloader_images")
    reader = dataset.reader
    if (
        cached is None
        or cached._reader is not reader
        or cached._samples is not getattr(reader, "samples", None)
    ):
        cached = TimmImages(dataset)
        dataset.__dict__["_ringloader_images"] = cached
    return cached


def _sources_of(reader: Any) -> Sources:
    kind = type(reader).__name__
    if kind == "ReaderImageFolder":
        paths = [os.path.abspath(p) for p, _ in reader.samples]
        targets = [t for _, t in reader.samples]
        return Sources(paths=paths, targets=_targets(targets))
    if kind == "ReaderImageInTar":
        paths, offsets, lengths = [], [], []
        for sample, parent, child in reader.samples:
            path = os.path.join(reader.root, parent) if parent else reader.root
            start = child.offset_data if child is not None else 0
            if not sample.isreg() or (child is not None and not child.isreg()):
                raise ValueError(f"{path}: {sample.name} is not a plain file")
            paths.append(os.path.abspath(path))
            offsets.append(start + sample.offset_data)
            lengths.append(sample.size)
        return Sources(
            paths=paths,
            targets=_targets(reader.targets),
            offsets=np.asarray(offsets, dtype=np.int64),
            lengths=np.asarray(lengths, dtype=np.int64),
        )
    raise ValueError(f"timm's {kind} is not read by ringloader")


def _targets(targets: Any) -> np.ndarray:
    out = np.asarray([-1 if t is None else t for t in targets])
    if len(out) and not np.issubdtype(out.dtype, np.integer):
        raise ValueError(f"targets of {out.dtype}, not class indices")
    return out.astype(np.int64)
