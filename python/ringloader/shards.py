"""WebDataset-style tar shards read in place, as random-access byte ranges.

A shard is a plain POSIX tar file (ustar, GNU or pax; not compressed) whose
members are grouped into samples by basename, as WebDataset groups them:
``dir/abc.jpg`` and ``dir/abc.cls`` form the sample ``dir/abc``. Nothing is
unpacked or converted: the loader reads each sample's image member straight
out of the shard with one ranged read.

On first use each shard gets an index, a small ``.npz`` file with every
member's name, data offset and size, the sample each member belongs to and
the integer value of the tiny members (``.cls`` labels), so later uses read
no tar header at all. The index is written next to the shard
(``<shard>.idx.npz``) or, when the shard's folder is not writable, in the
cache directory (``cache_dir``, ``$RINGLOADER_CACHE_DIR`` or
``~/.cache/ringloader``). It records the shard's size and mtime and is
rebuilt when either changes.

Tar headers are parsed by Python's ``tarfile``; ``TarInfo.offset_data`` and
``TarInfo.size`` give each member's byte range. Building the index checks
that every range lies inside the file, so a truncated shard fails there,
naming the shard and the member, rather than in the middle of an epoch.
"""

from __future__ import annotations

import bisect
import glob
import logging
import os
import re
import tarfile
from collections.abc import Iterable, Sequence
from typing import Any, Callable

import numpy as np

from .index import (
    PathLike,
    StringBlob,
    cache_name,
    decode_item,
    default_cache_dir,
    load_npz,
    pack_strings,
    save_npz,
)

__all__ = ["IMAGE_KEYS", "ShardError", "TarShards"]

log = logging.getLogger("ringloader")

# Extensions (WebDataset "keys") tried in this order for a sample's image.
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "tif", "tiff")

SHARD_INDEX_VERSION = 1
# Members up to this size are read while indexing, and their value kept
# when they hold an integer (the ".cls" labels of WebDataset).
_SMALL_MEMBER = 64
_NO_INT = np.iinfo(np.int64).min
_INT_TEXT = re.compile(rb"\s*[-+]?\d+\s*")


class ShardError(ValueError):
    """A tar shard that cannot be used as it is: truncated, corrupt,
    compressed, or with a sample whose label is missing or not an integer.
    The message names the shard and, where one is at fault, the member."""


def _split_key(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member name as WebDataset splits it: the key
    runs to the first dot of the last path component; None without one."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot <= slash + 1:  # no dot, or a dot file: no key
        return None
    return name[:dot], name[dot + 1 :].lower()


def _key_of(name: str) -> str:
    split = _split_key(name)
    return split[0] if split is not None else name


def _expand_braces(pattern: str) -> list[str]:
    """WebDataset brace notation: ``a-{000..009}.tar`` (zero padding kept)
    and ``{train,val}.tar``, expanded left to right."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    head, tail, body = pattern[: m.start()], pattern[m.end() :], m.group(1)
    rng = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if rng is not None:
        lo, hi = rng.group(1), rng.group(2)
        width = len(lo) if lo.startswith("0") else 0
        items = [f"{i:0{width}d}" for i in range(int(lo), int(hi) + 1)]
    else:
        items = body.split(",")
    return [p for item in items for p in _expand_braces(head + item + tail)]


def _shard_paths(urls_or_glob: PathLike | Iterable[PathLike]) -> list[str]:
    """Local shard paths, in order: a path, a glob (sorted), WebDataset
    brace notation, ``file://`` URLs, or a list of any of these."""
    if isinstance(urls_or_glob, (str, os.PathLike)):
        specs = [os.fspath(urls_or_glob)]
    else:
        specs = [os.fspath(u) for u in urls_or_glob]
    paths: list[str] = []
    for spec in specs:
        if spec.startswith("file://"):
            spec = spec[len("file://") :]
        elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", spec):
            raise ValueError(
                f"{spec}: only local tar files can be read by byte range "
                "(copy or mount remote shards first)"
            )
        for pattern in _expand_braces(os.path.expanduser(spec)):
            if glob.has_magic(pattern):
                matches = sorted(glob.glob(pattern))
                if not matches:
                    raise FileNotFoundError(f"no shard matches {pattern!r}")
                paths.extend(matches)
            else:
                if not os.path.isfile(pattern):
                    raise FileNotFoundError(f"no such shard: {pattern!r}")
                paths.append(pattern)
    if not paths:
        raise FileNotFoundError(f"no shard in {urls_or_glob!r}")
    return paths


# ---------------------------------------------------------------------------
# Per-shard index


def _sidecar(path: str) -> str:
    return path + ".idx.npz"


def _cached(path_abs: str, cache_dir: PathLike | None) -> str:
    name = cache_name("shard", path_abs, os.path.basename(path_abs))
    return os.path.join(default_cache_dir(cache_dir), name)


def _scan_shard(path: str, st: os.stat_result) -> dict[str, np.ndarray]:
    """The index arrays of one shard, from its tar headers. Raises
    ShardError for a truncated, corrupt or compressed shard."""
    size = st.st_size
    names: list[bytes] = []
    offsets: list[int] = []
    sizes: list[int] = []
    key_ids: list[int] = []
    ext_codes: list[int] = []
    ints: list[int] = []
    keys: dict[str, int] = {}
    exts: dict[str, int] = {}
    last = "the start of the archive"
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        if head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head[:4] == b"\xfd7zX":
            raise ShardError(
                f"{path}: compressed tar shards cannot be read by byte range; "
                "decompress them (the .tar files are read in place)"
            )
        try:
            tf = tarfile.TarFile(fileobj=f)  # the `with` above closes f
        except tarfile.ReadError as e:
            raise ShardError(f"{path}: not a tar file ({e})") from None
        while True:
            try:
                m = tf.next()
            except tarfile.TarError as e:
                raise ShardError(
                    f"{path}: truncated or corrupt after member {last!r} ({e})"
                ) from None
            if m is None:
                break
            tf.members = []  # tarfile keeps every TarInfo otherwise
            end = m.offset_data + m.size
            if m.isreg() and end > size:
                raise ShardError(
                    f"{path}: truncated shard: member {m.name!r} needs bytes "
                    f"{m.offset_data}..{end} but the file has {size} bytes"
                )
            last = m.name
            if not m.isreg():
                continue  # directories, links, devices: no data of their own
            if m.sparse is not None:
                raise ShardError(f"{path}: member {m.name!r} is a sparse file")
            split = _split_key(m.name)
            if split is None:
                continue
            key, ext = split
            value = _NO_INT
            if m.size <= _SMALL_MEMBER:
                text = os.pread(f.fileno(), m.size, m.offset_data)
                if _INT_TEXT.fullmatch(text):
                    value = int(text)
            names.append(os.fsencode(m.name))
            offsets.append(m.offset_data)
            sizes.append(m.size)
            key_ids.append(keys.setdefault(key, len(keys)))
            ext_codes.append(exts.setdefault(ext, len(exts)))
            ints.append(value)
        # tarfile stops quietly at a header that is cut short or is not a
        # header at all; past the last member there must be the end-of-archive
        # zero block, or nothing (some writers omit it).
        tail = os.pread(f.fileno(), tarfile.BLOCKSIZE, tf.offset)
        if tail and (len(tail) < tarfile.BLOCKSIZE or tail.count(0) != len(tail)):
            raise ShardError(
                f"{path}: truncated or corrupt after member {last!r} "
                f"(no valid tar header at byte {tf.offset})"
            )
    names_blob, names_offsets = pack_strings(names)
    exts_blob, exts_offsets = pack_strings(os.fsencode(e) for e in exts)
    return {
        "version": np.int64(SHARD_INDEX_VERSION),
        "shard": np.frombuffer(os.fsencode(os.path.abspath(path)), dtype=np.uint8),
        "size": np.int64(st.st_size),
        "mtime_ns": np.int64(st.st_mtime_ns),
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


def _valid(
    z: dict[str, np.ndarray] | None, path_abs: str | None, st: os.stat_result
) -> bool:
    """Whether index arrays ``z`` describe the shard as it is now. A
    sidecar copied along with its shard stays valid (``path_abs`` None);
    a cached index must name the same shard."""
    if z is None:
        return False
    try:
        return (
            int(z["version"]) == SHARD_INDEX_VERSION
            and int(z["size"]) == st.st_size
            and int(z["mtime_ns"]) == st.st_mtime_ns
            and (path_abs is None or os.fsdecode(z["shard"].tobytes()) == path_abs)
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


def _select(
    path: str,
    z: dict[str, np.ndarray],
    image_key: Sequence[str],
    label_key: str | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(image member per sample, label per sample) of one shard, in the
    order the samples' keys first appear. Samples without an image member
    are dropped; among duplicate members the last one wins, as when a tar
    is extracted."""
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
    order = np.lexsort((-member, rank, key_ids))  # key, then rank, then last
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
        label_member[key_ids[holders]] = holders  # the last duplicate wins
    names = StringBlob(z["names_blob"], z["names_offsets"])
    wanted = label_member[key_ids[images]]
    missing = np.nonzero(wanted < 0)[0]
    if len(missing):
        name = names[int(images[missing[0]])]
        raise ShardError(
            f"{path}: sample {_key_of(name)!r} (member {name!r}) has no "
            f".{label_key} member; pass label_key=None or a function of the key"
        )
    values = z["ints"][wanted]
    bad = np.nonzero(values == _NO_INT)[0]
    if len(bad):
        name = names[int(wanted[bad[0]])]
        raise ShardError(f"{path}: label member {name!r} does not hold an integer")
    return images, values


class TarShards:
    """Samples stored in WebDataset tar shards, for :class:`ringloader.Loader`.

    Args:
        urls_or_glob: a shard path, a glob (``"data/train-*.tar"``, sorted),
            WebDataset brace notation (``"train-{000000..000146}.tar"``), a
            ``file://`` URL, or a list of these. Shards are plain,
            uncompressed tar files on a local or mounted file system.
        image_key: extensions that hold the image, in order of preference
            (a tuple, or ``"jpg;png"``); a sample with none is skipped.
            Extensions are what follows the first dot of the member's base
            name, lowercased (``abc.seg.png`` has ``seg.png``).
        label_key: the extension of the member holding the integer label
            (``"cls"``), a function from the sample key (``"dir/abc"``) to an
            int, or None (labels are -1).
        cache_dir: where indexes go when a shard's folder is not writable.
        transform, target_transform: as ImageFolder's; the loader uses
            ``transform`` when it is given none.

    Samples come shard by shard, each in the order its key first appears
    in the shard. Attributes: ``shards`` (paths), ``targets`` (int64),
    ``offsets`` and ``lengths`` (the image member's byte range).
    """

    def __init__(
        self,
        urls_or_glob: PathLike | Iterable[PathLike],
        image_key: str | Sequence[str] = IMAGE_KEYS,
        label_key: str | Callable[[str], int] | None = "cls",
        cache_dir: PathLike | None = None,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        progress: bool = True,
    ) -> None:
        if isinstance(image_key, str):
            image_key = image_key.split(";")
        self.image_key = tuple(k.lower().lstrip(".") for k in image_key)
        self.label_key = label_key
        self.cache_dir = cache_dir
        self.transform = transform
        self.target_transform = target_transform
        self.shards = _shard_paths(urls_or_glob)
        self.index_files: list[str] = []

        by_ext = label_key.lower().lstrip(".") if isinstance(label_key, str) else None
        parts_off, parts_len, parts_tgt = [], [], []
        counts = []
        bar = self._progress_bar() if progress else None
        try:
            for path in self.shards:
                z, file, reused = shard_index(path, cache_dir)
                self.index_files.append(file)
                if bar is not None and not reused:
                    bar.update(1)
                images, labels = _select(path, z, self.image_key, by_ext)
                if callable(label_key):
                    names = StringBlob(z["names_blob"], z["names_offsets"])
                    labels = np.array(
                        [int(label_key(_key_of(names[int(i)]))) for i in images],
                        dtype=np.int64,
                    )
                parts_off.append(z["offsets"][images])
                parts_len.append(z["sizes"][images])
                parts_tgt.append(labels)
                counts.append(len(images))
        finally:
            if bar is not None:
                bar.close()
        self.offsets = np.concatenate(parts_off).astype(np.int64, copy=False)
        self.lengths = np.concatenate(parts_len).astype(np.int64, copy=False)
        self.targets = np.concatenate(parts_tgt).astype(np.int64, copy=False)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.paths = _ShardPaths(self.shards, self.starts)

    def _progress_bar(self) -> Any:
        """A tqdm bar over the shards still to index, when there are many
        of them (indexing reads every tar header once)."""
        if len(self.shards) < 16:
            return None
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        return tqdm(
            total=len(self.shards),
            unit="shard",
            desc="indexing shards",
            leave=False,
            delay=2.0,
        )

    def __len__(self) -> int:
        return len(self.targets)

    def shard_of(self, index: int) -> int:
        """The position in ``shards`` of the shard holding sample ``index``."""
        return int(np.searchsorted(self.starts, index, side="right")) - 1

    def key(self, index: int) -> str:
        """The WebDataset key (``"dir/abc"``) of sample ``index``, looked up
        in its shard's index."""
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} samples")
        s = self.shard_of(index)
        z = load_npz(self.index_files[s])
        if z is None:
            z = shard_index(self.shards[s], self.cache_dir)[0]
        member = int(np.searchsorted(z["offsets"], self.offsets[index]))
        return _key_of(StringBlob(z["names_blob"], z["names_offsets"])[member])

    def describe(self, index: int) -> str:
        """Where sample ``index`` is, for error messages:
        ``shard.tar[key] (bytes start..end)``."""
        off, length = int(self.offsets[index]), int(self.lengths[index])
        return f"{self.paths[index]}[{self.key(index)}] (bytes {off}..{off + length})"

    def read(self, index: int) -> bytes:
        """The bytes of sample ``index``'s image member."""
        path = self.paths[index]
        off, length = int(self.offsets[index]), int(self.lengths[index])
        with open(path, "rb") as f:
            data = os.pread(f.fileno(), length, off)
        if len(data) != length:
            raise OSError(
                f"{path}: member at byte {off} is cut short (shard truncated)"
            )
        return data

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """(image, target): the full image as a uint8 CHW tensor."""
        where = self.describe(index)
        return decode_item(
            where,
            self.read(index),
            int(self.targets[index]),
            self.transform,
            self.target_transform,
        )

    def ringloader_sources(self) -> Any:
        """The shard of each sample with its image member's byte range."""
        from .loader import Sources

        return Sources(
            paths=self.paths,
            targets=self.targets,
            offsets=self.offsets,
            lengths=self.lengths,
        )

    def __repr__(self) -> str:
        return (
            f"ringloader.TarShards({len(self.shards)} shards, {len(self)} samples, "
            f"image_key={self.image_key}, label_key={self.label_key!r})"
        )


class _ShardPaths(Sequence):
    """The shard path of each sample, from the first sample index of each
    shard: no per-sample memory."""

    def __init__(self, shards: list[str], starts: np.ndarray) -> None:
        self._shards = shards
        self._starts = [int(s) for s in starts]
        self._n = self._starts[-1]

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = int(index)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"index {index} out of range for {self._n} samples")
        return self._shards[bisect.bisect_right(self._starts, i) - 1]
