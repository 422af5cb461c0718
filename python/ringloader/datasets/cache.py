"""Index files of the datasets: where they go, how they are written, and
the compact string arrays they hold.

The cache directory is ``cache_dir`` if given, else
``$RINGLOADER_CACHE_DIR``, else ``$XDG_CACHE_HOME/ringloader``, else
``~/.cache/ringloader``. Index files are ``.npz`` archives written
atomically and read without unpickling; many strings (paths, member names)
are kept as one UTF-8 blob with offsets rather than as Python objects.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import zipfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .base import PathLike

__all__ = [
    "StringBlob",
    "cache_name",
    "default_cache_dir",
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


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically (a temporary file in the same
    directory, then a rename), so a reader never sees half a file and
    concurrent writers of the same index do not corrupt it. Raises OSError
    when the directory is not writable; leaves no temporary file behind."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".ringloader-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.chmod(tmp, 0o644)  # readable by the other users of a shared dataset
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


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

    @classmethod
    def from_strings(cls, items: Iterable[str], prefix: str = "") -> StringBlob:
        """Pack ``items`` (paths or any text) into a blob."""
        blob, offsets = pack_strings(os.fsencode(s) for s in items)
        return cls(blob, offsets, prefix)

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
