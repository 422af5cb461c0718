"""Which batches each epoch of a Loader yields: the built-in orders
(shuffle, shuffle="runs"), DistributedSampler sharding or the user's
samplers, the epoch a sampler keeps, and the checks DataLoader makes on
these arguments (batching, sharding over torch.distributed's ranks)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import numpy as np
from torch.utils.data import BatchSampler, RandomSampler

from ._stream_order import StreamOrder
from ._keys import DrawKeys, Keys
from ._order import Shuffle


# shuffle="runs": the epoch shuffles runs of this many consecutive samples.
RUN_LENGTH = 16


# The named orders a Loader's ``shuffle`` may be, besides a bool.
NAMED_ORDERS = ("runs", "stream")


def shuffle_mode(shuffle: Any) -> tuple[bool, Optional[str]]:
    """(shuffle, the named order or None) of a Loader's ``shuffle``
    argument: a bool, "runs" or "stream". Raises ValueError for anything
    else."""
    if isinstance(shuffle, str):
        if shuffle not in NAMED_ORDERS:
            raise ValueError(
                f'shuffle must be a bool, "runs" or "stream", not {shuffle!r}'
            )
        return True, shuffle
    return bool(shuffle), None


class EpochOrder:
    """A built-in order of one epoch on one rank, computed per batch (see
    _order.py): memory O(batch), any batch reached directly.

    The epoch's order over ``n`` samples is ``mode``'s: "shuffle" (a
    :class:`Shuffle` of (seed, epoch)), "runs" (the samples cut into runs
    of RUN_LENGTH consecutive indices, the runs in the order of a Shuffle
    over the run count, each run's samples in order; the last run may be
    short) or "identity". It is padded by repeating it from its start to
    a multiple of ``world_size``, or cut to one with ``drop_last``, as
    DistributedSampler does (same num_samples and total_size); rank r
    takes positions r, r + world_size, ... of it (DistributedSampler's
    split), or with ``contiguous`` the r-th contiguous part, so runs stay
    whole. Position g of the padded order is the (g // n)-th draw of its
    sample in the epoch: :meth:`repeats`, the keys' occurrences."""

    def __init__(
        self,
        n: int,
        seed: int,
        epoch: int,
        mode: str,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        contiguous: bool = False,
        shard_starts: Optional[np.ndarray] = None,
    ) -> None:
        self.n, self.mode, self.contiguous = n, mode, contiguous
        self.rank, self.world_size = rank, world_size
        if drop_last and n % world_size:
            self.num_samples = math.ceil((n - world_size) / world_size)
        else:
            self.num_samples = math.ceil(n / world_size)
        self.total_size = self.num_samples * world_size
        self._shuffle: Optional[Shuffle] = None
        self._stream: Optional[StreamOrder] = None
        if mode == "stream":
            assert shard_starts is not None
            self._stream = StreamOrder(
                shard_starts, seed, epoch, rank, world_size, drop_last
            )
            assert len(self._stream) == self.num_samples
        elif mode == "shuffle":
            self._shuffle = Shuffle(n, seed, epoch)
        elif mode == "runs":
            runs = math.ceil(n / RUN_LENGTH)
            self._shuffle = Shuffle(runs, seed, epoch)
            # The short last run (if any) and the slot it lands in: the
            # runs after it in the order start that much earlier.
            self._short = n % RUN_LENGTH
            if self._short:
                last = np.array([runs - 1], dtype=np.int64)
                self._short_end = (
                    int(self._shuffle.inverse(last)[0]) * RUN_LENGTH + self._short
                )
        elif mode != "identity":
            raise ValueError(f"unknown order {mode!r}")

    def __len__(self) -> int:
        return self.num_samples

    def positions(self, local: np.ndarray) -> np.ndarray:
        """The positions in the padded order of this rank's ``local`` ones."""
        if self._stream is not None:
            raise TypeError("a streaming order has no padded order's positions")
        if self.contiguous:
            return self.rank * self.num_samples + local
        return local * self.world_size + self.rank

    def indices(self, local: np.ndarray) -> np.ndarray:
        """The samples at this rank's positions ``local`` (int64)."""
        if self._stream is not None:
            return self._stream.at(local)
        q = self.positions(local) % max(self.n, 1)
        if self.mode == "shuffle":
            return self._shuffle(q)
        if self.mode == "runs":
            if self._short:  # virtual positions, as if every run were full
                q = q + (q >= self._short_end) * (RUN_LENGTH - self._short)
            return self._shuffle(q // RUN_LENGTH) * RUN_LENGTH + q % RUN_LENGTH
        return q

    def repeats(self, local: np.ndarray) -> np.ndarray:
        """Which draw of its sample in the epoch each position is."""
        if self._stream is not None:
            return self._stream.draws(local)
        return self.positions(local) // max(self.n, 1)

    def __iter__(self) -> Iterator[int]:
        for start in range(0, self.num_samples, CHUNK):
            local = np.arange(start, min(start + CHUNK, self.num_samples))
            yield from self.indices(local).tolist()

    def batches(self, batch_size: int, drop_last: bool, start: int) -> "OrderBatches":
        return OrderBatches(self, batch_size, drop_last, start)


# Positions computed at once when an EpochOrder is iterated as a sampler.
CHUNK = 4096


class OrderBatches:
    """The batches of an :class:`EpochOrder` from batch ``start`` on, as
    BatchSampler cuts them; :meth:`repeats` gives the keys' occurrences of
    the batch last yielded (Keys.draw follows each batch, in order)."""

    def __init__(
        self, order: EpochOrder, batch_size: int, drop_last: bool, start: int
    ) -> None:
        self.order, self.batch_size = order, batch_size
        n = order.num_samples
        self.count = n // batch_size if drop_last else math.ceil(n / batch_size)
        self.next = start
        self._drawn = start
        # The indices of positions [_lo, _lo + len(_ahead)): computed for
        # CHUNK positions at once, as numpy's cost is per call, not per
        # position (a batch of 64 alone spends most of it in overhead).
        self._lo, self._ahead = 0, np.zeros(0, dtype=np.int64)

    def __iter__(self) -> "OrderBatches":
        return self

    def __next__(self) -> list[int]:
        if self.next >= self.count:
            raise StopIteration
        self.next += 1
        local = self._local(self.next - 1)
        if len(local) == 0:
            return []
        lo, hi = int(local[0]), int(local[-1]) + 1
        if lo < self._lo or hi > self._lo + len(self._ahead):
            end = min(max(hi, lo + CHUNK), self.order.num_samples)
            self._lo, self._ahead = lo, self.order.indices(np.arange(lo, end))
        return self._ahead[lo - self._lo : hi - self._lo].tolist()

    def _local(self, b: int) -> np.ndarray:
        end = min((b + 1) * self.batch_size, self.order.num_samples)
        return np.arange(b * self.batch_size, end)

    def repeats(self, drawn: np.ndarray) -> np.ndarray:
        """The occurrences of the draws of the next batch Keys draws."""
        local = self._local(self._drawn)
        self._drawn += 1
        if len(local) != len(drawn):
            raise RuntimeError("keys drawn out of step with the built-in order")
        return self.order.repeats(local)


class RunSampler(EpochOrder):
    """The order of ``shuffle="runs"`` (see EpochOrder), seeded by (seed,
    epoch), rank r taking the r-th contiguous part of it. ``shuffled=False``
    keeps the indices in order, only split over the ranks: a Mix's draws,
    which it makes in runs itself."""

    def __init__(
        self,
        n: int,
        seed: int,
        epoch: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        shuffled: bool = True,
    ) -> None:
        mode = "runs" if shuffled else "identity"
        super().__init__(n, seed, epoch, mode, rank, world_size, drop_last, True)


def builtin_order(
    n: int, seed: int, epoch: int, kind: Optional[str], dataset: Any = None
) -> EpochOrder:
    """The built-in shuffle of ``epoch`` over ``n`` samples in one process
    (``kind``: None, "runs" or "stream", which reads ``dataset``'s
    shards): a function of (seed, epoch) alone, iterable as a sampler."""
    if kind == "stream":
        starts = shard_starts(dataset)
        return EpochOrder(n, seed, epoch, "stream", shard_starts=starts)
    return EpochOrder(n, seed, epoch, "runs" if kind == "runs" else "shuffle")


def shard_starts(dataset: Any) -> np.ndarray:
    """The first sample of each shard of ``dataset``, and its length, for
    shuffle="stream": its ``ringloader_shards()``. Raises ValueError for a
    dataset that is not read shard by shard."""
    shards = getattr(dataset, "ringloader_shards", None)
    if shards is None:
        raise ValueError(
            'shuffle="stream" reads a shard set shard by shard (a '
            f"ringloader.TarShards), and {type(dataset).__name__} has no shards: "
            'use shuffle=True (or shuffle="runs")'
        )
    return np.asarray(shards(), dtype=np.int64)


def check_sharded(sampling: "Sampling", asked: Optional[bool]) -> None:
    """Raise ValueError where torch.distributed runs several processes and
    nothing shards this loader's data (no distributed=True, no sampler of
    the user's, and distributed=False not said): every rank would read the
    whole data set, which is never what a training script meant without
    saying so."""
    if asked is not None or sampling.distributed:
        return
    if sampling.sampler is not None or sampling.batch_sampler is not None:
        return  # the user's sampler decides, as with torch's DataLoader
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    world = dist.get_world_size()
    if world > 1:
        raise ValueError(
            f"torch.distributed runs {world} processes and nothing shards this "
            "loader's data: every rank would read the whole data set. To shard "
            "it as DistributedSampler does, pass distributed=True "
            "(ringloader.Loader) or sampler=DistributedSampler(dataset) "
            "(ringloader.DataLoader; Lightning's use_distributed_sampler=True "
            "and Accelerate's prepare() pass one for you); to read all of it on "
            "every rank, pass distributed=False (ringloader.Loader) or a "
            "sampler of your own, e.g. SequentialSampler(dataset)"
        )


def check_batching(
    batch_size: Optional[int],
    shuffle: Optional[bool],
    sampler: Any,
    batch_sampler: Any,
    drop_last: bool,
) -> Optional[int]:
    """The batch size to use (None with a batch_sampler), after the checks
    DataLoader makes on these arguments; raises ValueError as it does."""
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
        raise ValueError(f"batch_size should be a positive integer, not {batch_size}")
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    return batch_size


def rank_and_world(rank: Optional[int], world_size: Optional[int]) -> tuple[int, int]:
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


def sharding(
    distributed: Optional[bool],
    rank: Optional[int],
    world_size: Optional[int],
    sampler: Any,
    batch_sampler: Any,
) -> tuple[bool, int, int]:
    """(distributed, rank, world_size): giving rank or world_size implies
    distributed; rank and world size come from torch.distributed unless
    given. Raises ValueError with a sampler of the user's as well."""
    distributed = bool(distributed or rank is not None or world_size is not None)
    if not distributed:
        return False, 0, 1
    if sampler is not None or batch_sampler is not None:
        raise ValueError(
            "distributed=True shards with its own DistributedSampler; "
            "pass either distributed=True or a sampler, not both"
        )
    return (True, *rank_and_world(rank, world_size))


@dataclass(frozen=True)
class Sampling:
    """How a loader draws its batches, as its arguments are now."""

    n: int  # samples in the dataset
    batch_size: Optional[int]
    drop_last: bool
    shuffle: bool
    runs: bool  # shuffle="runs" (RunSampler)
    sampler: Any
    batch_sampler: Any
    distributed: bool
    rank: int
    world_size: int
    seed: int
    # A dataset that draws its epochs (datasets/mix.py's Mix): its
    # ringloader_order with the Mix's own seed, order(epoch, run), maps
    # positions 0..n-1, what the samplers yield, to the ids read (with
    # runs: drawn in runs of RUN_LENGTH, which RunSampler only splits over
    # the ranks). None: positions are the ids.
    order: Optional[Callable[[int, int], np.ndarray]] = None
    # shuffle="stream": the first sample of each shard of the dataset, and
    # its length (the streaming order, _stream_order.py). None: not asked.
    stream: Optional[np.ndarray] = None

    @property
    def user_samplers(self) -> tuple[tuple[str, Any], ...]:
        """The user's samplers by argument name (None where not given)."""
        return (("sampler", self.sampler), ("batch_sampler", self.batch_sampler))

    def epoch_samplers(self) -> list[Any]:
        """The user's samplers that may keep an epoch, as Accelerate looks
        for them: the sampler, the batch sampler, the sampler it batches
        (BatchSampler's; Accelerate's BatchSamplerShard's batch_sampler's)."""
        batches = self.batch_sampler
        inner = getattr(batches, "batch_sampler", None)
        found: list[Any] = []
        for s in (self.sampler, batches, getattr(batches, "sampler", None)) + (
            getattr(inner, "sampler", None),
        ):
            if s is not None and all(s is not f for f in found):
                found.append(s)
        return found

    def sampler_epoch(self) -> Optional[int]:
        """The first int ``epoch`` of :meth:`epoch_samplers` (as
        DistributedSampler's set_epoch sets it), or None."""
        for s in self.epoch_samplers():
            e = getattr(s, "epoch", None)
            if isinstance(e, (int, np.integer)) and not isinstance(e, bool):
                return int(e)
        return None

    def draw_epoch(self, epoch: int) -> int:
        """The epoch whose draws a Mix's positions index in an iteration
        of the loader's ``epoch``. The one rule: a sampler's epoch where it
        has one (:meth:`sampler_epoch`), as its positions are that epoch's;
        else the loader's. Loader.set_epoch and load_state_dict set both,
        so they differ only where the sampler's alone was set (a script
        restarted at epoch e calling ``sampler.set_epoch(e)``; Accelerate's
        DataLoaderShard): the draws follow the positions. Every rank sets
        its sampler alike, so the ranks draw one epoch."""
        e = self.sampler_epoch()
        return epoch if e is None else e

    def batches_per_epoch(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self.sampler is not None:
            n = len(self.sampler)
        else:
            n = self.builtin(0).num_samples
        if self.drop_last:
            return n // self.batch_size
        return math.ceil(n / self.batch_size)

    @property
    def is_builtin(self) -> bool:
        """Whether the loader draws a built-in order (no sampler of the
        user's): its batches are computed, any one directly."""
        return self.sampler is None and self.batch_sampler is None

    def builtin(self, epoch: int) -> EpochOrder:
        """The built-in order of ``epoch`` on this rank: shuffle="runs"
        (a Mix draws in runs itself: only split over the ranks), the
        shuffle or the sequential order, sharded as DistributedSampler
        shards (a single rank: the whole order)."""
        if self.stream is not None:
            return EpochOrder(
                self.n,
                self.seed,
                epoch,
                "stream",
                self.rank,
                self.world_size,
                self.drop_last and self.distributed,
                shard_starts=self.stream,
            )
        if self.runs:
            mode = "identity" if self.order is not None else "runs"
        else:
            mode = "shuffle" if self.shuffle else "identity"
        return EpochOrder(
            self.n,
            self.seed,
            epoch,
            mode,
            self.rank,
            self.world_size,
            self.drop_last and self.distributed,
            contiguous=self.runs,
        )

    def batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        """The batches of ``epoch``, as the samplers give them: lists of
        dataset indices, or with an ``order`` (a Mix) positions in the
        epoch's draws, which :meth:`keys` maps to the ids drawn there. A
        built-in order starts at batch ``start`` (a sampler of the user's
        is iterated from its start: ``start`` is for :attr:`is_builtin`
        orders only). A sampler of the user's keeps the epoch the user
        gave it (directly, or through Loader.set_epoch): as with
        DataLoader, iterating does not change it."""
        if self.is_builtin:
            return self.builtin(epoch).batches(self.batch_size, self.drop_last, start)
        if self.batch_sampler is not None:
            return iter(self.batch_sampler)
        return iter(BatchSampler(self.sampler, self.batch_size, self.drop_last))

    def keys(self, epoch: int, skip: bool, batches: Any = None) -> Keys:
        """The keys of the draws of an iteration of ``epoch`` (``skip``:
        on_error="skip"), which also map the batches to dataset indices
        (:meth:`Keys.ids`); a Mix's draws are :meth:`draw_epoch`'s.
        ``batches``, from :meth:`batches`: a built-in order's give the
        draws' occurrences; a user's sampler's are counted."""
        repeats = batches.repeats if isinstance(batches, OrderBatches) else None
        if self.order is None:
            return Keys(skip, self.n, repeats)
        run = RUN_LENGTH if self.runs else 1
        return DrawKeys(self.order(self.draw_epoch(epoch), run), skip, repeats)


class BuiltinShuffle(RandomSampler):
    """What ``DataLoader.sampler`` is for the built-in shuffle: a
    RandomSampler, which is how frameworks tell that a loader shuffles
    (Lightning then shards with a shuffling DistributedSampler). Iterated
    by someone else (Accelerate's sharded batch sampler iterates it), it
    yields the loader's own order for the epoch given to ``set_epoch``
    (keyed by seed and epoch, like the loader); with a ``generator`` (the
    DataLoader's, or one Accelerate sets to keep processes in step), it
    draws from it as torch's RandomSampler does, so a framework shards as
    it would torch's DataLoader. The loader itself does not iterate it."""

    def __init__(
        self, dataset: Any, seed: int, kind: Optional[str], generator: Any
    ) -> None:
        super().__init__(dataset, generator=generator)
        self.seed, self.kind, self.epoch = seed, kind, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        if self.generator is not None:
            return super().__iter__()
        return iter(
            builtin_order(
                len(self.data_source),
                self.seed,
                self.epoch,
                self.kind,
                self.data_source,
            )
        )
