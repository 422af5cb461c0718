"""Prometheus export of every live loader's :meth:`Loader.stats`.

``ringloader.metrics.serve(port)`` starts prometheus_client's HTTP server
in a daemon thread of this process; at each scrape a collector reads the
``stats()`` of every loader alive at that moment, so there is nothing to
update from the training loop and loaders created later are included.
Every sample carries the labels ``rank`` (the loader's rank under
``distributed=True``, else 0) and ``loader`` (a small integer numbering the
loaders of this process in the order the collector first saw them).

prometheus_client is an optional dependency: ``pip install
ringloader[metrics]``. Under torchrun, give each rank its own port (for
example ``9400 + local_rank``).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Iterator, Optional

__all__ = ["RingloaderCollector", "serve"]

# (key of Loader.stats(), metric name, help)
_GAUGES = (
    (
        "images_per_second",
        "images_per_second",
        "Images yielded per second in the current epoch",
    ),
    (
        "batches_per_second",
        "batches_per_second",
        "Batches yielded per second in the current epoch",
    ),
    (
        "stall_fraction",
        "stall_fraction",
        "Share of wall time the training loop waited for its next batch",
    ),
    ("queue_depth", "queue_depth", "Batches decoded and waiting"),
    ("inflight", "inflight_batches", "Batches submitted and not yet handed out"),
    ("epoch", "epoch", "Current epoch"),
)
_COUNTERS = (
    ("read_seconds", "read_seconds", "Thread time spent reading files"),
    ("decode_seconds", "decode_seconds", "Thread time spent decoding and transforming"),
    ("samples_decoded", "samples_decoded", "Samples decoded"),
    ("bytes_read", "read_bytes", "Bytes read from files"),
    ("errors", "errors", "Samples that failed to read or decode"),
    ("http_requests", "http_requests", "HTTP(S)/S3 requests made (each attempt)"),
    ("http_retries", "http_retries", "HTTP(S)/S3 requests that were retries"),
    ("http_bytes", "http_bytes", "Bytes of HTTP(S)/S3 response bodies received"),
    (
        "http_cache_hits",
        "http_cache_hits",
        "Remote samples read from the local cache instead of the network",
    ),
)
_LABELS = ["rank", "loader"]


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as e:
        raise ImportError(
            "ringloader.metrics needs prometheus_client: "
            "pip install ringloader[metrics]  (or: pip install prometheus_client)"
        ) from e
    return prometheus_client


class RingloaderCollector:
    """A prometheus_client collector reading the stats of every live loader
    (``ringloader.loader.LIVE``) when scraped. Register it yourself on a
    registry of your own, or let :func:`serve` do it."""

    def __init__(self, prefix: str = "ringloader") -> None:
        _prometheus()
        self.prefix = prefix
        self._ids: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self._next_id = itertools.count()
        self._lock = threading.Lock()

    def _id(self, loader: Any) -> str:
        with self._lock:
            if loader not in self._ids:
                self._ids[loader] = next(self._next_id)
            return str(self._ids[loader])

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from .loader import LIVE

        rows = []
        for loader in sorted(LIVE, key=self._id):
            try:
                stats = loader.stats()
            except Exception:  # a loader being torn down: skip it this time
                continue
            rows.append(([str(stats.get("rank", 0)), self._id(loader)], stats))
        p = self.prefix
        for key, name, doc in _GAUGES:
            g = GaugeMetricFamily(f"{p}_{name}", doc, labels=_LABELS)
            for labels, stats in rows:
                g.add_metric(labels, float(stats.get(key) or 0))
            yield g
        for key, name, doc in _COUNTERS:
            # prometheus_client appends _total to counter names.
            c = CounterMetricFamily(f"{p}_{name}", doc, labels=_LABELS)
            for labels, stats in rows:
                c.add_metric(labels, float(stats.get(key) or 0))
            yield c

    def describe(self) -> Iterator[Any]:
        # Declared up front so that registering checks for name clashes
        # without calling collect() (which would need loaders).
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for _, name, doc in _GAUGES:
            yield GaugeMetricFamily(f"{self.prefix}_{name}", doc, labels=_LABELS)
        for _, name, doc in _COUNTERS:
            yield CounterMetricFamily(f"{self.prefix}_{name}", doc, labels=_LABELS)


# Registries that have our collector (held, so that ids are never reused).
_registered: list[Any] = []


def serve(
    port: int = 9400, addr: str = "127.0.0.1", registry: Optional[Any] = None
) -> tuple[Any, threading.Thread]:
    """Serve the metrics of every live loader at ``http://addr:port/metrics``.

    Starts prometheus_client's HTTP server on a daemon thread and registers
    a :class:`RingloaderCollector` on ``registry`` (prometheus_client's
    default registry, so the process and Python metrics come along, unless
    given) once per registry. ``port=0`` picks a free port. Binds to
    127.0.0.1 by default; pass ``addr="0.0.0.0"`` for a scraper on another
    host. Returns prometheus_client's ``(server, thread)``: the port is
    ``server.server_port``; ``server.shutdown()`` stops it.

    Raises ImportError naming ``pip install ringloader[metrics]`` when
    prometheus_client is not installed, OSError when the port is taken.
    """
    prom = _prometheus()
    if registry is None:
        registry = prom.REGISTRY
    if not any(r is registry for r in _registered):
        registry.register(RingloaderCollector())
        _registered.append(registry)
    # prometheus_client >= 0.17 returns (server, thread); older, None.
    return prom.start_http_server(port, addr=addr, registry=registry)
