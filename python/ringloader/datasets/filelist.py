"""A dataset given as a list of image files and their labels, or a CSV:
local paths, or URLs (http, https, s3) of image objects."""

from __future__ import annotations

import csv
import os
import posixpath
from collections.abc import Iterable
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from .. import _core
from . import base as _base
from .base import ImageDataset, PairView, PathLike, Sources
from .cache import StringBlob, give_back_freed
from .remote import Client
from .targets import as_targets, item
from .urls import is_url, redact

__all__ = ["FileList"]


class FileList(ImageDataset):
    """Image files and their labels, for :class:`ringloader.Loader`.

    Args:
        paths: image file paths (str or path-like), or URLs of image
            objects (``http://``, ``https://``, ``s3://``), in sample
            order; all local or all remote.
        labels: one target per path: integers (class indices), or targets
            of any kind as an array with a row per path (floats, multi-hot
            or soft-label rows, bools) or a sequence of per-path values
            (tuples included), batched as torch's ``default_collate``
            batches them (:mod:`ringloader.datasets.targets`).
        transform, target_transform: as ImageFolder's; the loader uses
            ``transform`` when it is given none.
        retries: remote files: attempts after the first for a failed
            request (5xx, 429, connection errors, timeouts).
        timeout: remote files: seconds without progress before an attempt
            is abandoned and retried.
        s3_client: a boto3 S3 client for ``s3://`` files; None: one made
            from the standard configuration (see :class:`TarShards`).
        progress: remote files: show a bar while presigning many S3 URLs
            (when tqdm is installed; on the first rank of a distributed
            job only).

    ``paths`` may be a list or tuple, a numpy array (of str, bytes or
    objects) or a pyarrow ``Array``/``ChunkedArray`` of strings, and
    ``labels`` a list, a numpy array or an Arrow array. Paths are kept as
    one compact blob (:class:`~.cache.StringBlob`: their common directory
    once, then each path's rest and an 8-byte offset; an Arrow column's
    own buffers, not copied), made with no Python loop per path, and
    labels as an array ``targets`` (int64 for integers; a tuple of arrays
    for tuple targets); ``samples`` gives (path, label) pairs on access.
    No Python object is kept per sample. A path holding a NUL byte, or a
    null in an Arrow array, is refused naming its row. Files are not
    checked here: a missing one raises OSError, with its path, in the
    batch that reads it.
    """

    def __init__(
        self,
        paths: Iterable[PathLike] | np.ndarray | Any,
        labels: Iterable[Any] | np.ndarray | Any,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        *,
        retries: int = 5,
        timeout: float = 30.0,
        s3_client: Any = None,
        progress: bool = True,
    ) -> None:
        self.paths = StringBlob.of_paths(paths, "FileList paths")
        url = _url_rows(self.paths)
        if url.any() and not url.all():
            raise ValueError(
                "local files and remote (http, https, s3) files cannot be "
                "mixed in one FileList; make two and concatenate them"
            )
        self.client: Client | None = None
        if len(self.paths) and url.all():
            self.client = Client(
                retries=retries,
                timeout=timeout,
                s3_client=s3_client,
                progress=progress,
            )
        self.targets = as_targets(labels, len(self.paths), "FileList labels")
        self.samples = PairView(self.paths, self.targets)
        self.transform = transform
        self.target_transform = target_transform

    @classmethod
    def from_csv(
        cls,
        path: PathLike,
        root: PathLike | None = None,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        *,
        label_columns: int = 1,
        **remote: Any,
    ) -> FileList:
        """Read ``path,label`` rows from a CSV file.

        The ``label_columns`` columns after the path hold the target: one
        number (a class index, or a float for regression), or with
        ``label_columns=k`` a row of k numbers per path (multi-hot or soft
        labels, a box), batched as a (N, k) tensor. Integers give int64
        targets; a float anywhere gives float64 ones. A first row whose
        labels are not numbers is a header and is skipped; blank rows are
        skipped; further columns are ignored. Relative paths are resolved
        against ``root`` (a folder, or a URL such as ``s3://bucket/prefix``),
        or the CSV file's folder when ``root`` is None; rows may be URLs
        (``http(s)://``, ``s3://``). ``remote``: ``retries``, ``timeout``,
        ``s3_client``, ``progress``, as for the constructor. Raises
        ValueError naming the line of a row that has too few labels or a
        label that is not a number.

        With pyarrow installed (the ``arrow`` extra), the file is read by
        its CSV reader and the rows converted as whole columns (relative
        paths keep the root once, as the paths' prefix); without it, or
        for a file it does not read as the above says (rows of other
        widths, rows of blank cells, labels in a form only Python parses,
        a bad row to name by its line), by the ``csv`` module, row by row:
        the same result, several times slower.
        """
        if int(label_columns) < 1:
            raise ValueError(f"label_columns must be >= 1, not {label_columns}")
        k = int(label_columns)
        path = os.fspath(path)
        if root is not None:
            base = os.fspath(root)
        elif is_url(path):
            base = path.rsplit("/", 1)[0]
        else:
            # The CSV's folder as it is now: the process may change folder
            # before the files are read.
            base = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
        if not is_url(base):
            base = os.path.expanduser(base)
        read = _read_csv_arrow(path, base, k)
        paths, labels = read if read is not None else _read_csv_rows(path, base, k)
        return cls(paths, labels, transform, target_transform, **remote)

    def ringloader_sources(self) -> Sources:
        """The files, whole, and their int64 labels."""
        if self.client is None:
            return Sources(paths=self.paths, targets=self.targets)
        names, objects = _objects(self.paths)
        return Sources(
            paths=self.paths,
            targets=self.targets,
            remote=self.client.remote(names, objects),
        )

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        if self.client is None:
            return super()._sample(index)
        path = self.paths[index]
        return path, self.client.get(path), item(self.targets, index)

    def __repr__(self) -> str:
        where = "" if self.client is None else " over HTTP/S3"
        return f"ringloader.FileList({len(self)} files{where})"


def _objects(paths: StringBlob) -> tuple[StringBlob, np.ndarray | None]:
    """The objects of remote paths, each once, and each path's object:
    (the paths themselves, None) when no path repeats, else (the distinct
    paths in order of first use, as a blob, and an int64 array of each
    path's place among them). Found in C over the blob: no Python object
    a path."""
    ids = _core.object_ids(paths.blob, paths.offsets)
    if ids is None:
        return paths, None
    objects = np.frombuffer(ids, dtype=np.int64)
    # Ids come in order of first use: a path is its object's first where
    # the largest id so far grows.
    first = np.flatnonzero(np.diff(np.maximum.accumulate(objects), prepend=-1) > 0)
    return paths.take(first), objects


def _number(text: str) -> int | float:
    """A CSV label: an int, else a float; ValueError carrying the text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ValueError(text) from None


# The first bytes of a URL (in any case) read remotely.
_URL_HEADS = tuple(
    np.frombuffer(h, dtype=np.uint8) for h in (b"http://", b"https://", b"s3://")
)
_URL_FIRST = np.zeros(256, dtype=bool)
_URL_FIRST[list(b"hHsS")] = True


def _url_rows(paths: StringBlob, first: np.ndarray | None = None) -> np.ndarray:
    """Whether each path is a URL read remotely (it starts with
    ``http://``, ``https://`` or ``s3://``, in any case): a bool per path,
    or one for all when their common prefix decides it. A path's first
    byte is looked at (``first``, when given), and the first 8 of those
    that may be URLs."""
    known = os.fsencode(paths.prefix)
    if len(known) >= 8 or (known and not _URL_FIRST[known[0]]):
        return _url_heads(np.frombuffer(known[:8].ljust(8, b"\0"), np.uint8)[None])
    url = np.zeros(len(paths), dtype=bool)
    if first is None:
        first = paths.heads(1)[:, 0]
    maybe = np.flatnonzero(_URL_FIRST[first])
    if len(maybe):
        url[maybe] = _url_heads(paths.heads(8, maybe))
    return url


def _url_heads(heads: np.ndarray) -> np.ndarray:
    """Whether each row of first bytes starts a URL read remotely."""
    low = np.where((heads >= 65) & (heads <= 90), heads | 32, heads)
    url = np.zeros(len(low), dtype=bool)
    for h in _URL_HEADS:
        url |= (low[:, : len(h)] == h).all(axis=1)
    return url


def _read_csv_rows(path: str, base: str, k: int) -> tuple[list[str], np.ndarray]:
    """(paths, labels) of a CSV file as ``FileList.from_csv`` says, read
    row by row by the csv module."""
    paths: list[str] = []
    labels: list[Any] = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        first = True
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < 1 + k:
                want = "path,label" if k == 1 else f"path and {k} labels"
                raise ValueError(
                    f"{path}, line {reader.line_num}: expected {want}, got {row!r}"
                )
            file = row[0].strip()
            try:
                values = [_number(c.strip()) for c in row[1 : 1 + k]]
            except ValueError as e:
                if first:  # a header
                    first = False
                    continue
                raise ValueError(
                    f"{path}, line {reader.line_num}: label {e.args[0]!r} "
                    "is not a number"
                ) from None
            first = False
            paths.append(_resolve(base, file))
            labels.append(values[0] if k == 1 else values)
    return paths, np.array(labels) if labels else np.zeros(0, np.int64)


def _read_csv_arrow(
    path: str, base: str, k: int
) -> tuple[StringBlob | list[str], np.ndarray] | None:
    """(paths, labels) of a CSV file as ``_read_csv_rows`` gives them, read
    by pyarrow's CSV reader and converted column by column; None when
    pyarrow is not installed or the file needs the row-by-row reading
    (rows of another width, rows of blank cells, labels Arrow does not
    parse, an error to name by its line)."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyarrow import csv as pacsv
    except ImportError:
        return None
    with open(path, "rb") as f:
        data = f.read()
    names = [f"f{i}" for i in range(k + 1)]
    # The C heap's (not Arrow's own allocator, which keeps what is freed):
    # the temporaries of reading are handed back after it.
    pool = pa.system_memory_pool()
    try:
        table = pacsv.read_csv(
            pa.py_buffer(data),
            # One block, so one column chunk: the paths' blob is Arrow's.
            read_options=pacsv.ReadOptions(
                autogenerate_column_names=True, block_size=min(len(data) + 1, 1 << 30)
            ),
            # As the csv module reads, a quoted cell may hold a newline.
            parse_options=pacsv.ParseOptions(newlines_in_values=b'"' in data),
            convert_options=pacsv.ConvertOptions(
                include_columns=names,
                column_types={c: pa.string() for c in names},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
            memory_pool=pool,
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError):
        return None  # rows of other widths, an empty file, not UTF-8, ...
    del data
    cells = [table.column(c) for c in names]
    if table.num_rows:
        try:
            [_number(c[0].as_py()) for c in cells[1:]]
        except ValueError:  # a header
            cells = [c.slice(1) for c in cells]
    # Blank cells (of blank rows too) parse as no number.
    labels = _label_columns(cells[1:], pool)
    if labels is None:
        trimmed = [pc.utf8_trim_whitespace(c, memory_pool=pool) for c in cells[1:]]
        labels = _label_columns(trimmed, pool)
        if labels is None:
            return None
    files = StringBlob.of_paths(cells[0], "CSV paths")
    if _spaced(files):
        trimmed = pc.utf8_trim_whitespace(cells[0], memory_pool=pool)
        files = StringBlob.of_paths(trimmed, "CSV paths")
    del table, cells
    paths = _resolved(files, base)
    give_back_freed()
    return paths, labels


# Bytes that may begin or end white space (ASCII's, or a UTF-8 sequence).
_SPACE = np.zeros(256, dtype=bool)
_SPACE[list(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f")] = True
_SPACE[0x80:] = True


def _spaced(paths: StringBlob) -> bool:
    """Whether a path (of a blob without a prefix) may begin or end with
    white space, which the csv reading strips."""
    start, end = paths.offsets[:-1], paths.offsets[1:]
    full = end > start
    blob = paths.blob
    return bool(_SPACE[blob[start[full]]].any() or _SPACE[blob[end[full] - 1]].any())


def _label_columns(columns: list, pool: Any) -> np.ndarray | None:
    """The labels of CSV columns of text: int64 when all are integers,
    else float64; None when Arrow parses some as neither."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for kind in (pa.int64(), pa.float64()):
        try:
            parsed = [pc.cast(c, kind, memory_pool=pool).to_numpy() for c in columns]
        except pa.ArrowInvalid:
            continue
        return parsed[0] if len(parsed) == 1 else np.column_stack(parsed)
    return None


def _resolved(paths: StringBlob, base: str) -> StringBlob | list[str]:
    """A CSV's paths (a blob without a prefix) resolved as :func:`_resolve`
    resolves each: kept as they are when every one is a URL or absolute
    (``base`` a folder), ``base`` as the prefix when every one is
    relative, else path by path."""
    if not len(paths):
        return paths
    first = paths.heads(1)[:, 0]
    url = _url_rows(paths, first)
    base_url = is_url(base)
    absolute = (first == ord("/")) & ~url
    if (url | (absolute & (not base_url))).all():
        return paths
    relative = ~url & ~absolute
    if not base_url:
        relative &= first != ord("~")
    prefix = _join_prefix(base)
    if prefix is not None and relative.all():
        return StringBlob(paths.blob, paths.offsets, prefix)
    return [_resolve(base, f) for f in paths]


def _join_prefix(base: str) -> str | None:
    """What :func:`_resolve` puts before every relative path under
    ``base``, when it only puts text before it; else None."""
    head = _resolve(base, "a")[:-1]
    if _resolve(base, "b/c") != head + "b/c":
        return None
    return head


def _resolve(base: str, file: str) -> str:
    """A CSV row's path: a URL as it is; else joined to ``base``, a folder
    or a URL (its path extended)."""
    if is_url(file):
        return file
    if is_url(base):
        parts = urlsplit(base)
        if parts.query:
            raise ValueError(f"{redact(base)}: a root URL cannot have a query")
        return urlunsplit(parts._replace(path=posixpath.join(parts.path, file)))
    return os.path.join(base, os.path.expanduser(file))


def files_of(dataset: Any) -> Sources:
    """The sources of a dataset class of the user's that has
    ``ringloader_files()``: a method returning ``(paths, targets)``, where

    - ``paths`` says where sample i's bytes are: a local file path or an
      ``http(s)://`` or ``s3://`` URL (all local or all remote), as any
      sequence of str (a list, a numpy array of str or bytes) or, for
      billions of samples, one blob of the paths' UTF-8 bytes and the
      ``n + 1`` offsets where each starts (``(blob, offsets)``: two numpy
      arrays, uint8 and int64, e.g. an Arrow string column's buffers), so
      that no Python object is made per sample;
    - ``targets`` is one per sample, as an array: int64 class indices, or
      any kind :mod:`.targets` keeps (floats, rows, a tuple of arrays).

    The loader then reads and decodes the files itself and applies the
    dataset's ``transform`` and ``target_transform`` attributes, so the
    dataset's ``__getitem__`` must be what torchvision's ImageFolder does
    (the file decoded to an RGB image, ``transform`` on it, the target,
    ``target_transform`` on it); it is not called. Read once, when the
    loader is made. Raises ValueError or TypeError naming the dataset for
    what is not of that form."""
    name = type(dataset).__name__
    got = dataset.ringloader_files()
    if not (isinstance(got, tuple) and len(got) == 2):
        raise TypeError(f"{name}.ringloader_files() must return (paths, targets)")
    paths, targets = got
    if isinstance(paths, tuple):  # (blob, offsets)
        blob, offsets = (np.asarray(a) for a in paths)
        if blob.dtype != np.uint8 or offsets.ndim != 1 or len(offsets) < 1:
            raise TypeError(
                f"{name}.ringloader_files(): paths as (blob, offsets) must be a "
                "uint8 array and an int64 array of len(targets) + 1 offsets"
            )
        if np.any(np.diff(offsets) < 0) or offsets[0] < 0 or offsets[-1] > len(blob):
            raise ValueError(
                f"{name}.ringloader_files(): offsets must rise from 0 to at most "
                f"len(blob) ({len(blob)})"
            )
        paths = StringBlob(blob, offsets)
        if not _url_rows(paths).any():
            # Local files: kept as given, no string made per sample.
            what = f"{name}.ringloader_files() targets"
            return Sources(paths=paths, targets=as_targets(targets, len(paths), what))
    return FileList(paths, targets).ringloader_sources()


_base._files_reader = files_of
