"""The fields of a tar shard sample beside its image (captions, JSON,
classes, arrays), as WebDataset names them, read with the image and
decoded and batched in Python.

A sample's members are neighbours in its shard, so one read (one range
GET) covers them all: the sample's byte range is widened from its image
member to every member it needs. The C core decodes the image from its
part of those bytes and hands the rest back with the batch
(``Batch.fields``: the bytes before the image, then those after it);
:class:`FieldTable` knows where each member lies in them, and
:meth:`FieldTable.batch` decodes and batches them:

- ``txt``, ``text``, ``caption``, ``transcript`` -> ``str`` (UTF-8, with
  the ``errors`` chosen); ``json``, ``jsn`` -> the parsed object
  (``json.loads`` on the bytes, as WebDataset: UTF-8, -16 or -32); ``cls``,
  ``cls2``, ``class``, ``count``, ``index``, ``inx``, ``id`` -> ``int``;
  ``npy`` -> a tensor; any other -> ``bytes``. A field's kind is the last
  dotted part of the member's extension (``seg.json`` is JSON).
- batched as WebDataset's ``batched()`` does: ints and floats into a
  tensor, tensors stacked, anything else (str, a JSON object, bytes) a
  list with one entry per sample.

Bad members fail their sample in the C core, before its image is
decoded, so that the loader's ``on_error`` applies as to a corrupt image
(raised naming shard, sample and member, a ``DecodeError`` of kind
``"field"``; or under ``"skip"`` the sample replaced by the next one that
loads, counted, its batch full): missing members and members over
``max_field_bytes``, known from the index (``refusals``); and, checked on
the bytes read (``checks()``, core/fields.h), text that is not UTF-8
(``errors="strict"``), JSON that ``json.loads`` refuses and integers that
``int()`` refuses or int64 cannot hold. What is left to Python alone (an
``.npy`` member) raises :class:`FieldError` when it does not decode,
whatever ``on_error`` says: the batch is made by then, and no sample is
left out of it.
"""

from __future__ import annotations

import codecs
import io
import json
import sys
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

from ..errors import FieldError

__all__ = ["FieldError", "FieldTable", "field_table", "kind_of", "parse_fields"]

TEXT = ("txt", "text", "caption", "transcript")
JSON = ("json", "jsn")
INT = ("cls", "cls2", "class", "count", "index", "inx", "id")
NPY = ("npy",)
# The bytes a field member may have by default (a caption, a JSON record):
# larger members refuse their sample, naming the limit.
MAX_FIELD_BYTES = 16 << 20
# Members of one sample further apart than this (bytes between them that
# belong to no member of the sample) refuse it: one read would carry them.
MAX_GAP_BYTES = 1 << 20


# How the C core checks a member of each kind before the batch is made
# (core/fields.h's RL_FIELD_*): text only when its errors are "strict".
CHECKS = {"text": 1, "json": 2, "int": 3}


def kind_of(ext: str) -> str:
    """How a member of extension ``ext`` is decoded: "text", "json",
    "int", "npy" or "bytes" (the last dotted part decides)."""
    last = ext.rsplit(".", 1)[-1]
    if last in TEXT:
        return "text"
    if last in JSON:
        return "json"
    if last in INT:
        return "int"
    if last in NPY:
        return "npy"
    return "bytes"


def parse_fields(
    fields: Sequence[str], image_keys: Sequence[str]
) -> tuple[int, list[tuple[str, ...]]]:
    """(position of the image field, each field's extensions in order of
    preference) of ``fields`` as given (``("jpg;png", "txt")``). Exactly
    one field holds the image: the one whose extensions are all image
    extensions. Raises ValueError otherwise."""
    if isinstance(fields, str):
        raise TypeError(
            f"fields is a sequence of field names, like ('jpg;png', 'txt'), "
            f"not the string {fields!r}"
        )
    alts = [tuple(e.lower().lstrip(".") for e in f.split(";") if e) for f in fields]
    if not alts or any(not a for a in alts):
        raise ValueError(f"fields must name at least one extension each: {fields!r}")
    images = [i for i, a in enumerate(alts) if all(e in image_keys for e in a)]
    if len(images) != 1:
        raise ValueError(
            f"fields {tuple(fields)!r} must hold exactly one image field (whose "
            f"extensions are all among {tuple(image_keys)}); it has {len(images)}"
        )
    return images[0], alts


def _decode(kind: str, data: bytes, errors: str) -> Any:
    if kind == "text":
        return data.decode("utf-8", errors)
    if kind == "json":
        return json.loads(data)
    if kind == "int":
        return int(data)
    if kind == "npy":
        import torch

        array = np.load(io.BytesIO(data), allow_pickle=False)
        if not array.dtype.isnative:  # torch takes native byte order only
            array = array.astype(array.dtype.newbyteorder("="))
        return torch.from_numpy(array)
    return data


def _collate(values: list) -> Any:
    """A column of a batch, as WebDataset's batched() makes it (ints and
    floats into a tensor rather than a numpy array)."""
    import torch

    first = values[0]
    if isinstance(first, bool) or not isinstance(first, (int, float, torch.Tensor)):
        return values
    if isinstance(first, torch.Tensor):
        return torch.stack(values)
    return torch.tensor(values)


class FieldTable:
    """Where each field member of each sample lies in the bytes the C core
    hands back (``at``, ``size`` per field, per sample; -1: none), which
    extension it has (``ext``: an index into the field's extensions), and
    how a batch of them is decoded and batched.

    ``names`` are the fields as requested; ``image`` the position of the
    image field (its column is the images the loader made);
    ``image_at``/``image_len``/``refusals`` are what the C pipeline reads
    (core/pipeline.h): the image's place in the sample's bytes, or a
    refusal. ``per_sample`` maps a field position to a callable run on
    each value (``target_transform`` on the label field), ``per_batch``
    one run on the batched column (``field_transforms``)."""

    def __init__(
        self,
        names: Sequence[str],
        image: int,
        exts: list[tuple[str, ...]],
        at: list[np.ndarray],
        size: list[np.ndarray],
        ext: list[np.ndarray],
        image_at: np.ndarray,
        image_len: np.ndarray,
        refusals: list[str],
        errors: str = "strict",
        per_sample: Optional[dict[int, Callable]] = None,
        per_batch: Optional[dict[int, Callable]] = None,
    ) -> None:
        self.names = tuple(names)
        self.image = image
        self.exts = exts
        self.at, self.size, self.ext = at, size, ext
        self.image_at, self.image_len = image_at, image_len
        self.refusals = refusals
        self.errors = errors
        self.per_sample = dict(per_sample or {})
        self.per_batch = dict(per_batch or {})
        # Each sample's range (its image's when refused): field_table's.
        self.offsets = np.zeros(0, dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.int64)

    def value(self, f: int, i: int, data: bytes, describe: Callable) -> Any:
        """Field ``f`` of sample ``i`` decoded from its field bytes. Raises
        FieldError naming the sample."""
        at, size = int(self.at[f][i]), int(self.size[f][i])
        ext = self.exts[f][int(self.ext[f][i])]
        kind = kind_of(ext)
        try:
            value = _decode(kind, data[at : at + size], self.errors)
        except Exception as e:  # noqa: BLE001 - bad bytes, whatever numpy raises
            # (json: ValueError, RecursionError; np.load: ValueError,
            # EOFError, tokenize's TokenError for a cut header...)
            what = {
                "text": "is not UTF-8 text",
                "json": "is not valid JSON",
                "int": "does not hold an integer",
                "npy": "is not a .npy array",
            }.get(kind, "cannot be decoded")
            raise FieldError(
                f"{describe(i)}: its .{ext} member {what} ({e})", i, self.names[f]
            ) from None
        fn = self.per_sample.get(f)
        return fn(value) if fn is not None else value

    def checks(self) -> list[tuple]:
        """What the C core checks on each sample's bytes before its batch
        is made (core/fields.h's rl_field_check, one a field whose kind
        it checks): (at, size, ext, extensions, kinds), so that a bad
        member fails its sample there, replaced under on_error="skip"."""
        out = []
        for f in range(len(self.names)):
            if f == self.image:
                continue
            kinds = [CHECKS.get(kind_of(e), 0) for e in self.exts[f]]
            if self.errors != "strict":  # text always decodes
                kinds = [0 if k == CHECKS["text"] else k for k in kinds]
            if any(kinds):
                out.append((self.at[f], self.size[f], self.ext[f], self.exts[f], kinds))
        return out

    @staticmethod
    def max_int_digits() -> int:
        """int()'s limit on digits (0: none), which json.loads meets too."""
        get = getattr(sys, "get_int_max_str_digits", None)
        return int(get()) if get is not None else 0

    def batch(
        self,
        images: Any,
        ids: Sequence[int],
        field_bytes: Sequence[bytes],
        describe: Callable[[int], str],
    ) -> tuple:
        """The batch as a tuple in the order of ``names``: the images, then
        each other field decoded and batched, its ``per_batch`` callable
        run on the column. A field that does not decode raises FieldError
        naming its sample: the core checked what it could (``checks``),
        and a batch never comes out shorter than it was made."""
        columns: list[list] = [[] for _ in self.names]
        for i, data in zip(ids, field_bytes):
            for f in range(len(self.names)):
                if f != self.image:
                    columns[f].append(self.value(f, i, data, describe))
        out: list[Any] = []
        for f in range(len(self.names)):
            col = images if f == self.image else _collate(columns[f])
            fn = self.per_batch.get(f)
            out.append(fn(col) if fn is not None else col)
        return tuple(out)


def field_table(
    names: Sequence[str],
    image: int,
    exts: list[tuple[str, ...]],
    image_off: np.ndarray,
    image_len: np.ndarray,
    members: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]],
    *,
    max_field_bytes: int,
    errors: str,
    per_sample: dict[int, Callable],
    per_batch: dict[str, Callable],
) -> FieldTable:
    """The FieldTable of a data set whose samples have their image at
    ``image_off``/``image_len`` and, for each other field f, the parts
    (one per shard) of ``members[f]``: (offset, size, extension rank) of
    its member per sample, -1 where there is none. Its ``offsets`` and
    ``lengths`` are each sample's widened range: from its first member to
    the end of its last. A sample missing a field, with a field over
    ``max_field_bytes`` or with members over MAX_GAP_BYTES apart keeps
    its image's range and is refused (``image_at`` < 0)."""
    for name in per_batch:
        if name not in names:
            raise ValueError(
                f"field_transforms names {name!r}, which is not one of the "
                f"fields {tuple(names)!r}"
            )
    codecs.lookup_error(errors)  # an unknown handler raises LookupError now
    n = len(image_off)
    lo = image_off.copy()
    hi = image_off + image_len
    total = image_len.copy()
    refusal = np.zeros(n, dtype=np.int64)  # 0: none, else 1 + its index
    refusals: list[str] = []

    def refuse(where: np.ndarray, message: str) -> None:
        where = where & (refusal == 0)
        if where.any():
            refusals.append(message)
            refusal[where] = len(refusals)

    at: list[np.ndarray] = []
    size: list[np.ndarray] = []
    rank: list[np.ndarray] = []
    for f in range(len(names)):
        if f == image:
            empty = np.zeros(0, dtype=np.int64)
            at.append(empty)
            size.append(empty)
            rank.append(empty)
            continue
        parts = members[f]
        off = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
        sz = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
        rk = np.concatenate([p[2] for p in parts]).astype(np.int64, copy=False)
        present = off >= 0
        refuse(
            ~present,
            f"the sample has no {' or '.join('.' + e for e in exts[f])} "
            f"member (fields={tuple(names)!r})",
        )
        refuse(
            present & (sz > max_field_bytes),
            f"its {names[f]!r} member is over max_field_bytes={max_field_bytes}",
        )
        lo = np.where(present, np.minimum(lo, off), lo)
        hi = np.where(present, np.maximum(hi, off + sz), hi)
        total += np.where(present, sz, 0)
        at.append(off)
        size.append(sz)
        rank.append(rk)
    refuse(
        (hi - lo) - total > MAX_GAP_BYTES,
        f"its members are more than {MAX_GAP_BYTES} bytes apart in the shard",
    )
    ok = refusal == 0
    lo = np.where(ok, lo, image_off)
    hi = np.where(ok, hi, image_off + image_len)
    image_at = np.where(ok, image_off - lo, -refusal)
    for f in range(len(names)):
        if f != image:
            # Where the member lies in the bytes handed back: the sample's
            # bytes with the image's cut out.
            rel = at[f] - lo
            rel = np.where(rel > image_at, rel - image_len, rel)
            # 9 bytes a field a sample: a refused sample's values are
            # never read, every other one's fit (its members lie within
            # MAX_GAP_BYTES plus max_field_bytes each).
            at[f] = np.where(ok, rel, -1).astype(np.int64)
            size[f] = np.where(ok, size[f], -1)
            if len(at[f]) == 0 or max(at[f].max(), size[f].max()) < 2**31:
                at[f] = at[f].astype(np.int32)
                size[f] = size[f].astype(np.int32)
            rank[f] = rank[f].astype(np.int8)
    table = FieldTable(
        names,
        image,
        exts,
        at,
        size,
        rank,
        image_at.astype(np.int64),
        image_len.astype(np.int64, copy=True),
        refusals,
        errors=errors,
        per_sample=per_sample,
        per_batch={names.index(k): v for k, v in per_batch.items()},
    )
    table.offsets = lo.astype(np.int64)
    table.lengths = (hi - lo).astype(np.int64)
    return table
