"""The C pipeline of a Loader, as the rest of the package sees it.

This is the only module that calls ``_core.Pipeline``: creating it from the
dataset's table of samples (given once: paths, or byte ranges of files),
submitting a batch by sample ids, taking the next batch in order, and
turning it into a tensor (host or device) with what the C core reports:
samples decoded by the Python fallback decoder (not JPEG, PNG or WebP), and samples the
core's skip policy replaced (``on_error="skip"``).

A Pipeline belongs to one process (the threads do not survive ``fork``)
and runs one epoch at a time; batches come back in the order submitted.
What is in flight is known to the C core alone: each batch it hands back
(or the exception of its failure) carries the ids it was submitted with,
so no bookkeeping here can drift from the core's when an exception (a
Ctrl-C in the wait) falls between two calls, and the random key each
position's sample was drawn with (a replacement's own under the skip
policy: a detection sample's targets follow its plan, drawn from it). The
one thing kept here is each batch's epoch, forgotten once the core hands
the batch back or its failure, never on an interrupted wait.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch

from . import _core
from ._gpu import Gpu
from .datasets.base import Sources
from .datasets.cache import StringBlob, default_cache_dir
from .datasets.presign import FromNames
from .datasets.shards import _ShardPaths
from .transforms import Compiled

log = logging.getLogger("ringloader")

# pread reasons already logged by this process (one line per reason).
_announced_io: set[str] = set()

# Counters of the C core that add up across the pipelines a loader makes
# (a new one for a new transform, a new table of samples, a fork): every
# key of its stats but the gauges (_core.STATS_FIELDS, defined in C).
COUNTERS = tuple(
    name for name, (kind, _) in _core.STATS_FIELDS.items() if kind != "gauge"
)


# Past this many times Remote.refresh_s since they were made, the URLs in
# use may be about to expire: the next batch waits for new ones.
URL_DEADLINE = 1.5


def checked_arena_bytes(arena_bytes: Any) -> Optional[int]:
    """``arena_bytes`` as the Loader takes it: None (the core's default) or
    an int in 1 .. ``_core.ARENA_MAX_BYTES`` (1 TiB); TypeError or
    ValueError naming it otherwise."""
    if arena_bytes is None:
        return None
    if isinstance(arena_bytes, bool) or not hasattr(arena_bytes, "__index__"):
        raise TypeError(f"arena_bytes must be an int, not {type(arena_bytes).__name__}")
    n = arena_bytes.__index__()
    if not 1 <= n <= _core.ARENA_MAX_BYTES:
        raise ValueError(
            f"arena_bytes must be in 1 .. {_core.ARENA_MAX_BYTES} (1 TiB), not {n}"
        )
    return n


class Taken(NamedTuple):
    """One batch taken from the pipeline."""

    idx: list[int]  # dataset index of each position, replacements included
    # One tensor per view (one view but for a MultiView): uint8 (or the
    # view's fused dtype on CPU), in the view's C layout; a varying view's
    # (each sample its own size) a list of one tensor per sample, each a
    # view of the batch's arena (or of its own buffer) keeping it alive.
    raw: list[Any]
    fallback: Sequence[int]  # positions decoded by Pillow (not JPEG, PNG or WebP)
    # (position, DecodeError or OSError) of samples replaced (skip policy)
    replaced: Sequence[tuple[int, Union[_core.DecodeError, OSError]]]
    # Each position's field bytes (a shard sample's other members), or None
    # when the table has no fields.
    fields: Optional[Sequence[bytes]] = None
    # The random key each position's sample was drawn with (a replaced
    # position's: its replacement's own, as the core reports it), and the
    # batch's epoch.
    keys: Sequence[int] = ()
    epoch: int = 0


class Pipeline:
    """The C threads and batch ring of one loader in one process."""

    def __init__(
        self,
        views: Sequence[tuple[Compiled, str]],
        src: Sources,
        *,
        gpu: Optional[Gpu],
        fallback: Callable[[memoryview, int], tuple],
        num_threads: int,
        seed: int,
        io: str,
        max_pixels: int,
        allow_truncated: bool,
        direct_io: bool,
        skip_errors: bool,
        max_consecutive_errors: int,
        carried: Optional[dict] = None,
        arena_bytes: int = 0,
    ) -> None:
        # Each view (compiled, C layout): its spec and its output. On the
        # GPU path uint8 crosses PCIe; the conversion runs on the device.
        transform = [
            (c.spec, "uint8", None, None, layout)
            if gpu is not None
            else (c.spec, c.dtype, c.mul, c.add, layout)
            for c, layout in views
        ]
        output: dict[str, Any] = {}
        if gpu is not None:
            output = dict(device=gpu.index, allocator=gpu.alloc)
        remote = getattr(src, "remote", None)
        table = _table(src, remote)
        fields = getattr(src, "fields", None)
        if fields is not None:
            # Each range holds the image and the sample's other members.
            table["fields"] = _fields(src, fields, "records" in table)
        parts = getattr(src, "parts", None)
        if parts is not None:
            # on_error="skip" replaces a sample within its own dataset.
            table["parts"] = parts
        plan_boxes = getattr(src, "plan_boxes", None)
        if plan_boxes is not None:
            # The boxes each sample's RandomIoUCrop draws from.
            table["plan_boxes"] = plan_boxes
        self._refresh_at: Optional[float] = None
        self._refreshing: Optional[_Background] = None
        self._urls_made = 0.0  # when the URLs in use began to be made
        self._slow_urls_said = False
        self._fetched: Optional[weakref.finalize] = None
        if remote is not None:
            # Objects over HTTP(S): the C source fetches them from URLs
            # made now (presigned ones are made again before they expire).
            self._urls_made = time.monotonic()
            table["http"].update(remote.options, urls=fetch_urls(remote.urls()))
            if remote.options.get("cache_bytes"):
                # The members fetched, kept for later epochs: a folder of
                # this pipeline's, removed with it.
                root = os.path.join(default_cache_dir(), "fetched")
                os.makedirs(root, exist_ok=True)
                folder = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root)
                self._fetched = weakref.finalize(self, shutil.rmtree, folder, True)
                table["http"]["cache_dir"] = folder
            if remote.refresh_s is not None:
                self._refresh_at = self._urls_made + remote.refresh_s
        first_keys = remote.keys() if remote is not None and remote.keys else None
        self._c = _core.Pipeline(
            transform,
            **table,
            num_threads=num_threads,
            **output,
            seed=seed & (2**64 - 1),
            io=io,
            max_pixels=max_pixels,
            allow_truncated=allow_truncated,
            direct_io=direct_io,
            fallback=fallback,
            skip_errors=skip_errors,
            max_consecutive_errors=max_consecutive_errors,
            arena_bytes=arena_bytes,
        )
        if first_keys is not None:
            # S3 GETs are signed per request by the C source (before the
            # first submit, so before any is sent).
            self._c.set_keys(*first_keys)
        if gpu is not None:
            gpu.use_stream(self._c.copy_stream)  # the pipeline's own
        self.pid = os.getpid()
        self._submitted: collections.deque = collections.deque()
        self.src = src
        self._gpu = gpu
        self._carried = dict(carried or {})
        reason = self._c.io_reason
        if self._c.io_backend == "pread" and reason not in _announced_io:
            _announced_io.add(reason)
            log.info("ringloader: reading with pread (%s)", reason)

    # ---- state ----

    def owned(self) -> bool:
        """Whether this process made it (a forked child must make its own
        and leave the inherited one untouched)."""
        return self.pid == os.getpid()

    def usable(self) -> bool:
        return self.owned() and not self._c.closed

    @property
    def closed(self) -> bool:
        return self._c.closed

    @property
    def pending(self) -> int:
        """Batches submitted and not taken yet (the C core's count)."""
        return self._c.inflight

    @property
    def io_backend(self) -> str:
        return self._c.io_backend

    @property
    def pinned_slots(self) -> int:
        return self._c.pinned_slots

    def stats(self) -> dict:
        """The C core's counters (see ``_core.Pipeline.stats``), those of
        the loader's earlier pipelines added."""
        out = self._c.stats()
        for k, v in self._carried.items():
            out[k] = out.get(k, 0) + v
        return out

    def counters(self) -> dict:
        """What a next pipeline of the same loader carries over."""
        if self._c.closed:
            return dict(self._carried)
        s = self.stats()
        return {k: s[k] for k in COUNTERS if k in s}

    # ---- batches ----

    def _remake(self) -> tuple[Optional[list[str]], Optional[tuple]]:
        """What signs S3 GETs, made again: the presigned URLs (None when
        the URLs do not expire: the C source signs them) and the keys
        (None when it does not)."""
        remote = self.src.remote
        urls = remote.urls() if remote.urls_expire else None
        return urls, remote.keys() if remote.keys is not None else None

    def _refresh_urls(self) -> None:
        """What signs S3 GETs is made again when ``refresh_s`` has passed:
        presigned URLs (for many objects that takes minutes of Python,
        which the training loop should not wait for) and the keys the C
        source signs with (boto3 may fetch new credentials then), on a
        thread of their own, and handed to the C source by the first
        submit() that finds them made. A failure there is logged and tried
        again a minute later. Past URL_DEADLINE x ``refresh_s`` since they
        began to be made, those in use may be about to expire (after a
        long pause between batches, or refreshes that keep failing):
        submit() then waits for new ones, made here if need be, and a
        failure is raised."""
        job, now = self._refreshing, time.monotonic()
        if job is not None and job.done.is_set():
            self._refreshing = None
            if job.error is None:
                self._use_urls(job.result, job.started)
            else:
                what = "making the S3 URLs"
                if not self.src.remote.urls_expire:
                    what = "reading the S3 credentials"
                log.warning(
                    "ringloader: %s again failed; trying again in a minute",
                    what,
                    exc_info=job.error,
                )
                self._refresh_at = now + 60.0
            job = None
        refresh_s = self.src.remote.refresh_s
        if now >= self._urls_made + URL_DEADLINE * refresh_s:
            if job is not None:
                job.done.wait()
                self._refresh_urls()  # its URLs, then again if still too old
            else:
                self._use_urls(self._remake(), now)
        elif job is None and now >= self._refresh_at:
            self._refreshing = _Background(self._remake)

    def _use_urls(self, made_again: tuple, made: float) -> None:
        urls, keys = made_again
        took, refresh_s = time.monotonic() - made, self.src.remote.refresh_s
        if keys is not None:
            self._c.set_keys(*keys)
        if urls is None:
            self._urls_made = made
            self._refresh_at = made + refresh_s
            return
        if took > refresh_s and not self._slow_urls_said:
            self._slow_urls_said = True
            log.warning(
                "ringloader: making the URLs of %d S3 objects took %.0f s, "
                "longer than they may be used before new ones are made "
                "(%.0f s): batches will keep waiting for them. Pack the "
                "objects into tar shards (ringloader.TarShards), or sign with "
                "long-term access keys (URLs made daily).",
                len(urls),
                took,
                refresh_s,
            )
        self._c.set_urls(fetch_urls(urls))
        self._urls_made = made
        self._refresh_at = made + refresh_s

    def submit(self, idx: list[int], keys: list[int], epoch: int) -> None:
        """Queue the samples ``idx`` of the table as one batch, each with
        its random key. On the GPU path the C core asks the allocator for
        the batch's device buffer."""
        if self._refresh_at is not None and not self._c.closed:
            self._refresh_urls()
        self._c.submit(idx, keys, epoch)
        self._submitted.append(epoch)

    def take(self) -> Taken:
        """The oldest batch submitted, once decoded (blocks, GIL released).
        Raises DecodeError or OSError (with ``.index``, and ``.batch``: the
        ids of its batch) for a sample that failed and was not replaced,
        and RuntimeError once closed; the batch is then dropped. Its ids
        are the ones the core reports with it, never a copy kept here."""
        consumer = self._gpu.consumer_stream() if self._gpu is not None else 0
        pending = self._c.inflight
        try:
            batch = self._c.next(consumer_stream=consumer)
        except BaseException:
            # A failed batch is dropped, and its keys go with it; a Ctrl-C
            # in the wait (or a call refused before it) leaves the batch in
            # flight, and its keys with it; one raised by the allocator of
            # a device batch's spill buffer comes after the batch was
            # taken, which is dropped. (One thread takes from a Pipeline.)
            if self._c.inflight < pending:
                self._pop_submitted()
            raise
        # Batches come out in the order submitted, a failed one too.
        epoch = self._pop_submitted()
        if batch is None:
            raise RuntimeError("the loader is closed")  # nothing in flight
        raw: list[Any]
        if batch.samples is not None:  # a varying batch: one view
            if self._gpu is None:
                raw = [[torch.from_dlpack(s) for s in batch.samples]]
            else:  # each sample its region of the batch's device buffer
                raw = [[self._gpu.tensor(s) for s in batch.samples]]
        elif self._gpu is None:
            raw = [torch.from_dlpack(view) for view in batch.views]
        else:
            raw = [self._gpu.tensor(view) for view in batch.views]
        replaced = [(pos, error) for pos, _, error in batch.replaced]
        return Taken(
            list(batch.ids),
            raw,
            batch.fallback,
            replaced,
            batch.fields,
            batch.keys,
            epoch,
        )

    def _pop_submitted(self) -> int:
        """The epoch of the oldest batch in flight, forgotten."""
        return self._submitted.popleft() if self._submitted else 0

    # ---- lifecycle ----

    def cancel(self) -> None:
        """Drop every batch in flight."""
        self._c.cancel()
        self._submitted.clear()

    def close(self) -> None:
        """Stop and join the threads; idempotent. The counters are kept
        for :meth:`counters`."""
        if not self._c.closed:
            self._carried = self.counters()
        self._c.close()
        if self._fetched is not None:
            self._fetched()  # the cache of fetched members, after its files


def _i64(column: Any) -> np.ndarray:
    """A column of the table as the C core reads it: int64, contiguous (no
    copy when it already is)."""
    return np.ascontiguousarray(column, dtype=np.int64)


def _names(paths: Any) -> Any:
    """The file names of a table as ``_core.Pipeline`` takes them: a blob
    of fs-encoded bytes with its offsets and prefix, borrowed by the C
    source as they are; a plain sequence of str (an ImageFolder's samples)
    is packed by the C side."""
    if isinstance(paths, StringBlob):
        return (paths.blob, _i64(paths.offsets), paths.prefix)
    if isinstance(paths, tuple):
        return list(paths)  # a tuple is the blob form to the C side
    return paths


def fetch_urls(urls: Sequence[str]) -> Any:
    """A remote's fetch URLs as ``_core.Pipeline`` takes them: plain ones
    made from the names (``FromNames``) as their buckets' bases, which the
    C source makes each URL from; others (presigned) as they are, which
    it packs into one blob."""
    if isinstance(urls, FromNames):
        return dict(urls.bases)
    return _names(urls)


def _table(src: Sources, remote: Any) -> dict[str, Any]:
    """The keywords of ``_core.Pipeline`` that give the table of samples:
    nothing in it costs a Python object a sample. Shards go as their
    names and each one's first sample (``starts``), a remote table's
    objects by the same starts when its objects are the shards."""
    paths, table = src.paths, {}
    shards = isinstance(paths, _ShardPaths)
    if remote is None:
        if shards:
            table["paths"] = _names(StringBlob.from_strings(paths.shards))
            table["starts"] = paths.starts
        else:
            table["paths"] = _names(paths)
    else:
        names = remote.names
        table["http"] = dict(names=_names(names))
        if names is paths:
            table["http"]["objects"] = None  # one object a sample
        elif remote.objects is not None:
            table["http"]["objects"] = _i64(remote.objects)
        elif shards and list(names) == list(paths.shards):
            table["starts"] = paths.starts
        else:
            table["paths"] = paths  # each sample's object, by name
    records = getattr(src, "records", None)
    if records is not None and shards and (remote is None or "starts" in table):
        # Local shards, or remote ones by starts: ranges from record files.
        files, sizes, mtimes, tag = records
        table["records"] = (files, _i64(sizes), _i64(mtimes), tag)
    elif src.offsets is not None:
        offsets = src.offsets
        if isinstance(offsets, np.ndarray) and offsets.ndim == 1 and not offsets.any():
            offsets = None  # zeros (often broadcast): the C side's default
        else:
            offsets = _i64(offsets)
        table.update(offsets=offsets, lengths=_i64(src.lengths))
    return table


def _fields(src: Sources, fields: Any, by_record: bool) -> tuple:
    """The ``fields`` keyword of ``_core.Pipeline`` for a FieldTable: where
    the C source reads the shards' record files (local shards), the
    record form, whose positions the core reads from the same files as
    each sample's job runs (core/pipeline.h's field_records), nothing per
    sample; else (remote shards, whose source takes arrays) the columns
    read out of the records into arrays."""
    if by_record:
        files, sizes, mtimes, tag = src.records  # type: ignore[misc]
        return (
            (files, _i64(sizes), _i64(mtimes), tag),
            _i64(src.paths.starts),  # type: ignore[attr-defined]
            fields.refusals,
            fields.checks(),
            fields.max_int_digits(),
        )
    checks = [
        (_i64(at), _i64(size), np.ascontiguousarray(ext, np.int8), exts, kinds)
        for at, size, ext, exts, kinds in fields.check_arrays()
    ]
    return (
        _i64(np.asarray(fields.image_at)),
        _i64(np.asarray(fields.image_len)),
        fields.refusals,
        checks,
        fields.max_int_digits(),
    )


class _Background:
    """``fn()`` on a daemon thread: ``done`` is set once ``result`` (or
    ``error``) is there. A job still running when its pipeline closes is
    left to finish; its result is dropped."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.started = time.monotonic()
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()
        threading.Thread(
            target=self._run, args=(fn,), name="ringloader-urls", daemon=True
        ).start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as e:  # noqa: BLE001 - the next submit() reports it
            self.error = e
        finally:
            self.done.set()
