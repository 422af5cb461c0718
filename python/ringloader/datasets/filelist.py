"""A dataset given as a list of image files and their labels, or a CSV:
local paths, or URLs (http, https, s3) of image objects."""

from __future__ import annotations

import csv
import os
import posixpath
from collections.abc import Iterable, Iterator
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from . import base as _base
from .base import ImageDataset, PairView, PathLike, Sources
from .cache import StringBlob
from .remote import Client
from .targets import as_targets, item
from .urls import is_url, redact

__all__ = ["FileList"]


class FileList(ImageDataset):
    """Image files and their labels, for :class:`ringloader.Loader`.

    Args:
        paths: image file paths (str or path-like), or URLs of image
            objects (``http://``, ``https://``, ``s3://``), in sample
            order; all local or all remote.
        labels: one target per path: integers (class indices), or targets
            of any kind as an array with a row per path (floats, multi-hot
            or soft-label rows, bools) or a sequence of per-path values
            (tuples included), batched as torch's ``default_collate``
            batches them (:mod:`ringloader.datasets.targets`).
        transform, target_transform: as ImageFolder's; the loader uses
            ``transform`` when it is given none.
        retries: remote files: attempts after the first for a failed
            request (5xx, 429, connection errors, timeouts).
        timeout: remote files: seconds without progress before an attempt
            is abandoned and retried.
        s3_client: a boto3 S3 client for ``s3://`` files; None: one made
            from the standard configuration (see :class:`TarShards`).
        progress: remote files: show a bar while presigning many S3 URLs
            (when tqdm is installed; on the first rank of a distributed
            job only).

    Paths are kept as one compact blob (a sequence view, not a list of
    strings) and labels as an array ``targets`` (int64 for integers; a
    tuple of arrays for tuple targets); ``samples`` gives (path, label)
    pairs on access. Files are not checked here: a missing
    one raises OSError, with its path, in the batch that reads it.
    """

    def __init__(
        self,
        paths: Iterable[PathLike],
        labels: Iterable[Any] | np.ndarray,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        *,
        retries: int = 5,
        timeout: float = 30.0,
        s3_client: Any = None,
        progress: bool = True,
    ) -> None:
        kinds: set[bool] = set()
        self.paths = StringBlob.from_strings(_noting_urls(paths, kinds))
        if len(kinds) > 1:
            raise ValueError(
                "local files and remote (http, https, s3) files cannot be "
                "mixed in one FileList; make two and concatenate them"
            )
        self.client: Client | None = None
        if kinds == {True}:
            self.client = Client(
                retries=retries,
                timeout=timeout,
                s3_client=s3_client,
                progress=progress,
            )
        self.targets = as_targets(labels, len(self.paths), "FileList labels")
        self.samples = PairView(self.paths, self.targets)
        self.transform = transform
        self.target_transform = target_transform

    @classmethod
    def from_csv(
        cls,
        path: PathLike,
        root: PathLike | None = None,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        *,
        label_columns: int = 1,
        **remote: Any,
    ) -> FileList:
        """Read ``path,label`` rows from a CSV file.

        The ``label_columns`` columns after the path hold the target: one
        number (a class index, or a float for regression), or with
        ``label_columns=k`` a row of k numbers per path (multi-hot or soft
        labels, a box), batched as a (N, k) tensor. Integers give int64
        targets; a float anywhere gives float64 ones. A first row whose
        labels are not numbers is a header and is skipped; blank rows are
        skipped; further columns are ignored. Relative paths are resolved
        against ``root`` (a folder, or a URL such as ``s3://bucket/prefix``),
        or the CSV file's folder when ``root`` is None; rows may be URLs
        (``http(s)://``, ``s3://``). ``remote``: ``retries``, ``timeout``,
        ``s3_client``, ``progress``, as for the constructor. Raises
        ValueError naming the line of a row that has too few labels or a
        label that is not a number.
        """
        if int(label_columns) < 1:
            raise ValueError(f"label_columns must be >= 1, not {label_columns}")
        k = int(label_columns)
        path = os.fspath(path)
        base = os.fspath(root) if root is not None else os.path.dirname(path)
        if not is_url(base):
            base = os.path.expanduser(base)

        paths: list[str] = []
        labels: list[Any] = []
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            first = True
            for row in reader:
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) < 1 + k:
                    want = "path,label" if k == 1 else f"path and {k} labels"
                    raise ValueError(
                        f"{path}, line {reader.line_num}: expected {want}, got {row!r}"
                    )
                file = row[0].strip()
                try:
                    values = [_number(c.strip()) for c in row[1 : 1 + k]]
                except ValueError as e:
                    if first:  # a header
                        first = False
                        continue
                    raise ValueError(
                        f"{path}, line {reader.line_num}: label {e.args[0]!r} "
                        "is not a number"
                    ) from None
                first = False
                paths.append(_resolve(base, file))
                labels.append(values[0] if k == 1 else values)
        return cls(
            paths,
            np.array(labels) if labels else np.zeros(0, np.int64),
            transform,
            target_transform,
            **remote,
        )

    def ringloader_sources(self) -> Sources:
        """The files, whole, and their int64 labels."""
        if self.client is None:
            return Sources(paths=self.paths, targets=self.targets)
        names = list(dict.fromkeys(self.paths))  # each object once
        return Sources(
            paths=self.paths, targets=self.targets, remote=self.client.remote(names)
        )

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        if self.client is None:
            return super()._sample(index)
        path = self.paths[index]
        return path, self.client.get(path), item(self.targets, index)

    def __repr__(self) -> str:
        where = "" if self.client is None else " over HTTP/S3"
        return f"ringloader.FileList({len(self)} files{where})"


def _number(text: str) -> int | float:
    """A CSV label: an int, else a float; ValueError carrying the text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ValueError(text) from None


def _noting_urls(paths: Iterable[PathLike], kinds: set[bool]) -> Iterator[str]:
    """The paths as str, noting in ``kinds`` whether each is a URL."""
    for p in paths:
        s = os.fspath(p)
        kinds.add("://" in s and is_url(s))
        yield s


def _resolve(base: str, file: str) -> str:
    """A CSV row's path: a URL as it is; else joined to ``base``, a folder
    or a URL (its path extended)."""
    if is_url(file):
        return file
    if is_url(base):
        parts = urlsplit(base)
        if parts.query:
            raise ValueError(f"{redact(base)}: a root URL cannot have a query")
        return urlunsplit(parts._replace(path=posixpath.join(parts.path, file)))
    return os.path.join(base, os.path.expanduser(file))


def files_of(dataset: Any) -> Sources:
    """The sources of a dataset class of the user's that has
    ``ringloader_files()``: a method returning ``(paths, targets)``, where

    - ``paths`` says where sample i's bytes are: a local file path or an
      ``http(s)://`` or ``s3://`` URL (all local or all remote), as any
      sequence of str (a list, a numpy array of str or bytes) or, for
      billions of samples, one blob of the paths' UTF-8 bytes and the
      ``n + 1`` offsets where each starts (``(blob, offsets)``: two numpy
      arrays, uint8 and int64, e.g. an Arrow string column's buffers), so
      that no Python object is made per sample;
    - ``targets`` is one per sample, as an array: int64 class indices, or
      any kind :mod:`.targets` keeps (floats, rows, a tuple of arrays).

    The loader then reads and decodes the files itself and applies the
    dataset's ``transform`` and ``target_transform`` attributes, so the
    dataset's ``__getitem__`` must be what torchvision's ImageFolder does
    (the file decoded to an RGB image, ``transform`` on it, the target,
    ``target_transform`` on it); it is not called. Read once, when the
    loader is made. Raises ValueError or TypeError naming the dataset for
    what is not of that form."""
    name = type(dataset).__name__
    got = dataset.ringloader_files()
    if not (isinstance(got, tuple) and len(got) == 2):
        raise TypeError(f"{name}.ringloader_files() must return (paths, targets)")
    paths, targets = got
    if isinstance(paths, tuple):  # (blob, offsets)
        blob, offsets = (np.asarray(a) for a in paths)
        if blob.dtype != np.uint8 or offsets.ndim != 1 or len(offsets) < 1:
            raise TypeError(
                f"{name}.ringloader_files(): paths as (blob, offsets) must be a "
                "uint8 array and an int64 array of len(targets) + 1 offsets"
            )
        if np.any(np.diff(offsets) < 0) or offsets[0] < 0 or offsets[-1] > len(blob):
            raise ValueError(
                f"{name}.ringloader_files(): offsets must rise from 0 to at most "
                f"len(blob) ({len(blob)})"
            )
        paths = StringBlob(blob, offsets)
        if not len(paths) or not is_url(paths[0]):
            # Local files: kept as given, no string made per sample.
            what = f"{name}.ringloader_files() targets"
            return Sources(paths=paths, targets=as_targets(targets, len(paths), what))
    elif isinstance(paths, np.ndarray) and paths.dtype.kind == "S":
        paths = (os.fsdecode(p) for p in paths)
    return FileList(paths, targets).ringloader_sources()


_base._files_reader = files_of
