"""The ``_core.Pipeline`` keywords of a remote shard set's sources, for
tests that build a pipeline by hand."""

from typing import Any

from ringloader._pipeline import _table


def http_table(src: Any, **http: Any) -> dict[str, Any]:
    """A remote shard set's table as the loader gives it (the shards'
    names, their first samples and record files: nothing per sample), with
    its fetch URLs and the options in ``http`` (which win)."""
    table = _table(src, src.remote)
    table["http"] = {**table["http"], "urls": src.remote.urls(), **http}
    return table
