"""What a Loader measures: the wall time, waiting time and counts of an
epoch (:class:`Meter`), and the ``stats()`` dict assembled from them and
the C pipeline's counters."""

from __future__ import annotations

import time
from typing import Any, Optional

from . import _core


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


# The C pipeline's stats (their keys and kinds are _core.STATS_FIELDS,
# defined in C) that Loader.stats() shows, by the name it shows them under:
# all of them, some renamed, but the batches returned and slots allocated
# (the loader counts its own batches per epoch). What a loader's
# HTTP(S)/S3 source did are the http_* ones (0 for local data).
RENAMED = {"samples": "samples_decoded", "ready": "queue_depth"}
HIDDEN = ("batches", "slots")
SHOWN = {
    name: RENAMED.get(name, name) for name in _core.STATS_FIELDS if name not in HIDDEN
}


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
    for name, shown in SHOWN.items():
        kind = _core.STATS_FIELDS[name][0]
        out[shown] = c.get(name, 0.0 if kind == "seconds" else 0)
    out.update(
        io_backend=io_backend,
        epoch=epoch,
        rank=rank,
        fallback_decodes=fallback_decodes,
        skipped=skipped,
    )
    return out
