"""WebDataset-style tar shards read in place, as random-access byte ranges.

A shard is a plain POSIX tar file (ustar, GNU or pax; not compressed) whose
members are grouped into samples by basename, as WebDataset groups them:
``dir/abc.jpg`` and ``dir/abc.cls`` form the sample ``dir/abc``. Nothing is
unpacked or converted: the loader reads each sample's image member straight
out of the shard with one ranged read.

On first use each shard gets an index (:mod:`.tarindex`): every member's
name, byte range and sample, kept in a small ``.npz`` file next to the shard
or in the cache directory, so later uses read no tar header at all, and a
truncated or corrupt shard fails when indexed, naming the shard and the
member, rather than in the middle of an epoch.
"""

from __future__ import annotations

import bisect
import glob
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any, Callable

import numpy as np

from .base import ImageDataset, PathLike, Sources
from .cache import StringBlob, load_npz
from .tarindex import ShardError, key_of, select_samples, shard_index

__all__ = ["IMAGE_KEYS", "ShardError", "TarShards"]

# Extensions (WebDataset "keys") tried in this order for a sample's image.
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "tif", "tiff")


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


class TarShards(ImageDataset):
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
                images, labels = select_samples(path, z, self.image_key, by_ext)
                if callable(label_key):
                    names = StringBlob(z["names_blob"], z["names_offsets"])
                    labels = np.array(
                        [int(label_key(key_of(names[int(i)]))) for i in images],
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
        return key_of(StringBlob(z["names_blob"], z["names_offsets"])[member])

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

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        """Named as :meth:`describe` names it; its image member's bytes."""
        where = self.describe(index)
        return where, self.read(index), int(self.targets[index])

    def ringloader_sources(self) -> Sources:
        """The shard of each sample with its image member's byte range."""
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
