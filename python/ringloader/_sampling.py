"""Which batches each epoch of a Loader yields: the built-in orders
(shuffle, shuffle="runs"), DistributedSampler sharding or the user's
samplers, the epoch a sampler keeps, and the checks DataLoader makes on
these arguments (batching, sharding over torch.distributed's ranks)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from ._keys import DrawKeys, Keys


def epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit generator seed that depends only on (seed, epoch)."""
    state = np.random.SeedSequence([seed & (2**64 - 1), epoch & (2**64 - 1)])
    return int(state.generate_state(1, dtype=np.uint64)[0]) >> 1


# shuffle="runs": the epoch shuffles runs of this many consecutive samples.
RUN_LENGTH = 16


def shuffle_mode(shuffle: Any) -> tuple[bool, bool]:
    """(shuffle, runs) of a Loader's ``shuffle`` argument: a bool, or
    "runs". Raises ValueError for anything else."""
    if isinstance(shuffle, str):
        if shuffle != "runs":
            raise ValueError(f'shuffle must be a bool or "runs", not {shuffle!r}')
        return True, True
    return bool(shuffle), False


class RunSampler(Sampler[int]):
    """The order of ``shuffle="runs"``: the samples cut into runs of
    RUN_LENGTH consecutive indices, the runs in a random order (seeded by
    ``seed``), each run's samples in order. With ``world_size`` > 1, the
    order is padded (from its start) to a multiple of the world size, or cut
    to one with ``drop_last``, as DistributedSampler does, and rank r takes
    the r-th contiguous part of it, so runs stay whole. ``shuffled=False``
    keeps the indices in order, only split over the ranks: a Mix's draws,
    which it makes in runs itself."""

    def __init__(
        self,
        n: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        shuffled: bool = True,
    ) -> None:
        self.n, self.seed, self.shuffled = n, seed, shuffled
        self.rank, self.world_size = rank, world_size
        if drop_last:
            self.num_samples = n // world_size
        else:
            self.num_samples = math.ceil(n / world_size)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        if self.shuffled:
            gen = torch.Generator()
            gen.manual_seed(self.seed)
            runs = torch.randperm(math.ceil(self.n / RUN_LENGTH), generator=gen)
            starts = runs.numpy() * RUN_LENGTH
            order = (starts[:, None] + np.arange(RUN_LENGTH)[None, :]).ravel()
            order = order[order < self.n]
        else:  # already in runs (a Mix's draws): only split over the ranks
            order = np.arange(self.n)
        total = self.num_samples * self.world_size
        if total > len(order):
            order = np.resize(order, total)  # repeats from the start
        part = order[self.rank * self.num_samples : (self.rank + 1) * self.num_samples]
        return iter(part.tolist())


def builtin_order(n: int, seed: int, epoch: int, runs: bool) -> Sampler[int]:
    """The built-in shuffle of ``epoch`` over ``n`` samples in one process:
    a function of (seed, epoch) alone."""
    if runs:
        return RunSampler(n, epoch_seed(seed, epoch))
    gen = torch.Generator()
    gen.manual_seed(epoch_seed(seed, epoch))
    return RandomSampler(range(n), generator=gen)


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
        elif self.runs:
            n = len(self.run_sampler(0))
        elif self.distributed:
            n = len(self.distributed_sampler(0))
        else:
            n = self.n
        if self.drop_last:
            return n // self.batch_size
        return math.ceil(n / self.batch_size)

    def distributed_sampler(self, epoch: int) -> DistributedSampler:
        s = DistributedSampler(
            range(self.n),
            num_replicas=self.world_size,
            rank=self.rank,
            shuffle=self.shuffle,
            seed=self.seed,
            drop_last=self.drop_last,
        )
        s.set_epoch(epoch)
        return s

    def run_sampler(self, epoch: int) -> RunSampler:
        return RunSampler(
            self.n,
            epoch_seed(self.seed, epoch),
            self.rank,
            self.world_size,
            self.drop_last and self.distributed,
            # A Mix draws its epoch in runs itself (order(..., RUN_LENGTH)).
            shuffled=self.order is None,
        )

    def batches(self, epoch: int) -> Iterator[Any]:
        """The batches of ``epoch``, as the samplers give them: lists of
        dataset indices, or with an ``order`` (a Mix) positions in the
        epoch's draws, which :meth:`keys` maps to the ids drawn there. A
        sampler of the user's keeps the epoch the user gave it (directly,
        or through Loader.set_epoch): as with DataLoader, iterating does
        not change it."""
        return self._positions(epoch)

    def keys(self, epoch: int, skip: bool) -> Keys:
        """The keys of the draws of an iteration of ``epoch`` (``skip``:
        on_error="skip"), which also map the batches to dataset indices
        (:meth:`Keys.ids`); a Mix's draws are :meth:`draw_epoch`'s."""
        if self.order is None:
            return Keys(skip)
        run = RUN_LENGTH if self.runs else 1
        return DrawKeys(self.order(self.draw_epoch(epoch), run), skip)

    def _positions(self, epoch: int) -> Iterator[Any]:
        if self.batch_sampler is not None:
            return iter(self.batch_sampler)
        if self.sampler is not None:
            sampler = self.sampler
        elif self.runs:
            sampler = self.run_sampler(epoch)
        elif self.distributed:
            sampler = self.distributed_sampler(epoch)
        elif self.shuffle:
            sampler = builtin_order(self.n, self.seed, epoch, runs=False)
        else:
            sampler = SequentialSampler(range(self.n))
        return iter(BatchSampler(sampler, self.batch_size, self.drop_last))
