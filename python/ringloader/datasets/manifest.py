"""A shard set opened in O(shards): its manifest, and its samples looked up
in the shards' record files rather than held as per-sample arrays.

The manifest of a shard set and a selection (image extensions, label
extension) is one ``.npz`` file in the cache directory, named after a hash
of the shard list and the selection. It records, for each shard, its size
and mtime (a remote shard: its size and ETag), its sample count, and where
its record file (:func:`.tarindex.shard_records`) and member index are.
Opening the set reads the manifest, looks at every shard's metadata
(``os.stat``; a HEAD request for a remote shard) and re-indexes only the
shards that changed or are new; the sample offsets of the shards
(``starts``) come from the counts, and no per-sample array is built.

:class:`RecordStore` then finds sample i by a binary search of ``starts``
and reads its record from the shard's record file with ``pread``, through
a small cache of open files (the least recently used closed), so that a
set of 100,000 shards needs neither 100,000 descriptors nor memory per
sample. The files are read, never mapped: a record file cut short while
the set is in use gives a short read (the file is checked again, and made
anew or refused naming the shard), where a map would kill the process
with SIGBUS. :class:`RecordColumn` is one field of the records seen as a
read-only int64 array (``len``, integer and integer-array indexing).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .base import PathLike
from .cache import StringBlob, cache_name, default_cache_dir, load_npz, save_npz
from .tarindex import (
    HEADER_BYTES,
    RECORD,
    RECORDS_VERSION,
    SHARD_INDEX_VERSION,
    ShardError,
    records_head,
)

__all__ = ["Manifest", "RecordColumn", "RecordStore", "manifest_path"]

log = logging.getLogger("ringloader")

# The manifest's format: 1, the first.
MANIFEST_VERSION = 1
# Lookups of up to this many samples (a batch) read their records one by
# one with pread; larger ones read each shard's records whole.
_PREAD_ROWS = 1024
# Record files kept open for those reads (least recently used closed).
_OPEN_RECORD_FILES = 128


def manifest_path(shards: Sequence[str], tag: bytes, cache_dir: PathLike | None) -> str:
    """The manifest's file for a shard list (absolute paths or URLs) and a
    selection ``tag``."""
    ident = "\n".join(shards) + "\0" + tag.decode("utf-8", "replace")
    label = f"{os.path.basename(shards[0])}-{len(shards)}"
    return os.path.join(
        default_cache_dir(cache_dir), cache_name("shards", ident, label)
    )


def _blob(items: Sequence[str]) -> StringBlob:
    return StringBlob.from_strings(items)


class Manifest:
    """What a shard set's manifest records, one entry per shard: ``sizes``,
    ``mtimes`` (ns; 0 for remote shards), ``etags`` (remote shards; "" for
    local ones), ``counts``, ``records`` and ``indexes`` (the files)."""

    def __init__(self, n: int) -> None:
        self.sizes = np.full(n, -1, dtype=np.int64)
        self.mtimes = np.zeros(n, dtype=np.int64)
        self.counts = np.zeros(n, dtype=np.int64)
        self.etags: list[str] = [""] * n
        self.records: Sequence[str] = [""] * n
        self.indexes: Sequence[str] = [""] * n

    def __getstate__(self) -> dict:  # a StringBlob does not pickle
        state = dict(self.__dict__)
        for k in ("records", "indexes"):
            state[k] = list(state[k])
        return state

    @classmethod
    def load(cls, path: str, shards: Sequence[str], tag: bytes) -> Manifest | None:
        """The manifest at ``path`` when it is of this format, of these
        shards (in this order) and this selection, and holds together;
        else None (the caller builds it anew)."""
        z = load_npz(path)
        if z is None:
            return None
        n = len(shards)
        try:
            names = _blob(shards)
            m = cls(0)
            m.sizes, m.mtimes, m.counts = z["sizes"], z["mtimes"], z["counts"]
            m.records = StringBlob(z["records_blob"], z["records_offsets"])
            m.indexes = StringBlob(z["indexes_blob"], z["indexes_offsets"])
            etags = StringBlob(z["etags_blob"], z["etags_offsets"])
            if not (
                int(z["version"]) == MANIFEST_VERSION
                and int(z["records_version"]) == RECORDS_VERSION
                and int(z["index_version"]) == SHARD_INDEX_VERSION
                and z["tag"].tobytes() == tag
                and np.array_equal(z["names_offsets"], names.offsets)
                and np.array_equal(z["names_blob"], names.blob)
                and len(m.sizes) == len(m.mtimes) == len(m.counts) == n
                and len(m.records) == len(m.indexes) == len(etags) == n
                and (n == 0 or int(m.counts.min()) >= 0)
            ):
                return None
            m.etags = list(etags) if len(etags.blob) else [""] * n
        except (KeyError, ValueError, TypeError, IndexError):
            return None
        return m

    def save(self, path: str, shards: Sequence[str], tag: bytes) -> None:
        """Write the manifest; where the cache directory is not writable,
        say so in the log and go on (the next open checks every shard's
        record file instead)."""
        try:
            self._save(path, shards, tag)
        except OSError as e:
            log.info("ringloader: cannot write the manifest %s (%s)", path, e)

    def _save(self, path: str, shards: Sequence[str], tag: bytes) -> None:
        names, records = _blob(shards), _blob(self.records)
        indexes, etags = _blob(self.indexes), _blob(self.etags)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        save_npz(
            path,
            {
                "version": np.int64(MANIFEST_VERSION),
                "records_version": np.int64(RECORDS_VERSION),
                "index_version": np.int64(SHARD_INDEX_VERSION),
                "tag": np.frombuffer(tag, dtype=np.uint8),
                "names_blob": names.blob,
                "names_offsets": names.offsets,
                "sizes": np.asarray(self.sizes, dtype=np.int64),
                "mtimes": np.asarray(self.mtimes, dtype=np.int64),
                "counts": np.asarray(self.counts, dtype=np.int64),
                "records_blob": records.blob,
                "records_offsets": records.offsets,
                "indexes_blob": indexes.blob,
                "indexes_offsets": indexes.offsets,
                "etags_blob": etags.blob,
                "etags_offsets": etags.offsets,
            },
        )


class RecordStore:
    """The records of a shard set's samples, read from the shards' record
    files on demand.

    ``starts``: the first sample of each shard, and the total (K + 1);
    ``files``: each shard's record file; ``expect(s)``: (size, mtime_ns,
    tag) that shard s's record file must state; ``rebuild(s)``: writes
    shard s's record file anew and gives its path (it raises ShardError
    naming the shard when the shard changed since the set was opened).
    A record file that disagrees with its shard, or whose count is not the
    one ``starts`` gives, is rebuilt once; one that still disagrees is
    refused with a ShardError naming the shard. Thread-safe."""

    def __init__(
        self,
        shards: Sequence[str],
        starts: np.ndarray,
        files: Sequence[str],
        expect: Callable[[int], tuple[int, int, bytes]],
        rebuild: Callable[[int], str],
        dtype: np.dtype = RECORD,
    ) -> None:
        self.shards = shards
        self.starts = starts
        self.files = files
        self.dtype = dtype
        self._expect = expect
        self._rebuild = rebuild
        self._new_state()

    def _new_state(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._replaced: dict[int, str] = {}
        # Record files open for batch lookups (shard -> (fd, where the
        # records start)), least recently used first: a batch's few
        # records from many shards are read with pread, not maps.
        self._open_files()

    def _open_files(self) -> None:
        """A new (empty) cache of open record files, closed with the store."""
        self._fds: collections.OrderedDict[int, tuple[int, int]] = (
            collections.OrderedDict()
        )
        self._closer = weakref.finalize(self, _close_all, self._fds)

    def __getstate__(self) -> dict:  # open files and locks do not pickle
        state = dict(self.__dict__)
        for k in ("_lock", "_replaced", "_pid", "_fds", "_closer"):
            del state[k]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._new_state()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def file(self, s: int) -> str:
        """Shard s's record file (the rebuilt one, once rebuilt)."""
        return self._replaced.get(s, self.files[s])

    def file_of(self, i: int) -> str:
        """The record file that holds sample i's record."""
        return self.file(int(np.searchsorted(self.starts, i, side="right")) - 1)

    def table(self, s: int) -> np.ndarray:
        """Shard s's records, read whole (a copy)."""
        count = int(self.starts[s + 1] - self.starts[s])
        return self._checked([s], lambda: self._whole(s, count))

    def _checked(self, shards: Any, read: Callable[[], Any]) -> Any:
        """``read()``; when it finds a record file not right (None), each
        of ``shards`` checked again, made anew where it is not right, and
        read once more; a file still not right is refused naming its
        shard."""
        got = read()
        if got is not None:
            return got
        for s in shards:
            self._renew(int(s))
        got = read()
        if got is None:
            bad = [int(s) for s in shards if self._fd_of(int(s)) < 0]
            raise ShardError(self._not_right(bad[0] if bad else int(shards[0])))
        return got

    def _not_right(self, s: int) -> str:
        count = int(self.starts[s + 1] - self.starts[s])
        return (
            f"{self.shards[s]}: its record file {self.file(s)} does not hold the "
            f"{count} samples the shard set's manifest gives it; open the "
            "shard set again"
        )

    def _fd_of(self, s: int) -> int:
        self._forked()
        with self._lock:
            return self._open(s)[0]

    def _renew(self, s: int) -> None:
        """Shard s's record file checked again (its open file closed), and
        made anew when it is not right."""
        self._forked()
        with self._lock:
            got = self._fds.pop(s, None)
            if got is not None:
                os.close(got[0])
            if self._open(s)[0] >= 0:
                return
        path = self._rebuild(s)
        with self._lock:
            self._replaced[s] = path

    def _whole(self, s: int, count: int) -> np.ndarray | None:
        """Shard s's ``count`` records read with one pread; None when its
        file is not right or was cut short."""
        size = self.dtype.itemsize
        self._forked()
        with self._lock:
            fd, head = self._open(s)
            if fd < 0:
                return None
            try:
                data = os.pread(fd, size * count, head)
            except OSError as e:
                raise OSError(e.errno, f"{self.file(s)}: cannot read ({e})") from None
        if len(data) != size * count:
            return None
        return np.frombuffer(data, dtype=self.dtype)

    def _few(self, shard: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
        """The records at rows ``rows`` of shards ``shard`` read with pread
        through open record files, each file's header checked when it is
        opened (:func:`.tarindex.records_head`); None when a file is not
        right or was cut short since it was opened."""
        size = self.dtype.itemsize
        parts = []
        self._forked()
        with self._lock:
            for s, r in zip(shard.tolist(), rows.tolist()):
                fd, head = self._open(s)
                if fd < 0:
                    return None
                try:
                    parts.append(os.pread(fd, size, head + r * size))
                except OSError as e:
                    raise OSError(
                        e.errno, f"{self.file(s)}: cannot read record {r} ({e})"
                    ) from None
        data = b"".join(parts)
        if len(data) != len(parts) * size:
            return None  # cut short since it was opened
        return np.frombuffer(data, dtype=self.dtype)

    def _forked(self) -> None:
        """In a forked child: its own lock (another thread of the parent
        may have held the parent's at the fork) and open files (the maps
        are the child's too)."""
        if self._pid != os.getpid():
            self._pid, self._lock = os.getpid(), threading.Lock()
            self._open_files()

    def _open(self, s: int) -> tuple[int, int]:
        """(fd, where the records start) of shard s's record file, opened
        and checked at the first use; (-1, 0) when it is not right. Under
        the lock."""
        got = self._fds.get(s)
        if got is not None:
            self._fds.move_to_end(s)
            return got
        size, mtime_ns, tag = self._expect(s)
        count = int(self.starts[s + 1] - self.starts[s])
        try:
            fd = os.open(self.file(s), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return -1, 0
        try:
            head = records_head(
                os.pread(fd, HEADER_BYTES + len(tag), 0),
                os.fstat(fd).st_size,
                size,
                mtime_ns,
                tag,
                count,
                self.dtype,
            )
        except OSError:
            head = 0
        if head == 0:
            os.close(fd)
            return -1, 0
        self._fds[s] = (fd, head)
        while len(self._fds) > _OPEN_RECORD_FILES:
            os.close(self._fds.popitem(last=False)[1][0])
        return fd, head

    def lookup(self, index: Any, field: str) -> Any:
        """``field`` of the samples ``index`` (an int: an np.int64; a slice,
        a list or an integer or boolean array: an int64 array).
        ``"image_offset"``: where a version-2 record's image member starts
        in its shard (the range's start plus image_at; the range's start
        for a refused sample, whose range is its image's)."""
        n = len(self)
        if isinstance(index, (int, np.integer)):
            i = int(index)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"index {index} out of range for {n} samples")
            return np.int64(_field(self.rows(np.array([i])), field)[0])
        if isinstance(index, slice):
            idx = np.arange(*index.indices(n), dtype=np.int64)
        else:
            idx = np.asarray(index)
            if idx.dtype == bool:
                if idx.shape != (n,):
                    raise IndexError(f"a boolean index of {idx.shape} for {n} samples")
                idx = np.nonzero(idx)[0]
            elif idx.dtype.kind not in "iu" and idx.size:
                raise IndexError(f"samples are indexed by integers, not {idx.dtype}")
            idx = idx.astype(np.int64)
        shape = idx.shape
        idx = np.where(idx < 0, idx + n, idx).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = idx[(idx < 0) | (idx >= n)][0]
            raise IndexError(f"index {bad} out of range for {n} samples")
        return _field(self.rows(idx), field).reshape(shape)

    def rows(self, idx: Any) -> np.ndarray:
        """The whole records of samples ``idx`` (in range, not negative),
        one structured array of ``dtype``: a batch's read record by record,
        more than that shard by shard."""
        idx = np.asarray(idx, dtype=np.int64).ravel()
        shard = np.searchsorted(self.starts, idx, side="right") - 1
        if idx.size <= _PREAD_ROWS:
            rows = idx - self.starts[shard]
            return self._checked(np.unique(shard), lambda: self._few(shard, rows))
        out = np.empty(idx.size, dtype=self.dtype)
        for s in np.unique(shard):
            sel = shard == s
            out[sel] = self.table(int(s))[idx[sel] - self.starts[s]]
        return out

    def column(self, field: str) -> RecordColumn:
        """One field of every record as a lazy int64 column."""
        return RecordColumn(self, field)

    def columns(self, fields: Sequence[str]) -> list[np.ndarray]:
        """Whole columns, one int64 array each (every record file read)."""
        parts: list[list[np.ndarray]] = [[] for _ in fields]
        for s in range(len(self.starts) - 1):
            table = self.table(s)
            for part, field in zip(parts, fields):
                part.append(_field(table, field))
        return [
            np.concatenate(p).astype(np.int64) if p else np.zeros(0, np.int64)
            for p in parts
        ]


def _field(rows: np.ndarray, field: str) -> np.ndarray:
    """Column ``field`` of records ``rows`` as int64 (``"image_offset"``
    derived: see :meth:`RecordStore.lookup`)."""
    if field == "image_offset":
        at = rows["image_at"].astype(np.int64)
        return rows["offset"].astype(np.int64) + np.maximum(at, 0)
    return rows[field].astype(np.int64)


def _close_all(fds: dict) -> None:
    """Closes the record files a store kept open (its finalizer)."""
    for fd, _ in fds.values():
        os.close(fd)
    fds.clear()


class RecordColumn:
    """One field of every sample's record as a read-only int64 array that
    reads records on demand: ``len``, ``dtype``/``shape``/``ndim``, integer
    indexing (an np.int64), slices, lists and integer or boolean arrays
    (int64 arrays); ``np.asarray`` reads the whole column."""

    dtype = np.dtype(np.int64)
    ndim = 1

    def __init__(self, store: RecordStore, field: str) -> None:
        self._store = store
        self._field = field

    @property
    def shape(self) -> tuple[int]:
        return (len(self._store),)

    @property
    def size(self) -> int:
        return len(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def __getitem__(self, index: Any) -> Any:
        return self._store.lookup(index, self._field)

    def __iter__(self) -> Any:
        for s in range(len(self._store.starts) - 1):
            yield from _field(self._store.table(s), self._field)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._store.columns([self._field])[0]
        return out if dtype is None else out.astype(dtype)

    def tolist(self) -> list[int]:
        return np.asarray(self).tolist()

    def __repr__(self) -> str:
        return f"<{self._field} of {len(self)} samples, read from record files>"
