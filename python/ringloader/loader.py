"""ringloader.Loader: a torch DataLoader whose workers are C threads."""

from __future__ import annotations

import atexit
import io
import logging
import math
import os
import threading
import warnings
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    default_collate,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from . import _core
from .transforms import compile_transform

log = logging.getLogger("ringloader")

_LAYOUTS = ("NCHW", "NHWC", "channels_last")


class FallbackWarning(UserWarning):
    """Part of the work runs in Python instead of the fused C pipeline."""


class DataWarning(UserWarning):
    """A bad sample was tolerated: replaced (``on_error="skip"``) or decoded
    although truncated (``allow_truncated=True``)."""


_announced_io: set[str] = set()
# Every live loader, for ringloader.metrics and for closing at exit.
LIVE: "weakref.WeakSet[Loader]" = weakref.WeakSet()


def _close_all_at_exit() -> None:
    """Stop every loader's threads while the interpreter is still whole.
    Left to garbage collection, they would still run while other extensions
    tear down (torch's process groups and thread pools), and a torchrun
    worker then aborted at exit now and then ("terminate called without an
    active exception"). atexit runs this before torch's own handlers, which
    were registered earlier."""
    for loader in list(LIVE):
        try:
            loader.close()
        except Exception:  # exiting: a loader that cannot close is left be
            pass


atexit.register(_close_all_at_exit)


# The key of a sample's randomness is its dataset index the first time it
# comes in an epoch; a repeat (a sampler with replacement, repeated
# augmentation) adds its occurrence count above bit 40, and a replacement
# for a failed sample (on_error="skip") sets bit 62, so no two draws of an
# epoch share a key. Index = key & _INDEX_MASK.
_OCCURRENCE_SHIFT = 40
_INDEX_MASK = (1 << _OCCURRENCE_SHIFT) - 1
_REPLACEMENT = 1 << 62


class _Keys:
    """Random keys of the samples of one epoch, in the order drawn."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self.replaced: dict[int, int] = {}

    def draw(self, idx: Sequence[int]) -> list[int]:
        out = []
        for i in idx:
            n = self.seen.get(i, 0)
            self.seen[i] = n + 1
            out.append(i + (n << _OCCURRENCE_SHIFT))
        return out

    def replacement(self, j: int) -> int:
        n = self.replaced.get(j, 0)
        self.replaced[j] = n + 1
        return _REPLACEMENT | (n << _OCCURRENCE_SHIFT) | j


class _EpochIterator:
    """One epoch of a Loader: the generator that runs it, and whether a
    newer iter(loader) has taken its place."""

    def __init__(self, gen: Iterator) -> None:
        self._gen = gen
        self.superseded = False

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.superseded:
            raise RuntimeError(
                "this iterator was ended by a newer iter(loader): a ringloader "
                "Loader runs one epoch at a time (use two Loaders to iterate "
                "twice at once)"
            )
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()


def _default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit generator seed that depends only on (seed, epoch)."""
    state = np.random.SeedSequence([seed & (2**64 - 1), epoch & (2**64 - 1)])
    return int(state.generate_state(1, dtype=np.uint64)[0]) >> 1


def _rank_and_world(rank: Optional[int], world_size: Optional[int]) -> tuple[int, int]:
    import torch.distributed as dist

    if rank is None or world_size is None:
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "distributed=True needs torch.distributed initialised "
                "(init_process_group) or explicit rank= and world_size="
            )
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, {world_size})")
    return int(rank), int(world_size)


class _Meter:
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


class _Gpu:
    """Device buffers and streams for the GPU path.

    With a CUDA build of torch, device memory comes from torch's caching
    allocator and the copy stream is a ``torch.cuda.Stream``, whose handle the
    C threads use; each batch's buffer is allocated on the copy stream and
    records the consumer's stream when handed out, as torch's rules for
    cross-stream use ask. Without torch CUDA but with a runtime loaded from
    ``RINGLOADER_CUDART`` (the tests' fake), buffers come from cudaMalloc
    and the consumer's "stream" is synchronised before the host reads it.
    """

    def __init__(self, device: torch.device) -> None:
        ok, msg, lib, count = _core.cuda_probe()
        if not ok:
            raise RuntimeError(
                f"device={str(device)!r} needs a CUDA GPU, and none is usable here "
                f"({msg}). Use a machine with an NVIDIA GPU and a CUDA build of "
                "torch, or leave device unset to get batches in host memory."
            )
        self.torch_cuda = torch.cuda.is_available() and not os.environ.get(
            "RINGLOADER_CUDART"
        )
        if device.index is not None:
            self.index = device.index
        else:
            self.index = torch.cuda.current_device() if self.torch_cuda else 0
        if not 0 <= self.index < count:
            raise RuntimeError(f"CUDA device {self.index} requested, {count} present")
        self.device = torch.device("cuda", self.index)
        self.library = lib
        self._stream: Any = None
        self._consumer = 0

    def start(self) -> int:
        """The copy stream's handle (made once per process)."""
        if self.torch_cuda:
            self._stream = torch.cuda.Stream(device=self.device)
            return int(self._stream.cuda_stream)
        self._stream = _core.cuda_stream_create(self.index)
        self._consumer = _core.cuda_stream_create(self.index)
        return int(self._stream)

    def alloc(self, nbytes: int) -> tuple[Any, int]:
        """A fresh device buffer for one batch, and its address."""
        if self.torch_cuda:
            with torch.cuda.stream(self._stream):
                t = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            return t, int(t.data_ptr())
        buf = _core.cuda_malloc(self.index, nbytes)
        return buf, int(buf.ptr)

    def consumer_stream(self) -> int:
        if self.torch_cuda:
            return int(torch.cuda.current_stream(self.device).cuda_stream)
        return int(self._consumer)

    def tensor(self, buf: Any, shape: tuple) -> torch.Tensor:
        if self.torch_cuda:
            buf.record_stream(torch.cuda.current_stream(self.device))
            return buf.view(shape)
        # The fake's device memory is host memory, viewed without waiting:
        # like a real device tensor its content is only defined for work
        # ordered after the copy (see synchronize()).
        return torch.frombuffer(buf, dtype=torch.uint8).view(shape)

    def before_compute(self) -> None:
        """Called before torch ops on a fresh batch. On a GPU they are
        queued on the consumer stream, after the copy: nothing to do. The
        fake's "device" tensors are host tensors computed at once, so wait
        for the copy first, as the stream would."""
        if not self.torch_cuda:
            self.synchronize()

    def synchronize(self) -> None:
        """Wait for everything queued on the consumer's stream."""
        if self.torch_cuda:
            torch.cuda.current_stream(self.device).synchronize()
        else:
            _core.cuda_stream_sync(self.index, self._consumer)


@dataclass
class Sources:
    """Where each sample's bytes are: a file, or a byte range of one.

    ``offsets``/``lengths`` are None for whole files. Datasets that are not
    ImageFolder-like provide this through a ``ringloader_sources()``
    method (tar shards, file lists and indexed folders do).
    """

    paths: Sequence[str]
    targets: np.ndarray
    offsets: Optional[np.ndarray] = None
    lengths: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.paths)


def _sources(dataset: Any) -> Sources:
    """The files (or byte ranges) and int64 targets of a dataset."""
    provider = getattr(dataset, "ringloader_sources", None)
    if provider is not None:
        return provider()
    samples = getattr(dataset, "samples", None)
    if samples is None:
        raise TypeError(
            f"{type(dataset).__name__} has no 'samples' list of (path, target): "
            "ringloader.Loader reads image files itself, so it needs an "
            "ImageFolder-like dataset (ringloader.ImageFolder or torchvision's)"
        )
    paths = [s[0] for s in samples]
    targets = np.fromiter((s[1] for s in samples), dtype=np.int64, count=len(samples))
    return Sources(paths=paths, targets=targets)


class Loader:
    """Iterate over an image dataset in batches, like
    ``torch.utils.data.DataLoader``, with decoding in C threads.

    Args:
        dataset: ``ringloader.ImageFolder`` or torchvision's ``ImageFolder``
            (anything with ``samples``, a list of (path, target)).
        batch_size, shuffle, sampler, batch_sampler, drop_last: as
            ``DataLoader``; any torch ``Sampler`` works.
        num_threads: decode threads (default: the CPUs this process may use).
        prefetch: batches decoded ahead of the one being consumed.
        seed: seeds shuffling and augmentations; with ``epoch`` it fixes
            every batch exactly.
        transform: ``ringloader.transforms`` or torchvision transforms with a
            fixed output size; defaults to ``dataset.transform``.
        layout: ``"NCHW"`` (torch's default), ``"NHWC"``, or
            ``"channels_last"`` (NCHW shape, NHWC memory, as
            ``torch.channels_last``).
        io: ``"auto"`` (io_uring when available), ``"io_uring"`` or
            ``"pread"``.
        max_pixels: images with more pixels are refused before decoding.
        allow_truncated: decode truncated JPEGs (grey bottom) instead of
            raising; they are counted in ``stats()["truncated"]`` and the
            first one is announced with a :class:`DataWarning`.
        on_error: ``"raise"`` (default): a sample that cannot be read or
            decoded raises ``DecodeError`` or ``OSError`` naming it, at its
            batch; the loader can be iterated again afterwards. ``"skip"``:
            the sample is replaced by the next readable one in dataset
            order (index + 1, + 2, ... with its own label and augmentation,
            so the result does not depend on timing), counted in
            ``stats()["skipped"]`` and announced once; after
            ``max_consecutive_errors`` unreadable samples in a row, the
            error is raised all the same.
        device: ``None``/``"cpu"`` (host batches), or ``"cuda"``,
            ``"cuda:N"``, a ``torch.device``: batches are copied to that GPU
            from pinned memory by the C threads as soon as each is decoded,
            on a stream of the loader's, overlapping decoding and compute;
            uint8 crosses PCIe and dtype/normalisation/channels_last are
            applied on the device.
        direct_io: read with ``O_DIRECT``, bypassing the page cache, for
            data sets larger than RAM on fast storage; where the file system
            refuses it, files are read buffered and this is said once.
        distributed: shard the data across processes exactly as
            ``DistributedSampler(dataset, world_size, rank, shuffle, seed,
            drop_last)`` does; rank and world size come from
            ``torch.distributed`` unless given. Passing a
            ``DistributedSampler`` as ``sampler`` works too.

    Yields ``(images, labels)``: a tensor of shape (N, 3, H, W) (or
    (N, H, W, 3)), uint8 unless the transform converts to floats, and an
    int64 tensor of shape (N,). Transforms after the fusable prefix run in
    Python on each sample (announced once with a :class:`FallbackWarning`). The images are views of
    a batch buffer, not copies; keeping them is safe (the loader allocates
    another buffer instead of overwriting one still referenced).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = False,
        sampler: Optional[Sampler | Sequence[int]] = None,
        batch_sampler: Optional[Sampler | Sequence[Sequence[int]]] = None,
        drop_last: bool = False,
        num_threads: Optional[int] = None,
        prefetch: int = 2,
        seed: int = 0,
        transform: Any = None,
        layout: str = "NCHW",
        io: str = "auto",
        max_pixels: int = _core.DEFAULT_MAX_PIXELS,
        allow_truncated: bool = False,
        distributed: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        device: Any = None,
        direct_io: bool = False,
        on_error: str = "raise",
        max_consecutive_errors: int = 16,
    ) -> None:
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, "
                    "shuffle, sampler, and drop_last"
                )
            batch_size = None
        elif batch_size is None:
            raise ValueError(
                "batch_size=None (no batching) is not supported: ringloader "
                "always yields batches; use batch_size=1"
            )
        elif batch_size < 1:
            raise ValueError(
                f"batch_size should be a positive integer, not {batch_size}"
            )
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', not {layout!r}")
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, not {prefetch}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if max_consecutive_errors < 1:
            raise ValueError(
                f"max_consecutive_errors must be >= 1, not {max_consecutive_errors}"
            )

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.shuffle = bool(shuffle)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_threads = int(num_threads or _default_threads())
        self.prefetch = int(prefetch)
        self.seed = int(seed)
        self.layout = layout
        self.io = io
        self.max_pixels = int(max_pixels)
        self.allow_truncated = bool(allow_truncated)
        self.direct_io = bool(direct_io)
        self.on_error = on_error
        self.max_consecutive_errors = int(max_consecutive_errors)
        # Without a transform of its own the loader follows the dataset's,
        # as DataLoader does: a new dataset.transform (progressive resizing)
        # is compiled at the next iteration.
        self._follow_dataset = transform is None
        self.device = (
            torch.device(device) if device is not None else torch.device("cpu")
        )
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, not {self.device}")
        self._gpu: Optional[_Gpu] = None
        self._use_transform(
            transform if transform is not None else getattr(dataset, "transform", None),
            stacklevel=3,
        )
        if self.device.type == "cuda":
            self._gpu = _Gpu(self.device)
        self._use_sources()
        self.distributed = bool(
            distributed or rank is not None or world_size is not None
        )
        self.rank, self.world_size = 0, 1
        if self.distributed:
            if sampler is not None or batch_sampler is not None:
                raise ValueError(
                    "distributed=True shards with its own DistributedSampler; "
                    "pass either distributed=True or a sampler, not both"
                )
            self.rank, self.world_size = _rank_and_world(rank, world_size)
        self.target_transform = getattr(dataset, "target_transform", None)

        self._epoch = 0
        self._epoch_explicit = False
        self._started_epochs = 0
        self._pipe: Optional[_core.Pipeline] = None
        self._pipe_pid = -1
        self._lock = threading.Lock()
        self._active: Optional[weakref.ref] = None
        self._yielded = 0  # batches yielded in the current epoch
        self._epoch_finished = False
        self._skip = 0  # batches to skip at the next iteration
        self._sampler_states: dict = {}  # stateful samplers at epoch start
        self._meter = _Meter()
        self._fallback_decodes = 0
        self._announced_fallback = False
        self._skipped = 0
        self._announced_skip = False
        self._announced_truncated = False
        self._announced_direct = False
        LIVE.add(self)

    def _use_transform(self, transform: Any, stacklevel: int) -> None:
        compiled = compile_transform(transform)
        tail = list(compiled.rest)
        if tail and self.device.type == "cuda":
            raise ValueError(
                "transforms that run in Python per sample ("
                + ", ".join(type(t).__name__ for t in tail)
                + ") cannot follow device='cuda'; apply them to the batch"
            )
        if tail:
            names = ", ".join(type(t).__name__ for t in tail)
            warnings.warn(
                f"ringloader: fused {' + '.join(compiled.fused)} into the C "
                f"decoder; {names} cannot be fused and runs in Python per sample "
                "(slower)",
                FallbackWarning,
                stacklevel=stacklevel + 1,
            )
        self.transform, self._compiled, self._tail = transform, compiled, tail
        # Samples handed to a Python tail as images are converted from NHWC.
        self._c_layout = (
            "NHWC"
            if self.layout in ("NHWC", "channels_last")
            or (tail and not compiled.tensor_out)
            else "NCHW"
        )

    def _use_sources(self) -> None:
        self._src = _sources(self.dataset)
        self._paths, self._targets = self._src.paths, self._src.targets
        samples = getattr(self.dataset, "samples", None)
        self._samples_seen = (id(samples), len(samples) if samples is not None else 0)

    def _follow(self) -> None:
        """Pick up a dataset whose transform or samples list was replaced
        since the last epoch, as DataLoader would (it reads them at every
        fetch)."""
        if self._follow_dataset:
            current = getattr(self.dataset, "transform", None)
            if current is not self.transform:
                self._use_transform(current, stacklevel=4)
                if self._pipe is not None:
                    self._pipe.close()  # built for the old transform
                    self._pipe = None
        samples = getattr(self.dataset, "samples", None)
        if (
            getattr(self.dataset, "ringloader_sources", None) is None
            and samples is not None
            and (id(samples), len(samples)) != self._samples_seen
        ):
            self._use_sources()

    # ---- DataLoader-compatible surface ----

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self.sampler is not None:
            n = len(self.sampler)
        elif self.distributed:
            n = len(self._distributed_sampler(0))
        else:
            n = len(self._paths)
        if self.drop_last:
            return n // self.batch_size
        return math.ceil(n / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order and augmentations the next iteration
        yields (also forwarded to a sampler that has ``set_epoch``). Without
        calls, each new iteration advances the epoch by one."""
        epoch = int(epoch)
        if epoch != self._epoch:
            self._skip = 0  # a restored position belongs to its own epoch
        self._epoch = epoch
        self._epoch_explicit = True
        self._yielded = self._skip
        self._epoch_finished = False
        for s in (self.sampler, self.batch_sampler):
            if s is not None and hasattr(s, "set_epoch"):
                s.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._epoch

    def _distributed_sampler(self, epoch: int) -> DistributedSampler:
        s = DistributedSampler(
            range(len(self._paths)),
            num_replicas=self.world_size,
            rank=self.rank,
            shuffle=self.shuffle,
            seed=self.seed,
            drop_last=self.drop_last,
        )
        s.set_epoch(epoch)
        return s

    def _batches_for(self, epoch: int):
        # A sampler of the user's keeps the epoch the user gave it (directly,
        # or through Loader.set_epoch): as with DataLoader, iterating does
        # not change it. A stateful one is saved as it is now, before this
        # epoch draws from it (and prefetching draws ahead of what is
        # yielded): resuming restores this and skips the yielded batches.
        self._sampler_states = {
            name: s.state_dict()
            for name, s in (
                ("sampler", self.sampler),
                ("batch_sampler", self.batch_sampler),
            )
            if s is not None and hasattr(s, "state_dict")
        }
        if self.batch_sampler is not None:
            return iter(self.batch_sampler)
        if self.sampler is not None:
            sampler = self.sampler
        elif self.distributed:
            sampler = self._distributed_sampler(epoch)
        elif self.shuffle:
            gen = torch.Generator()
            gen.manual_seed(_epoch_seed(self.seed, epoch))
            sampler = RandomSampler(range(len(self._paths)), generator=gen)
        else:
            sampler = SequentialSampler(range(len(self._paths)))
        return iter(BatchSampler(sampler, self.batch_size, self.drop_last))

    # ---- the pipeline ----

    def _pipeline(self) -> _core.Pipeline:
        pid = os.getpid()
        if self._pipe is None or self._pipe_pid != pid or self._pipe.closed:
            # In a forked child the parent's threads do not exist: build a
            # new pipeline and leave the inherited one untouched.
            c = self._compiled
            gpu = {}
            if self._gpu is not None:
                # uint8 crosses PCIe; the conversion runs on the device.
                gpu = dict(
                    device=self._gpu.index, copy_stream=self._gpu.start(), dtype="uint8"
                )
            self._pipe = _core.Pipeline(
                c.spec,
                num_threads=self.num_threads,
                layout=self._c_layout,
                **(gpu or dict(dtype=c.dtype, mul=c.mul, add=c.add)),
                seed=self.seed & (2**64 - 1),
                io=self.io,
                max_pixels=self.max_pixels,
                allow_truncated=self.allow_truncated,
                direct_io=self.direct_io,
                skip_errors=self.on_error == "skip",
            )
            self._pipe_pid = pid
            reason = self._pipe.io_reason
            if self._pipe.io_backend == "pread" and reason not in _announced_io:
                _announced_io.add(reason)
                log.info("ringloader: reading with pread (%s)", reason)
        return self._pipe

    @property
    def io_backend(self) -> str:
        """The I/O backend in use: 'io_uring' or 'pread'."""
        return self._pipeline().io_backend

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        with self._lock:
            previous = self._active() if self._active else None
            if previous is not None:
                # One epoch at a time: the older iterator ends, and says so
                # if it is used again rather than stopping silently short.
                previous.superseded = True
                previous.close()
            self._follow()
            if self._started_epochs > 0 and not self._epoch_explicit:
                self._epoch += 1
                self._skip = 0
            self._yielded = self._skip
            self._epoch_finished = False
            self._epoch_explicit = False
            self._started_epochs += 1
            it = _EpochIterator(self._iterate(self._epoch))
            self._active = weakref.ref(it)
        return it

    def _iterate(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        pipe = self._pipeline()
        src = self._src
        paths, targets = src.paths, src.targets
        batches = self._batches_for(epoch)
        keys = _Keys()
        skip, self._skip = self._skip, 0
        for _ in range(skip):  # resuming: these batches were yielded before
            done = next(batches, None)
            if done is None:
                break
            keys.draw([int(i) for i in done])
        self._yielded = skip
        self._epoch_finished = False
        self._meter.start_epoch()
        pending: deque = deque()
        exhausted = False
        try:
            while True:
                # Everything from here to the yield is time the training
                # loop waits for its batch (submitting, waiting, wrapping).
                t0 = time.perf_counter()
                while not exhausted and len(pending) < self.prefetch:
                    idx = next(batches, None)
                    if idx is None:
                        exhausted = True
                        break
                    idx = [int(i) for i in idx]
                    if not idx:
                        continue
                    batch_keys = keys.draw(idx)
                    extra: dict = {}
                    buf = None
                    if self._gpu is not None:
                        buf, extra["device_buffer"] = self._gpu.alloc(
                            len(idx) * self._sample_bytes()
                        )
                    if src.offsets is None:
                        pipe.submit([paths[i] for i in idx], batch_keys, epoch, **extra)
                    else:
                        pipe.submit(
                            [paths[i] for i in idx],
                            batch_keys,
                            epoch,
                            [int(src.offsets[i]) for i in idx],
                            [int(src.lengths[i]) for i in idx],
                            **extra,
                        )
                    pending.append((idx, batch_keys, buf))
                if not pending:
                    self._epoch_finished = True
                    return
                try:
                    if self._gpu is None:
                        batch = pipe.next()
                        others, failed = batch.fallback, batch.failed
                    else:
                        others, failed = pipe.next(
                            consumer_stream=self._gpu.consumer_stream()
                        )
                except (_core.DecodeError, OSError) as e:
                    self._describe(e)
                    raise
                idx, batch_keys, buf = pending.popleft()
                if self._gpu is None:
                    raw = torch.from_dlpack(batch)
                else:
                    raw = self._gpu.tensor(buf, self._shape(len(idx)))
                if others or failed:
                    failed = list(failed)
                    if others:
                        failed += self._fill_others(
                            pipe, raw, idx, batch_keys, others, epoch
                        )
                    if failed:
                        idx = self._replace_failed(pipe, raw, idx, failed, epoch, keys)
                if self._gpu is None:
                    images = self._finish(raw)
                else:
                    images = self._on_device(raw)
                self._announce_truncated(pipe)
                labels = torch.from_numpy(targets[idx])
                if self.target_transform is not None:
                    # As DataLoader batches them: floats stay float64,
                    # tuples and tensors are collated element-wise.
                    labels = default_collate(
                        [self.target_transform(int(t)) for t in labels]
                    )
                if self.direct_io and not self._announced_direct:
                    if pipe.stats()["direct_refused"]:
                        self._announced_direct = True
                        log.warning(
                            "ringloader: the file system refuses O_DIRECT for "
                            "%s; reading it (and others like it) through the "
                            "page cache",
                            paths[idx[0]],
                        )
                self._yielded += 1
                self._meter.waited(time.perf_counter() - t0)
                self._meter.delivered(len(idx))
                yield images, labels
        finally:
            if pending and not pipe.closed:
                pipe.cancel()

    def _place(
        self,
        pipe: Any,
        raw: torch.Tensor,
        pos: int,
        rgb: bytes,
        w: int,
        h: int,
        epoch: int,
        i: int,
    ) -> None:
        """Place an image decoded outside the C pipeline as sample i at
        position pos of the batch, with the same fused transform."""
        if self._gpu is None:
            pipe.fill(raw[pos].view(torch.uint8).numpy(), rgb, w, h, epoch, i)
        else:
            host = torch.empty(raw[pos].numel(), dtype=torch.uint8)
            pipe.fill(host.numpy(), rgb, w, h, epoch, i)
            self._gpu.before_compute()
            raw[pos].copy_(host.view(raw[pos].shape).to(raw.device))

    def _fill_others(
        self,
        pipe: Any,
        raw: torch.Tensor,
        idx: list,
        batch_keys: list,
        positions: Sequence[int],
        epoch: int,
    ) -> list:
        """Decode the samples that are not JPEG (a PNG named .JPEG, WebP,
        BMP...) with Pillow and place them with the same fused transform.
        Returns the (position, error) of those Pillow cannot read either
        when on_error="skip" (else raises)."""
        failed = []
        for pos in positions:
            i = idx[pos]
            try:
                rgb, w, h, kind = self._decode_other(i, self._read_sample(i))
            except _core.DecodeError as e:
                if self.on_error != "skip":
                    raise
                failed.append((pos, e))
                continue
            self._place(pipe, raw, pos, rgb, w, h, epoch, batch_keys[pos])
            self._fallback_decodes += 1
            if not self._announced_fallback:
                self._announced_fallback = True
                warnings.warn(
                    f"ringloader: {self._paths[i]} is {kind}, not JPEG: such files "
                    "are decoded with Pillow (slower) and counted in "
                    "stats()['fallback_decodes']",
                    FallbackWarning,
                    stacklevel=4,
                )
        return failed

    def _replace_failed(
        self,
        pipe: Any,
        raw: torch.Tensor,
        idx: list,
        failed: list,
        epoch: int,
        keys: _Keys,
    ) -> list:
        """on_error="skip": put the next readable sample (in dataset order)
        in the place of each failed one. Returns the batch's indices with
        the replacements; raises the original error after
        max_consecutive_errors failures in a row."""
        idx = list(idx)
        n = len(self._paths)
        for pos, error in failed:
            i = idx[pos]
            self._describe(error)
            for k in range(1, self.max_consecutive_errors):
                j = (i + k) % n
                try:
                    data = self._read_sample(j)
                    if data[:3] == b"\xff\xd8\xff":
                        rgb, h, w = _core.decode(
                            data,
                            max_pixels=self.max_pixels,
                            allow_truncated=self.allow_truncated,
                        )
                    else:
                        rgb, w, h, _ = self._decode_other(j, data)
                except (_core.DecodeError, OSError):
                    continue
                self._place(pipe, raw, pos, rgb, w, h, epoch, keys.replacement(j))
                break
            else:
                if error.args:
                    tail = (
                        f" (on_error='skip': the {self.max_consecutive_errors - 1}"
                        " samples after it failed too)"
                    )
                    if isinstance(error, OSError):
                        error.strerror = f"{error.strerror}{tail}"
                    else:
                        error.args = (f"{error.args[0]}{tail}",) + error.args[1:]
                raise error
            idx[pos] = j
            self._skipped += 1
            log.info(
                "ringloader: skipped %s (%s); replaced by %s",
                self._paths[i],
                error,
                self._paths[j],
            )
            if not self._announced_skip:
                self._announced_skip = True
                warnings.warn(
                    f"ringloader: skipped a sample that cannot be loaded ({error}); "
                    f"replaced by {self._paths[j]} (on_error='skip'). Further skips "
                    "are counted in stats()['skipped'] and logged at INFO level.",
                    DataWarning,
                    stacklevel=4,
                )
        return idx

    def _announce_truncated(self, pipe: Any) -> None:
        if self._announced_truncated or not self.allow_truncated:
            return
        n = pipe.stats()["truncated"]
        if n:
            self._announced_truncated = True
            warnings.warn(
                f"ringloader: decoded {n} truncated JPEG(s) (allow_truncated=True: "
                "their missing rows are grey); counted in stats()['truncated']",
                DataWarning,
                stacklevel=3,
            )

    def _read_sample(self, i: int) -> bytes:
        """The bytes of sample i: its file, or its byte range of a shard."""
        src = self._src
        with open(self._paths[i], "rb") as f:
            if src.offsets is not None:
                f.seek(int(src.offsets[i]))
                return f.read(int(src.lengths[i]))
            return f.read()

    def _decode_other(self, i: int, data: bytes) -> tuple[bytes, int, int, str]:
        """Decode sample i, not a JPEG, with Pillow: (rgb, w, h, format)."""
        path = self._paths[i]
        try:
            from PIL import Image
        except ImportError:
            raise _core.DecodeError(
                f"cannot decode {path}: not a JPEG; install Pillow to read "
                "other formats"
            ) from None
        try:
            with Image.open(io.BytesIO(data)) as im:
                kind = im.format or "not JPEG"
                im.draft(None, None)
                rgb = im.convert("RGB")
        except Exception as e:
            err = _core.DecodeError(
                f"cannot decode {path}: not a JPEG, and "
                f"Pillow cannot read it either ({e})"
            )
            err.path, err.reason, err.kind = path, str(e), "not_jpeg"
            err.index = i
            self._describe(err)
            raise err from None
        w, h = rgb.size
        return rgb.tobytes(), w, h, kind

    def _describe(self, error: BaseException) -> None:
        """Name the failing sample as the dataset knows it (for a tar shard:
        the member and its byte range), not only by its file."""
        describe = getattr(self.dataset, "describe", None)
        index = getattr(error, "index", None)
        if index is not None:
            index = error.index = index & _INDEX_MASK  # a key, from C
        if describe is None or index is None:
            return
        try:
            where = describe(index)
        except Exception:  # a description is a courtesy, never a new error
            return
        if isinstance(error, OSError):
            error.strerror = f"{error.strerror} (sample {where})"
        elif error.args:
            error.args = (f"{error.args[0]} (sample {where})",) + error.args[1:]
        error.sample = where

    def _sample_bytes(self) -> int:
        spec = self._compiled.spec
        return spec["out_h"] * spec["out_w"] * 3

    def _shape(self, n: int) -> tuple:
        h, w = self._compiled.spec["out_h"], self._compiled.spec["out_w"]
        return (n, h, w, 3) if self._c_layout == "NHWC" else (n, 3, h, w)

    def _on_device(self, images: torch.Tensor) -> torch.Tensor:
        """Layout and dtype conversion of a uint8 batch on its device."""
        if self.layout == "channels_last":
            images = images.permute(0, 3, 1, 2)
        c = self._compiled
        if c.dtype == "uint8":
            return images
        self._gpu.before_compute()
        view = (1, 1, 1, 3) if self.layout == "NHWC" else (1, 3, 1, 1)
        mul = torch.tensor(c.mul, dtype=torch.float32, device=images.device).view(view)
        add = torch.tensor(c.add, dtype=torch.float32, device=images.device).view(view)
        return torch.addcmul(add, images.to(torch.float32), mul).to(
            getattr(torch, c.dtype)
        )

    def _finish(self, images: torch.Tensor) -> torch.Tensor:
        """Lay the C output out as asked and run the Python tail, if any."""
        if self._tail:
            return self._run_tail(images)
        if self.layout == "channels_last":
            return images.permute(0, 3, 1, 2)
        return images

    def _run_tail(self, images: torch.Tensor) -> torch.Tensor:
        from torch.utils.data import default_collate

        out = []
        for i in range(images.shape[0]):
            if self._compiled.tensor_out:
                sample: Any = images[i]
                if self._c_layout == "NHWC":
                    sample = sample.permute(2, 0, 1)
            else:
                from PIL import Image

                sample = Image.fromarray(images[i].numpy())
            for t in self._tail:
                sample = t(sample)
            out.append(sample)
        return default_collate(out)

    # ---- lifecycle ----

    def close(self) -> None:
        """Stop the threads and free the batch buffers not held by tensors
        (pinned memory included). Idempotent; the loader can be iterated
        again afterwards. Called from another thread while one iterates,
        that iteration raises ``RuntimeError`` (the loader is closed) at
        its next batch."""
        active = self._active() if self._active else None
        if active is not None:
            try:
                active.close()
            except ValueError:
                # Iterating in another thread right now: closing the
                # pipeline below makes its next batch raise instead.
                pass
        if self._pipe is not None and self._pipe_pid == os.getpid():
            self._pipe.close()
        self._pipe = None

    @property
    def pinned_slots(self) -> int:
        """Pinned host batch slots currently allocated (GPU path)."""
        return self._pipe.pinned_slots if self._pipe is not None else 0

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ---- resume ----

    def state_dict(self) -> dict:
        """Where this loader is: (epoch, batches already yielded, seed),
        enough to resume exactly with :meth:`load_state_dict` in a new
        process. Same method names as torchdata's ``StatefulDataLoader``."""
        state = {
            "version": 1,
            "epoch": self._epoch,
            "batches_yielded": self._yielded,
            "epoch_finished": self._epoch_finished,
            "seed": self.seed,
            "world_size": self.world_size,
            "rank": self.rank,
        }
        for name in ("sampler", "batch_sampler"):
            s = getattr(self, name)
            if s is not None and hasattr(s, "state_dict"):
                # As it was when this epoch started (see _batches_for).
                state[name] = self._sampler_states.get(name, s.state_dict())
        return state

    def load_state_dict(self, state: dict) -> None:
        """Make the next iteration continue where ``state`` was taken: the
        remaining batches of that epoch, bit-identical (augmentations
        included) for the built-in shuffle, DistributedSampler sharding and
        any deterministic sampler."""
        if state.get("version") != 1:
            raise ValueError(f"unknown ringloader state version {state.get('version')}")
        if self.distributed and state.get("world_size", 1) != self.world_size:
            raise ValueError(
                f"this state was taken with world_size={state.get('world_size')}, "
                f"this loader has world_size={self.world_size}: the shards differ, "
                "so the position cannot be restored"
            )
        self.seed = int(state["seed"])
        epoch, done = int(state["epoch"]), int(state["batches_yielded"])
        if state.get("epoch_finished") or done >= len(self):
            epoch, done = epoch + 1, 0
        self._epoch, self._skip = epoch, done
        self._epoch_explicit = True
        self._started_epochs = max(self._started_epochs, 1)
        for name in ("sampler", "batch_sampler"):
            s = getattr(self, name)
            if s is not None and hasattr(s, "set_epoch"):
                s.set_epoch(epoch)
            if name in state and hasattr(s, "load_state_dict"):
                s.load_state_dict(state[name])
        self._sampler_states = {}
        if self._pipe is not None:
            self._pipe.close()  # the seed may have changed
            self._pipe = None

    # ---- telemetry ----

    def stats(self) -> dict:
        """Throughput and where the time goes, for the current (or last)
        epoch, measured from its first batch so start-up is not counted:

        - ``images_per_second``, ``batches_per_second``;
        - ``stall_fraction``: share of wall time the training loop spent
          waiting for its next batch (0: the loader keeps up; near 1: the
          GPU starves);
        - ``read_seconds``, ``decode_seconds``: cumulative thread time in
          reading and in decode + transform;
        - ``queue_depth``: batches decoded and waiting; ``inflight``:
          batches submitted; ``first_batch_seconds``; ``io_backend``;
        - ``errors``: samples that failed to load; ``skipped``: of those,
          replaced (``on_error="skip"``); ``truncated``: JPEGs decoded
          although truncated (``allow_truncated=True``);
          ``fallback_decodes``: non-JPEG files decoded with Pillow.
        """
        out = self._meter.snapshot()
        c = (
            self._pipe.stats()
            if self._pipe is not None and not self._pipe.closed
            else {}
        )
        out.update(
            read_seconds=c.get("read_seconds", 0.0),
            decode_seconds=c.get("decode_seconds", 0.0),
            samples_decoded=c.get("samples", 0),
            bytes_read=c.get("bytes_read", 0),
            errors=c.get("errors", 0),
            inflight=c.get("inflight", 0),
            queue_depth=c.get("ready", 0),
            io_backend=self._pipe.io_backend if c else None,
            epoch=self._epoch,
            rank=self.rank,
            fallback_decodes=self._fallback_decodes,
            direct_refused=c.get("direct_refused", 0),
            skipped=self._skipped,
            truncated=c.get("truncated", 0),
        )
        return out

    def __repr__(self) -> str:
        return (
            f"ringloader.Loader({len(self._paths)} images, batch_size="
            f"{self.batch_size}, num_threads={self.num_threads}, "
            f"prefetch={self.prefetch}, layout={self.layout!r})"
        )
