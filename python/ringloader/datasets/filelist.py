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

from .base import ImageDataset, PairView, PathLike, Sources
from .cache import StringBlob
from .remote import Client, is_url, redact

__all__ = ["FileList"]


class FileList(ImageDataset):
    """Image files and their integer labels, for :class:`ringloader.Loader`.

    Args:
        paths: image file paths (str or path-like), or URLs of image
            objects (``http://``, ``https://``, ``s3://``), in sample
            order; all local or all remote.
        labels: one integer per path.
        transform, target_transform: as ImageFolder's; the loader uses
            ``transform`` when it is given none.
        retries: remote files: attempts after the first for a failed
            request (5xx, 429, connection errors, timeouts).
        timeout: remote files: seconds without progress before an attempt
            is abandoned and retried.
        s3_client: a boto3 S3 client for ``s3://`` files; None: one made
            from the standard configuration (see :class:`TarShards`).

    Paths are kept as one compact blob (a sequence view, not a list of
    strings) and labels as an int64 array ``targets``; ``samples`` gives
    (path, label) pairs on access. Files are not checked here: a missing
    one raises OSError, with its path, in the batch that reads it.
    """

    def __init__(
        self,
        paths: Iterable[PathLike],
        labels: Iterable[int] | np.ndarray,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        *,
        retries: int = 5,
        timeout: float = 30.0,
        s3_client: Any = None,
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
            self.client = Client(retries=retries, timeout=timeout, s3_client=s3_client)
        targets = np.asarray(labels if isinstance(labels, np.ndarray) else list(labels))
        if targets.ndim != 1 or len(targets) != len(self.paths):
            raise ValueError(
                f"{len(self.paths)} paths but labels of shape {targets.shape}: "
                "give one label per path"
            )
        if len(targets) and not np.issubdtype(targets.dtype, np.integer):
            raise TypeError(f"labels must be integers, not {targets.dtype}")
        self.targets = targets.astype(np.int64)
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
        **remote: Any,
    ) -> FileList:
        """Read ``path,label`` rows from a CSV file.

        A first row whose label is not an integer is a header and is
        skipped; blank rows are skipped; further columns are ignored.
        Relative paths are resolved against ``root`` (a folder, or a URL
        such as ``s3://bucket/prefix``), or the CSV file's folder when
        ``root`` is None; rows may be URLs (``http(s)://``, ``s3://``).
        ``remote``: ``retries``, ``timeout``, ``s3_client``, as for the
        constructor. Raises ValueError naming the line of a row that has
        no label or a label that is not an integer.
        """
        path = os.fspath(path)
        base = os.fspath(root) if root is not None else os.path.dirname(path)
        if not is_url(base):
            base = os.path.expanduser(base)

        paths: list[str] = []
        labels: list[int] = []
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            first = True
            for row in reader:
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) < 2:
                    raise ValueError(
                        f"{path}, line {reader.line_num}: expected path,label, "
                        f"got {row!r}"
                    )
                file, label = row[0].strip(), row[1].strip()
                try:
                    value = int(label)
                except ValueError:
                    if first:  # a header
                        first = False
                        continue
                    raise ValueError(
                        f"{path}, line {reader.line_num}: label {label!r} is not "
                        "an integer"
                    ) from None
                first = False
                paths.append(_resolve(base, file))
                labels.append(value)
        return cls(
            paths,
            np.array(labels, dtype=np.int64),
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
        return path, self.client.get(path), int(self.targets[index])

    def __repr__(self) -> str:
        where = "" if self.client is None else " over HTTP/S3"
        return f"ringloader.FileList({len(self)} files{where})"


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
