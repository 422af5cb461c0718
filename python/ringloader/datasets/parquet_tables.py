"""The target and ``columns`` tables of several Parquet files as one
(:class:`.parquet.Parquet`'s): types promoted where they are compatible,
and errors naming the file (and row, or both files) a bad value or a
mismatched column is in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import targets as _targets
from .columns import _targets_of
from .urls import redact

__all__ = ["concat_tables", "targets_by_file"]


def concat_tables(files: list[str], tables: list, columns: Sequence[str]) -> Any:
    """The files' tables as one, compatible types promoted (int32 and
    int64, string and large_string); a ValueError naming two files and
    the column whose types cannot be."""
    import pyarrow as pa

    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    for col in columns:
        first = tables[0].schema.field(col).type
        for path, table in zip(files[1:], tables[1:]):
            other = table.schema.field(col).type
            try:
                pa.unify_schemas(
                    [pa.schema([(col, first)]), pa.schema([(col, other)])],
                    promote_options="permissive",
                )
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                raise ValueError(
                    f"{redact(files[0])} and {redact(path)}: column {col!r} is "
                    f"{first} in one, {other} in the other; give files of one "
                    "schema"
                ) from None
    raise ValueError(
        f"{[redact(f) for f in files]}: the columns {list(columns)} cannot be "
        "put together (their types differ between files)"
    )


def targets_by_file(
    files: list[str], tables: list, table: Any, column: str
) -> _targets.Targets:
    """The target column of all files; a bad value is named in its own
    file and row (each file's column checked on its own)."""
    try:
        return _targets_of(table, column, "the Parquet files")
    except ValueError:
        for path, part in zip(files, tables):
            _targets_of(part, column, redact(path))
        raise
