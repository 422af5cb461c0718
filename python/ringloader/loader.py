"""ringloader.Loader: a torch DataLoader whose workers are C threads.

The Loader keeps DataLoader's surface (constructor, ``len``, iteration,
``set_epoch``, ``state_dict``, ``stats``, ``close``) and delegates each
concern to a module of its own: :mod:`._sampling` (which batches an
epoch yields), :mod:`._keys` (the random keys of its samples),
:mod:`._position` (where the loader stands, resuming),
:mod:`._epoch_iterator` (one epoch's iterator), :mod:`._pipeline` (the C
pipeline), :mod:`._plan` (a transform split between C and Python),
:mod:`._fallback` (Pillow's decodes, replaced samples, what is said about
them), :mod:`._gpu` (the device path) and :mod:`._meter` (stats). Datasets
come from :mod:`.datasets`, which knows nothing of the loader.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
import time
import weakref
from typing import Any, Iterator, Optional, Sequence

import torch
from torch.utils.data import Sampler
from torch.utils.data._utils.pin_memory import pin_memory

from . import _core
from ._epoch_iterator import SUPERSEDED, EpochIterator
from ._fallback import Fallback
from ._gpu import Gpu, open_gpu
from ._meter import Meter
from ._meter import stats as assemble_stats
from ._pipeline import Pipeline, checked_arena_bytes
from ._plan import TransformPlan, plan_views, run_tail
from ._position import Position
from ._sampling import (
    Sampling,
    check_batching,
    check_sharded,
    sharding,
    shard_starts,
    shuffle_mode,
)
from .datasets import targets as _targets
from .datasets.base import sources_of
from .datasets.composed import resolve, samples_stamp
from .transforms import MultiView

_LAYOUTS = ("NCHW", "NHWC", "channels_last")

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


def _default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Loader:
    """Iterate over an image dataset in batches, like
    ``torch.utils.data.DataLoader``, with decoding in C threads.

    Args:
        dataset: ``ringloader.ImageFolder`` or torchvision's ``ImageFolder``
            (anything with ``samples``, a list of (path, target)), a
            dataset giving ``ringloader_sources()``, a class of yours with
            ``ringloader_files()`` (its paths and targets as arrays:
            ``datasets/base.py``'s ``files_of``), or torch's ``Subset``
            (``random_split``) or ``ConcatDataset`` of those, nested to any
            depth (the parts of a ConcatDataset with the same transform),
            or a ``ringloader.Mix`` of those (its epochs are its draws, in
            the order it draws them, whatever ``shuffle`` says).
        batch_size, shuffle, sampler, batch_sampler, drop_last: as
            ``DataLoader``; any torch ``Sampler`` works. ``shuffle=True``
            is ringloader's own shuffle, not torch's ``randperm``: a keyed
            bijection of the indices computed a batch at a time, with no
            array of the data set's size. ``shuffle="runs"``
            shuffles runs of 16 consecutive samples instead of samples:
            for remote shards, where a batch's neighbouring samples come in
            one range GET, so that a batch of 64 costs 4 GETs instead of 64
            (local reads gain nothing from it). ``shuffle="stream"`` (a
            ``TarShards``) reads the shards in a random order, one after
            another, each rank a contiguous part of them, the samples
            shuffled within windows of 8,192 (as webdataset's shard shuffle
            and ``shuffle(n)`` do, but computable from any position: exact
            resume): for object stores where even runs cost too many
            requests.
        num_threads: decode threads (default: the CPUs this process may use).
        prefetch: batches decoded ahead of the one being consumed.
        seed: seeds shuffling and augmentations; with ``epoch`` it fixes
            every batch exactly (a Mix's draws follow ``Mix(seed=)``).
        transform: ``ringloader.transforms`` or torchvision transforms;
            defaults to ``dataset.transform``. One without a crop (a
            shorter-side ``Resize`` alone, or only flips and conversions:
            torchvision's detection presets) gives each image its own size.
        arena_bytes: for such a transform, the memory each batch's images
            are placed in (default 64 MiB, its bound exact); an image that
            does not fit gets a buffer of its own (slower, never an error;
            counted in ``stats()["past_arena"]``). With ``device`` those
            images are then copied, after the arena, into one more device
            buffer of the batch's (its spill buffer, from the same
            allocator); a batch whose spill buffer cannot be allocated
            fails with a ``MemoryError`` saying to raise ``arena_bytes``.
        layout: ``"NCHW"`` (torch's default), ``"NHWC"``, or
            ``"channels_last"`` (NCHW shape, NHWC memory, as
            ``torch.channels_last``).
        io: ``"auto"`` (io_uring when available), ``"io_uring"`` or
            ``"pread"``.
        max_pixels: images with more pixels are refused from their header,
            before decoding, whatever their format (``DecodeError``, kind
            ``"too_big"``). It also bounds each decode thread's memory for
            one image: libjpeg's at 8 bytes per pixel of ``max_pixels`` +
            64 MiB (783 MB at the default; what a progressive CMYK JPEG at
            the limit needs), plus the decoded region.
        allow_truncated: decode truncated JPEGs (grey bottom), PNGs and
            WebPs (black bottom) instead of raising; they are counted in ``stats()["truncated"]`` and the
            first one is announced with a :class:`DataWarning`.
        on_error: ``"raise"`` (default): a sample that cannot be read or
            decoded raises ``DecodeError`` or ``OSError`` naming it, at its
            batch; the loader can be iterated again afterwards. ``"skip"``:
            the sample is replaced by the next readable one in dataset
            order (index + 1, + 2, ... with its own label and augmentation,
            so the result does not depend on timing), counted in
            ``stats()["skipped"]`` and announced once; after
            ``max_consecutive_errors`` unreadable samples in a row (at
            most 256), the error is raised all the same. With ``"skip"`` an
            epoch may draw one sample at most 16,384 times (a sampler with
            replacement), else about 4 million: more raises ValueError, as
            the random keys could not tell the repeats apart.
        device: ``None``/``"cpu"`` (host batches), or ``"cuda"``,
            ``"cuda:N"``, a ``torch.device``: batches are copied to that GPU
            from pinned memory by the C threads as soon as each is decoded,
            on a stream of the loader's, overlapping decoding and compute;
            uint8 crosses PCIe and dtype/normalisation/channels_last are
            applied on the device. Images of varying sizes are each a
            tensor on its own region of the batch's device buffer (one
            copy of the batch's arena), or, past the arena, of its spill
            buffer (one more copy each).
        direct_io: read with ``O_DIRECT``, bypassing the page cache, for
            data sets larger than RAM on fast storage; where the file system
            refuses it, files are read buffered and this is said once.
        distributed: shard the data across processes as
            ``DistributedSampler(dataset, world_size, rank, shuffle, seed,
            drop_last)`` does (its sizes, padding and split; the order,
            when shuffled, is the built-in shuffle's); rank and world size
            come from ``torch.distributed`` unless given. Passing a
            ``DistributedSampler`` as ``sampler`` works too. Left at None
            where ``torch.distributed`` runs several processes and no
            sampler is given, iterating raises ValueError (every rank would
            read the whole data set): ``distributed=False`` says that is
            what you want.

    Yields ``(images, labels)``: a tensor of shape (N, 3, H, W) (or
    (N, H, W, 3)), uint8 unless the transform converts to floats, and the
    targets: an int64 tensor of shape (N,) for class indices, else as
    torch's DataLoader batches the dataset's targets (floats, rows,
    tuples: ``datasets/targets.py``). With a ``transforms.MultiView`` it yields
    ``(views, labels)``: a list of such tensors, one per view, each with
    the size and dtype of its view; each image is read and decoded once.
    With a transform that gives each image its own size, ``images`` is a
    list of N tensors, each (3, h_i, w_i) (or (h_i, w_i, 3)), as torch's
    DataLoader with ``collate_fn=lambda b: tuple(zip(*b))`` gives them
    (images and labels then as described). Transforms after the fusable prefix run in
    Python on each sample (announced once with a :class:`FallbackWarning`). The images are views of
    a batch buffer, not copies; keeping them is safe (the loader allocates
    another buffer instead of overwriting one still referenced).

    For a ``TarShards(fields=...)`` it yields a tuple in the order of its
    fields: the images (or the list of views) in the image field's place,
    each other field batched (``datasets/fields.py``).
    """

    # Whether batches are copied into page-locked memory before they are
    # yielded: DataLoader's pin_memory=True, on a machine with an
    # accelerator (ringloader.DataLoader sets it; see there why a copy).
    _pin_memory = False
    # A collate_fn of the user's, which ringloader.DataLoader calls on the
    # samples of each batch (its _collated) instead of yielding the batch.
    _collate: Any = None

    def __init__(
        self,
        dataset: Any,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool | str] = False,
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
        distributed: Optional[bool] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        device: Any = None,
        direct_io: bool = False,
        on_error: str = "raise",
        max_consecutive_errors: int = 16,
        arena_bytes: Optional[int] = None,
    ) -> None:
        batch_size = check_batching(
            batch_size, shuffle, sampler, batch_sampler, drop_last
        )
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', not {layout!r}")
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, not {prefetch}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if not 1 <= max_consecutive_errors <= _core.MAX_CONSECUTIVE_ERRORS:
            # Above the bound, replacements would share random keys.
            raise ValueError(
                f"max_consecutive_errors must be 1..{_core.MAX_CONSECUTIVE_ERRORS}, "
                f"not {max_consecutive_errors}"
            )

        self.dataset = dataset
        # What is read: the dataset itself, or the files under a Subset or
        # ConcatDataset of datasets (datasets/composed.py).
        self._data = resolve(dataset)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.shuffle, kind = shuffle_mode(shuffle)
        self.runs, self.stream = kind == "runs", kind == "stream"
        # shuffle="stream": the shards' first samples (ValueError for a
        # dataset that has none: see _sampling.shard_starts).
        self._shard_starts = shard_starts(self._data) if self.stream else None
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
        self.arena_bytes = checked_arena_bytes(arena_bytes)
        # Without a transform of its own the loader follows the dataset's,
        # as DataLoader does: a new dataset.transform (progressive resizing)
        # is compiled at the next iteration.
        self._follow_dataset = transform is None
        self.device = (
            torch.device(device) if device is not None else torch.device("cpu")
        )
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, not {self.device}")
        self._gpu: Optional[Gpu] = None
        self._use_transform(
            transform
            if transform is not None
            else getattr(self._data, "transform", None),
            stacklevel=3,
        )
        if self.device.type == "cuda":
            self._gpu = open_gpu(self.device)
        self._use_sources()
        self._distributed_asked = distributed
        self.distributed, self.rank, self.world_size = sharding(
            distributed, rank, world_size, sampler, batch_sampler
        )
        self.target_transform = getattr(self._data, "target_transform", None)

        self._position = Position()
        self._pipe: Optional[Pipeline] = None
        self._lock = threading.Lock()
        self._lock_owner: Optional[int] = None  # the thread holding it
        self._active: Optional[weakref.ref] = None
        self._meter = Meter()
        self._fallback = Fallback(self._data, allow_truncated=self.allow_truncated)
        LIVE.add(self)

    def _use_transform(
        self, transform: Any, stacklevel: int, plans: Optional[list] = None
    ) -> None:
        # One plan per view: a MultiView's views, or the transform alone
        # (``plans``: compiled already, by the caller).
        if plans is None:
            plans = plan_views(
                transform, self.layout, self.device.type == "cuda", stacklevel + 1
            )
        self._plans = plans
        self._multi = isinstance(transform, MultiView)
        self.transform = transform

    def _use_sources(self) -> None:
        self._src = sources_of(self._data)
        self._samples_seen = samples_stamp(self._data)

    def _follow(self, depth: int = 0) -> None:
        """Pick up a dataset whose transform or samples list was replaced
        since the last epoch, as DataLoader would (it reads them at every
        fetch)."""
        try:
            if self._follow_dataset:
                current = getattr(self._data, "transform", None)
                if current is not self.transform:
                    # (the caller's iter(), past __iter__ and this frame,
                    # and ``depth`` frames of a subclass's between)
                    self._use_transform(current, stacklevel=3 + depth)
                    self._drop_pipeline()  # built for the old transform
        finally:  # a transform refused still leaves the samples read again
            if samples_stamp(self._data) != self._samples_seen:
                self._drop_pipeline()  # ... or for the old table of samples
                self._use_sources()

    def _drop_pipeline(self) -> None:
        """Close the pipeline this process made (the next epoch makes one)."""
        if self._pipe is not None and self._pipe.owned():
            self._pipe.close()

    def _sampling(self) -> Sampling:
        """How batches are drawn, from the loader's arguments as they are.
        A dataset that draws its own epochs (a Mix) has ``len(dataset)``
        positions, each mapped to the id drawn there."""
        order = getattr(self._data, "ringloader_order", None)
        if order is not None:
            # A Mix draws with its own seed, never the loader's (which seeds
            # augmentations and differs between ranks where each seeds torch
            # with seed + rank): every rank draws the same epochs.
            order = functools.partial(order, int(self._data.seed))
        return Sampling(
            n=len(self._data) if order is not None else len(self._src),
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            shuffle=self.shuffle,
            runs=self.runs,
            sampler=self.sampler,
            batch_sampler=self.batch_sampler,
            distributed=self.distributed,
            rank=self.rank,
            world_size=self.world_size,
            seed=self.seed,
            order=order,
            stream=self._shard_starts,
        )

    # ---- DataLoader-compatible surface ----

    def __len__(self) -> int:
        return self._sampling().batches_per_epoch()

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order and augmentations the next iteration
        yields (also forwarded to a sampler that has ``set_epoch``, or to
        the one a batch sampler batches). Without calls, each new
        iteration advances the epoch by one."""
        self._position.set_epoch(int(epoch), self._sampling())

    @property
    def epoch(self) -> int:
        return self._position.epoch

    def _pipeline(self) -> Pipeline:
        if self._pipe is None or not self._pipe.usable():
            # In a forked child the parent's threads do not exist: build a
            # new pipeline and leave the inherited one untouched. A new
            # pipeline carries on the counters of the one it replaces.
            old = self._pipe
            carried = old.counters() if old is not None and old.owned() else None
            self._pipe = Pipeline(
                [(plan.compiled, plan.c_layout) for plan in self._plans],
                self._src,
                gpu=self._gpu,
                fallback=self._fallback.decode,
                num_threads=self.num_threads,
                seed=self.seed,
                io=self.io,
                max_pixels=self.max_pixels,
                allow_truncated=self.allow_truncated,
                direct_io=self.direct_io,
                skip_errors=self.on_error == "skip",
                max_consecutive_errors=self.max_consecutive_errors,
                carried=carried,
                arena_bytes=self.arena_bytes or 0,
            )
        return self._pipe

    @property
    def io_backend(self) -> str:
        """The I/O backend in use: 'io_uring' or 'pread'."""
        with self._locked():
            return self._pipeline().io_backend

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The loader's lock (epochs, their pipeline and position). Taken
        again by the thread holding it (a sampler of the loader's own
        calling iter(loader) as the epoch begins), RuntimeError rather
        than a hang."""
        if self._lock_owner == threading.get_ident():
            raise RuntimeError(
                "iter(loader) from inside the loader's own epoch as it begins "
                "(its sampler's code, say): a Loader runs one epoch at a time"
            )
        with self._lock:
            self._lock_owner = threading.get_ident()
            try:
                yield
            finally:
                self._lock_owner = None

    def __iter__(self) -> Iterator[tuple[Any, torch.Tensor]]:
        with self._locked():
            previous = self._active() if self._active else None
            if previous is not None:
                # One epoch at a time: the older iterator ends, and says so
                # if it is used again rather than stopping silently short.
                previous.superseded = True
                if not previous.close():
                    # Another thread is inside its next(): closing the
                    # pipeline ends that wait, and this epoch takes from a
                    # new one (one thread takes from a pipeline).
                    self._drop_pipeline()
            self._follow()
            check_sharded(self._sampling(), self._distributed_asked)
            epoch = self._position.next_iteration()
            it = EpochIterator(self._iterate(epoch, self._position.started))
            self._active = weakref.ref(it)
        return it

    def _latest(self, tag: int) -> None:
        """RuntimeError unless iteration ``tag`` (its Position.started) is
        still the loader's latest: one a newer iter() ended while its
        thread was in next() changes nothing of the newer one's (called
        under the loader's lock, as __iter__ runs)."""
        if tag != self._position.started:
            raise RuntimeError(SUPERSEDED)

    def _counted(self, tag: int, n: int, waited: float) -> None:
        """A batch of ``n`` samples yielded by iteration ``tag``, after
        ``waited`` seconds."""
        with self._locked():
            if tag == self._position.started:
                self._position.yielded += 1
                self._meter.waited(waited)
                self._meter.delivered(n)

    def _ended(self, tag: int) -> None:
        with self._locked():
            if tag == self._position.started:
                self._position.finished = True

    def _iterate(self, epoch: int, tag: int) -> Iterator[tuple[Any, torch.Tensor]]:
        with self._locked():  # the pipeline and the position: this epoch's
            self._latest(tag)
            pipe = self._pipeline()
            src = pipe.src
            batches, keys = self._position.begin(
                self._sampling(), epoch, skip=self.on_error == "skip"
            )
            self._meter.start_epoch()
        exhausted = False
        try:
            while True:
                # Everything from here to the yield is time the training
                # loop waits for its batch (submitting, waiting, wrapping).
                t0 = time.perf_counter()
                while not exhausted and pipe.pending < self.prefetch:
                    idx = next(batches, None)
                    if idx is None:
                        exhausted = True
                        break
                    idx = [int(i) for i in idx]
                    if idx:
                        pipe.submit(keys.ids(idx), keys.draw(idx), epoch)
                if not pipe.pending:
                    if pipe.closed:  # by close() from another thread
                        raise RuntimeError("the loader is closed")
                    self._ended(tag)
                    return
                try:
                    taken = pipe.take()
                except (_core.DecodeError, OSError) as e:
                    self._fallback.note_fallback(
                        getattr(e, "fallback", ()), e.batch, src, stacklevel=4
                    )
                    self._fallback.name_sample(e)
                    raise
                self._fallback.note(taken, src)
                idx = taken.idx
                views = [
                    self._finish(raw, plan) for raw, plan in zip(taken.raw, self._plans)
                ]
                images: Any = views if self._multi else views[0]
                self._fallback.announce_truncated(pipe)
                if self._collate is not None:
                    # ringloader.DataLoader's collate_fn, on the samples.
                    out: Any = self._collated(src, views, taken)
                elif getattr(src, "fields", None) is not None:
                    # A shard's fields (datasets/fields.py): a tuple in
                    # their order, the images in the image field's place.
                    # Bad members were refused by the core (replaced under
                    # on_error="skip"); one it could not check that does
                    # not decode raises FieldError.
                    describe = getattr(self._data, "describe", None) or str
                    out = src.fields.batch(images, idx, taken.fields, describe)
                else:
                    # As DataLoader batches them (datasets/targets.py):
                    # int64 classes straight from the array; any other
                    # kind, and target_transform's results, as
                    # default_collate does.
                    labels = _targets.batch(src.targets, idx, self.target_transform)
                    out = (images, labels)
                if self.direct_io:
                    self._fallback.announce_direct(pipe, src, idx)
                if self._pin_memory:
                    out = pin_memory(out)
                self._counted(tag, len(idx), time.perf_counter() - t0)
                yield out
        finally:
            if pipe.pending and not pipe.closed:
                pipe.cancel()

    def _finish(self, raw: Any, plan: TransformPlan) -> Any:
        """Lay a view's C output out as asked (converting it on the device
        on the GPU path) and run its Python tail, if any. A varying view's
        (a list of samples, never a tail): each sample's axes, converted
        on the device one by one on the GPU path."""
        if isinstance(raw, list):
            if self._gpu is not None:
                one = [s[None] for s in raw]
                out = self._gpu.convert_samples(one, self.layout, plan.compiled)
                return [s[0] for s in out]
            if self.layout == "channels_last":
                return [s.permute(2, 0, 1) for s in raw]
            return raw
        if self._gpu is not None:
            return self._gpu.convert(raw, self.layout, plan.compiled)
        if plan.tail:
            return run_tail(raw, plan)
        if self.layout == "channels_last":
            return raw.permute(0, 3, 1, 2)
        return raw

    # ---- lifecycle ----

    def close(self) -> None:
        """Stop the threads and free the batch buffers not held by tensors
        (pinned memory included). Idempotent; the loader can be iterated
        again afterwards. Called from another thread while one iterates,
        that iteration raises ``RuntimeError`` (the loader is closed) at
        its next batch."""
        active = self._active() if self._active else None
        if active is not None:
            # Iterated in another thread right now, it is only marked:
            # closing the pipeline below ends that thread's wait.
            active.close()
        if self._pipe is not None and self._pipe.owned():
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
        state = self._position.state_dict(self._sampling())
        if hasattr(self._data, "ringloader_order"):  # a Mix: its draws' seed
            state["mix_seed"] = int(self._data.seed)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Make the next iteration continue where ``state`` was taken: the
        remaining batches of that epoch, bit-identical (augmentations
        included) for the built-in orders (started at the batch directly)
        and any deterministic sampler (replayed up to it)."""
        Position.check(state, self._sampling())
        mix_seed = state.get("mix_seed")
        if mix_seed is not None and hasattr(self._data, "ringloader_order"):
            if int(mix_seed) != int(self._data.seed):
                raise ValueError(
                    f"this state was taken with Mix(seed={mix_seed}), this "
                    f"loader's Mix has seed={self._data.seed}: its epochs draw "
                    f"other samples; make the Mix with seed={mix_seed} to resume"
                )
        self.seed = int(state["seed"])
        self._position.restore(state, self._sampling())
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
        - ``io_cpu_seconds``: cumulative CPU time of the I/O thread in its
          batch reads (io_uring submissions, HTTP requests), 0 where the
          decode threads read for themselves (pread);
        - ``queue_depth``: batches decoded and waiting; ``inflight``:
          batches submitted; ``first_batch_seconds``; ``io_backend``;
        - what happened to the data, counted over the loader's life (every
          epoch) and once per load of a sample, so a file loaded as a
          sample and again as a replacement counts twice:

          - ``errors``: loads that failed: a file missing or unreadable, a
            JPEG, PNG or WebP corrupt, truncated (without
            ``allow_truncated``) or over a limit, a file of another format
            Pillow cannot read either. With
            ``on_error="skip"`` each candidate tried as a replacement that
            fails too counts; with ``"raise"`` every failed sample of the
            batch counts, though one error is raised;
          - ``skipped``: samples replaced (``on_error="skip"``). Each was
            first counted in ``errors``, so ``skipped <= errors``; the
            difference is the replacement candidates that failed;
          - ``decodes_jpeg``, ``decodes_png``, ``decodes_webp``: files
            decoded natively (libjpeg-turbo, libspng, libwebp);
          - ``fallback_decodes``: files of other formats Pillow decoded
            (BMP, TIFF, GIF, AVIF...; not errors);
          - ``decodes``: pixel decodes, one per sample loaded, and
            ``views``: views written, one per view of each (a
            ``transforms.MultiView`` decodes each image once);
          - ``truncated``: truncated JPEGs, PNGs and WebPs decoded with
            ``allow_truncated=True`` (not errors);
          - for shards or files over HTTP(S) or S3 (0 otherwise):
            ``http_requests`` (requests made, each attempt counted),
            ``http_retries`` (of those, the attempts after a failure),
            ``http_bytes`` (bytes of response bodies received, retried
            attempts included; a response refused at its head, such as a
            wrong range, counts none) and
            ``http_cache_hits`` (samples read from ``cache_limit``'s local
            cache instead of the network);
          - ``past_arena``: images of varying sizes placed past their
            batch's ``arena_bytes``, each in a buffer of its own (on a
            device, copied through the batch's spill buffer);
        - ``decode_buffer_bytes``: the bytes the decode threads keep now for
          their next images (their decoders' buffers), given back some
          images after an outlier.
        """
        pipe = self._pipe
        c = pipe.stats() if pipe is not None and not pipe.closed else {}
        return assemble_stats(
            self._meter,
            c,
            io_backend=pipe.io_backend if c else None,
            epoch=self._position.epoch,
            rank=self.rank,
            fallback_decodes=c.get("fallback_decodes", 0),
            skipped=c.get("skipped", 0),
        )

    def __repr__(self) -> str:
        return (
            f"ringloader.Loader({len(self._src)} images, batch_size="
            f"{self.batch_size}, num_threads={self.num_threads}, "
            f"prefetch={self.prefetch}, layout={self.layout!r})"
        )
