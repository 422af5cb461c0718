"""The C pipeline of a Loader, as the rest of the package sees it.

This is the only module that calls ``_core.Pipeline``: creating it (all its
options), submitting a batch, taking the next batch in order, and turning
the taken batch into a uint8 tensor (host or device) plus the positions the
C threads left to Python (samples that are not JPEG; failed samples with
``on_error="skip"``). Everything else goes through :class:`Pipeline`, so a
new C API changes this module (and :mod:`._fallback`) only.

A Pipeline belongs to one process (the threads do not survive ``fork``)
and runs one epoch at a time; batches come back in the order submitted.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch

from . import _core
from ._gpu import Gpu
from .datasets.base import Sources
from .transforms import Compiled

log = logging.getLogger("ringloader")

# pread reasons already logged by this process (one line per reason).
_announced_io: set[str] = set()


class Taken(NamedTuple):
    """One batch taken from the pipeline."""

    idx: list[int]  # dataset index of each position
    keys: list[int]  # random key of each position (see _epoch.Keys)
    raw: torch.Tensor  # uint8 (or the fused dtype on CPU), C layout
    fallback: Sequence[int]  # positions of samples that are not JPEG
    # (position, DecodeError or OSError) of samples that failed (skip_errors)
    failed: Sequence[tuple[int, Union[_core.DecodeError, OSError]]]


class Pipeline:
    """The C threads and batch ring of one loader in one process."""

    def __init__(
        self,
        compiled: Compiled,
        *,
        c_layout: str,
        gpu: Optional[Gpu],
        num_threads: int,
        seed: int,
        io: str,
        max_pixels: int,
        allow_truncated: bool,
        direct_io: bool,
        skip_errors: bool,
    ) -> None:
        if gpu is not None:
            # uint8 crosses PCIe; the conversion runs on the device.
            output: dict[str, Any] = dict(
                device=gpu.index, copy_stream=gpu.start(), dtype="uint8"
            )
        else:
            output = dict(dtype=compiled.dtype, mul=compiled.mul, add=compiled.add)
        self._c = _core.Pipeline(
            compiled.spec,
            num_threads=num_threads,
            layout=c_layout,
            **output,
            seed=seed & (2**64 - 1),
            io=io,
            max_pixels=max_pixels,
            allow_truncated=allow_truncated,
            direct_io=direct_io,
            skip_errors=skip_errors,
        )
        self.pid = os.getpid()
        self._gpu = gpu
        self._out_h, self._out_w = compiled.spec["out_h"], compiled.spec["out_w"]
        self._nhwc = c_layout == "NHWC"
        # (indices, keys, device buffer or None) of each batch in flight.
        self._inflight: deque = deque()
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
        """Batches submitted and not taken yet."""
        return len(self._inflight)

    @property
    def io_backend(self) -> str:
        return self._c.io_backend

    @property
    def pinned_slots(self) -> int:
        return self._c.pinned_slots

    def stats(self) -> dict:
        """The C core's cumulative counters (see ``_core.Pipeline.stats``)."""
        return self._c.stats()

    # ---- batches ----

    def submit(self, src: Sources, idx: list[int], keys: list[int], epoch: int) -> None:
        """Queue the samples ``idx`` of ``src`` as one batch, each with its
        random key. On the GPU path a device buffer is allocated for it."""
        extra: dict = {}
        buf = None
        if self._gpu is not None:
            buf, extra["device_buffer"] = self._gpu.alloc(
                len(idx) * self._out_h * self._out_w * 3
            )
        paths = [src.paths[i] for i in idx]
        if src.offsets is None:
            self._c.submit(paths, keys, epoch, **extra)
        else:
            self._c.submit(
                paths,
                keys,
                epoch,
                [int(src.offsets[i]) for i in idx],
                [int(src.lengths[i]) for i in idx],  # type: ignore[index]
                **extra,
            )
        self._inflight.append((idx, keys, buf))

    def take(self) -> Taken:
        """The oldest batch submitted, once decoded (blocks, GIL released).
        Raises DecodeError or OSError for a sample that failed, unless
        skip_errors, and RuntimeError once closed; the batch then stays
        pending until :meth:`cancel`."""
        if self._gpu is None:
            batch = self._c.next()
            fallback, failed = batch.fallback, batch.failed
        else:
            fallback, failed = self._c.next(consumer_stream=self._gpu.consumer_stream())
        idx, keys, buf = self._inflight.popleft()
        if self._gpu is None:
            raw = torch.from_dlpack(batch)
        else:
            raw = self._gpu.tensor(buf, self._shape(len(idx)))
        return Taken(idx, keys, raw, fallback, failed)

    def _shape(self, n: int) -> tuple:
        h, w = self._out_h, self._out_w
        return (n, h, w, 3) if self._nhwc else (n, 3, h, w)

    def fill(
        self, dst: np.ndarray, rgb: bytes, w: int, h: int, epoch: int, key: int
    ) -> None:
        """Place an image decoded outside the pipeline (rgb: w*h*3 bytes)
        into ``dst``, one sample's host buffer, with the fused transform
        and the randomness of ``key``."""
        self._c.fill(dst, rgb, w, h, epoch, key)

    # ---- lifecycle ----

    def cancel(self) -> None:
        """Drop every batch in flight."""
        self._c.cancel()
        self._inflight.clear()

    def close(self) -> None:
        """Stop and join the threads; idempotent."""
        self._c.close()
