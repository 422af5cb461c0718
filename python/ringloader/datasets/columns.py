"""What the datasets made of table rows share (HFDataset's Arrow files,
Parquet's extracts): an image column's chunks as byte ranges (its data
buffer, offsets and nulls; the path rows' names) with numpy alone, the
file table the C file source reads (runs of rows of one file, or a name a
row), a column as targets, the other columns carried beside the image as
fields, and the dataset base those build on (indexing, ``describe``'s
callers, ``ringloader_sources``).

Nothing here imports pyarrow at module level: it is imported when a table
is read."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

import numpy as np

from . import targets as _targets
from .base import ImageDataset, Sources, decode_item
from .cache import StringBlob, gather_strings
from .shards import _ShardPaths

__all__ = ["_ColumnDataset", "_ColumnFields"]


def _image_chunk(chunk: Any) -> tuple[Any, np.ndarray, np.ndarray, Any]:
    """An image column's Arrow array (a struct of bytes and path, or
    binary) as (the bytes' data buffer, its m + 1 offsets as int64, which
    rows have bytes (bool), the path array or None)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_struct(chunk.type):
        data = chunk.field("bytes")
        valid = chunk.is_valid()
        if data.null_count:
            valid = pc.and_(valid, data.is_valid())
        has_path = chunk.type.get_field_index("path") >= 0
        path = chunk.field("path") if has_path else None
    else:
        data, valid, path = chunk, chunk.is_valid(), None
    wide = pa.types.is_large_binary(data.type)
    _, off_buf, data_buf = data.buffers()
    offs = np.frombuffer(off_buf, np.int64 if wide else np.int32)
    offs = offs[data.offset : data.offset + len(chunk) + 1].astype(np.int64)
    has = np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool)
    return data_buf, offs, has, path


def _take_strings(strings: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(blob, offsets) of the rows ``rows`` of an Arrow string array, from
    its buffers (no Python object a row)."""
    import pyarrow as pa

    wide = pa.types.is_large_string(strings.type) or pa.types.is_large_binary(
        strings.type
    )
    _, off_buf, data_buf = strings.buffers()
    offs = np.frombuffer(off_buf, np.int64 if wide else np.int32)
    offs = offs[strings.offset : strings.offset + len(strings) + 1].astype(np.int64)
    data = (
        np.frombuffer(data_buf, np.uint8)
        if data_buf is not None
        else np.zeros(0, np.uint8)
    )
    return gather_strings(data, offs, rows)


class _RunPaths(_ShardPaths):
    """The file of each sample, as runs of samples of one file: run k is
    ``names[k]`` and holds samples ``starts[k] .. starts[k + 1] - 1``. The
    shard form of the C file source's table; nothing per sample, the run
    names one blob (not a list of str)."""

    def __init__(self, names: StringBlob, starts: np.ndarray) -> None:
        # _ShardPaths' fields, its lookup (a bisection) over the array.
        self._shards = names  # type: ignore[assignment]
        self._starts_array = np.asarray(starts, dtype=np.int64)
        self._starts = self._starts_array  # type: ignore[assignment]
        self._n = int(self._starts_array[-1])


def _table_of(sources: np.ndarray, names: StringBlob) -> Any:
    """The file of each sample for the C file source: runs of one file
    (``_RunPaths``) when they are few, else a name a sample (a blob), the
    one that costs less memory."""
    n = len(sources)
    cut = np.flatnonzero(sources[1:] != sources[:-1]) + 1
    starts = np.concatenate([[0], cut, [n]]).astype(np.int64)
    run_src = sources[starts[:-1]] if n else np.zeros(0, np.int32)
    sizes = names.offsets[1:] - names.offsets[:-1]
    as_runs = len(run_src) * 16 + int(sizes[run_src].sum())
    per_sample = n * 8 + int(sizes[sources].sum()) if n else 0
    prefix = _common_dir(names)
    skip = len(os.fsencode(prefix))
    if as_runs <= per_sample or n == 0:
        ids = run_src.astype(np.int64)
        blob, ends = gather_strings(names.blob, names.offsets, ids, skip)
        return _RunPaths(StringBlob(blob, ends, prefix), starts)
    blob, ends = gather_strings(
        names.blob, names.offsets, sources.astype(np.int64), skip
    )
    return StringBlob(blob, ends, prefix)


def _common_dir(names: StringBlob) -> str:
    """The directory (with its slash) every name starts with, or ""."""
    if len(names) == 0:
        return ""
    first = names[0]
    cut = first.rfind("/") + 1
    heads = names.heads(cut) if cut else None
    while cut:
        want = np.frombuffer(os.fsencode(first[:cut]), np.uint8)
        if heads is not None and (heads[:, : len(want)] == want).all():
            return first[:cut]
        cut = first.rfind("/", 0, cut - 1) + 1
    return ""


def _targets_of(table: Any, column: str, name: str) -> _targets.Targets:
    """A column as targets (:mod:`.targets`): int64 classes (ClassLabel,
    any integer), floats, bools, rows (a list column whose lists have one
    length), strings or other objects as they are."""
    import pyarrow as pa

    values = table.column(column)
    t = values.type
    what = f"{name}: column {column!r}"
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
    ):
        values = values.combine_chunks()
        if values.null_count:
            nulls = values.is_null().to_numpy(zero_copy_only=False)
            raise ValueError(
                f"{what}: row {int(np.argmax(nulls))} is null, not a target"
            )
        flat = values.flatten()
        if flat.null_count:
            inner = int(np.argmax(flat.is_null().to_numpy(zero_copy_only=False)))
            row = int(np.searchsorted(values.offsets.to_numpy(), inner, "right")) - 1
            raise ValueError(f"{what}: row {row} holds a null, not a number")
        if pa.types.is_fixed_size_list(t):
            width = t.list_size
        else:
            sizes = np.diff(np.asarray(values.offsets.to_numpy(), dtype=np.int64))
            width = int(sizes[0]) if len(sizes) else 0
            if len(sizes) and (sizes != width).any():
                raise ValueError(
                    f"{what}: lists of {width} and of "
                    f"{int(sizes[np.argmax(sizes != width)])} values: every "
                    "target must have the same shape"
                )
        rows = _targets._from_arrow(flat, what)
        return rows.reshape(len(values), width)
    return _targets.as_targets(values, table.num_rows, what)


class _ColumnFields:
    """A dataset's other columns, carried beside the image and target as
    a tar shard's fields are (the protocol of
    :class:`~.fields.FieldTable` the loader and the C pipeline read): the
    C source reads the image alone (``image_at`` 0, ``image_len`` its
    length, no refusal, nothing checked), and :meth:`batch` takes the
    columns' values from the Arrow table, a batch at a time. With the
    owner's ``as_dict``, a batch and each sample handed to a collate_fn
    (:meth:`item`) are dicts keyed by the image's key and the columns'
    names."""

    image = 0

    def __init__(self, owner: "_ColumnDataset", lengths: np.ndarray) -> None:
        self._owner = owner
        self.names = ("image",) + (
            ((owner.target,) if owner.target is not None else ()) + owner.fields
        )
        # The keys of a dict item (as_dict): the image's, then the columns'.
        self.keys = ((owner.as_dict,) + self.names[1:]) if owner.as_dict else None
        # calloc'd zeros: no page touched until the C side copies them.
        self.image_at = np.zeros(len(lengths), dtype=np.int64)
        self.image_len = lengths
        self.refusals: list[str] = []

    @staticmethod
    def checks() -> list:
        return []

    @staticmethod
    def check_arrays() -> list:
        """:meth:`checks` as per-sample arrays: none either."""
        return []

    @staticmethod
    def max_int_digits() -> int:
        return 0

    def value(self, f: int, i: int, data: bytes, describe: Callable) -> Any:
        """Field ``f`` (a position of ``names``, not the image's) of
        sample ``i``, as indexing the dataset gives it."""
        return self._owner._extras(f - 1, [i])[0]

    def item(self, values: Iterable[Any]) -> Any:
        """A sample as indexing gives it, from its values in the order of
        ``names``: their tuple, or with ``as_dict`` their dict."""
        if self.keys is None:
            return tuple(values)
        return dict(zip(self.keys, values))

    def batch(self, images: Any, ids: Sequence[int], _bytes: Any, _: Any) -> Any:
        """The batch in the order of ``names``: the images, the targets
        (as without fields), each column's values batched as torch's
        ``default_collate`` batches them (the C side's field bytes, and
        the describing function, are not needed); with ``as_dict``, the
        dict ``default_collate`` makes of the dict items."""
        from torch.utils.data import default_collate

        owner, ids = self._owner, list(ids)
        out: list[Any] = [images]
        for k in range(len(self.names) - 1):
            if k == 0 and owner.target is not None:
                tt = owner.target_transform
                out.append(_targets.batch(owner.targets, ids, tt))
            else:
                out.append(default_collate(owner._extras(k, ids)))
        return self.item(out)


class _ColumnDataset(ImageDataset):
    """What a dataset of table rows shares (HFDataset, Parquet): an image
    column read by the C source at ``offsets``/``lengths`` (a length < 0:
    the whole file ``paths[i]``), a ``target`` column or None, ``fields``
    carried beside (:class:`_ColumnFields`, ``as_dict``). A subclass sets
    those and gives :meth:`_sample` and :meth:`_column_values`."""

    target: Optional[str]
    fields: tuple[str, ...]
    as_dict: Optional[str]
    offsets: np.ndarray
    lengths: np.ndarray
    _field_table: Optional["_ColumnFields"] = None

    def __len__(self) -> int:
        return len(self.lengths)

    def _index(self, index: int) -> int:
        n = len(self)
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for {n} samples")
        return i

    def _column_values(self, column: str, ids: Sequence[int]) -> list:
        """The values of ``column`` at samples ``ids``, as Arrow gives
        them to Python."""
        raise NotImplementedError

    def _carry_fields(self) -> None:
        """Set ``_field_table``; a path row's file is measured now, since
        the C side places the image by its length."""
        lengths = self.lengths
        if (lengths < 0).any():
            lengths = lengths.copy()
            for i in np.flatnonzero(lengths < 0).tolist():
                try:
                    lengths[i] = os.stat(self.paths[i]).st_size
                except OSError:
                    lengths[i] = 0  # its read fails, naming the file
            self.lengths = lengths
        self._field_table = _ColumnFields(self, self.lengths)

    def _check_files(self) -> None:
        """ValueError naming a file the C source would misread (changed
        since this was made)."""
        raise NotImplementedError

    def ringloader_sources(self) -> Sources:
        """The files (and files of path rows) as runs of samples, with
        each sample's byte range; with ``fields``, the columns carried
        beside (see :class:`_ColumnFields`)."""
        self._check_files()
        return Sources(
            paths=self.paths,
            targets=self.targets,
            offsets=self.offsets,
            lengths=self.lengths,
            fields=self._field_table,
        )

    def _repr_tail(self, fields: str) -> str:
        """The end of the repr: the fields (called ``fields``) and as_dict."""
        return (f", {fields}={self.fields!r}" if self.fields else "") + (
            f", as_dict={self.as_dict!r})" if self.as_dict else ")"
        )

    def _extras(self, k: int, ids: Sequence[int]) -> list:
        """The k-th value beside the image of the samples ``ids``: the
        target (``target_transform`` applied) when there is one, then
        each of ``fields``' columns, as Arrow gives them to Python."""
        if self.target is not None:
            if k == 0:
                tt = self.target_transform or (lambda t: t)
                return [tt(_targets.item(self.targets, i)) for i in ids]
            k -= 1
        return self._column_values(self.fields[k], ids)

    def __getitem__(self, index: int) -> Any:
        """(image, target), or with ``fields`` (image, target, *values)
        (no target without a target column), or with ``as_dict`` the dict
        of those: the full image as a uint8 CHW tensor, or what
        ``transform`` makes of the RGB PIL image."""
        where, data, target = self._sample(int(index))
        image, target = decode_item(
            where, data, target, self.transform, self.target_transform
        )
        if self._field_table is None:
            return image, target
        i = self._index(index)
        extras = len(self.fields) + (self.target is not None)
        values = (image,) + tuple(self._extras(k, [i])[0] for k in range(extras))
        return self._field_table.item(values)


def _check_image_type(
    t: Any, column: str, where: str = "", reader: str = "HFDataset"
) -> None:
    """TypeError for an image column that holds no encoded bytes (``where``:
    the file, with its colon, that says so; ``reader``: who reads it)."""
    import pyarrow as pa

    def binary(x: Any) -> bool:
        return pa.types.is_binary(x) or pa.types.is_large_binary(x)

    if binary(t):
        return
    if pa.types.is_struct(t) and t.get_field_index("bytes") >= 0:
        if binary(t.field("bytes").type):
            return
    raise TypeError(
        f"{where}column {column!r} holds {t}, not images: {reader} reads an Image "
        "feature (struct<bytes: binary, path: string>) or a binary column of "
        "encoded images (name it with image=...)"
    )
