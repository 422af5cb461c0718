"""Index files of the datasets: where they go, how they are written, and
the compact string arrays they hold.

The cache directory is ``cache_dir`` if given, else
``$RINGLOADER_CACHE_DIR``, else ``$XDG_CACHE_HOME/ringloader``, else
``~/.cache/ringloader``. Index files are ``.npz`` archives written
atomically and read without unpickling; many strings (paths, member names)
are kept as one UTF-8 blob with offsets rather than as Python objects.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import sys
import tempfile
import threading
import zipfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .base import PathLike
from .targets import is_arrow

__all__ = [
    "StringBlob",
    "atomic_file",
    "cache_name",
    "default_cache_dir",
    "give_back_freed",
    "load_npz",
    "pack_strings",
    "read_npz",
    "save_npz",
]


def default_cache_dir(cache_dir: PathLike | None = None) -> str:
    """ringloader's cache directory (index files, the generated benchmark
    data set): ``cache_dir``, else ``$RINGLOADER_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/ringloader``, else ``~/.cache/ringloader``."""
    if cache_dir is not None:
        return os.path.expanduser(os.fspath(cache_dir))
    env = os.environ.get("RINGLOADER_CACHE_DIR")
    if env:
        return os.path.expanduser(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return os.path.join(xdg, "ringloader")


def cache_name(kind: str, ident: str, label: str) -> str:
    """A file name for the index of ``ident`` (an absolute path plus
    options): a readable label and a hash, so distinct datasets never
    share a file."""
    digest = hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:64]
    return f"{kind}-{safe}-{digest[:20]}.npz"


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[Any]:
    """A binary file object whose content becomes ``path`` at once when the
    block ends without error (a temporary file in the same directory, then
    a rename), so a reader never sees half a file and concurrent writers
    of the same file do not corrupt it. Raises OSError when the directory
    is not writable; leaves no temporary file behind on any path."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".ringloader-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.chmod(tmp, 0o644)  # readable by the other users of a shared dataset
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically (:func:`atomic_file`)."""
    with atomic_file(path) as f:
        np.savez(f, **arrays)


# numpy reads each array's header with ast.literal_eval. Before 3.11.8 and
# 3.12.2, CPython kept the AST builder's recursion depth in state shared by
# all threads (python/cpython#106905): two parses at once, with a garbage
# collection between, fail with "SystemError: AST constructor recursion depth
# mismatch". Remote shards are indexed by a pool of threads, so index files
# are read one at a time (a few microseconds each).
_NPZ_LOCK = threading.Lock()


def _new_npz_lock() -> None:
    """A forked child's lock: a pool thread of the parent may have held the
    parent's at the fork, and no thread of the child would release it."""
    global _NPZ_LOCK
    _NPZ_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_npz_lock)


def read_npz(file: Any) -> dict[str, np.ndarray]:
    """All arrays of the ``.npz`` archive ``file`` (a path or a binary file
    object), never unpickled. Raises what ``np.load`` raises."""
    with _NPZ_LOCK, np.load(file, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def load_npz(path: str) -> dict[str, np.ndarray] | None:
    """The arrays of an index file, or None when it is missing, unreadable
    or corrupt (the caller then rebuilds it). Never unpickles."""
    try:
        return read_npz(path)
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None


def pack_strings(items: Iterable[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(blob, offsets): the byte strings concatenated into one uint8 array,
    and n + 1 int64 offsets (item i is ``blob[offsets[i]:offsets[i + 1]]``)."""
    blob = bytearray()
    ends = array("q", [0])
    for item in items:
        blob += item
        ends.append(len(blob))
    return np.frombuffer(bytes(blob), dtype=np.uint8), np.frombuffer(
        ends, dtype=np.int64
    )


class StringBlob(Sequence):
    """A read-only sequence of ``str`` kept as one byte blob plus offsets.

    Item i is ``prefix + blob[offsets[i]:offsets[i + 1]]`` decoded with the
    file system encoding (``os.fsdecode`` semantics, so any file name
    round-trips). About 10 bytes per item beyond the text itself, against
    ~60 for a list of ``str``.
    """

    __slots__ = ("_blob", "_n", "_offsets", "_prefix")

    def __init__(self, blob: np.ndarray, offsets: np.ndarray, prefix: str = "") -> None:
        self._blob = memoryview(np.ascontiguousarray(blob, dtype=np.uint8))
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._prefix = prefix
        self._n = len(self._offsets) - 1

    def __reduce__(self) -> tuple:
        # A memoryview does not pickle: the blob goes as its array (a
        # spawned worker, a framework's copy of the dataset).
        return StringBlob, (self.blob, self._offsets, self._prefix)

    @classmethod
    def from_strings(cls, items: Iterable[str], prefix: str = "") -> StringBlob:
        """Pack ``items`` (paths or any text) into a blob, each item read
        as ``prefix`` followed by it."""
        blob, offsets, _ = _pack_texts(_texts(items), "items", common=False)
        return cls(blob, offsets, prefix)

    @classmethod
    def of_paths(cls, paths: Any, what: str = "paths") -> StringBlob:
        """Paths (or URLs) packed with no Python loop per item and no Python
        object kept per item, their longest common directory prefix kept
        once in ``prefix``.

        ``paths``: a list or tuple of str (or path-like), a numpy array of
        dtype ``U``, ``S`` (bytes, taken as they are) or object, a pyarrow
        ``Array`` or ``ChunkedArray`` of string or binary, or any iterable
        of str. Items go through the file system encoding as
        :func:`os.fsencode` takes them (surrogate-escaped names round-trip).
        An Arrow array of one chunk is kept as it is (its data buffer is
        the blob: no copy; its prefix is not taken out). Raises ValueError
        naming ``what`` and the row of an item holding a NUL byte or, in an
        Arrow array, a null; TypeError for an array of another type.
        """
        if isinstance(paths, StringBlob):
            return paths
        if is_arrow(paths):
            return cls(*_pack_arrow(paths, what))
        if isinstance(paths, np.ndarray):
            if paths.ndim != 1:
                raise ValueError(f"{what}: a 1-D array is needed, not {paths.shape}")
            if paths.dtype.kind in "US":
                packed = _pack_fixed(paths, what)
            elif paths.dtype != object:
                raise TypeError(f"{what}: an array of str, not of {paths.dtype}")
            else:
                packed = _pack_texts(paths.tolist(), what, common=True)
        else:
            packed = _pack_texts(_texts(paths), what, common=True)
        if len(packed[0]) >= _TRIM_AFTER:
            give_back_freed()
        return cls(*packed)

    @property
    def blob(self) -> np.ndarray:
        return np.frombuffer(self._blob, dtype=np.uint8)

    @property
    def offsets(self) -> np.ndarray:
        return self._offsets

    @property
    def prefix(self) -> str:
        """What every item starts with, kept once (a dataset's root)."""
        return self._prefix

    def __len__(self) -> int:
        return self._n

    def heads(self, width: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The first ``width`` bytes (the prefix's included) of each item,
        or of the items ``rows``, zero past an item's end: a uint8 array of
        a row per item, one gather per byte not in the prefix."""
        known = os.fsencode(self._prefix)[:width]
        starts, ends = self._offsets[:-1], self._offsets[1:]
        if rows is not None:
            starts, ends = starts[rows], ends[rows]
        out = np.zeros((len(starts), width), dtype=np.uint8)
        out[:, : len(known)] = np.frombuffer(known, dtype=np.uint8)
        blob = self.blob
        for j in range(len(known), width):
            at = starts + (j - len(known))
            got = blob.take(at, mode="clip") if len(blob) else 0
            out[:, j] = np.where(at < ends, got, 0)
        return out

    def take(self, rows: np.ndarray) -> StringBlob:
        """The strings ``rows`` as a blob of their own (the same prefix)."""
        return StringBlob(*gather_strings(self.blob, self._offsets, rows), self._prefix)

    def _get(self, i: int) -> str:
        a, b = self._offsets[i], self._offsets[i + 1]
        return self._prefix + os.fsdecode(bytes(self._blob[a:b]))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(self._n))]
        i = int(index)  # numpy integers too
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"index {index} out of range for {self._n} items")
        return self._get(i)

    def __iter__(self) -> Iterator[str]:
        for i in range(self._n):
            yield self._get(i)

    def __repr__(self) -> str:
        return f"<{self._n} strings in a {len(self._blob)}-byte blob>"


# Strings gathered this many at a time: the per-byte index arrays of a
# gather stay a few MB whatever the number of strings.
_GATHER_ROWS = 1024


def _fill(
    out: np.ndarray,
    ends: np.ndarray,
    blob: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    head: bytes = b"",
) -> None:
    """Write ``head`` and then ``blob[starts[m]:starts[m] + sizes[m]]`` as
    string m of ``out``, which ends at ``ends[m + 1]`` (``ends``: one more
    than the strings, from where the first begins)."""
    k = len(head)
    for j, byte in enumerate(head):
        out[ends[:-1] + j] = byte
    for a in range(0, len(sizes), _GATHER_ROWS):
        sz = sizes[a : a + _GATHER_ROWS]
        lead = np.cumsum(sz) - sz  # each string's first byte in the chunk
        at = np.arange(int(lead[-1] + sz[-1]), dtype=np.int64)
        # Byte t of the chunk is byte t - lead[m] of its string m.
        dst = np.repeat(ends[a : a + len(sz)] + k - lead, sz) + at
        out[dst] = blob[np.repeat(starts[a : a + _GATHER_ROWS] - lead, sz) + at]


def gather_strings(
    blob: np.ndarray, offsets: np.ndarray, ids: np.ndarray, skip: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(blob, offsets) of the strings ``ids`` of ``(blob, offsets)``, in
    that order, each less its first ``skip`` bytes, with numpy alone, a
    few thousand strings at a time."""
    ids = np.asarray(ids, dtype=np.int64)
    starts = offsets[ids] + skip
    sizes = offsets[ids + 1] - starts
    ends = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(sizes, out=ends[1:])
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    _fill(out, ends, np.asarray(blob), starts, sizes)
    return out, ends


def concat_strings(
    parts: list[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """(blob, offsets) of the strings of several, one after another."""
    if not parts:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    blobs, ends, base = [], [np.zeros(1, np.int64)], 0
    for blob, offs in parts:
        blobs.append(np.asarray(blob, dtype=np.uint8)[offs[0] : offs[-1]])
        ends.append(np.asarray(offs[1:], dtype=np.int64) - offs[0] + base)
        base += int(offs[-1] - offs[0])
    return np.concatenate(blobs), np.concatenate(ends)


def join_blobs(blobs: list[StringBlob]) -> StringBlob:
    """The strings of ``blobs``, one after another, as one blob whose
    prefix is what their prefixes share (the rest of a blob's prefix goes
    before each of its strings), written once: no Python object a string,
    no copy but the result's."""
    common = os.path.commonprefix([b.prefix for b in blobs]) if blobs else ""
    heads = [os.fsencode(b.prefix[len(common) :]) for b in blobs]
    ends = np.zeros(sum(len(b) for b in blobs) + 1, dtype=np.int64)
    at = 0
    for b, head in zip(blobs, heads):
        sizes = ends[at + 1 : at + 1 + len(b)]
        np.subtract(b.offsets[1:], b.offsets[:-1], out=sizes)
        sizes += len(head)
        at += len(b)
    np.cumsum(ends, out=ends)
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    at = 0
    for b, head in zip(blobs, heads):
        mine = ends[at : at + len(b) + 1]
        if not head:  # the strings as they lie: one copy
            out[mine[0] : mine[-1]] = b.blob[b.offsets[0] : b.offsets[-1]]
        elif len(b):
            sizes = np.diff(b.offsets)
            _fill(out, mine, b.blob, b.offsets[:-1], sizes, head)
        at += len(b)
    return StringBlob(out, ends, common)


# How os.fsencode encodes (UTF-8 and surrogateescape on Linux): every
# name, even one that is not valid UTF-8, round-trips.
_FS = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


# The temporaries of packing are arrays the size of the text. Those under
# glibc's mmap threshold (up to 32 MiB) come from the heap and, freed, stay
# in the process's resident memory; after packing that much text, the free
# pages are handed back to the system.
_TRIM_AFTER = 4 << 20


def give_back_freed() -> None:
    """Return the C heap's free pages to the system (glibc's malloc_trim);
    nothing where the C library has no such call."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)


def _texts(items: Any) -> list:
    """``items`` as a list or tuple (the one given, when it is one)."""
    return items if isinstance(items, (list, tuple)) else list(items)


def _nul_row(what: str, row: int) -> ValueError:
    return ValueError(f"{what}: row {row} holds a NUL byte, which no path can hold")


def _pack_texts(
    items: list | tuple, what: str, common: bool
) -> tuple[np.ndarray, np.ndarray, str]:
    """(blob, offsets, prefix) of a list of str: joined with NULs and
    encoded in one call each, the items then found by their NULs with
    numpy; with ``common``, their longest common directory prefix kept
    once, out of the blob."""
    n = len(items)
    if n == 0:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64), ""
    try:
        joined = "\0".join(items)
    except TypeError:  # path-likes or bytes: one call each
        items = [os.fsdecode(p) for p in items]
        joined = "\0".join(items)
    raw = joined.encode(*_FS)
    del joined
    data = np.frombuffer(raw, dtype=np.uint8)
    seps = np.flatnonzero(data == 0)
    if len(seps) != n - 1:  # more NULs than separators
        raise _nul_row(what, next(i for i, s in enumerate(items) if "\0" in s))
    cut = _common_dir(raw, data, seps) if common else 0
    prefix = os.fsdecode(raw[:cut])
    # Taken out: each separator and the prefix after it (and the first
    # item's prefix), marked by toggles whose running xor is 1 inside.
    toggles = np.zeros(len(data) + 1, dtype=np.uint8)
    toggles[[0, cut]] ^= np.uint8(cut > 0)
    toggles[seps] ^= 1
    toggles[seps + (cut + 1)] ^= 1
    # In place: each temporary the size of the text is fresh memory, and
    # faulting it in costs as much as the pass that fills it.
    np.bitwise_xor.accumulate(toggles, out=toggles)
    keep = toggles.view(bool)[:-1]
    np.logical_not(keep, out=keep)
    blob = data[keep]
    del data, raw, toggles, keep
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    # Item j >= 1 starts after separator j - 1, less the j - 1 separators
    # and j prefixes before it.
    offsets[1:n] = seps - np.arange(n - 1) * (cut + 1) - cut
    offsets[n] = len(blob)
    return blob, offsets, prefix


def _common_dir(raw: bytes, data: np.ndarray, seps: np.ndarray) -> int:
    """The length of the longest directory prefix (ending with a slash)
    of the first item that every item of ``raw`` (``data``: the items
    joined with NULs, which no item holds, at ``seps``) shares: one with
    ``b"\0" + prefix`` once per separator in ``raw``. A sample of the
    items rules out the longer candidates first; the longest left is then
    counted, and the others by bisection when it is not shared."""
    first = data[: int(seps[0]) if len(seps) else len(data)]
    cuts = (np.flatnonzero(first == 0x2F) + 1).tolist()
    if not cuts or not len(seps):
        return cuts[-1] if cuts else 0
    starts = seps[:: max(1, len(seps) // 4096)] + 1
    window = np.take(data, starts[:, None] + np.arange(cuts[-1]), mode="clip")
    same = (window == first[: cuts[-1]]).all(axis=0)
    shared = cuts[-1] if same.all() else int(np.argmin(same))
    cuts = [c for c in cuts if c <= shared]
    lo, hi = 0, len(cuts)  # cuts[:lo] are shared, cuts[hi:] are not
    mid = hi
    while lo < hi:
        if raw.count(b"\0" + first[: cuts[mid - 1]].tobytes()) == len(seps):
            lo = mid
        else:
            hi = mid - 1
        mid = (lo + hi + 1) // 2
    return cuts[lo - 1] if lo else 0


def _pack_fixed(arr: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(blob, offsets, prefix) of a numpy array of str (``U``) or bytes
    (``S``): as a 2-D array of bytes, its common directory prefix is a
    band of equal columns and each item a row's first bytes."""
    n = len(arr)
    if arr.dtype.kind == "U":
        if arr.dtype.itemsize == 0 or n == 0:
            rows = np.zeros((n, 0), np.uint8)
        else:
            codes = arr.view(np.uint32).reshape(n, -1)
            if codes.max() >= 128:  # not ASCII: encoded by Python's codec
                return _pack_texts(arr.tolist(), what, common=True)
            rows = codes.astype(np.uint8)
    else:
        rows = arr.view(np.uint8).reshape(n, arr.dtype.itemsize)
    lengths = np.char.str_len(arr).astype(np.int64)
    if np.count_nonzero(rows) != lengths.sum():  # a NUL inside an item
        inside = np.count_nonzero(rows, axis=1) != lengths
        raise _nul_row(what, int(np.argmax(inside)))
    cut = 0
    if n:
        first = rows[0, : lengths[0]]
        for c in (np.flatnonzero(first == ord("/")) + 1).tolist():
            if not (rows[:, cut:c] == first[cut:c]).all():
                break
            cut = c
    keep = np.arange(rows.shape[1] - cut) < (lengths - cut)[:, None]
    blob = rows[:, cut:][keep]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths - cut, out=offsets[1:])
    prefix = os.fsdecode(rows[0, :cut].tobytes()) if cut else ""
    return blob, offsets, prefix


def _pack_arrow(arr: Any, what: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(blob, offsets, "") of an Arrow string or binary array: its data
    buffer and offsets as they are (a slice's offsets from 0); the chunks
    of a ChunkedArray of several concatenated."""
    import pyarrow as pa

    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    blobs, ends, base = [], [np.zeros(1, np.int64)], 0
    for chunk in chunks:
        t = chunk.type
        if pa.types.is_dictionary(t):
            chunk = chunk.dictionary_decode()
            t = chunk.type
        if not (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
        ):
            if not (pa.types.is_string_view(t) or pa.types.is_binary_view(t)):
                raise TypeError(f"{what}: an Arrow array of strings, not of {t}")
            chunk = chunk.cast(pa.large_binary())
            t = chunk.type
        if chunk.null_count:
            row = base + int(np.argmax(chunk.is_null().to_numpy(zero_copy_only=False)))
            raise ValueError(f"{what}: row {row} is null, not a path")
        wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        _, off_buf, data_buf = chunk.buffers()
        offs = np.frombuffer(off_buf, np.int64 if wide else np.int32)
        offs = offs[chunk.offset : chunk.offset + len(chunk) + 1]
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else None
        lo, hi = (int(offs[0]), int(offs[-1])) if len(offs) else (0, 0)
        blob = data[lo:hi] if data is not None else np.zeros(0, np.uint8)
        nul = np.flatnonzero(blob == 0)
        if len(nul):
            row = int(np.searchsorted(offs, lo + nul[0], side="right")) - 1
            raise _nul_row(what, base + row)
        blobs.append(blob)
        ends.append(offs[1:].astype(np.int64) + (ends[-1][-1] - lo))
        base += len(chunk)
    if len(blobs) == 1:
        if offs.dtype == np.int64 and offs[0] == 0:
            return blobs[0], offs, ""  # large_string: its offsets as they are
        return blobs[0], np.concatenate(ends), ""
    return (
        np.concatenate(blobs) if blobs else np.zeros(0, np.uint8),
        np.concatenate(ends),
        "",
    )
