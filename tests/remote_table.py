"""The ``_core.Pipeline`` keywords of a remote shard set's sources, for
tests that build a pipeline by hand."""

import ctypes
import gc
import tracemalloc
from typing import Any, Callable

import pytest

from ringloader import _core
from ringloader._pipeline import _table, fetch_urls


def http_table(src: Any, **http: Any) -> dict[str, Any]:
    """A remote shard set's table as the loader gives it (the shards'
    names, their first samples and record files: nothing per sample), with
    its fetch URLs as the loader hands them over and the options in
    ``http`` (which win)."""
    table = _table(src, src.remote)
    urls = fetch_urls(src.remote.urls())
    table["http"] = {**table["http"], "urls": urls, **http}
    return table


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_in_use() -> int:
    """Bytes malloc has handed out on this thread's arena (small chunks and
    mapped large ones): what a C table of the pipeline's takes."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.fail("glibc 2.33 or later is needed (mallinfo2)")
    libc.mallinfo2.restype = _Mallinfo2
    m = libc.mallinfo2()
    return int(m.uordblks) + int(m.hblkhd)


def hand_over_costs(sources: Callable[[], Any], spec: Any) -> tuple[int, int, int]:
    """What handing a remote dataset over to a pipeline costs: (Python
    bytes kept, Python peak, tracemalloc's, of ``sources()`` and its
    table; C bytes the pipeline keeps once built, malloc's)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        table = http_table(sources())
        gc.collect()
        kept, peak = (v - base for v in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    gc.collect()
    before = malloc_in_use()
    p = _core.Pipeline(spec, **table)
    try:
        built = malloc_in_use() - before
    finally:
        p.close()
    return kept, peak, built
