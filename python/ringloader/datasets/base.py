"""What every dataset ringloader reads shares, and the protocol the loader
reads them through.

A dataset gives the loader its samples in one of three ways:

- ``ringloader_files()``, the protocol for a dataset class of the user's:
  it returns ``(paths, targets)``, where sample i's bytes are and its
  target, as arrays (see :data:`FILES_PROTOCOL` and
  :func:`ringloader.datasets.filelist.files_of`);
- ``ringloader_sources()``, returning :class:`Sources`: the file (or byte
  range of a file) and target of every sample (:mod:`.targets`). Tar shards, file lists
  and indexed folders do this;
- a ``samples`` list of ``(path, target)``, as torchvision's
  ``ImageFolder`` and :class:`ringloader.ImageFolder` have. The loader
  follows a ``samples`` list replaced between epochs, as DataLoader does.

Optionally, ``describe(index)`` names a sample as the dataset knows it (a
tar shard: the member and its byte range); errors about that sample then
carry the description.

Nothing here imports the loader: datasets sit below it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

from . import targets as _targets

__all__ = [
    "ImageDataset",
    "PairView",
    "PathLike",
    "Remote",
    "Sources",
    "FILES_PROTOCOL",
    "decode_item",
    "provides_sources",
    "read_file",
    "sources_of",
]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class Remote:
    """How the objects of a remote dataset (HTTP(S) or S3) are fetched.

    ``names`` are the objects' display names (``http://host/a.tar``,
    ``s3://bucket/key``, never a presigned URL), each once: a sequence of
    str, or a :class:`~.cache.StringBlob` (a FileList's: no Python object
    per name). Each of ``Sources.paths`` is one of them; ``objects``
    (int64, one a sample, or None) gives each sample's by its position in
    ``names``, and ``names`` that are ``Sources.paths`` themselves name
    one object a sample. ``urls()`` gives the fetch URL of each, in the
    same order (the URL itself; for S3 a plain URL that the C source signs
    per request with ``keys()``, or a presigned GET URL), made afresh at
    each call: a sequence of str, which for plain URLs is
    :class:`~.presign.FromNames` (made from the names, in C, by the
    pipeline: nothing kept per object; presigned URLs are one string an
    object by nature). ``keys()`` (None: nothing is signed in C)
    gives the (region, access key, secret key, session token or None)
    that S3 GETs without a query string are signed with. Every
    ``refresh_s`` seconds (None: never) ``keys()`` is called again, and
    ``urls()`` too when ``urls_expire`` (presigned URLs). ``options`` are the fetch
    settings: ``retries`` (int), ``timeout`` (seconds without progress
    before an attempt is abandoned), ``connect_timeout`` (seconds),
    ``ca_file`` (str or None: the system's), ``verify`` (bool),
    ``max_connections`` (int).
    """

    names: Sequence[str]
    urls: Callable[[], Sequence[str]]
    refresh_s: Optional[float]
    options: dict
    keys: Optional[Callable[[], tuple[str, str, str, Optional[str]]]] = None
    urls_expire: bool = True
    objects: Optional[np.ndarray] = None


@dataclass
class Sources:
    """Where each sample's bytes are: a file, or a byte range of one.

    ``offsets``/``lengths`` are None for whole files. Datasets that are not
    ImageFolder-like provide this through a ``ringloader_sources()``
    method (tar shards, file lists and indexed folders do). For a remote
    dataset, ``paths`` are the display names of ``remote.names`` (the
    shard of each sample, or the file) and ``remote`` says how to fetch
    them; None for local files. ``fields`` (a tar shard's
    :class:`~ringloader.datasets.fields.FieldTable`): each range holds the
    image and other members, which the loader decodes into the batch's
    fields; None: each range is the image alone. ``parts`` (int64, each
    part's first sample, then the table's length): the datasets the table
    was made of (:meth:`.composed.Composed.parts`), within which
    ``on_error="skip"`` replaces a sample; None: one. ``records``
    (tar shards, local or remote, whose per-sample ranges are in record
    files: each shard's record file, the size and mtime_ns it must state,
    and the tag it starts with, ``(files, sizes, mtimes, tag)``, tag None
    for remote shards, whose files each state their own ETag: checked in
    Python when the sources are made, their format and count in C; see
    :mod:`.manifest`): the C source (file or HTTP) looks each sample's
    range up when it reads it,
    and ``offsets``/``lengths`` are lazy views for everything else (a
    Python decode, a composition of datasets); None: the arrays are the
    table. ``plan_boxes`` (``(boxes, offsets)``: float64 (N, 4) XYXY boxes
    in each image's pixels, sample i's rows ``offsets[i]:offsets[i + 1]``,
    int64 offsets, one a sample and one more): the boxes a RandomIoUCrop
    draws each sample's crop from (core/pipeline.h's plan_boxes); None:
    none, and such a transform is refused.
    """

    paths: Sequence[str]
    targets: _targets.Targets  # int64 classes, or any kind (.targets)
    offsets: Optional[np.ndarray] = None
    lengths: Optional[np.ndarray] = None
    remote: Optional[Remote] = None
    fields: Optional[Any] = None
    parts: Optional[np.ndarray] = None
    records: Optional[tuple] = None
    plan_boxes: Optional[tuple] = None

    def __len__(self) -> int:
        return len(self.paths)


# How the loader's messages name the protocol a user's dataset class can
# follow to be read natively.
FILES_PROTOCOL = "a ringloader_files() method returning (paths, targets)"


# Reads a dataset that has ringloader_files() (filelist.files_of, which
# registers itself when datasets.filelist is imported: it makes a FileList,
# a layer above this module).
_files_reader: Optional[Callable[[Any], Sources]] = None


def provides_sources(dataset: Any) -> bool:
    """Whether the dataset has ``ringloader_sources()`` or
    ``ringloader_files()`` (rather than a ``samples`` list the loader reads
    and follows)."""
    return (
        getattr(dataset, "ringloader_sources", None) is not None
        or getattr(dataset, "ringloader_files", None) is not None
    )


def sources_of(dataset: Any) -> Sources:
    """The files (or byte ranges) and targets of a dataset (a ``samples``
    list's targets may be of any kind :mod:`.targets` keeps). Raises
    TypeError for a dataset that follows none of the protocols."""
    if getattr(dataset, "ringloader_files", None) is not None:
        # Set whenever the package is imported (datasets/__init__.py
        # imports filelist).
        assert _files_reader is not None
        return _files_reader(dataset)
    provider = getattr(dataset, "ringloader_sources", None)
    if provider is not None:
        return provider()
    samples = getattr(dataset, "samples", None)
    if samples is None:
        raise TypeError(
            f"{type(dataset).__name__} has no 'samples' list of (path, target): "
            "ringloader.Loader reads image files itself, so it needs an "
            "ImageFolder-like dataset (ringloader.ImageFolder or torchvision's)"
        )
    paths = [s[0] for s in samples]
    targets = _targets.as_targets(
        [s[1] for s in samples], len(samples), f"{type(dataset).__name__}.samples"
    )
    return Sources(paths=paths, targets=targets)


class PairView(Sequence):
    """``(names[i], values[i])`` on access (the target as
    :func:`.targets.item` gives it), like a list of samples, without one
    tuple per item in memory."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: Sequence[str], values: np.ndarray) -> None:
        self._names = names
        self._values = values

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return (self._names[index], _targets.item(self._values, index))

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for i in range(len(self)):
            yield self[i]


def decode_item(
    path: str,
    data: bytes,
    target: Any,
    transform: Callable | None,
    target_transform: Callable | None,
) -> tuple[Any, Any]:
    """(image, target) for inspection, as indexing a ringloader dataset
    gives it: the full image as a uint8 CHW tensor, or with a ``transform``
    the RGB PIL image it is applied to (what torchvision's datasets give
    their transforms, as torch's DataLoader runs them when ringloader falls
    back to it); ``target_transform`` applied. Raises DecodeError naming
    ``path``."""
    import torch

    from .. import _core

    try:
        rgb, h, w = _core.decode(data)
    except _core.DecodeError as e:
        raise _core.DecodeError(f"cannot decode {path}: {e}") from None
    pixels = np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3)
    image: Any
    if transform is not None:
        from PIL import Image

        image = transform(Image.fromarray(pixels))
    else:
        image = torch.from_numpy(pixels.copy()).permute(2, 0, 1)
    out_target: Any = target
    if target_transform is not None:
        out_target = target_transform(target)
    return image, out_target


def read_file(path: str) -> bytes:
    """The whole content of the file at ``path``."""
    with open(path, "rb") as f:
        return f.read()


class ImageDataset:
    """The base of ringloader's datasets: ``transform`` and
    ``target_transform`` as torchvision's (the loader uses ``transform``
    when it is given none), a length, and indexing that decodes one sample
    for inspection (loading batches is the job of :class:`ringloader.Loader`).

    A subclass sets ``paths`` and ``targets`` (one per sample: int64
    classes or any kind :mod:`.targets` keeps), or overrides ``__len__``
    and ``_sample``.
    """

    paths: Sequence[str]
    targets: Any
    transform: Optional[Callable] = None
    target_transform: Optional[Callable] = None

    def __len__(self) -> int:
        return len(self.paths)

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        """(name for messages, encoded bytes, target) of sample ``index``:
        by default its whole file, named by its path."""
        path = self.paths[index]
        return path, read_file(path), _targets.item(self.targets, index)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """(image, target): the full image as a uint8 CHW tensor."""
        name, data, target = self._sample(index)
        return decode_item(name, data, target, self.transform, self.target_transform)
