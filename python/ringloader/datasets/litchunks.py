"""LitData's optimized chunks (``litdata.optimize``) read in place.

An optimized folder holds ``index.json`` and chunk files. The index's
``config`` names the item loader (``PyTreeLoader``: one item a sample),
the leaves of each item (``data_spec``, a flattened pytree: a dict's keys
are the column names) and each leaf's encoding (``data_format``: ``jpeg``
and ``bytes`` are an encoded file's bytes as they are; ``pil`` is raw
pixels; ``int``/``float`` 8 bytes; ``str`` UTF-8). Its ``chunks`` list
each chunk's file and item count. A chunk is::

    num_items u32 | offsets u32[num_items + 1] | items

where item i is ``offsets[i] .. offsets[i + 1]`` of the file, and an item
is its leaves' sizes (u32 each) then the leaves' bytes one after another.
So every sample's image is a byte range of a chunk file: it is found with
numpy from the headers (a gather over a memory map, nothing per sample in
Python), and the C file source reads it in place, the chunk files as runs
of samples (``columns._table_of``).

Compressed folders (``compression="zstd"``) are inflated once per chunk
into the cache folder (:func:`.cache.default_cache_dir`, ``litdata/``),
into the uncompressed layout, then read in place the same way: a whole
chunk compressed (``compression_level="chunk"``, ``.zstd.bin``), frames
of items (``"batch"``, the ``LDFZ01`` layout: a prefix, the items' offsets
in the inflated bytes, a table of frames) or each item on its own
(``"sample"``).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

from .base import PathLike
from .chunkfiles import ChunkedDataset, cached_copy, column_ranges, gather
from .chunkfiles import header_of, inflate_zstd, load_index
from .litarrow import Compressed, arrow_footer, arrow_ranges, inflate_arrow

__all__ = ["LitData"]

_IMAGE_FORMATS = ("jpeg", "bytes")
_NUMBERS = {"int": np.dtype("<i8"), "float": np.dtype("<f8"), "bool": np.dtype("u1")}
_FRAMED_MAGIC = b"LDFZ01\0\0"
_FRAMED_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")


def _leaf_names(spec: Any, at: str, out: list[str]) -> None:
    """The names of a flattened pytree's leaves, in order: a dict's keys,
    a tuple's or list's positions, joined with dots when nested."""
    kind = spec.get("type")
    children = spec.get("children_spec") or []
    if kind is None and not children:
        out.append(at or "0")
        return
    if kind == "builtins.dict":
        keys = [str(k) for k in json.loads(spec.get("context") or "[]")]
    else:
        keys = [str(k) for k in range(len(children))]
    for key, child in zip(keys, children):
        _leaf_names(child, f"{at}.{key}" if at else key, out)


def _read_index(root: str) -> tuple[dict, list[dict], list[str]]:
    """(config, chunks, column names) of an optimized folder's index.json,
    ValueError naming it when it is missing or not LitData's."""

    def parse(index: dict) -> tuple:
        config, chunks = index["config"], index["chunks"]
        if config is None or not chunks:
            return None, chunks, [], []
        names: list[str] = []
        _leaf_names(json.loads(config["data_spec"])[1], "", names)
        return config, chunks, names, list(config["data_format"])

    path, (config, chunks, names, formats) = load_index(
        root,
        parse,
        "a LitData index",
        "litdata.optimize",
        "LitData(input_dir) takes the folder litdata.optimize wrote (its "
        "index.json and chunk files)",
    )
    if config is None:
        raise ValueError(
            f"{path}: the folder holds no chunks (did the optimize run "
            "fail? its workers' errors say why)"
        )
    loader = config.get("item_loader")
    if loader not in (None, "PyTreeLoader"):
        raise ValueError(
            f"{path}: chunks of item loader {loader!r}; LitData reads "
            "PyTreeLoader's (litdata.optimize's default, one item a sample)"
        )
    if config.get("encryption"):
        raise ValueError(f"{path}: the chunks are encrypted, which LitData cannot read")
    if len(names) != len(formats):
        raise ValueError(
            f"{path}: data_spec has {len(names)} leaves but data_format "
            f"{len(formats)}: the index disagrees with itself"
        )
    return config, chunks, list(zip(names, formats))


def _inflate(data: bytes, what: str) -> bytes:
    return inflate_zstd(data, what, "litdata")


def _classic(n: int, items: bytes, ends: np.ndarray) -> bytes:
    """An uncompressed chunk of ``n`` items whose bytes are ``items``,
    item i ending at ``ends[i]`` (``ends[0]`` = 0)."""
    header = 4 + 4 * (n + 1)
    offsets = (np.asarray(ends, dtype=np.int64) + header).astype("<u4")
    return struct.pack("<I", n) + offsets.tobytes() + items


def _unframe(data: bytes, path: str, level: str) -> bytes:
    """The uncompressed chunk of a compressed chunk file's bytes."""
    if level == "chunk":
        return _inflate(data, path)
    if level == "arrow":
        return inflate_arrow(data, path)
    if level == "batch":
        if len(data) < _FRAMED_PREFIX.size or not data.startswith(_FRAMED_MAGIC):
            raise ValueError(f"{path}: not a framed zstd chunk (no LDFZ01 prefix)")
        _, _, _, n, _, frames = _FRAMED_PREFIX.unpack_from(data, 0)
        at = _FRAMED_PREFIX.size
        table = at + 4 * (n + 1)
        if len(data) < table + _FRAME.size * frames:
            raise ValueError(f"{path}: the framed chunk's tables are cut short")
        ends = np.frombuffer(data, "<u4", n + 1, at).astype(np.int64)
        parts = []
        for k in range(frames):
            _, _, off, size, _ = _FRAME.unpack_from(data, table + k * _FRAME.size)
            if off + size > len(data):
                raise ValueError(f"{path}: frame {k} lies past the end of the file")
            parts.append(_inflate(data[off : off + size], path))
        items = b"".join(parts)
        if len(items) != int(ends[-1] - ends[0]):
            raise ValueError(
                f"{path}: the frames inflate to other sizes than its table's"
            )
        return _classic(n, items, ends - ends[0])
    if level == "sample":
        n, offsets = header_of(data, path)
        parts = [
            _inflate(data[int(offsets[i]) : int(offsets[i + 1])], path)
            for i in range(n)
        ]
        ends = np.zeros(n + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=ends[1:])
        return _classic(n, b"".join(parts), ends)
    raise ValueError(f"{path}: compression_level {level!r} is not one LitData reads")


def _whole(path: str, want: int) -> bool:
    """Whether the inflated chunk ``path`` is all there: ``want`` items
    and as many bytes as its item table (and its Arrow rows) say. A file
    left zero-filled or cut short by a crash is not."""
    try:
        if os.path.getsize(path) < 8:
            return False
        mm = np.memmap(path, np.uint8, "r")
    except (OSError, ValueError):
        return False
    try:
        n, offsets = header_of(mm, path)
    except ValueError:
        return False
    footer = arrow_footer(mm)
    end = footer[0] if footer is not None else len(mm)
    return n == want and int(offsets[-1]) == end


def _cached_chunk(
    path: str, level: str, cache_dir: Optional[PathLike], want: int
) -> str:
    """The uncompressed copy of the compressed chunk ``path`` (``want``
    items) in the cache folder, named by the file's path, size and mtime
    (a changed chunk is inflated again). One process inflates it, under a
    lock of its own: the ranks of a job starting together wait for it and
    then use its copy, and a copy that is whole is never replaced (another
    process may be reading it). A copy that is not whole (a crash) is
    inflated again."""
    return cached_copy(
        path,
        level,
        cache_dir,
        "litdata",
        lambda data: _unframe(data, path, level),
        lambda out: _whole(out, want),
    )


class _Chunk:
    """Where each leaf of each item of one uncompressed chunk file is:
    ``starts``/``sizes`` (n, leaves) int64, checked against the file, and
    each leaf's kind (``kinds``: ``"str"``, ``"bytes"`` or a numpy dtype
    of its values)."""

    def __init__(
        self, path: str, name: str, want: int, columns: list[tuple[str, str]]
    ) -> None:
        size = os.path.getsize(path)
        if size == 0:
            raise ValueError(f"{name}: the chunk file is empty")
        leaves = len(columns)
        self.mm = mm = np.memmap(path, np.uint8, "r")
        n, offsets = header_of(mm, name)
        if n != want:
            raise ValueError(
                f"{name}: holds {n} items where index.json says {want}: the "
                "index disagrees with the files (write the folder again)"
            )
        header = 4 + 4 * (n + 1)
        footer = arrow_footer(mm)
        if offsets[0] != header or (
            footer is None and (np.diff(offsets) < 4 * leaves).any()
        ):
            raise ValueError(f"{name}: its item table is not a chunk's (damaged)")
        end = footer[0] if footer is not None else size
        if offsets[-1] != end:
            raise ValueError(
                f"{name}: {size} bytes where its item table ends at "
                f"{int(offsets[-1])}: the chunk is "
                + ("cut short" if size < offsets[-1] else "followed by other bytes")
            )
        if n and offsets[-1] == header and footer is not None:
            # Rows kept as an Arrow IPC file after the (empty) items.
            self.kinds, self.starts, self.sizes = arrow_ranges(
                path, footer, columns, n, name
            )
            return
        self.starts, self.sizes = column_ranges(mm, offsets, [None] * leaves, name)
        self.kinds = [_NUMBERS.get(kind, kind) for _, kind in columns]

    def numbers(self, leaf: int) -> np.ndarray:
        """The values of a leaf of fixed-size numbers, one per item."""
        dtype = self.kinds[leaf]
        if (
            not isinstance(dtype, np.dtype)
            or (self.sizes[:, leaf] != dtype.itemsize).any()
        ):
            raise ValueError(f"leaf {leaf} does not hold one number an item")
        data = gather(self.mm, self.starts[:, leaf], dtype.itemsize)
        return data.view(dtype).reshape(-1).copy()


class LitData(ChunkedDataset):
    """A folder written by ``litdata.optimize`` (or litdata's
    ``BinaryWriter``), for :class:`ringloader.Loader` and
    ``ringloader.DataLoader``: each image's bytes are read in place from
    its chunk file by the C file source.

    Args:
        input_dir: the optimized folder (its ``index.json`` and chunks),
            local. Compressed chunks (zstd) are inflated once into
            ``cache_dir``'s ``litdata/`` folder, then read in place.
        transform, target_transform: as torchvision's datasets take them.
        image: the image column (a key of the optimized dict, or a
            position of a tuple as a string, ``"0"``): encoded images
            (``jpeg``, ``bytes``: JPEG, PNG or WebP). Raw PIL pixels
            (``pil``) are refused with a ValueError.
        target: the target column (``int``: int64 classes, ``float``,
            ``bool``), or None (targets -1).
        fields: other columns to yield beside image and target (``str``,
            ``int``, ``float``, ``bool``, ``bytes``).
        cache_dir: where inflated chunks go (default: ringloader's cache).

    ``describe(i)`` names the chunk file, the item in it and its bytes.
    """

    def __init__(
        self,
        input_dir: PathLike,
        transform: Callable | None = None,
        image: str = "image",
        target: str | None = "label",
        target_transform: Callable | None = None,
        fields: Sequence[str] | None = None,
        cache_dir: PathLike | None = None,
    ) -> None:
        root = os.path.abspath(os.fspath(input_dir))
        config, chunks, columns = _read_index(root)
        formats = dict(columns)
        names = [c for c, _ in columns]
        if isinstance(fields, str):
            raise TypeError(f"fields is a sequence of column names, not {fields!r}")
        self.fields = tuple(fields or ())
        for what, col in [("image", image), ("target", target)] + [
            ("field", f) for f in self.fields
        ]:
            if col is not None and col not in formats:
                raise ValueError(
                    f"{root}: no {what} column {col!r}; its columns are {names}"
                )
        kind = formats[image]
        if kind == "pil":
            raise ValueError(
                f"{root}: column {image!r} holds raw PIL pixels (data format "
                "'pil'), which ringloader does not decode: optimize the images "
                "encoded (return the JpegImageFile as opened, litdata's Jpeg, "
                "or the file's bytes)"
            )
        if kind not in _IMAGE_FORMATS and not kind.startswith("image:"):
            raise ValueError(
                f"{root}: column {image!r} has data format {kind!r}, not an "
                "encoded image (jpeg, bytes, image:*)"
            )
        if target is not None and formats[target] not in _NUMBERS:
            raise ValueError(
                f"{root}: target column {target!r} has data format "
                f"{formats[target]!r}; a target is int, float or bool"
            )
        self.root, self.image, self.target = root, image, target
        self.transform, self.target_transform = transform, target_transform
        self.as_dict = None
        self._col = {c: k for k, c in enumerate(names)}
        self._kinds: list = [_NUMBERS.get(k, k) for _, k in columns]
        compression = config.get("compression")
        level = config.get("compression_level") or "chunk"
        parts: list[tuple] = []
        for entry in chunks:
            name = os.path.join(root, entry["filename"])
            if not os.path.isfile(name):
                raise ValueError(
                    f"{name}: index.json lists this chunk but the file is not "
                    "there: the index disagrees with the files"
                )
            want = int(entry["chunk_size"])
            if compression:
                path = _cached_chunk(name, level, cache_dir, want)
            else:
                path = name
            try:
                chunk = _Chunk(path, name, want, columns)
            except Compressed:
                # Arrow rows with compressed buffers: written out plain.
                path = _cached_chunk(path, "arrow", cache_dir, want)
                chunk = _Chunk(path, name, want, columns)
            if not parts:
                self._kinds = chunk.kinds
                self._check_kinds(root)
            elif chunk.kinds != self._kinds:
                raise ValueError(
                    f"{name}: its columns are of kinds {chunk.kinds}, where the "
                    f"first chunk's are {self._kinds}"
                )
            values = None if target is None else chunk.numbers(self._col[target])
            parts.append((path, chunk.starts, chunk.sizes, values))
            del chunk
        self._set_tables([os.path.join(root, e["filename"]) for e in chunks], parts)

    def _check_kinds(self, root: str) -> None:
        """ValueError for a column whose values cannot be what it is used
        as (the chunk layout decides: Arrow rows have their own types)."""
        for what, col in [("image", self.image), ("target", self.target)] + [
            ("field", f) for f in self.fields
        ]:
            if col is None:
                continue
            kind = self._kinds[self._col[col]]
            ok = {
                "image": kind in _IMAGE_FORMATS or str(kind).startswith("image:"),
                "target": isinstance(kind, np.dtype),
            }.get(what, kind in ("str", "bytes") or isinstance(kind, np.dtype))
            if not ok:
                raise ValueError(
                    f"{root}: {what} column {col!r} holds {kind}, which LitData "
                    f"cannot read as its {what}"
                )

    def __repr__(self) -> str:
        return (
            f"ringloader.LitData({self.root!r}: {len(self)} samples in "
            f"{len(self._files)} chunk(s), image={self.image!r}, "
            f"target={self.target!r})"
        )
