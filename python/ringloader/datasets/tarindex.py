"""The index of one tar shard: every member's name, data offset and size,
the sample each member belongs to, and the integer value of tiny members
(``.cls`` labels), so that a shard is read by byte range without parsing
its tar headers again.

Members are grouped into samples as WebDataset groups them: walking the
tar in order, a member whose key (see :func:`split_key`) differs from the
previous member's starts a new sample. ``a.jpg a.cls b.jpg b.cls a.jpg
a.cls`` is three samples, the second ``a`` a sample of its own. Members
without a key (no extension), WebDataset's metadata (``__name__``) and
anything but regular files (directories, links) are left out and do not
end a sample; an extension twice in one sample is refused, as WebDataset
refuses it.

The index is a ``.npz`` file written next to the shard
(``<shard>.idx.npz``) or, when the shard's folder is not writable, in the
cache directory (see :mod:`.cache`). It records the format's version and
the shard's size and mtime, and is rebuilt when any of them differs, or
when its arrays do not hold together (a member past the shard's end,
samples out of member order): an index is never read in a way its shard
contradicts. A remote shard's index (HTTP(S), S3) is its sidecar
(``<url>.idx.npz``) when one records its size, else is built from the
shard streamed once; it is kept in the cache directory with the shard's
size and ETag, and rebuilt when either changes. Tar headers are parsed by
Python's ``tarfile``; building the index checks that every member lies
inside the file, so a truncated shard fails there, naming the shard and
the member.

Derived from the index, for one selection (image extensions in order of
preference, a label extension or none), a shard's sample records
(:func:`shard_records`): one 24-byte record a sample (the image member's
offset and length, the integer label or -1) after a header that names the
format and member-index versions, the shard's size and mtime (a remote
shard's ETag), the selection and the count. The record file
``<shard>.<hash of the selection>.rec`` is written atomically beside the
shard (in the cache directory when the folder is not writable, and for
remote shards), read by mapping it (:func:`map_records`), and rebuilt
from the index whenever its header disagrees with the shard or with what
the caller expects; finding a valid record file reads no member index.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import mmap
import os
import re
import struct
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np

from .base import PathLike
from .cache import (
    StringBlob,
    cache_name,
    default_cache_dir,
    load_npz,
    pack_strings,
    read_npz,
    save_npz,
)
from .remote import Client
from .urls import local_name, sidecar_url

__all__ = [
    "RECORD",
    "Selection",
    "ShardError",
    "key_of",
    "map_records",
    "remote_shard_index",
    "remote_shard_records",
    "select_members",
    "select_samples",
    "selection_tag",
    "shard_index",
    "shard_records",
    "split_key",
]

log = logging.getLogger("ringloader")

# 2: key_ids number the samples in member order (a key met again later is
# a sample of its own); 1 numbered keys, merging a key's samples.
SHARD_INDEX_VERSION = 2
# Members up to this size are read while indexing, and their value kept
# when they hold an integer (the ".cls" labels of WebDataset).
_SMALL_MEMBER = 64
_NO_INT = np.iinfo(np.int64).min
_INT_MAX = int(np.iinfo(np.int64).max)
_INT_TEXT = re.compile(rb"\s*[-+]?\d+\s*")
# What tarfile raises on a corrupt header: TarError, or what its parsing
# lets out (a pax record length past ssize_t: OverflowError, found by
# tests/fuzz/fuzz_tar.py; bad numbers and names: ValueError).
_TAR_FAILURES = (tarfile.TarError, ValueError, OverflowError, EOFError)
# WebDataset's metadata members, which belong to no sample: a name that
# starts with "__x__" followed by "/" or its end, or a top-level name
# that starts and ends with "__".
_META = re.compile(r"__[^/]*__(/|$)")


class ShardError(ValueError):
    """A tar shard that cannot be used as it is: truncated, corrupt,
    compressed, or with a sample whose label is missing or not an integer.
    The message names the shard and, where one is at fault, the member."""


def split_key(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member name as WebDataset splits it, the
    extension lowercased; None for a name without one.

    The key runs to the first dot of the last path component: ``d/a.b.c``
    is (``d/a``, ``b.c``). When that component starts with a dot
    (``d/.x``), the key is its folder with the slash (``d/``) unless the
    folder's own name holds a dot (then there is no key); a top-level dot
    file, or a last component without a dot, has none."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return None
    if dot == slash + 1:  # a dot file: its folder is the key, if any
        if slash < 0 or "." in name[name.rfind("/", 0, slash) + 1 : slash]:
            return None
    return name[:dot], name[dot + 1 :].lower()


def _is_meta(name: str) -> bool:
    return bool(
        _META.match(name)
        or ("/" not in name and name.startswith("__") and name.endswith("__"))
    )


def key_of(name: str) -> str:
    split = split_key(name)
    return split[0] if split is not None else name


# ---------------------------------------------------------------------------
# Per-shard index


def _sidecar(path: str) -> str:
    return path + ".idx.npz"


def _cached(path_abs: str, cache_dir: PathLike | None) -> str:
    name = cache_name("shard", path_abs, os.path.basename(path_abs))
    return os.path.join(default_cache_dir(cache_dir), name)


def _scan(f: BinaryIO, name: str, size: int) -> dict[str, np.ndarray]:
    """The member arrays of the tar of ``size`` bytes that ``f`` reads from
    its start (a file, or a stream that seeks forward: see
    :class:`_ForwardReader`). Raises ShardError naming ``name`` for a
    truncated, corrupt or compressed shard."""
    names: list[bytes] = []
    offsets: list[int] = []
    sizes: list[int] = []
    key_ids: list[int] = []
    ext_codes: list[int] = []
    ints: list[int] = []
    exts: dict[str, int] = {}
    key: str | None = None  # the current sample's key
    group = -1  # its number
    seen: set[str] = set()  # its extensions
    last = "the start of the archive"
    head = f.read(4)
    f.seek(0)
    if head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head[:4] == b"\xfd7zX":
        raise ShardError(
            f"{name}: compressed tar shards cannot be read by byte range; "
            "decompress them (the .tar files are read in place)"
        )
    try:
        tf = tarfile.TarFile(fileobj=f)  # closing tf leaves f open
    except _TAR_FAILURES as e:
        raise ShardError(f"{name}: not a tar file ({e})") from None
    while True:
        try:
            m = tf.next()
        except _TAR_FAILURES as e:
            raise ShardError(
                f"{name}: truncated or corrupt after member {last!r} ({e})"
            ) from None
        if m is None:
            break
        tf.members = []  # tarfile keeps every TarInfo otherwise
        end = m.offset_data + m.size
        if m.isreg() and end > size:
            raise ShardError(
                f"{name}: truncated shard: member {m.name!r} needs bytes "
                f"{m.offset_data}..{end} but the file has {size} bytes"
            )
        last = m.name
        if not m.isreg():
            continue  # directories, links, devices: no data of their own
        if m.sparse is not None:
            raise ShardError(f"{name}: member {m.name!r} is a sparse file")
        split = split_key(m.name)
        if split is None or _is_meta(m.name):
            continue
        if split[0] != key:
            key, group = split[0], group + 1
            seen.clear()
        ext = split[1]
        if ext in seen:
            raise ShardError(
                f"{name}: member {m.name!r} repeats the .{ext} member of "
                f"sample {key!r}; a sample has one member per extension"
            )
        seen.add(ext)
        value = _NO_INT
        if m.size <= _SMALL_MEMBER:
            f.seek(m.offset_data)  # tarfile seeks on from where it left
            text = f.read(m.size)
            if _INT_TEXT.fullmatch(text):
                value = int(text)
                if not _NO_INT < value <= _INT_MAX:  # no int64: not a label
                    value = _NO_INT
        names.append(os.fsencode(m.name))
        offsets.append(m.offset_data)
        sizes.append(m.size)
        key_ids.append(group)
        ext_codes.append(exts.setdefault(ext, len(exts)))
        ints.append(value)
    # tarfile stops quietly at a header that is cut short or is not a
    # header at all; past the last member there must be the end-of-archive
    # zero block, or nothing (some writers omit it).
    f.seek(tf.offset)
    tail = f.read(tarfile.BLOCKSIZE)
    if tail and (len(tail) < tarfile.BLOCKSIZE or tail.count(0) != len(tail)):
        raise ShardError(
            f"{name}: truncated or corrupt after member {last!r} "
            f"(no valid tar header at byte {tf.offset})"
        )
    names_blob, names_offsets = pack_strings(names)
    exts_blob, exts_offsets = pack_strings(os.fsencode(e) for e in exts)
    return {
        "names_blob": names_blob,
        "names_offsets": names_offsets,
        "offsets": np.array(offsets, dtype=np.int64),
        "sizes": np.array(sizes, dtype=np.int64),
        "key_ids": np.array(key_ids, dtype=np.int32),
        "ext_codes": np.array(ext_codes, dtype=np.int32),
        "exts_blob": exts_blob,
        "exts_offsets": exts_offsets,
        "ints": np.array(ints, dtype=np.int64),
    }


def _header(shard: str, size: int, mtime_ns: int) -> dict[str, np.ndarray]:
    """The fields of an index that say which shard it describes."""
    return {
        "version": np.int64(SHARD_INDEX_VERSION),
        "shard": np.frombuffer(os.fsencode(shard), dtype=np.uint8),
        "size": np.int64(size),
        "mtime_ns": np.int64(mtime_ns),
    }


def _scan_shard(path: str, st: os.stat_result) -> dict[str, np.ndarray]:
    """The index arrays of one local shard, from its tar headers. Raises
    ShardError for a truncated, corrupt or compressed shard."""
    with open(path, "rb") as f:
        members = _scan(f, path, st.st_size)
    return {**_header(os.path.abspath(path), st.st_size, st.st_mtime_ns), **members}


def _holds_together(z: dict[str, np.ndarray], size: int) -> bool:
    """Whether index arrays ``z`` can be read against a shard of ``size``
    bytes: the arrays of one length, every member inside the shard, the
    samples numbered in member order from 0 (so that one written another
    way, or by hand, is rebuilt, not misread), the extensions in their
    table."""
    offsets, sizes, groups, codes = (
        z["offsets"],
        z["sizes"],
        z["key_ids"],
        z["ext_codes"],
    )
    n = len(offsets)
    if not (
        len(sizes) == len(groups) == len(codes) == len(z["ints"]) == n
        and len(z["names_offsets"]) == n + 1
    ):
        return False
    if n == 0:
        return True
    steps = np.diff(groups)
    return bool(
        offsets.min() >= 0
        and sizes.min() >= 0
        and (offsets + sizes).max() <= size
        and groups[0] == 0
        and (n == 1 or (steps.min() >= 0 and steps.max() <= 1))
        and codes.min() >= 0
        and codes.max() < len(z["exts_offsets"]) - 1
    )


def _describes(z: dict[str, np.ndarray] | None, size: int) -> bool:
    """Whether index arrays ``z`` are of this format and describe a shard
    of ``size`` bytes in a way that holds together."""
    if z is None:
        return False
    try:
        return (
            int(z["version"]) == SHARD_INDEX_VERSION
            and int(z["size"]) == size
            and _holds_together(z, size)
        )
    except (KeyError, ValueError, TypeError, IndexError):
        return False


def _valid(
    z: dict[str, np.ndarray] | None, path_abs: str | None, st: os.stat_result
) -> bool:
    """Whether index arrays ``z`` describe the shard as it is now. A
    sidecar copied along with its shard stays valid (``path_abs`` None);
    a cached index must name the same shard."""
    if not _describes(z, st.st_size):
        return False
    assert z is not None
    try:
        return int(z["mtime_ns"]) == st.st_mtime_ns and (
            path_abs is None or os.fsdecode(z["shard"].tobytes()) == path_abs
        )
    except (KeyError, ValueError, TypeError):
        return False


def shard_index(
    path: str, cache_dir: PathLike | None = None
) -> tuple[dict[str, np.ndarray], str, bool]:
    """(arrays, index file, reused) for one shard: the sidecar or cached
    index when it matches the shard's size and mtime, else a new one,
    written next to the shard or, when that fails, in the cache directory.
    Raises ShardError for a bad shard, OSError when no index can be
    written anywhere."""
    st = os.stat(path)
    path_abs = os.path.abspath(path)
    sidecar, cached = _sidecar(path), _cached(path_abs, cache_dir)
    for candidate, same_path in ((sidecar, None), (cached, path_abs)):
        z = load_npz(candidate)
        if _valid(z, same_path, st):
            assert z is not None
            return z, candidate, True
    arrays = _scan_shard(path, st)
    folder = os.path.dirname(path_abs)
    if os.access(folder, os.W_OK):
        try:
            save_npz(sidecar, arrays)
            _drop(cached)
            return arrays, sidecar, False
        except OSError as e:  # read-only file system, quota, ...
            log.debug("ringloader: cannot write %s (%s)", sidecar, e)
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    save_npz(cached, arrays)
    return arrays, cached, False


def _drop(path: str) -> None:
    """Remove a stale cached index that a sidecar now replaces."""
    try:
        os.unlink(path)
    except OSError:
        pass


# ---------------------------------------------------------------------------
# Index of a remote shard


class _ForwardReader:
    """A read-only file over a stream of chunks, enough for tarfile: it
    reads, seeks forward by reading on, and back only within the last
    ``KEEP`` bytes. ``received`` counts the bytes the stream gave."""

    KEEP = 1 << 17

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = bytearray()
        self._base = 0  # the offset of _buf[0] in the stream
        self._pos = 0

    @property
    def received(self) -> int:
        return self._base + len(self._buf)

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == 1:
            pos += self._pos
        elif whence != 0:
            raise io.UnsupportedOperation("a stream is not seekable from its end")
        if pos < self._base:
            raise io.UnsupportedOperation(f"cannot seek back to {pos} in a stream")
        self._pos = pos
        return pos

    def read(self, n: int = -1) -> bytes:
        want = self._pos + n if n >= 0 else None
        while want is None or self.received < want:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buf += chunk
            drop = min(self._pos - self.KEEP - self._base, len(self._buf))
            if drop >= self.KEEP:  # keep KEEP bytes behind the position
                del self._buf[:drop]
                self._base += drop
        a = self._pos - self._base
        data = bytes(self._buf[a : a + n] if n >= 0 else self._buf[a:])
        self._pos += len(data)
        return data


def _valid_remote(z: dict[str, np.ndarray] | None, size: int, etag: str) -> bool:
    """Whether a cached index describes the remote shard as it is now:
    same size and validator (ETag)."""
    if not _describes(z, size):
        return False
    assert z is not None
    try:
        return z["etag"].tobytes().decode() == etag
    except (KeyError, ValueError, TypeError, UnicodeDecodeError):
        return False


def _sidecar_arrays(name: str, client: Client, size: int) -> dict | None:
    """The index arrays of the sidecar beside remote shard ``name``, when
    there is one that records the shard's size (mtimes do not apply)."""
    data = client.get_optional(sidecar_url(name))
    if data is None:
        return None
    try:
        arrays = read_npz(io.BytesIO(data))
        if _describes(arrays, size):
            return arrays
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        pass
    log.info("ringloader: %s: the sidecar index does not match; rescanning", name)
    return None


def remote_shard_index(
    name: str,
    client: Client,
    cache_dir: PathLike | None = None,
    meta: tuple[int, str] | None = None,
) -> tuple[dict[str, np.ndarray], str, bool]:
    """(arrays, index file, reused) for a remote shard: the cached index
    when the shard's size and ETag are those recorded, else its sidecar
    (``<url>.idx.npz``) when it records the shard's size, else a scan of
    the shard in one streaming pass. A new index is written to the cache
    directory, named after the URL. Raises ShardError for a bad shard,
    OSError (naming the URL) for one that cannot be read. ``meta``: the
    shard's (size, ETag) when a HEAD request just gave them."""
    size, etag = meta if meta is not None else client.head(name)
    cached = os.path.join(
        default_cache_dir(cache_dir), cache_name("shard", name, local_name(name))
    )
    z = load_npz(cached)
    if _valid_remote(z, size, etag):
        assert z is not None
        return z, cached, True
    arrays = _sidecar_arrays(name, client, size)
    if arrays is None:
        with contextlib.closing(client.stream(name, etag)) as chunks:
            f = _ForwardReader(chunks)
            arrays = _scan(f, name, size)
    arrays.update(_header(name, size, 0))
    arrays["etag"] = np.frombuffer(etag.encode(), dtype=np.uint8)
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    save_npz(cached, arrays)
    return arrays, cached, False


def select_samples(
    path: str,
    z: dict[str, np.ndarray],
    image_key: Sequence[str],
    label_key: str | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(image member per sample, label per sample) of one shard, in the
    order of its samples. Samples without an image member are dropped."""
    exts = list(StringBlob(z["exts_blob"], z["exts_offsets"]))
    key_ids, ext_codes = z["key_ids"], z["ext_codes"]
    n = len(key_ids)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # Rank of each extension as an image (lower is preferred), none = len.
    none = len(image_key)
    rank_of = np.array(
        [image_key.index(e) if e in image_key else none for e in exts], dtype=np.int64
    )
    rank = rank_of[ext_codes]
    member = np.arange(n, dtype=np.int64)
    order = np.lexsort((member, rank, key_ids))  # sample, then rank
    first = np.ones(n, dtype=bool)
    first[1:] = key_ids[order][1:] != key_ids[order][:-1]
    best = order[first]  # one member per key, keys in increasing id
    images = best[rank[best] < none]
    if label_key is None:
        return images, np.full(len(images), -1, dtype=np.int64)

    label_member = np.full(int(key_ids.max()) + 1, -1, dtype=np.int64)
    if label_key in exts:
        code = exts.index(label_key)
        holders = np.nonzero(ext_codes == code)[0]  # in member order
        label_member[key_ids[holders]] = holders  # one per sample
    names = StringBlob(z["names_blob"], z["names_offsets"])
    wanted = label_member[key_ids[images]]
    missing = np.nonzero(wanted < 0)[0]
    if len(missing):
        name = names[int(images[missing[0]])]
        raise ShardError(
            f"{path}: sample {key_of(name)!r} (member {name!r}) has no "
            f".{label_key} member; pass label_key=None or a function of the key"
        )
    values = z["ints"][wanted]
    bad = np.nonzero(values == _NO_INT)[0]
    if len(bad):
        name = names[int(wanted[bad[0]])]
        raise ShardError(f"{path}: label member {name!r} does not hold an integer")
    return images, values


def select_members(
    z: dict[str, np.ndarray], images: np.ndarray, exts: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(member, rank) per sample of one shard, for the samples whose image
    members are ``images``: the sample's member whose extension comes
    first in ``exts``, and that extension's position in ``exts``; -1 for
    a sample with none."""
    names_exts = list(StringBlob(z["exts_blob"], z["exts_offsets"]))
    key_ids, ext_codes = z["key_ids"], z["ext_codes"]
    out = np.full(len(images), -1, dtype=np.int64)
    rank = np.full(len(images), -1, dtype=np.int64)
    if len(images) == 0:
        return out, rank
    best = np.full(int(key_ids.max()) + 1, -1, dtype=np.int64)
    best_rank = np.full(len(best), -1, dtype=np.int64)
    # From the least preferred extension to the most: a later write wins,
    # so the preferred extension's member stays.
    for r in range(len(exts) - 1, -1, -1):
        if exts[r] not in names_exts:
            continue
        holders = np.nonzero(ext_codes == names_exts.index(exts[r]))[0]
        best[key_ids[holders]] = holders
        best_rank[key_ids[holders]] = r
    sample_keys = key_ids[images]
    return best[sample_keys], best_rank[sample_keys]


# ---------------------------------------------------------------------------
# Sample records: one fixed-width record per sample of a shard, for one
# selection (image extensions, label extension), derived from the index.
#
# A record file is a header, then ``count`` records of 24 bytes, all
# little-endian:
#
#   0  magic "RLSAMPLE" | 8  format version u32 | 12 member-index version u32
#   16 shard size u64   | 24 shard mtime_ns i64  | 32 count u64
#   40 header bytes u32 (where the records start, a multiple of 8)
#   44 tag bytes u32    | 48 tag: the selection ("jpg;png\ncls\n"), then,
#                          for a remote shard, its ETag; zero padding
#
#   record: image member offset u64 | its length u64 | label i64 (-1: none)
#
# csrc/source/shard_records.h reads the same layout.

#
# Version 2, for a selection with fields (members read beside the image,
# :mod:`.fields`), has 8 more header bytes before the tag, and wider
# records whose first 24 bytes are version 1's (the range to read is the
# sample's widened one):
#
#   48 record bytes u32 (40 + 24 * nfields) | 52 nfields u32 | 56 tag...
#
#   record: range offset u64 | range length u64 | label i64 | image_at i64
#           (< 0: refused, -image_at the refusal's code) | image_len i64 |
#           then per field beside the image: at i64 | size i64 | ext i64

RECORDS_MAGIC = b"RLSAMPLE"
RECORDS_VERSION = 1
FIELDS_RECORDS_VERSION = 2
RECORD = np.dtype([("offset", "<u8"), ("length", "<u8"), ("label", "<i8")])
_HEAD = struct.Struct("<8sIIQqQII")
_HEAD2 = struct.Struct("<8sIIQqQIIII")
# A record file's fixed header bytes (the tag follows), at most.
HEADER_BYTES = _HEAD2.size
# Fields a version-2 record may carry beside the image (the C reader's).
MAX_RECORD_FIELDS = 16


def _head_struct(dtype: np.dtype) -> struct.Struct:
    """The fixed header of record files of ``dtype``: version 1's for
    :data:`RECORD`, else version 2's."""
    return _HEAD if dtype == RECORD else _HEAD2


def records_bytes(tag: bytes, count: int, dtype: np.dtype = RECORD) -> int:
    """The size of a right record file of ``count`` records of ``dtype``
    and ``tag``."""
    head = _head_struct(dtype).size
    return (head + len(tag) + 7) // 8 * 8 + count * dtype.itemsize


def selection_tag(image_key: Sequence[str], label_key: str | None) -> bytes:
    """What a record file's header says it selected: the image extensions
    in order of preference and the label extension ("" for none)."""
    return os.fsencode(";".join(image_key) + "\n" + (label_key or "") + "\n")


def records_file(
    path: str, tag: bytes, cache_dir: PathLike | None, remote: bool = False
) -> tuple[str, str]:
    """(beside the shard, in the cache directory): where the record file of
    a shard and a selection goes. A remote shard has only the second (the
    first is returned empty)."""
    digest = hashlib.sha256(tag).hexdigest()[:12]
    ident = path if remote else os.path.abspath(path)
    label = local_name(path) if remote else os.path.basename(ident)
    name = cache_name("samples", ident + "\0" + tag.decode("utf-8", "replace"), label)
    cached = os.path.join(default_cache_dir(cache_dir), name[: -len(".npz")] + ".rec")
    # Absolute: the set's manifest keeps it, and is found again from any
    # working directory (it is named by the shards' absolute paths).
    return ("" if remote else f"{ident}.{digest}.rec"), cached


def write_records(
    dest: str, size: int, mtime_ns: int, tag: bytes, table: np.ndarray
) -> None:
    """Write record file ``dest`` atomically (a temporary file, then a
    rename) for a shard of ``size`` bytes and ``mtime_ns``. Raises OSError
    when its folder is not writable; leaves no temporary file behind."""
    dtype = table.dtype
    head_len = records_bytes(tag, 0, dtype)
    fixed = (
        RECORDS_MAGIC,
        RECORDS_VERSION if dtype == RECORD else FIELDS_RECORDS_VERSION,
        SHARD_INDEX_VERSION,
        size,
        mtime_ns,
        len(table),
        head_len,
        len(tag),
    )
    if dtype == RECORD:
        head = _HEAD.pack(*fixed)
    else:
        nfields = (dtype.itemsize - 40) // 24
        head = _HEAD2.pack(*fixed, dtype.itemsize, nfields)
    head += tag + b"\0" * (head_len - len(head) - len(tag))
    fd, tmp = tempfile.mkstemp(
        prefix=".ringloader-", suffix=".tmp", dir=os.path.dirname(dest) or "."
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            f.write(np.ascontiguousarray(table, dtype=dtype).tobytes())
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def records_head(
    head: bytes,
    file_bytes: int,
    size: int,
    mtime_ns: int,
    tag: bytes,
    count: int | None = None,
    dtype: np.dtype = RECORD,
) -> int:
    """Where the records start in a record file of ``file_bytes`` bytes that
    begins with ``head`` (at least its header and tag), when the header says
    the file is of this format (version 1 for :data:`RECORD`, else version
    2 of records of ``dtype``), of a shard of ``size`` bytes and
    ``mtime_ns``, of the selection ``tag``, and (when given) of ``count``
    records, and the file holds exactly those; else 0."""
    fixed = _head_struct(dtype)
    if len(head) < fixed.size:
        return 0
    values = fixed.unpack_from(head)
    magic, version, index_version, r_size, r_mtime, n, head_len, tag_len = values[:8]
    want = RECORDS_VERSION if dtype == RECORD else FIELDS_RECORDS_VERSION
    if version == FIELDS_RECORDS_VERSION and version == want:
        if values[8] != dtype.itemsize or values[9] != (dtype.itemsize - 40) // 24:
            return 0  # records of another width: another selection
    if (
        magic == RECORDS_MAGIC
        and version == want
        and index_version == SHARD_INDEX_VERSION
        and r_size == size
        and r_mtime == mtime_ns
        and (count is None or n == count)
        and head_len % 8 == 0
        and tag_len == len(tag)
        and fixed.size + tag_len <= head_len
        and head[fixed.size : fixed.size + tag_len] == tag
        and file_bytes == head_len + n * dtype.itemsize
    ):
        return head_len
    return 0


def map_records(
    path: str,
    size: int,
    mtime_ns: int,
    tag: bytes,
    count: int | None = None,
    dtype: np.dtype = RECORD,
) -> np.ndarray | None:
    """The records of record file ``path`` (a read-only array of ``dtype``
    over a map of the file), when :func:`records_head` finds it right;
    else None (missing, truncated, or another shard's or selection's: the
    caller rebuilds it)."""
    fixed = _head_struct(dtype).size
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size < fixed:
                return None
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    head_len = records_head(
        mapped[: fixed + len(tag)], len(mapped), size, mtime_ns, tag, count, dtype
    )
    if head_len == 0:
        mapped.close()
        return None
    # The records themselves are not scanned (that would read the whole
    # file at each map); a range past the shard's end fails its read,
    # naming the shard, as a shard truncated after indexing does.
    n = (len(mapped) - head_len) // dtype.itemsize
    return np.frombuffer(mapped, dtype=dtype, count=n, offset=head_len)


class Selection:
    """What a shard set's records are made for: the image extensions in
    order of preference, a label extension or none, and with ``fields``
    (:mod:`.fields`: the fields as named, the image field's position,
    each field's extensions, ``max_field_bytes``) version-2 records with
    each field's place. ``tag`` says all of it, so that a record file of
    another selection (other fields, another limit) is refused by its
    header and made again, never read as this one's; ``dtype`` is the
    record's."""

    def __init__(
        self,
        image_key: Sequence[str],
        label_key: str | None,
        fields: Sequence[str] | None = None,
        image: int = 0,
        exts: Sequence[tuple[str, ...]] = (),
        max_field_bytes: int = 0,
    ) -> None:
        from .fields import MAX_GAP_BYTES, fields_dtype

        self.image_key = tuple(image_key)
        self.label_key = label_key
        self.fields = None if fields is None else tuple(fields)
        self.image = image
        self.exts = [tuple(e) for e in exts]
        self.max_field_bytes = int(max_field_bytes)
        self.tag = selection_tag(self.image_key, label_key)
        self.dtype = RECORD
        if self.fields is not None:
            nfields = len(self.fields) - 1
            if nfields > MAX_RECORD_FIELDS:
                raise ValueError(
                    f"fields {self.fields!r}: at most {MAX_RECORD_FIELDS} fields "
                    "beside the image"
                )
            # JSON: no two selections write the same text (a "|" or ";"
            # inside an extension cannot join two of them).
            spec = json.dumps(self.exts)
            self.tag += os.fsencode(
                f"fields={spec}\nimage={image}\nmax_field_bytes="
                f"{self.max_field_bytes}\nmax_gap_bytes={MAX_GAP_BYTES}\n"
            )
            self.dtype = fields_dtype(nfields)

    def table(self, path: str, z: dict) -> np.ndarray:
        """The records of shard ``path`` from its member index ``z``."""
        from .fields import field_records

        images, labels = select_samples(path, z, self.image_key, self.label_key)
        if self.fields is None:
            table = np.empty(len(images), dtype=RECORD)
            table["offset"] = z["offsets"][images]
            table["length"] = z["sizes"][images]
            table["label"] = labels
            return table
        members = {}
        for f, exts in enumerate(self.exts):
            if f != self.image:
                m, rank = select_members(z, images, exts)
                off = np.where(m >= 0, z["offsets"][m], -1)
                size = np.where(m >= 0, z["sizes"][m], -1)
                members[f] = (off, size, rank)
        return field_records(
            self.fields,
            self.image,
            self.exts,
            z["offsets"][images],
            z["sizes"][images],
            labels,
            members,
            self.max_field_bytes,
        )


def shard_records(
    path: str,
    image_key: Sequence[str],
    label_key: str | None,
    cache_dir: PathLike | None = None,
    st: os.stat_result | None = None,
    count: int | None = None,
    selection: Selection | None = None,
) -> tuple[str, int, str]:
    """(record file, sample count, index file or "") of local shard
    ``path`` for a selection: the record file beside the shard or in the
    cache directory when it matches the shard's size and mtime and the
    selection (no member index read), else one derived from the shard's
    index (:func:`shard_index`, which builds the index when it is missing
    or stale), written beside the shard or, when that fails, in the cache
    directory. ``count``: the sample count a record file found must give
    (a file that gives another is rebuilt). Raises ShardError for a bad
    shard or a missing label. ``selection``: what the records are for
    (with fields: version 2), instead of ``image_key`` and ``label_key``."""
    if st is None:
        st = os.stat(path)
    sel = selection or Selection(image_key, label_key)
    tag = sel.tag
    beside, cached = records_file(path, tag, cache_dir)
    for candidate in (beside, cached):
        table = map_records(
            candidate, st.st_size, st.st_mtime_ns, tag, count, sel.dtype
        )
        if table is not None:
            return candidate, len(table), ""
    z, index_file, _ = shard_index(path, cache_dir)
    index_file = os.path.abspath(index_file)
    table = sel.table(path, z)
    if os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
        try:
            write_records(beside, st.st_size, st.st_mtime_ns, tag, table)
            _drop(cached)
            return beside, len(table), index_file
        except OSError as e:
            log.debug("ringloader: cannot write %s (%s)", beside, e)
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    write_records(cached, st.st_size, st.st_mtime_ns, tag, table)
    return cached, len(table), index_file


def remote_shard_records(
    name: str,
    client: Client,
    image_key: Sequence[str],
    label_key: str | None,
    cache_dir: PathLike | None = None,
    meta: tuple[int, str] | None = None,
    count: int | None = None,
    selection: Selection | None = None,
) -> tuple[str, int, str]:
    """(record file, sample count, index file or "") of remote shard
    ``name`` for a selection, kept in the cache directory with the shard's
    size and ETag (``meta``, else from a HEAD request): the record file when
    both match (and it gives ``count`` samples, when given), else one
    derived from :func:`remote_shard_index`."""
    size, etag = meta if meta is not None else client.head(name)
    sel = selection or Selection(image_key, label_key)
    tag = sel.tag + etag.encode()
    _, cached = records_file(name, tag, cache_dir, remote=True)
    table = map_records(cached, size, 0, tag, count, sel.dtype)
    if table is not None:
        return cached, len(table), ""
    z, index_file, _ = remote_shard_index(name, client, cache_dir, (size, etag))
    table = sel.table(name, z)
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    write_records(cached, size, 0, tag, table)
    return cached, len(table), index_file
