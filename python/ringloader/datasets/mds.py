"""MosaicML Streaming's MDS shards (``streaming.MDSWriter``) read in place.

A written folder (or its ``split`` subfolder) holds ``index.json``,
``{"version": 2, "shards": [...]}``, each shard's entry naming its
columns (``column_names``), their encodings (``column_encodings``) and
sizes (``column_sizes``: a fixed size, or null for a column whose size
each sample gives), its file (``raw_data``: basename and bytes; with
``compression``, ``zip_data`` is the file written) and its sample count
(``samples``). A shard file is::

    num_samples u32 | offsets u32[num_samples + 1] | the config (json) | samples

the offsets absolute in the file; a sample is the sizes (u32) of its
columns of no fixed size, then its columns' bytes one after another
(``chunkfiles.column_ranges``). An image column encoded ``jpeg``, ``png``
or ``bytes`` holds an encoded file: each sample's image is a byte range
of its shard, read in place by the C file source. ``pil`` holds raw
pixels (width, height, the mode's length (u32 each), the mode, then the
pixels), which ringloader does not decode: refused. ``int`` is an int64;
the ``int8`` ... ``float64`` scalars are the numpy types of their names.

Compressed shards (``zstd``, ``gz``, ``bz2``) are inflated once each into
the cache folder (``cache_dir``'s ``mds/``), then read in place; a shard's
uncompressed file already beside it (as Streaming leaves it) is read as
it is.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

from .base import PathLike
from . import chunkfiles as _files

__all__ = ["MDS", "mds_hint"]

_IMAGES = ("jpeg", "png", "bytes")
_NUMBERS = {"int": np.dtype("<i8")} | {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64"
    ).split()
}
_VALUES = ("str", "bytes", "json")
# What each shard's entry in index.json must give.
_SHARD_KEYS = (
    "column_names",
    "column_encodings",
    "column_sizes",
    "samples",
    "raw_data",
)


def mds_hint(dataset: Any) -> Optional[str]:
    """Why ringloader.DataLoader does not read ``dataset`` itself when it
    is MosaicML Streaming's StreamingDataset over local MDS shards, naming
    the way it is read natively; None for any other dataset."""
    if not any(c.__module__.startswith("streaming.") for c in type(dataset).__mro__):
        return None
    folders = []
    for stream in getattr(dataset, "streams", None) or ():
        local, split = getattr(stream, "local", None), getattr(stream, "split", "")
        try:
            with open(os.path.join(local, split or "", "index.json"), "rb") as f:
                shards = json.loads(f.read())["shards"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if shards and all(s.get("format") == "mds" for s in shards):
            folders.append((local, split))
    if not folders:
        return None
    local, split = folders[0]
    arg = f"{local!r}" + (f", split={split!r}" if split else "")
    return (
        f"{type(dataset).__name__} is MosaicML Streaming's iterable dataset, "
        "which torch's DataLoader iterates sample by sample in Python; its "
        f"local folder holds MDS shards: to read them natively, give "
        f"ringloader.MDS({arg}, transform=...)"
        + (f" (one for each of its {len(folders)} streams)" if len(folders) > 1 else "")
    )


def _inflate(kind: str, data: bytes, name: str) -> bytes:
    family = kind.split(":", 1)[0]
    if family == "zstd":
        return _files.inflate_zstd(data, name, "MDSWriter")
    try:
        if family == "gz":
            return gzip.decompress(data)
        if family == "bz2":
            return bz2.decompress(data)
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"{name}: cannot inflate the shard ({e}): damaged") from None
    raise ValueError(
        f"{name}: compressed with {kind!r}; MDS reads zstd, gz and bz2 shards "
        "(or the shard's uncompressed file beside it)"
    )


def _read_index(root: str) -> list[dict]:
    """The shard entries of ``root``'s index.json, ValueError naming it
    when it is missing or not an MDS index."""

    def parse(index: dict) -> list[dict]:
        shards = list(index["shards"])
        for s in shards:
            if s["format"] != "mds":
                raise ValueError(f"a shard of format {s['format']!r}, not 'mds'")
            missing = [k for k in _SHARD_KEYS if k not in s]
            if missing or "basename" not in s["raw_data"]:
                raise KeyError(
                    f"a shard entry without {missing or 'raw_data.basename'}"
                )
            s["samples"] = int(s["samples"])
        return shards

    path, shards = _files.load_index(
        root,
        parse,
        "an MDS index",
        "streaming.MDSWriter",
        "MDS(local) takes the folder MDSWriter wrote (its index.json and "
        "shard files), split= its subfolder",
    )
    if not shards:
        raise ValueError(f"{path}: the index lists no shards")
    return shards


def _whole(path: str, size: int) -> bool:
    try:
        return os.path.getsize(path) == size
    except OSError:
        return False


def _shard_file(
    root: str, shard: dict, cache_dir: Optional[PathLike]
) -> tuple[str, str]:
    """(the uncompressed file of a shard, the file it names): the raw
    file when it is there (and of its size), else the compressed one
    inflated into the cache."""
    raw = os.path.join(root, shard["raw_data"]["basename"])
    size = int(shard["raw_data"].get("bytes") or -1)
    zipped = shard.get("zip_data")
    if not zipped or _whole(raw, size):
        if not os.path.isfile(raw):
            raise ValueError(
                f"{raw}: index.json lists this shard but the file is not "
                "there: the index disagrees with the files"
            )
        return raw, raw
    name = os.path.join(root, zipped["basename"])
    if not os.path.isfile(name):
        raise ValueError(
            f"{name}: index.json lists this shard but the file is not "
            "there: the index disagrees with the files"
        )
    kind = str(shard.get("compression") or name.rsplit(".", 1)[-1])
    path = _files.cached_copy(
        name,
        kind,
        cache_dir,
        "mds",
        lambda data: _inflate(kind, data, name),
        lambda out: _whole(out, size),
    )
    return path, name


def _ranges(path: str, name: str, want: int, fixed: list) -> tuple:
    """(memory map, starts, sizes) of an uncompressed shard of ``want``
    samples, checked against its file."""
    size = os.path.getsize(path)
    if size == 0:
        raise ValueError(f"{name}: the shard file is empty")
    mm = np.memmap(path, np.uint8, "r")
    n, offsets = _files.header_of(mm, name)
    if n != want:
        raise ValueError(
            f"{name}: holds {n} samples where index.json says {want}: the "
            "index disagrees with the files (write the folder again)"
        )
    if offsets[0] < 4 + 4 * (n + 1) or (np.diff(offsets) < 0).any():
        raise ValueError(f"{name}: its sample table is not a shard's (damaged)")
    if offsets[-1] != size:
        raise ValueError(
            f"{name}: {size} bytes where its sample table ends at "
            f"{int(offsets[-1])}: the shard is "
            + ("cut short" if size < offsets[-1] else "followed by other bytes")
        )
    starts, sizes = _files.column_ranges(mm, offsets, fixed, name)
    return mm, starts, sizes


class MDS(_files.ChunkedDataset):
    """A folder written by MosaicML Streaming's ``MDSWriter``, for
    :class:`ringloader.Loader` and ``ringloader.DataLoader``: each image's
    bytes are read in place from its shard file by the C file source.

    Args:
        local: the folder (its ``index.json`` and shards), local, as
            ``StreamingDataset(local=...)`` takes it. Compressed shards
            (zstd, gz, bz2) are inflated once into ``cache_dir``'s
            ``mds/`` folder, then read in place.
        transform, target_transform: as torchvision's datasets take them.
        image: the image column, encoded ``jpeg``, ``png`` or ``bytes``
            (JPEG, PNG or WebP files). Raw PIL pixels (``pil``) are
            refused with a ValueError.
        target: the target column (``int`` or a numpy scalar encoding:
            ``int64``, ``float32``, ...), or None (targets -1).
        fields: other columns to yield beside image and target (``str``,
            ``bytes``, ``json``, numbers).
        split: the subfolder of ``local`` to read, as Streaming's.
        cache_dir: where inflated shards go (default: ringloader's cache).

    ``describe(i)`` names the shard file, the sample in it and its bytes.
    """

    _unit = "shard"

    def __init__(
        self,
        local: PathLike,
        transform: Callable | None = None,
        image: str = "image",
        target: str | None = "label",
        target_transform: Callable | None = None,
        fields: Sequence[str] | None = None,
        split: str | None = None,
        cache_dir: PathLike | None = None,
    ) -> None:
        root = os.path.abspath(os.path.join(os.fspath(local), split or ""))
        shards = _read_index(root)
        names = list(shards[0]["column_names"])
        encodings = list(shards[0]["column_encodings"])
        fixed = list(shards[0]["column_sizes"])
        if isinstance(fields, str):
            raise TypeError(f"fields is a sequence of column names, not {fields!r}")
        self.fields = tuple(fields or ())
        kinds = dict(zip(names, encodings))
        for what, col in [("image", image), ("target", target)] + [
            ("field", f) for f in self.fields
        ]:
            if col is not None and col not in kinds:
                raise ValueError(
                    f"{root}: no {what} column {col!r}; its columns are {names}"
                )
        if kinds[image] == "pil":
            raise ValueError(
                f"{root}: column {image!r} holds raw PIL pixels (encoding "
                "'pil'), which ringloader does not decode: write the images "
                "encoded ('jpeg', 'png', or the files' bytes as 'bytes')"
            )
        if kinds[image] not in _IMAGES:
            raise ValueError(
                f"{root}: image column {image!r} has encoding {kinds[image]!r}, "
                "not an encoded image (jpeg, png, bytes)"
            )
        if target is not None and kinds[target] not in _NUMBERS:
            raise ValueError(
                f"{root}: target column {target!r} has encoding "
                f"{kinds[target]!r}; a target is int or a numpy scalar (int64, ...)"
            )
        for f in self.fields:
            if kinds[f] not in _NUMBERS and kinds[f] not in _VALUES:
                raise ValueError(
                    f"{root}: field column {f!r} has encoding {kinds[f]!r}, which "
                    "MDS cannot read (str, bytes, json, numbers)"
                )
        self.root, self.image, self.target = root, image, target
        self.transform, self.target_transform = transform, target_transform
        self.as_dict = None
        self._col = {c: k for k, c in enumerate(names)}
        self._kinds = [_NUMBERS.get(k, k) for k in encodings]
        listed, parts = [], []
        for shard in shards:
            if [shard["column_names"], shard["column_encodings"]] != [names, encodings]:
                raise ValueError(
                    f"{root}: shard {shard['raw_data']['basename']}'s columns are "
                    f"{shard['column_names']} encoded {shard['column_encodings']}, "
                    f"where the first shard's are {names} encoded {encodings}"
                )
            path, name = _shard_file(root, shard, cache_dir)
            mm, starts, sizes = _ranges(path, name, int(shard["samples"]), fixed)
            listed.append(name)
            parts.append(
                (path, starts, sizes, self._target_values(mm, starts, sizes, name))
            )
            del mm
        self._set_tables(listed, parts)

    def _target_values(
        self, mm: np.ndarray, starts: np.ndarray, sizes: np.ndarray, name: str
    ) -> Optional[np.ndarray]:
        """The target column's values in a shard (int64, or float64 for a
        float encoding), or None without a target."""
        if self.target is None:
            return None
        k = self._col[self.target]
        dtype = self._kinds[k]
        if (sizes[:, k] != dtype.itemsize).any():
            raise ValueError(
                f"{name}: target column {self.target!r} is not one {dtype} a "
                "sample (damaged)"
            )
        values = _files.gather(mm, starts[:, k], dtype.itemsize).view(dtype).reshape(-1)
        return values.astype(np.float64 if dtype.kind == "f" else np.int64)

    def __repr__(self) -> str:
        return (
            f"ringloader.MDS({self.root!r}: {len(self)} samples in "
            f"{len(self._files)} shard(s), image={self.image!r}, "
            f"target={self.target!r})"
        )
