"""What LitData's chunks and MosaicML Streaming's MDS shards share.

Both are files of the same outline::

    count u32 | offsets u32[count + 1] | (anything) | samples

sample i being ``offsets[i] .. offsets[i + 1]`` of the file, its columns'
sizes (u32 each, for the columns of no fixed size) then its columns' bytes
one after another. :func:`column_ranges` finds every column's byte range
of every sample with numpy (a gather over a memory map, nothing per sample
in Python); :class:`ChunkedDataset` is a dataset of such files whose image
column the C file source reads in place, the files as runs of samples
(``columns._table_of``), targets and fields from the other columns.
Compressed files are inflated once into the cache folder
(:func:`cached_copy`) and read in place from there.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

from . import targets as _targets
from .base import PathLike
from .cache import StringBlob, atomic_file, default_cache_dir
from .columns import _ColumnDataset, _table_of
from .hf import _stat_of

__all__ = [
    "ChunkedDataset",
    "cached_copy",
    "column_ranges",
    "gather",
    "header_of",
    "inflate_zstd",
    "load_index",
]


def load_index(
    root: str, parse: Callable[[Any], Any], what: str, writer: str, hint: str
) -> tuple[str, Any]:
    """(the path of ``root``'s index.json, what ``parse`` makes of its
    json), ValueError naming it when it is missing or ``parse`` fails on
    it (``what`` it is not; ``writer`` writes it again; ``hint`` says what
    folder the reader takes)."""
    path = os.path.join(root, "index.json")
    try:
        with open(path, "rb") as f:
            return path, parse(json.loads(f.read()))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; {hint}") from None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise ValueError(
            f"{path}: not {what} ({type(e).__name__}: {e}); write the folder "
            f"again with {writer}"
        ) from None


def header_of(data: Any, path: str) -> tuple[int, np.ndarray]:
    """(sample count, offsets) of an uncompressed file's bytes."""
    size = len(data)
    if size < 8:
        raise ValueError(f"{path}: {size} bytes, cut short before its item table")
    n = int(np.frombuffer(data, "<u4", 1, 0)[0])
    if size < 4 + 4 * (n + 1):
        raise ValueError(
            f"{path}: {size} bytes, cut short within its table of {n} items"
        )
    return n, np.frombuffer(data, "<u4", n + 1, 4).astype(np.int64)


def gather(mm: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """(len(starts), width) uint8: ``width`` bytes of ``mm`` at each start."""
    return mm[starts[:, None] + np.arange(width, dtype=np.int64)]


def column_ranges(
    mm: np.ndarray, offsets: np.ndarray, fixed: Sequence[Optional[int]], name: str
) -> tuple[np.ndarray, np.ndarray]:
    """(starts, sizes), (n, columns) int64: where each column of each
    sample lies in the file ``mm``, whose samples ``offsets`` bound (its
    end checked already). ``fixed`` is each column's size, None for one
    whose size comes first in the sample (u32, in column order)."""
    n, cols = len(offsets) - 1, len(fixed)
    varying = [k for k, s in enumerate(fixed) if s is None]
    head = 4 * len(varying)
    if (np.diff(offsets) < head).any():
        raise ValueError(f"{name}: its item table is not a chunk's (damaged)")
    sizes = np.zeros((n, cols), np.int64)
    for k, s in enumerate(fixed):
        if s is not None:
            sizes[:, k] = s
    if varying:
        got = gather(mm, offsets[:-1], head).view("<u4").reshape(n, len(varying))
        sizes[:, varying] = got
    ends = np.cumsum(sizes, axis=1)
    starts = offsets[:-1, None] + head + ends - sizes
    last = ends[:, -1] if cols else np.zeros(n, np.int64)
    bad = offsets[:-1] + head + last != offsets[1:]
    if bad.any():
        raise ValueError(
            f"{name}: item {int(np.argmax(bad))}'s leaf sizes disagree "
            "with its length in the item table (the file is damaged)"
        )
    return starts, sizes


def inflate_zstd(data: bytes, what: str, writer: str) -> bytes:
    """``data`` inflated with the zstd package ``writer`` compresses with."""
    try:
        import zstd
    except ImportError:
        raise ValueError(
            f"{what}: the file is zstd-compressed; pip install zstd (what "
            f"{writer} compresses with) to read it"
        ) from None
    try:
        return zstd.decompress(data)
    except zstd.Error as e:
        raise ValueError(
            f"{what}: cannot inflate the file ({e}): the file is damaged"
        ) from None


def cached_copy(
    path: str,
    tag: str,
    cache_dir: Optional[PathLike],
    folder: str,
    inflate: Callable[[bytes], bytes],
    whole: Callable[[str], bool],
) -> str:
    """The uncompressed copy of the compressed file ``path`` (``inflate``
    makes it of the file's bytes) in the cache folder's ``folder``, named
    by the file's path, size, mtime and ``tag`` (a changed file is
    inflated again). One process inflates it, under a lock of its own:
    the ranks of a job starting together wait for it and then use its
    copy, and a copy that is ``whole`` is never replaced (another process
    may be reading it). A copy that is not whole (a crash) is inflated
    again."""
    st = os.stat(path)
    ident = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{tag}"
    digest = hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()[:20]
    where = os.path.join(default_cache_dir(cache_dir), folder)
    base = os.path.basename(path).split(".")[0]
    out = os.path.join(where, f"{base}-{digest}.bin")
    if whole(out):
        return out
    os.makedirs(where, exist_ok=True)
    with open(out[: -len(".bin")] + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if whole(out):  # another process inflated it meanwhile
            return out
        with open(path, "rb") as f:
            data = inflate(f.read())
        with atomic_file(out) as f:
            f.write(data)
    return out


class ChunkedDataset(_ColumnDataset):
    """A dataset of chunk files: the image column's bytes read in place
    by the C file source, targets and ``fields`` from other columns. A
    subclass finds the ranges and calls :meth:`_set_tables`; ``_unit``
    names a file in messages, ``_kinds`` each column's kind (``"str"``,
    ``"bytes"``, ``"json"`` or a numpy dtype of its values) by
    ``_col``'s positions."""

    _unit = "chunk"
    image: str
    transform: Optional[Callable]
    target_transform: Optional[Callable]
    _col: dict[str, int]
    _kinds: list

    def _set_tables(self, names: list[str], parts: list[tuple]) -> None:
        """The tables of the files listed as ``names``, one part each:
        (the path read from, starts and sizes (n, columns) as
        :func:`column_ranges` gives them, the target's values or None)."""
        files = [p for p, _, _, _ in parts]
        counts = [len(s) for _, s, _, _ in parts]
        self._chunk_names, self._files = names, files
        self._stats = [_stat_of(p) for p in files]
        n = int(sum(counts))
        self._source = np.repeat(np.arange(len(files), dtype=np.int32), counts)
        self._first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

        def column(k: int, at: int) -> np.ndarray:
            if not n:
                return np.zeros(0, np.int64)
            return np.concatenate([part[at][:, k] for part in parts])

        image = self._col[self.image]
        self.offsets, self.lengths = column(image, 1), column(image, 2)
        if self.target is None or not n:
            self.targets: _targets.Targets = np.full(n, -1, np.int64)
        else:
            self.targets = np.concatenate([t for _, _, _, t in parts])
        self._field_ranges = {
            f: (column(self._col[f], 1), column(self._col[f], 2)) for f in self.fields
        }
        self.paths = _table_of(self._source, StringBlob.from_strings(files))
        if self.fields:
            self._carry_fields()

    def describe(self, index: int) -> str:
        """Sample ``index`` for messages: its file, the sample in it and
        the image's bytes in the file it is read from."""
        i = self._index(index)
        c, unit = int(self._source[i]), self._unit
        off, size = int(self.offsets[i]), int(self.lengths[i])
        where = (
            f"{self._chunk_names[c]}: sample {i - int(self._first[c])} of the {unit}"
        )
        if self._files[c] != self._chunk_names[c]:
            where += f" (inflated to {self._files[c]})"
        return f"{where}, column {self.image!r} (bytes {off}..{off + size})"

    def _read(self, i: int, offsets: np.ndarray, lengths: np.ndarray) -> bytes:
        path = self._files[int(self._source[i])]
        off, size = int(offsets[i]), int(lengths[i])
        with open(path, "rb") as f:
            data = os.pread(f.fileno(), size, off)
        if len(data) != size:
            raise OSError(f"{self.describe(i)}: the file is cut short")
        return data

    def _check_files(self, which: Sequence[int] | None = None) -> None:
        """ValueError naming a file (of ``which``, else any) whose size or
        mtime changed since this was made: it would be misread."""
        for k in range(len(self._files)) if which is None else which:
            if _stat_of(self._files[k]) != self._stats[k]:
                kind = type(self).__name__
                raise ValueError(
                    f"{self._files[k]}: the {self._unit} file changed (size or "
                    f"mtime) since the {kind} was made; make a new {kind}"
                )

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        i = self._index(index)
        self._check_files([int(self._source[i])])
        data = self._read(i, self.offsets, self.lengths)
        return self.describe(i), data, _targets.item(self.targets, i)

    def _value(self, column: str, i: int) -> Any:
        data = self._read(i, *self._field_ranges[column])
        kind = self._kinds[self._col[column]]
        if kind == "str":
            return data.decode("utf-8")
        if kind == "json":
            return json.loads(data.decode("utf-8"))
        if isinstance(kind, np.dtype):
            return np.frombuffer(data, kind)[0].item()
        return data

    def _column_values(self, column: str, ids: Sequence[int]) -> list:
        return [self._value(column, int(i)) for i in ids]
