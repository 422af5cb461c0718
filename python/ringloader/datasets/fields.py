"""The fields of a tar shard sample beside its image (captions, JSON,
classes, arrays), as WebDataset names them, read with the image and
decoded and batched in Python.

A sample's members are neighbours in its shard, so one read (one range
GET) covers them all: the sample's byte range is widened from its image
member to every member it needs. The C core decodes the image from its
part of those bytes and hands the rest back with the batch
(``Batch.fields``: the bytes before the image, then those after it);
:class:`FieldTable` knows where each member lies in them (each sample's
version-2 record in its shard's record file, written by
:func:`field_records` when the shard is indexed and read only for the
samples of a batch: nothing per sample is kept), and
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
``max_field_bytes``, known from the index (``refusals``, numbered in
the records); and, checked on
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

__all__ = [
    "FieldError",
    "FieldTable",
    "field_records",
    "fields_dtype",
    "kind_of",
    "parse_fields",
    "refusal_messages",
]

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


def refusal_messages(
    names: Sequence[str],
    image: int,
    exts: list[tuple[str, ...]],
    max_field_bytes: int,
) -> list[str]:
    """Why a sample of these fields may be refused, in the order the
    refusal codes of its records number them (code k + 1 is message k):
    each field other than the image, in order, missing then over
    ``max_field_bytes``; then members too far apart. Fixed by the
    selection, so that a record file holds a code, never a message."""
    out = []
    for f in range(len(names)):
        if f != image:
            out.append(
                f"the sample has no {' or '.join('.' + e for e in exts[f])} "
                f"member (fields={tuple(names)!r})"
            )
            out.append(
                f"its {names[f]!r} member is over max_field_bytes={max_field_bytes}"
            )
    out.append(f"its members are more than {MAX_GAP_BYTES} bytes apart in the shard")
    return out


class FieldTable:
    """Where each field member of each sample lies in the bytes the C core
    hands back, which extension it has, and how a batch of them is
    decoded and batched: read from the shards' record files
    (``store``, a :class:`.manifest.RecordStore` of version-2 records,
    :mod:`.tarindex`), one record a sample, only for the samples asked
    for; nothing per sample is held.

    ``names`` are the fields as requested; ``image`` the position of the
    image field (its column is the images the loader made); ``image_at``
    and ``image_len`` (lazy int64 columns over the records) and
    ``refusals`` are what the C pipeline reads (core/pipeline.h): the
    image's place in the sample's bytes, or a refusal. ``per_sample``
    maps a field position to a callable run on each value
    (``target_transform`` on the label field), ``per_batch`` one run on
    the batched column (``field_transforms``)."""

    def __init__(
        self,
        names: Sequence[str],
        image: int,
        exts: list[tuple[str, ...]],
        store: Any,
        refusals: list[str],
        errors: str = "strict",
        per_sample: Optional[dict[int, Callable]] = None,
        per_batch: Optional[dict[str, Callable]] = None,
    ) -> None:
        for name in per_batch or {}:
            if name not in names:
                raise ValueError(
                    f"field_transforms names {name!r}, which is not one of the "
                    f"fields {tuple(names)!r}"
                )
        codecs.lookup_error(errors)  # an unknown handler raises LookupError now
        self.names = tuple(names)
        self.image = image
        self.exts = exts
        self.store = store
        self.refusals = refusals
        self.errors = errors
        self.per_sample = dict(per_sample or {})
        self.per_batch = {self.names.index(k): v for k, v in (per_batch or {}).items()}
        # Field f's columns in the record: the fields but the image, in order.
        others = [f for f in range(len(self.names)) if f != image]
        self.column = {f: k for k, f in enumerate(others)}
        self.image_at = store.column("image_at")
        self.image_len = store.column("image_len")

    def _decode(self, f: int, i: int, rec: Any, data: bytes, describe: Callable) -> Any:
        k = self.column[f]
        at, size, e = int(rec[f"at{k}"]), int(rec[f"size{k}"]), int(rec[f"ext{k}"])
        if not (0 <= e < len(self.exts[f]) and at >= 0 and 0 <= size <= len(data) - at):
            # The C core checks the fields whose kind it checks; these are
            # read here first: a corrupt record is never read as a place.
            raise FieldError(
                f"{describe(i)}: its record in {self.store.file_of(i)} gives its "
                f"{self.names[f]!r} member a place or extension out of range "
                "(a corrupt record file: remove it and open the shard set again)",
                i,
                self.names[f],
            )
        ext = self.exts[f][e]
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

    def value(self, f: int, i: int, data: bytes, describe: Callable) -> Any:
        """Field ``f`` of sample ``i`` decoded from its field bytes (its
        place read from its record). Raises FieldError naming the
        sample."""
        return self._decode(f, i, self.store.rows([i])[0], data, describe)

    def _kinds(self, f: int) -> list[int]:
        kinds = [CHECKS.get(kind_of(e), 0) for e in self.exts[f]]
        if self.errors != "strict":  # text always decodes
            kinds = [0 if k == CHECKS["text"] else k for k in kinds]
        return kinds

    def checks(self) -> list[tuple]:
        """What the C core checks on each sample's bytes before its batch
        is made (core/fields.h's rl_field_check, one a field whose kind
        it checks), in the record form: (column, extensions, kinds), the
        column the field's place in each record, so that a bad member
        fails its sample there, replaced under on_error="skip"."""
        out = []
        for f in range(len(self.names)):
            if f != self.image and any(self._kinds(f)):
                out.append((self.column[f], self.exts[f], self._kinds(f)))
        return out

    def check_arrays(self) -> list[tuple]:
        """:meth:`checks` with per-sample arrays (at, size, ext,
        extensions, kinds), every record read: for a source that cannot
        read the records as it goes (remote shards)."""
        out = []
        for column, exts, kinds in self.checks():
            at, size, ext = self.store.columns(
                (f"at{column}", f"size{column}", f"ext{column}")
            )
            out.append((at, size, ext.astype(np.int8), exts, kinds))
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
        run on the column. The batch's records are read once, together.
        A field that does not decode raises FieldError naming its sample:
        the core checked what it could (``checks``), and a batch never
        comes out shorter than it was made."""
        columns: list[list] = [[] for _ in self.names]
        ids = [int(i) for i in ids]
        recs = self.store.rows(ids) if ids else []
        for i, rec, data in zip(ids, recs, field_bytes):
            for f in range(len(self.names)):
                if f != self.image:
                    columns[f].append(self._decode(f, i, rec, data, describe))
        out: list[Any] = []
        for f in range(len(self.names)):
            col = images if f == self.image else _collate(columns[f])
            fn = self.per_batch.get(f)
            out.append(fn(col) if fn is not None else col)
        return tuple(out)


def fields_dtype(nfields: int) -> np.dtype:
    """The version-2 record of a selection with ``nfields`` fields beside
    the image (:mod:`.tarindex`): the range read, the label, the image's
    place in the range, then each field's place, size and extension."""
    head = [(n, "<u8") for n in ("offset", "length")]
    head += [(n, "<i8") for n in ("label", "image_at", "image_len")]
    for k in range(nfields):
        head += [(f"at{k}", "<i8"), (f"size{k}", "<i8"), (f"ext{k}", "<i8")]
    return np.dtype(head)


def field_records(
    names: Sequence[str],
    image: int,
    exts: list[tuple[str, ...]],
    image_off: np.ndarray,
    image_len: np.ndarray,
    labels: np.ndarray,
    members: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
    max_field_bytes: int,
) -> np.ndarray:
    """The version-2 records of one shard's samples, whose image members
    lie at ``image_off``/``image_len`` and, for each other field f, whose
    member is ``members[f]``: (offset, size, extension rank), -1 where
    there is none. A record's range is the sample's widened one: from its
    first member to the end of its last. A sample missing a field, with a
    field over ``max_field_bytes`` or with members over MAX_GAP_BYTES
    apart keeps its image's range and is refused (``image_at`` < 0, the
    code of :func:`refusal_messages`)."""
    others = [f for f in range(len(names)) if f != image]
    n = len(image_off)
    table = np.zeros(n, dtype=fields_dtype(len(others)))
    image_off = np.asarray(image_off, dtype=np.int64)
    image_len = np.asarray(image_len, dtype=np.int64)
    lo = image_off.copy()
    hi = image_off + image_len
    total = image_len.copy()
    refusal = np.zeros(n, dtype=np.int64)  # 0: none, else its code

    def refuse(where: np.ndarray, code: int) -> None:
        refusal[where & (refusal == 0)] = code

    for k, f in enumerate(others):
        off, sz, _ = (np.asarray(a, dtype=np.int64) for a in members[f])
        present = off >= 0
        refuse(~present, 2 * k + 1)
        refuse(present & (sz > max_field_bytes), 2 * k + 2)
        lo = np.where(present, np.minimum(lo, off), lo)
        hi = np.where(present, np.maximum(hi, off + sz), hi)
        total += np.where(present, sz, 0)
    refuse((hi - lo) - total > MAX_GAP_BYTES, 2 * len(others) + 1)
    ok = refusal == 0
    lo = np.where(ok, lo, image_off)
    hi = np.where(ok, hi, image_off + image_len)
    image_at = np.where(ok, image_off - lo, -refusal)
    for k, f in enumerate(others):
        off, sz, rank = (np.asarray(a, dtype=np.int64) for a in members[f])
        # Where the member lies in the bytes handed back: the sample's
        # bytes with the image's cut out.
        rel = off - lo
        rel = np.where(rel > image_at, rel - image_len, rel)
        table[f"at{k}"] = np.where(ok, rel, -1)
        table[f"size{k}"] = np.where(ok, sz, -1)
        table[f"ext{k}"] = rank
    table["offset"] = lo
    table["length"] = hi - lo
    table["label"] = labels
    table["image_at"] = image_at
    table["image_len"] = image_len
    return table
