"""What a Loader measures: the wall time, waiting time and counts of an
epoch (:class:`Meter`), and the ``stats()`` dict assembled from them and
the C pipeline's counters."""

from __future__ import annotations

import time
from typing import Any, Optional


class Meter:
    """Wall time, waiting time and counts of one epoch, from its first
    batch on (the first wait is start-up, reported on its own)."""

    def __init__(self) -> None:
        self.start_epoch()

    def start_epoch(self) -> None:
        self.t_start = time.perf_counter()
        self.t_first: Optional[float] = None
        self.t_last: Optional[float] = None
        self.first_wait = 0.0
        self.wait = 0.0
        self.images = 0
        self.batches = 0

    def waited(self, seconds: float) -> None:
        if self.t_first is None:
            self.first_wait = seconds
        else:
            self.wait += seconds

    def delivered(self, n: int) -> None:
        now = time.perf_counter()
        if self.t_first is None:
            self.t_first = now
        else:
            self.images += n
            self.batches += 1
        self.t_last = now

    def snapshot(self) -> dict:
        wall = (self.t_last - self.t_first) if self.t_first is not None else 0.0
        return {
            "images_per_second": self.images / wall if wall > 0 else 0.0,
            "batches_per_second": self.batches / wall if wall > 0 else 0.0,
            "stall_fraction": min(1.0, self.wait / wall) if wall > 0 else 0.0,
            "wait_seconds": self.wait,
            "wall_seconds": wall,
            "first_batch_seconds": (
                self.t_first - self.t_start if self.t_first is not None else None
            ),
        }


# What a loader's HTTP(S)/S3 source did (0 for local data).
HTTP_COUNTERS = ("http_requests", "http_retries", "http_bytes", "http_cache_hits")


def stats(
    meter: Meter,
    c: dict,
    io_backend: Optional[str],
    epoch: int,
    rank: int,
    fallback_decodes: int,
    skipped: int,
) -> dict[str, Any]:
    """Loader.stats(): the epoch's figures from ``meter``, the C pipeline's
    cumulative counters ``c`` (empty without a pipeline), and the loader's
    own counts."""
    out = meter.snapshot()
    out.update(
        read_seconds=c.get("read_seconds", 0.0),
        io_cpu_seconds=c.get("io_cpu_seconds", 0.0),
        decode_seconds=c.get("decode_seconds", 0.0),
        samples_decoded=c.get("samples", 0),
        bytes_read=c.get("bytes_read", 0),
        errors=c.get("errors", 0),
        inflight=c.get("inflight", 0),
        queue_depth=c.get("ready", 0),
        io_backend=io_backend,
        epoch=epoch,
        rank=rank,
        fallback_decodes=fallback_decodes,
        direct_refused=c.get("direct_refused", 0),
        skipped=skipped,
        truncated=c.get("truncated", 0),
        **{k: c.get(k, 0) for k in HTTP_COUNTERS},
    )
    return out
