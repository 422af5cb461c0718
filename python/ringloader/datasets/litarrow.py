"""LitData chunks whose rows are kept as an Arrow IPC file after the items.

When ``litdata.optimize`` writes dict rows Arrow can hold (bytes, strings,
numbers), each chunk's item table is empty (every offset is the header's
end) and the rows follow as an Arrow IPC *file*, then its length (u32)
and the magic ``LDARW01\\0``. Uncompressed, a binary or string column's
values lie in the file (its data buffer, at the places its offsets buffer
gives), and a number column's in its values buffer: memory-mapped with
pyarrow, each buffer's address less the map's is its place in the file,
so each value is a byte range the C file source reads in place. Buffers
Arrow compressed (``ipc_compression``) are not in the file as they are:
the chunk is then written again uncompressed (:func:`inflate_arrow`).
"""

from __future__ import annotations

import struct
from typing import Any, Optional

import numpy as np

__all__ = ["Compressed", "arrow_footer", "arrow_ranges", "inflate_arrow"]

MAGIC = b"LDARW01\0"


class Compressed(Exception):
    """The chunk's Arrow buffers are compressed: not readable in place."""


def arrow_footer(data: Any) -> Optional[tuple[int, int]]:
    """(start, length) of the Arrow IPC file at the end of a chunk's
    bytes (a memory map or bytes), or None when it has none."""
    size = len(data)
    if size < 12 or bytes(data[size - 8 : size]) != MAGIC:
        return None
    length = struct.unpack("<I", bytes(data[size - 12 : size - 8]))[0]
    start = size - 12 - length
    if start < 0 or length == 0:
        return None
    return start, length


def _open(path: str, footer: tuple[int, int], name: str) -> tuple[Any, Any, Any]:
    import pyarrow as pa

    mapped = pa.memory_map(path)
    whole = mapped.read_buffer()
    start, length = footer
    try:
        reader = pa.ipc.open_file(whole.slice(start, length))
    except (pa.ArrowInvalid, OSError) as e:
        mapped.close()
        raise ValueError(
            f"{name}: its Arrow rows cannot be read ({e}): damaged"
        ) from None
    return mapped, whole, reader


def _column(batch: Any, base: int, size: int, name: str, column: str) -> tuple:
    """(kind, starts, sizes) of one column of a record batch: where each
    row's value lies in the file."""
    import pyarrow as pa

    values = batch.column(column)
    t, n = values.type, len(values)
    bufs = values.buffers()

    def place(buf: Any) -> int:
        if buf is None:
            return 0
        at = buf.address - base
        if not 0 <= at <= size - buf.size:
            raise Compressed()
        return at

    if (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
    ):
        wide = pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        offs = np.frombuffer(bufs[1], np.int64 if wide else np.int32)
        offs = offs[values.offset : values.offset + n + 1].astype(np.int64)
        at = place(bufs[2]) if bufs[2] is not None and bufs[2].size else 0
        sizes = np.diff(offs)
        starts = at + offs[:-1]
        if values.null_count:
            valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), bool)
            sizes = np.where(valid, sizes, 0)
        string = pa.types.is_string(t) or pa.types.is_large_string(t)
        return ("str" if string else "bytes"), starts, sizes
    if (pa.types.is_integer(t) or pa.types.is_floating(t)) and bufs[1] is not None:
        dtype = np.dtype(t.to_pandas_dtype()).newbyteorder("<")
        if values.null_count:
            raise ValueError(f"{name}: column {column!r} holds nulls, not numbers")
        rows = np.arange(values.offset, values.offset + n, dtype=np.int64)
        starts = place(bufs[1]) + rows * dtype.itemsize
        return dtype, starts, np.full(n, dtype.itemsize, np.int64)
    return str(t), np.zeros(n, np.int64), np.zeros(n, np.int64)


def arrow_ranges(
    path: str,
    footer: tuple[int, int],
    columns: list[tuple[str, str]],
    n: int,
    name: str,
) -> tuple[list, np.ndarray, np.ndarray]:
    """(kinds, starts, sizes) of a chunk's Arrow rows, as the items' leaves
    (``columns`` in order; starts and sizes (n, leaves) int64). Raises
    :class:`Compressed` when a buffer is not in the file as it is, and
    ValueError naming the chunk when the rows disagree with its index."""
    mapped, whole, reader = _open(path, footer, name)
    try:
        have = reader.schema.names
        missing = [c for c, _ in columns if c not in have]
        if missing:
            raise ValueError(
                f"{name}: its Arrow rows have columns {have}, not {missing}: "
                "the index disagrees with the files"
            )
        kinds: list = [None] * len(columns)
        starts = np.zeros((n, len(columns)), np.int64)
        sizes = np.zeros((n, len(columns)), np.int64)
        row = 0
        for b in range(reader.num_record_batches):
            batch = reader.get_batch(b)
            m = batch.num_rows
            if row + m > n:
                break
            for k, (c, _) in enumerate(columns):
                kind, s, z = _column(batch, whole.address, whole.size, name, c)
                kinds[k] = kind
                starts[row : row + m, k] = s
                sizes[row : row + m, k] = z
            row += m
        if row != n:
            raise ValueError(
                f"{name}: its Arrow rows are not its {n} items: the index "
                "disagrees with the files"
            )
        return kinds, starts, sizes
    finally:
        del reader, whole
        mapped.close()


def inflate_arrow(data: bytes, name: str) -> bytes:
    """A chunk's bytes with its Arrow rows written again uncompressed."""
    import pyarrow as pa

    footer = arrow_footer(data)
    if footer is None:
        raise ValueError(f"{name}: no Arrow rows at its end")
    start, length = footer
    try:
        table = pa.ipc.open_file(pa.py_buffer(data[start : start + length])).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(
            f"{name}: its Arrow rows cannot be read ({e}): damaged"
        ) from None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    ipc = sink.getvalue().to_pybytes()
    return data[:start] + ipc + struct.pack("<I", len(ipc)) + MAGIC
