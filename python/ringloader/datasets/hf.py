"""A Hugging Face ``datasets.Dataset`` read in place: the encoded image
bytes straight out of the dataset's memory-mapped Arrow files.

A dataset loaded with ``load_dataset`` or ``load_from_disk`` keeps its
rows in Arrow IPC stream files (``dataset.cache_files``), uncompressed and
memory-mapped; an ``Image`` column is stored as ``struct<bytes: binary,
path: string>``. The bytes of row r are a slice of the ``bytes`` child's
data buffer, at the position its offsets buffer gives, and that buffer
lies in the file's memory map: its address less the map's start, plus the
map's offset in the file (the kernel's ``/proc/self/maps`` says which file
each map is of), is its place in the file. So each row's (file, offset,
length) comes from the offsets buffers with numpy, a chunk at a time, and
the table goes to the C file source in the form it reads tar shards in:
the files with each one's first sample (``starts``, runs of samples of one
file) and int64 ``offsets``/``lengths``. io_uring then reads the image
bytes from the Arrow files directly; nothing is kept per row but numpy
arrays (16 bytes a row, and the targets).

Working from the buffers the dataset has mapped, rather than from the file
list, follows whatever the dataset's table is: several files, a slice
(``select`` of a range), columns renamed or removed. An indices mapping
(``shuffle``, ``select``, ``filter``, ``train_test_split``) is applied by
gathering the arrays; rows of one file that stay neighbours stay one run.
"""

from __future__ import annotations

import bisect
import os
import sys
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

from . import targets as _targets
from . import timmdata
from .base import read_file
from .cache import StringBlob, concat_strings
from .columns import (
    _check_image_type,
    _ColumnDataset,
    _ColumnFields,
    _image_chunk,
    _table_of,
    _take_strings,
    _targets_of,
)

__all__ = ["HFDataset", "hf_hint"]


def _datasets_module() -> Any:
    """The ``datasets`` package when it is imported (a Hugging Face dataset
    cannot exist without it), else None: nothing here imports it."""
    return sys.modules.get("datasets")


def _is_hf(dataset: Any) -> bool:
    hf = _datasets_module()
    # A module of another kind may be named datasets: its classes, if any.
    kinds = ("Dataset", "DatasetDict", "IterableDataset")
    classes = tuple(getattr(hf, k, None) for k in kinds)
    return all(isinstance(c, type) for c in classes) and isinstance(dataset, classes)


def hf_hint(dataset: Any) -> Optional[str]:
    """Why ringloader.DataLoader does not read ``dataset`` itself when it is
    a Hugging Face dataset, naming the way it is read natively; None for
    any other dataset."""
    if not _is_hf(dataset):
        return None
    hf = _datasets_module()
    name = type(dataset).__name__
    if isinstance(dataset, hf.Dataset):
        images = [k for k, v in dataset.features.items() if isinstance(v, hf.Image)]
        if images:
            arg = "" if images[0] == "image" else f", image={images[0]!r}"
            if (dataset.format or {}).get("type") == "custom":
                return (
                    f"{name} is a Hugging Face dataset whose transform (set by "
                    "with_transform or set_transform) runs in Python row by "
                    f"row; to read its {images[0]!r} column natively, give "
                    "the image transform to ringloader.HFDataset over the "
                    f"dataset without it: ringloader.HFDataset(ds{arg}, "
                    "transform=..., as_dict='pixel_values'), whose items are "
                    "dicts of the image under that key and the label column"
                )
            return (
                f"{name} is a Hugging Face dataset, which torch's DataLoader "
                f"indexes row by row; to read its {images[0]!r} column "
                f"natively, wrap it: ringloader.HFDataset(ds{arg}, transform=...)"
            )
    if isinstance(dataset, hf.DatasetDict):
        return (
            f"{name} is a Hugging Face DatasetDict of splits {list(dataset)}: "
            "pick one, and to read its images natively wrap it: "
            f"ringloader.HFDataset(ds[{next(iter(dataset), 'train')!r}], transform=...)"
        )
    return (
        f"{name} is a Hugging Face dataset (read natively with "
        "ringloader.HFDataset(ds, transform=...) when it is not streamed and "
        "has an image column)"
    )


class _Maps:
    """The file-backed memory maps of this process (``/proc/self/maps``),
    to find which file, and where in it, an address lies."""

    def __init__(self) -> None:
        starts, ends, offsets, paths = [], [], [], []
        with open("/proc/self/maps", "rb") as f:
            for line in f:
                parts = line.rstrip(b"\n").split(None, 5)
                if len(parts) < 6 or not parts[5].startswith(b"/"):
                    continue
                lo, hi = parts[0].split(b"-")
                starts.append(int(lo, 16))
                ends.append(int(hi, 16))
                offsets.append(int(parts[2], 16))
                paths.append(os.fsdecode(parts[5]))
        order = sorted(range(len(starts)), key=starts.__getitem__)
        self.starts = [starts[k] for k in order]
        self.ends = [ends[k] for k in order]
        self.offsets = [offsets[k] for k in order]
        self.paths = [paths[k] for k in order]

    def find(self, address: int, size: int) -> Optional[tuple[str, int]]:
        """(file, offset in it) of ``size`` bytes at ``address``, when they
        lie in one file-backed map; else None."""
        k = bisect.bisect_right(self.starts, address) - 1
        if k < 0 or address + size > self.ends[k]:
            return None
        return self.paths[k], self.offsets[k] + address - self.starts[k]


def _in_memory(name: str, column: str, row: int) -> ValueError:
    return ValueError(
        f"{name}: row {row} of column {column!r} is held in memory, not in an "
        "Arrow file the loader can read (a dataset made with Dataset.from_dict "
        "or from_list, loaded with keep_in_memory=True, or mapped without a "
        "cache file). Save it once and load it back: ds.save_to_disk(folder); "
        "ds = datasets.load_from_disk(folder); then ringloader.HFDataset(ds, ...)"
    )


class _Images:
    """Where each row of an image column's bytes is: (source, offset,
    length) per row, int32/int64/int64, where a source is an Arrow file
    (``files``) or, for a row whose image is a path, that file
    (``paths``, after the Arrow files). A null image reads 0 bytes of a
    file (its sample then fails to decode) and is listed in ``nulls``."""

    def __init__(self, table: Any, column: str, name: str) -> None:

        maps = _Maps()
        n = table.num_rows
        self.source = np.zeros(n, dtype=np.int32)
        self.offsets = np.zeros(n, dtype=np.int64)
        self.lengths = np.zeros(n, dtype=np.int64)
        self.files: list[str] = []
        # Per file: one range of it whose bytes the dataset's map holds,
        # compared with the file's at open (the file a map names is the
        # one mapped).
        self.witness: list[tuple[int, bytes]] = []
        file_ids: dict[str, int] = {}
        path_rows: list[np.ndarray] = []
        path_blobs: list[tuple[np.ndarray, np.ndarray]] = []
        null_rows: list[np.ndarray] = []
        row = 0
        for chunk in table.column(column).chunks:
            m = len(chunk)
            data_buf, offs, has, path = _image_chunk(chunk)
            sel = slice(row, row + m)
            if has.any():
                lo, hi = int(offs[0]), int(offs[-1])
                where = None
                if data_buf is not None:
                    where = maps.find(data_buf.address + lo, hi - lo)
                if where is None:
                    raise _in_memory(name, column, row + int(np.argmax(has)))
                file, at = where
                if file.endswith(" (deleted)"):
                    raise ValueError(
                        f"{file[: -len(' (deleted)')]}: the Arrow file the dataset "
                        "mapped was deleted or replaced since it was loaded; "
                        "load the dataset again"
                    )
                f = file_ids.get(file)
                if f is None:
                    f = file_ids[file] = len(self.files)
                    self.files.append(file)
                    first = int(np.argmax(has))
                    a, b = int(offs[first]), int(offs[first + 1])
                    b = min(b, a + 64)
                    self.witness.append(
                        (at - lo + a, data_buf.slice(a, b - a).to_pybytes())
                    )
                self.source[sel] = f
                self.offsets[sel] = np.where(has, offs[:-1] - lo + at, 0)
                self.lengths[sel] = np.where(has, offs[1:] - offs[:-1], 0)
            if not has.all():
                miss = ~has
                if path is not None:
                    named = miss & np.asarray(
                        path.is_valid().to_numpy(zero_copy_only=False), dtype=bool
                    )
                    if named.any():
                        at = np.flatnonzero(named)
                        path_rows.append(at + row)
                        path_blobs.append(_take_strings(path, at))
                        miss &= ~named
                if miss.any():
                    null_rows.append(np.flatnonzero(miss) + row)
            row += m
        self.nulls = (
            np.concatenate(null_rows) if null_rows else np.zeros(0, np.int64)
        ).astype(np.int64)
        rows = np.concatenate(path_rows) if path_rows else np.zeros(0, np.int64)
        self.nfiles = len(self.files)
        if len(rows):
            # Each path row is a source of its own: the whole file.
            self.source[rows] = self.nfiles + np.arange(len(rows), dtype=np.int32)
            self.lengths[rows] = -1
        blob, ends = concat_strings(path_blobs)
        self.paths = StringBlob(blob, ends)
        if len(self.nulls):
            if self.nfiles == 0 and not len(rows):
                raise ValueError(
                    f"{name}: every row of column {column!r} is null: no image"
                )
            # 0 bytes of a file that is there: the sample fails to decode.
            self.source[self.nulls] = 0
            self.offsets[self.nulls] = 0
            self.lengths[self.nulls] = 0

    def names(self) -> StringBlob:
        """The name of every source: the Arrow files, then the path rows'
        files (UTF-8, as Arrow holds them)."""
        files = StringBlob.from_strings(self.files)
        blob, ends = concat_strings(
            [(files.blob, files.offsets), (self.paths.blob, self.paths.offsets)]
        )
        return StringBlob(blob, ends)


class HFDataset(_ColumnDataset):
    """A Hugging Face ``datasets.Dataset`` whose image column holds encoded
    images, for :class:`ringloader.Loader` and ``ringloader.DataLoader``:
    the image bytes are read by the C file source straight from the
    dataset's memory-mapped Arrow files, with no Python object per row.

    Args:
        dataset: one split (``load_dataset(...)["train"]``,
            ``load_from_disk(folder)``), not a ``DatasetDict``; its image
            column's bytes must lie in its Arrow files (a dataset loaded
            from the cache or from disk). A dataset held in memory
            (``Dataset.from_dict`` not saved, ``keep_in_memory=True``) is
            refused with a ValueError saying to ``save_to_disk`` it and
            ``load_from_disk`` it again. An indices mapping (``shuffle``,
            ``select``, ``filter``, ``train_test_split``) is followed.
        transform, target_transform: as torchvision's datasets take them
            (the transform gets an RGB PIL image); the loader uses
            ``transform`` when it is given none.
        image: the image column: an ``Image`` feature (``struct<bytes,
            path>``) or a binary column of encoded images. A row whose
            ``bytes`` is null and whose ``path`` is set reads that file
            (as ``imagefolder`` datasets store local files), relative
            paths from the working directory; a null image fails its
            sample as an undecodable file does.
        target: the target column (ClassLabel or integers: int64 classes;
            floats, bools; lists of one length: a row per sample;
            strings), or None: no target (labels are -1, as a TarShards
            without labels).
        fields: other columns to return beside the image and target: the
            loader then yields tuples ``(images, targets, *fields)``
            (``(images, *fields)`` without a target), each field batched
            as torch's ``default_collate`` batches its values (numbers
            into a tensor, strings a list), and indexing gives
            ``(image, target, *values)``.
        as_dict: the key of the image in dict items (``"pixel_values"``,
            as a ``with_transform`` function of a transformers example
            makes them): indexing gives ``{as_dict: image, <target
            column>: target, <each field>: value}``, a ``collate_fn`` gets
            those dicts, and without one the loader yields the dict
            ``default_collate`` makes of them (the images one tensor, the
            targets another, under the same keys). None: tuples.

    Rows of one Arrow file that are neighbours in the dataset's order are
    one run of the C source's table (a dataset without an indices mapping
    costs nothing per row beyond 16 bytes of offset and length and its
    targets); with an indices mapping that scatters the files (a shuffle),
    each sample names its file, a few dozen bytes a sample in one array
    (``dataset.flatten_indices()`` writes the rows in the mapped order:
    runs again).

    Each Arrow file's bytes are compared with what the dataset mapped when
    this is made, and each file's size and mtime are checked again when a
    loader takes the table and when a sample is indexed: a file replaced
    or changed since raises ValueError naming it rather than being
    misread. ``describe(i)`` names the Arrow file, the row of the
    dataset's Arrow table (``i`` itself without an indices mapping) and
    the byte range.
    """

    def __init__(
        self,
        dataset: Any,
        transform: Callable | None = None,
        image: str = "image",
        target: str | None = "label",
        target_transform: Callable | None = None,
        fields: Sequence[str] | None = None,
        as_dict: str | None = None,
    ) -> None:
        hf = _datasets_module()
        name = type(dataset).__name__
        if hf is None or not _is_hf(dataset):
            raise TypeError(
                f"HFDataset takes a Hugging Face datasets.Dataset, not a {name}"
            )
        if isinstance(dataset, hf.DatasetDict):
            raise TypeError(
                f"HFDataset takes one split, not a DatasetDict of "
                f"{list(dataset)}: pick one, HFDataset(ds[{next(iter(dataset), 'train')!r}], ...)"
            )
        if not isinstance(dataset, hf.Dataset):
            raise TypeError(
                f"HFDataset reads a dataset's Arrow files; a {name} (streaming) "
                "has none: load it without streaming=True"
            )
        if (dataset.format or {}).get("type") == "custom":
            raise ValueError(
                "the dataset has a transform set (set_transform or "
                "with_transform), which HFDataset does not run: give the "
                "image transform to HFDataset(ds, transform=...) over the "
                "dataset without it (ds.reset_format()); as_dict='pixel_values' "
                "makes its items dicts, as such a transform does"
            )
        if isinstance(fields, str):
            raise TypeError(f"fields is a sequence of column names, not {fields!r}")
        self.fields = tuple(fields or ())
        if as_dict is not None and not isinstance(as_dict, str):
            raise TypeError(f"as_dict is the image's key (a str), not {as_dict!r}")
        taken = [c for c in (target, *self.fields) if c is not None]
        if as_dict is not None and as_dict in taken:
            raise ValueError(
                f"as_dict={as_dict!r} is also the name of a column the items "
                "hold: give the image another key"
            )
        if as_dict is not None and len(set(taken)) != len(taken):
            raise ValueError(
                f"a column is named twice in target and fields {taken}: a "
                "dict item holds each key once"
            )
        self.as_dict = as_dict
        columns = list(dataset.column_names)
        for what, col in [("image", image), ("target", target)] + [
            ("field", f) for f in self.fields
        ]:
            if col is not None and col not in columns:
                raise ValueError(
                    f"{name} has no {what} column {col!r}; its columns are {columns}"
                )
        self.dataset = dataset
        self.image, self.target = image, target
        self.transform, self.target_transform = transform, target_transform
        feature = dataset.features[image]
        mode = getattr(feature, "mode", None)
        if isinstance(feature, hf.Image) and mode not in (None, "RGB"):
            raise ValueError(
                f"column {image!r} is Image(mode={mode!r}); ringloader decodes "
                "to RGB: cast it to Image() first (ds.cast_column)"
            )
        table = dataset.data.table
        _check_image_type(table.schema.field(image).type, image)
        images = _Images(table, image, name)
        rows = None
        if dataset._indices is not None:
            mapped = dataset._indices.column(0)
            rows = np.asarray(mapped.to_numpy(), dtype=np.int64)
        take = (lambda a: a[rows]) if rows is not None else (lambda a: a)
        self._rows = rows
        self._files = images.files
        self._nfiles = images.nfiles
        self._names = images.names()
        self._source = take(images.source)
        self.offsets = take(images.offsets)
        self.lengths = take(images.lengths)
        self._nulls = images.nulls
        self._stats = [_stat_of(f) for f in self._files]
        for f, (at, want) in zip(self._files, images.witness):
            _check_witness(f, at, want)
        if target is None:
            self.targets: _targets.Targets = np.full(len(self.lengths), -1, np.int64)
        else:
            self.targets = take(_targets_of(table, target, name))
        self.paths = _table_of(self._source, self._names)
        self._field_table: Optional[_ColumnFields] = None
        if self.fields or as_dict is not None:
            self._carry_fields()

    def _row(self, index: int) -> int:
        """The row of the dataset's Arrow table holding sample ``index``."""
        return int(self._rows[index]) if self._rows is not None else int(index)

    def _check_files(self, which: Sequence[int] | None = None) -> None:
        """ValueError naming an Arrow file (of ``which``, else any) whose
        size or mtime changed since this was made (it would be misread)."""
        for k in range(len(self._files)) if which is None else which:
            if _stat_of(self._files[k]) != self._stats[k]:
                raise ValueError(_changed(self._files[k]))

    def describe(self, index: int) -> str:
        """Where sample ``index`` is, for messages: its Arrow file, its row
        and byte range (or the file its row names)."""
        i = self._index(index)
        r = self._row(i)
        src = int(self._source[i])
        path = self._names[src]
        k = int(np.searchsorted(self._nulls, r))
        if k < len(self._nulls) and int(self._nulls[k]) == r:
            return f"{path}: table row {r}, whose {self.image!r} is null (no image)"
        if src >= self._nfiles:
            return f"{path} (the {self.image!r} path of table row {r})"
        off, size = int(self.offsets[i]), int(self.lengths[i])
        return f"{path}: table row {r} (bytes {off}..{off + size})"

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        i = self._index(index)
        where = self.describe(i)
        src = int(self._source[i])
        path = self._names[src]
        if src >= self._nfiles:
            data = read_file(path)
        else:
            self._check_files([src])
            off, size = int(self.offsets[i]), int(self.lengths[i])
            with open(path, "rb") as f:
                data = os.pread(f.fileno(), size, off)
            if len(data) != size:
                raise OSError(f"{where}: the file is cut short")
        return where, data, _targets.item(self.targets, i)

    def _column_values(self, column: str, ids: Sequence[int]) -> list:
        rows = [self._row(i) for i in ids]
        return self.dataset.data.table.column(column).take(rows).to_pylist()

    def __repr__(self) -> str:
        return (
            f"ringloader.HFDataset({len(self)} rows in {self._nfiles} Arrow "
            f"file(s), image={self.image!r}, target={self.target!r}"
            + self._repr_tail("fields")
        )


def _stat_of(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _changed(path: str) -> str:
    return (
        f"{path}: the Arrow file changed (size or mtime) since the dataset was "
        "wrapped; load the dataset again and make a new HFDataset"
    )


def _check_witness(path: str, at: int, want: bytes) -> None:
    """ValueError when ``path`` does not hold, at ``at``, the bytes the
    dataset's map of it holds: the file was replaced since it was loaded."""
    try:
        with open(path, "rb") as f:
            got = os.pread(f.fileno(), len(want), at)
    except OSError as e:
        raise ValueError(
            f"{path}: the dataset's Arrow file cannot be read ({e})"
        ) from None
    if got != want:
        raise ValueError(
            f"{path}: the file differs from the one the dataset mapped (it was "
            "replaced since the dataset was loaded); load the dataset again"
        )


def _from_timm_reader(reader: Any) -> HFDataset:
    """timm's ``ReaderHfds`` (``create_dataset("hfds/...")``) as an
    HFDataset over the dataset it loaded, with its image and label
    columns, each label as the reader's ``_get_target`` makes it (its
    class_map applied). ValueError naming what it cannot read: targets
    made of several columns, a label path into a nested column, labels a
    class_map maps to other than class indices."""
    if getattr(reader, "target_keys", None):
        raise ValueError(
            f"its targets are made of the columns {list(reader.target_keys)}"
        )
    try:
        ds = HFDataset(reader.dataset, image=reader.image_key, target=reader.label_key)
    except TypeError as e:
        raise ValueError(str(e)) from None
    if getattr(reader, "remap_class", False):
        t = ds.targets
        if not (isinstance(t, np.ndarray) and t.ndim == 1 and t.dtype == np.int64):
            raise ValueError("its class_map remaps labels that are not class indices")
        labels, where = np.unique(t, return_inverse=True)
        mapped = []
        for label in labels.tolist():
            try:
                mapped.append(reader._get_target({reader.label_key: label}))
            except (KeyError, IndexError):
                raise ValueError(
                    f"its class_map has no class for label {label}"
                ) from None
        if not all(isinstance(m, int) for m in mapped):
            raise ValueError("its class_map maps labels to other than class indices")
        ds.targets = np.asarray(mapped, dtype=np.int64)[where]
    return ds


timmdata.register_reader("ReaderHfds", _from_timm_reader)
