"""Parquet files, as the Hugging Face Hub stores data sets, read by the C
file source.

A Parquet file's pages are compressed (snappy, zstd, gzip) and encoded, so
an image's bytes have no fixed place in it that a read could reach. Each
file's image column is therefore decompressed once, a row group at a time
with pyarrow (which releases the GIL while it works), and its bytes are
written back to back into an *extract* file in ringloader's cache
directory, beside an ``.npz`` index (each row's offset, the rows that name
a file instead, the null rows, the row groups' first rows). From then on
the loader reads the extract as HFDataset reads an Arrow file: a byte range
per sample, io_uring, no Python object per row. Only one row group is
resident while a file is extracted; the extract is made once per file (its
path, size, mtime (a remote file's ETag) and column name its cache entry)
and reused by later runs and by every rank. A remote file is read by range
GETs (:mod:`.parquet_remote`).

Since the extract is read in place, every order the loader knows works on
it: ``shuffle=True`` is an exact global shuffle, ``shuffle="stream"``
shuffles the row groups and the rows within a bounded window
(:mod:`.._stream_order`; each row group is one of its shards), DDP
sharding and resuming are the loader's own. The target and ``fields``
columns (small: numbers, captions) are read into memory with pyarrow.
"""

from __future__ import annotations

import fcntl
import glob as _glob
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Optional, Union

import numpy as np

from . import targets as _targets
from .base import PathLike, read_file
from .cache import (
    StringBlob,
    concat_strings,
    atomic_file,
    cache_name,
    default_cache_dir,
    load_npz,
    save_npz,
)
from .parquet_remote import RemoteFile, expand_url
from .progress import bar as progress_bar
from .remote import Client
from .urls import is_url, local_name, redact
from .columns import (
    _check_image_type,
    _ColumnDataset,
    _image_chunk,
    _table_of,
    _take_strings,
    _targets_of,
)

__all__ = ["Parquet"]

# Bumped when the extract's layout changes: old entries are then unused.
_FORMAT = 1
# Row kinds in an extract's index.
_BYTES, _PATH, _NULL = 0, 1, 2
# Files extracted at once.
_WORKERS = 4


def _expand(files: Union[PathLike, Sequence[PathLike]], client: Client) -> list[str]:
    """The Parquet files named by a path, a glob, a folder (its ``*.parquet``
    files, recursively), a URL (an ``s3://`` glob) or a list of those, in
    order."""
    items = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    if not items:
        raise ValueError("Parquet needs at least one file")
    out: list[str] = []
    for item in items:
        path = os.path.expanduser(os.fspath(item))
        if is_url(path):
            out += expand_url(path, client)
        elif os.path.isdir(path):
            found = sorted(
                _glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True)
            )
            if not found:
                raise FileNotFoundError(f"{path}: a folder with no .parquet file")
            out += found
        elif _glob.has_magic(path):
            found = sorted(_glob.glob(path, recursive=True))
            if not found:
                raise FileNotFoundError(f"{path}: no file matches this pattern")
            out += found
        elif not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such Parquet file")
        else:
            out.append(os.path.abspath(path))
    return out


def _stamp(path: str, client: Client) -> str:
    """What changes when the file does: a local file's size and mtime, a
    remote object's size and ETag."""
    if is_url(path):
        size, validator = client.head(path)
        return f"{size}\0{validator}"
    st = os.stat(path)
    return f"{st.st_size}\0{st.st_mtime_ns}"


def _read(path: str, what: str, read: Callable[[], Any], remote: Any) -> Any:
    """``read()``, a pyarrow read of ``what`` of the file ``path``: a
    failed fetch of a remote file (``remote``, its RemoteFile, None for a
    local one) is raised as the client's OSError naming the object and
    ``what``; anything else pyarrow raises is a ValueError naming them
    (the file is damaged)."""
    import pyarrow as pa

    try:
        return read()
    except (pa.ArrowException, OSError) as e:
        failure = getattr(remote, "failure", None)
        if failure is not None:
            remote.failure = None
            raise type(failure)(
                f"{redact(path)}: {what} could not be read ({failure}); "
                "nothing was extracted: try again"
            ) from None
        raise ValueError(
            f"{redact(path)}: {what} cannot be read ({e}); the file is damaged "
            "or not Parquet: download it again"
        ) from None


def _open(path: str, client: Client) -> Any:
    """pyarrow's ParquetFile of ``path`` (a remote one read by range GETs,
    its RemoteFile as ``ringloader_remote``); errors as :func:`_read`'s."""
    import pyarrow.parquet as pq

    remote = RemoteFile(client, path) if is_url(path) else None

    def footer() -> Any:
        return pq.ParquetFile(remote or path, page_checksum_verification=True)

    pf = _read(path, "its footer", footer, remote)
    pf.ringloader_remote = remote
    return pf


def _check_columns(path: str, schema: Any, image: str, others: Sequence[str]) -> None:
    """ValueError for a missing column (naming those there are), TypeError
    for an image column that holds no encoded bytes."""

    names = list(schema.names)
    for what, col in [("image", image)] + [("target or field", c) for c in others]:
        if col not in names:
            raise ValueError(
                f"{redact(path)} has no {what} column {col!r}; its columns are {names}"
            )
    _check_image_type(schema.field(image).type, image, f"{redact(path)}: ", "Parquet")


def _miscounted(path: str, n: int) -> ValueError:
    return ValueError(
        f"{redact(path)}: its row groups do not hold the {n} rows its footer "
        "says; the file is damaged: download it again"
    )


class _Extract:
    """One Parquet file's image column as an extract (see the module):
    ``offsets`` (int64, rows + 1) into ``bin``, ``kinds`` (int8 a row:
    bytes, a path, null), the path rows' names (``paths``, a StringBlob in
    the order of those rows) and ``groups`` (the row groups' first rows,
    then the row count)."""

    def __init__(
        self,
        path: str,
        image: str,
        cache_dir: Optional[PathLike],
        client: Client,
        step: Callable[[int], None],
    ) -> None:
        ident = f"{path}\0{_stamp(path, client)}\0{image}\0{_FORMAT}"
        folder = default_cache_dir(cache_dir)
        os.makedirs(folder, exist_ok=True)
        index = os.path.join(folder, cache_name("parquet", ident, local_name(path)))
        self.path, self.index, self.client, self._step = path, index, client, step
        self.bin = index[: -len(".npz")] + ".bin"
        arrays, made = load_npz(index), False
        if arrays is None or not self._fits(arrays):
            # One process (or thread) extracts (the ranks of a job start
            # together); the others wait for it, then read its extract.
            with open(index[: -len(".npz")] + ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                arrays = load_npz(index)
                if arrays is None or not self._fits(arrays):
                    arrays, made = self._make(image), True
        if not made:  # _make counts its row groups as it goes
            step(len(arrays["groups"]) - 1)
        self.offsets = arrays["offsets"]
        self.kinds = arrays["kinds"]
        self.groups = arrays["groups"]
        self.paths = StringBlob(arrays["path_blob"], arrays["path_offsets"])

    def _fits(self, arrays: dict) -> bool:
        try:
            return os.path.getsize(self.bin) == int(arrays["offsets"][-1])
        except (OSError, KeyError, IndexError):
            return False

    def _make(self, image: str) -> dict:
        """Write the extract and its index, one row group resident at a
        time; nothing is left behind on failure."""
        pf = _open(self.path, self.client)
        _check_columns(self.path, pf.schema_arrow, image, ())
        n = pf.metadata.num_rows
        offsets = np.zeros(n + 1, dtype=np.int64)
        kinds = np.zeros(n, dtype=np.int8)
        groups = [0]
        blobs: list[tuple[np.ndarray, np.ndarray]] = []
        row, at = 0, 0
        with atomic_file(self.bin) as out:
            for g in range(pf.num_row_groups):
                table = _read(
                    self.path,
                    f"row group {g}",
                    partial(pf.read_row_group, g, columns=[image]),
                    pf.ringloader_remote,
                )
                for chunk in table.column(0).chunks:
                    m = len(chunk)
                    if row + m > n:
                        raise _miscounted(self.path, n)
                    data_buf, offs, has, names = _image_chunk(chunk)
                    lo, hi = int(offs[0]), int(offs[-1])
                    if hi > lo:
                        out.write(memoryview(data_buf)[lo:hi])
                    offsets[row + 1 : row + m + 1] = offs[1:] - lo + at
                    at += hi - lo
                    kinds[row : row + m] = np.where(has, _BYTES, _NULL)
                    if names is not None and not has.all():
                        valid = names.is_valid().to_numpy(zero_copy_only=False)
                        named = ~has & np.asarray(valid, dtype=bool)
                        where = np.flatnonzero(named)
                        if len(where):
                            kinds[row + where] = _PATH
                            blobs.append(_take_strings(names, where))
                    row += m
                groups.append(row)
                self._step(1)
            if row != n:
                raise _miscounted(self.path, n)
        blob, ends = concat_strings(blobs)
        arrays = {
            "offsets": offsets,
            "kinds": kinds,
            "groups": np.asarray(groups, dtype=np.int64),
            "path_blob": blob,
            "path_offsets": ends,
        }
        save_npz(self.index, arrays)
        return arrays


class Parquet(_ColumnDataset):
    """Parquet files whose image column holds encoded images (as the Hugging
    Face Hub stores data sets), for :class:`ringloader.Loader` and
    ``ringloader.DataLoader``.

    Args:
        files: a Parquet file, a glob (``"data/train-*.parquet"``), a folder
            (its ``*.parquet`` files), an ``http(s)://`` or ``s3://`` URL
            (an ``s3://`` glob) or a list of those; their rows in that
            order.
        transform, target_transform: as torchvision's datasets take them
            (the transform gets an RGB PIL image); the loader uses
            ``transform`` when it is given none.
        image: the image column: an ``Image`` feature (``struct<bytes:
            binary, path: string>``) or a binary column of encoded images.
            A row whose bytes are null and whose path is set reads that
            file (relative paths from the working directory); a null image
            fails its sample as an undecodable file does.
        target: the target column (integers or ClassLabel: int64 classes;
            floats, bools; lists of one length: a row per sample; strings),
            or None: labels are -1.
        columns: other columns to return beside the image and target: the
            loader yields ``(images, targets, *columns)`` (``(images,
            *columns)`` without a target), each batched as torch's
            ``default_collate`` does (numbers into a tensor, strings a list).
        as_dict: the image's key in dict items (``"pixel_values"``), as
            :class:`ringloader.HFDataset` takes it; None: tuples.
        cache_dir: where the extracts go (default: ringloader's cache
            directory, ``$RINGLOADER_CACHE_DIR``).
        retries, timeout, s3_client: for files given as ``http(s)://`` or
            ``s3://`` URLs (an ``s3://`` glob is listed), read by range
            GETs while they are extracted, as TarShards takes them.
        progress: a bar over the row groups while files are extracted
            (after 2 s, on the first rank, where tqdm is installed).

    The first use of a file decompresses its image column once, one row
    group at a time, into an extract in the cache directory (about the
    column's size on disk: encoded images hardly compress); later uses,
    and the other ranks, read that. ``ringloader_shards()`` gives the row
    groups, so ``shuffle="stream"`` reads them in a shuffled order.
    ``describe(i)`` names the file, the row group and the row.
    """

    def __init__(
        self,
        files: Union[PathLike, Sequence[PathLike]],
        transform: Optional[Callable] = None,
        image: str = "image",
        target: Optional[str] = "label",
        columns: Optional[Sequence[str]] = None,
        target_transform: Optional[Callable] = None,
        as_dict: Optional[str] = None,
        cache_dir: Optional[PathLike] = None,
        retries: int = 5,
        timeout: float = 30.0,
        s3_client: Any = None,
        progress: bool = True,
    ) -> None:
        import pyarrow as pa

        if isinstance(columns, str):
            raise TypeError(f"columns is a sequence of column names, not {columns!r}")
        if as_dict is not None and not isinstance(as_dict, str):
            raise TypeError(f"as_dict is the image's key (a str), not {as_dict!r}")
        self.client = Client(retries=retries, timeout=timeout, s3_client=s3_client)
        self.files = _expand(files, self.client)
        self.image, self.target = image, target
        self.fields = tuple(columns or ())
        self.as_dict = as_dict
        self.transform, self.target_transform = transform, target_transform
        others = [c for c in (target, *self.fields) if c is not None]
        if as_dict is not None and as_dict in others:
            raise ValueError(
                f"as_dict={as_dict!r} is also the name of a column the items "
                "hold: give the image another key"
            )
        if len(set(others)) != len(others):
            raise ValueError(f"a column is named twice in target and columns {others}")
        # The target and columns first (small), then the image column.
        tables, groups = [], 0
        for path in self.files:
            pf = _open(path, self.client)
            groups += pf.num_row_groups
            _check_columns(path, pf.schema_arrow, image, others)
            if others:
                tables.append(
                    _read(
                        path,
                        f"the columns {others}",
                        partial(pf.read, columns=others),
                        pf.ringloader_remote,
                    )
                )
        self._table: Any = pa.concat_tables(tables) if others else None
        # Files are extracted side by side (pyarrow decompresses without
        # the GIL): a row group of each in memory at a time.
        bar = self._progress_bar(groups) if progress else None
        step = bar.update if bar is not None else (lambda k: None)
        try:
            with ThreadPoolExecutor(min(_WORKERS, len(self.files))) as pool:
                extracts = list(
                    pool.map(
                        lambda p: _Extract(p, image, cache_dir, self.client, step),
                        self.files,
                    )
                )
        finally:
            if bar is not None:
                bar.close()
        self._extracts = extracts
        self._first = np.cumsum([0] + [len(e.kinds) for e in extracts])
        n = int(self._first[-1])
        if n == 0:
            raise ValueError(f"{[redact(f) for f in self.files]}: no rows in the files")
        self._kinds = np.concatenate([e.kinds for e in extracts]) if n else np.zeros(0)
        self._groups = np.concatenate(
            [e.groups[:-1] + f for e, f in zip(extracts, self._first)] + [[n]]
        ).astype(np.int64)
        # Sources: each extract, then each path row's file.
        source = np.zeros(n, dtype=np.int32)
        self.offsets = np.zeros(n, dtype=np.int64)
        self.lengths = np.zeros(n, dtype=np.int64)
        names = StringBlob.from_strings([e.bin for e in extracts])
        blobs = [(names.blob, names.offsets)]
        next_source = len(extracts)
        for k, (e, f) in enumerate(zip(extracts, self._first)):
            sel = slice(int(f), int(f) + len(e.kinds))
            source[sel] = k
            self.offsets[sel] = e.offsets[:-1]
            self.lengths[sel] = np.where(
                e.kinds == _BYTES, e.offsets[1:] - e.offsets[:-1], 0
            )
            rows = np.flatnonzero(e.kinds == _PATH)
            if len(rows):
                source[rows + f] = next_source + np.arange(len(rows), dtype=np.int32)
                self.offsets[rows + f] = 0
                self.lengths[rows + f] = -1
                next_source += len(rows)
                blobs.append((e.paths.blob, e.paths.offsets))
        self._source = source
        blob, ends = concat_strings(blobs)
        self._names = StringBlob(blob, ends)
        self.paths = _table_of(source, self._names)
        if target is None:
            self.targets: _targets.Targets = np.full(n, -1, np.int64)
        else:
            self.targets = _targets_of(self._table, target, self.files[0])
        if self.fields or as_dict is not None:
            self._carry_fields()

    def describe(self, index: int) -> str:
        """Sample ``index`` as the files know it: its Parquet file, row
        group and row (and the file a path row names)."""
        i = self._index(index)
        k = int(np.searchsorted(self._first, i, side="right")) - 1
        g = int(np.searchsorted(self._groups, i, side="right")) - 1
        row = i - int(self._first[k])
        where = (
            f"{redact(self.files[k])}: row group {g - self._group_base(k)}, row "
            f"{i - int(self._groups[g])} (file row {row})"
        )
        kind = int(self._kinds[i])
        if kind == _NULL:
            return f"{where}, whose {self.image!r} is null (no image)"
        if kind == _PATH:
            return f"{where}, the file {self._names[int(self._source[i])]}"
        return where

    def _group_base(self, k: int) -> int:
        """The global number of file k's first row group."""
        return int(np.searchsorted(self._groups, self._first[k], side="left"))

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        i = self._index(index)
        where = self.describe(i)
        name = self._names[int(self._source[i])]
        if int(self._kinds[i]) == _PATH:
            data = read_file(name)
        else:
            off, size = int(self.offsets[i]), int(self.lengths[i])
            with open(name, "rb") as f:
                data = os.pread(f.fileno(), size, off)
        return where, data, _targets.item(self.targets, i)

    def _column_values(self, column: str, ids: Sequence[int]) -> list:
        return self._table.column(column).take([int(i) for i in ids]).to_pylist()

    def ringloader_shards(self) -> np.ndarray:
        """The first row of each row group, then the row count (int64):
        what ``shuffle="stream"`` reads group by group."""
        return self._groups

    @staticmethod
    def _progress_bar(groups: int) -> Any:
        return progress_bar(
            groups,
            unit="row group",
            desc="extracting Parquet images",
            leave=False,
            delay=2.0,
        )

    def _check_files(self) -> None:
        for e in self._extracts:
            if not e._fits({"offsets": e.offsets}):
                raise ValueError(
                    f"{e.bin}: the extract of {redact(e.path)} is gone or changed; "
                    "make the Parquet dataset again"
                )

    def __repr__(self) -> str:
        return (
            f"ringloader.Parquet({len(self)} rows in {len(self.files)} file(s), "
            f"{len(self._groups) - 1} row groups, image={self.image!r}, "
            f"target={self.target!r}" + self._repr_tail("columns")
        )
