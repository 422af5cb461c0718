"""A dataset given as a list of image files and their labels, or a CSV."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from typing import Callable

import numpy as np

from .base import ImageDataset, PairView, PathLike, Sources
from .cache import StringBlob

__all__ = ["FileList"]


class FileList(ImageDataset):
    """Image files and their integer labels, for :class:`ringloader.Loader`.

    Args:
        paths: image file paths (str or path-like), in sample order.
        labels: one integer per path.
        transform, target_transform: as ImageFolder's; the loader uses
            ``transform`` when it is given none.

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
    ) -> None:
        self.paths = StringBlob.from_strings(os.fspath(p) for p in paths)
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
    ) -> FileList:
        """Read ``path,label`` rows from a CSV file.

        A first row whose label is not an integer is a header and is
        skipped; blank rows are skipped; further columns are ignored.
        Relative paths are resolved against ``root``, or the CSV file's
        folder when ``root`` is None. Raises ValueError naming the line of
        a row that has no label or a label that is not an integer.
        """
        path = os.fspath(path)
        base = os.fspath(root) if root is not None else os.path.dirname(path)
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
                paths.append(os.path.join(base, os.path.expanduser(file)))
                labels.append(value)
        return cls(paths, np.array(labels, dtype=np.int64), transform, target_transform)

    def ringloader_sources(self) -> Sources:
        """The files, whole, and their int64 labels."""
        return Sources(paths=self.paths, targets=self.targets)

    def __repr__(self) -> str:
        return f"ringloader.FileList({len(self)} files)"
