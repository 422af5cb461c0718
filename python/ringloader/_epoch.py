"""Epochs of a Loader: which batches each one yields (the built-in shuffle,
DistributedSampler sharding, or the user's samplers), the random key of
every sample drawn, and where the loader stands in them, so that a new
process can resume exactly."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from . import _core

# The key of a sample's randomness (its bit layout is the C core's, csrc/rng.h,
# exported by _core): its dataset index the first time it comes in an epoch;
# a repeat (a sampler with replacement, repeated augmentation) adds its
# occurrence count at KEY_OCCURRENCE_SHIFT; the C core's replacement for a
# failed sample (on_error="skip") keeps the key's bits below
# KEY_ATTEMPT_SHIFT and sets its attempt above them, with bit
# KEY_REPLACEMENT_BIT, so no two draws of an epoch share a key as long as no
# sample comes more than MAX_DRAWS times in it. Index = key & INDEX_MASK.
OCCURRENCE_SHIFT = _core.KEY_OCCURRENCE_SHIFT
INDEX_MASK = (1 << OCCURRENCE_SHIFT) - 1
MAX_DRAWS = {
    # skip policy: the count stays below the replacement's attempt bits
    True: 1 << (_core.KEY_ATTEMPT_SHIFT - OCCURRENCE_SHIFT),
    # no replacement keys: the count stays below the replacement bit
    False: 1 << (_core.KEY_REPLACEMENT_BIT - OCCURRENCE_SHIFT),
}

STATE_VERSION = 1


def index_of(key: int) -> int:
    """The dataset index of a sample's random key."""
    return key & INDEX_MASK


class Keys:
    """Random keys of the samples of one epoch, in the order drawn. With
    ``skip`` (on_error="skip") the C core makes replacement keys from them,
    which leaves fewer bits for repeats (MAX_DRAWS)."""

    def __init__(self, skip: bool = False) -> None:
        self.seen: dict[int, int] = {}
        self.skip = skip

    def ids(self, idx: Sequence[int]) -> list[int]:
        """The dataset indices of a batch the samplers gave: the same."""
        return list(idx)

    def draw(self, idx: Sequence[int]) -> list[int]:
        """The keys of the samples idx, drawn in this order. Raises
        ValueError for a sample that would come more than MAX_DRAWS times
        in the epoch: its key would be another draw's."""
        out = []
        limit = MAX_DRAWS[self.skip]
        for i in idx:
            n = self.seen.get(i, 0)
            if n >= limit:
                self._too_many(i, limit)
            self.seen[i] = n + 1
            out.append(i + (n << OCCURRENCE_SHIFT))
        return out

    def _too_many(self, i: int, limit: int) -> None:
        mode = 'on_error="skip"' if self.skip else 'on_error="raise"'
        raise ValueError(
            f"sample {i} comes more than {limit:,} times in one epoch, "
            f"more than the random keys of {mode} can tell apart: "
            "draw fewer samples per epoch (a sampler's num_samples)"
        )


class DrawKeys(Keys):
    """Keys of an epoch of a Mix, whose samplers give positions in the
    epoch's draws (``ids[p]``: the sample drawn at p). A draw's key is its
    sample with, as occurrence, the draw's rank among the epoch's draws of
    that sample in position order: a function of (seed, epoch, position),
    so processes that split one epoch (DDP ranks) never give two draws of
    a sample the same key, and each draw is augmented as one process
    reading the whole epoch augments it. (Counting in the order a process
    reads, each rank would count from 0: a sample drawn on two ranks would
    come out identical on both.) A position drawn again in this iteration
    (DistributedSampler's padding, a sampler with replacement) counts on
    past the sample's draws in the epoch."""

    def __init__(self, ids: np.ndarray, skip: bool = False) -> None:
        super().__init__(skip)
        self._ids = np.asarray(ids, dtype=np.int64)
        n = len(self._ids)
        self._nth = np.zeros(n, dtype=np.int64)  # rank among the sample's draws
        self._count = np.ones(n, dtype=np.int64)  # the sample's draws
        if n:
            by = np.argsort(self._ids, kind="stable")
            ordered = self._ids[by]
            first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
            sizes = np.diff(np.r_[first, n])
            self._nth[by] = np.arange(n) - np.repeat(first, sizes)
            self._count[by] = np.repeat(sizes, sizes)

    def ids(self, idx: Sequence[int]) -> list[int]:
        """The samples drawn at positions idx."""
        return self._ids[np.asarray(idx, dtype=np.int64)].tolist()

    def draw(self, idx: Sequence[int]) -> list[int]:
        """The keys of the draws at positions idx (see the class)."""
        out = []
        limit = MAX_DRAWS[self.skip]
        for p in idx:
            again = self.seen.get(p, 0)
            n = int(self._nth[p]) + again * int(self._count[p])
            i = int(self._ids[p])
            if n >= limit:
                self._too_many(i, limit)
            self.seen[p] = again + 1
            out.append(i + (n << OCCURRENCE_SHIFT))
        return out


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


class Position:
    """Where a loader stands: the epoch the next iteration runs, how many
    batches of the current one were yielded, and what resuming needs."""

    def __init__(self) -> None:
        self.epoch = 0
        self.explicit = False  # set_epoch or load_state_dict chose the epoch
        self.started = 0  # iterations started
        self.yielded = 0  # batches yielded in the current epoch
        self.finished = False
        self.skip = 0  # batches to skip at the next iteration
        self.sampler_states: dict = {}  # stateful samplers at epoch start
        # The samplers' epoch (Sampling.sampler_epoch) at the start of the
        # current epoch: what resuming gives them back.
        self.sampler_epoch: Optional[int] = None

    def set_epoch(self, epoch: int, sampling: Sampling) -> None:
        """Run ``epoch`` at the next iteration (also forwarded to a sampler
        that has ``set_epoch``)."""
        if epoch != self.epoch:
            self.skip = 0  # a restored position belongs to its own epoch
        self.epoch = epoch
        self.explicit = True
        self.yielded = self.skip
        self.finished = False
        self._forward(sampling, epoch)

    def _forward(self, sampling: Sampling, epoch: int) -> None:
        for s in sampling.epoch_samplers():
            if hasattr(s, "set_epoch"):
                s.set_epoch(epoch)
        self.sampler_epoch = sampling.sampler_epoch()

    def next_iteration(self) -> int:
        """The epoch a new iteration runs: the one chosen, else the one
        after the last."""
        if self.started > 0 and not self.explicit:
            self.epoch += 1
            self.skip = 0
        self.yielded = self.skip
        self.finished = False
        self.explicit = False
        self.started += 1
        return self.epoch

    def begin(
        self, sampling: Sampling, epoch: int, skip: bool
    ) -> tuple[Iterator[Any], Keys]:
        """The batches of ``epoch`` still to yield and the keys drawn so
        far (``skip``: on_error="skip", see Keys). A stateful sampler is saved as it is now, before this epoch
        draws from it (and prefetching draws ahead of what is yielded):
        resuming restores this and skips the batches yielded before."""
        self.sampler_states = {
            name: s.state_dict()
            for name, s in sampling.user_samplers
            if s is not None and hasattr(s, "state_dict")
        }
        self.sampler_epoch = sampling.sampler_epoch()
        batches = sampling.batches(epoch)
        keys = sampling.keys(epoch, skip)
        skip, self.skip = self.skip, 0
        for _ in range(skip):  # resuming: these batches were yielded before
            done = next(batches, None)
            if done is None:
                break
            keys.draw([int(i) for i in done])
        self.yielded = skip
        self.finished = False
        return batches, keys

    def state_dict(self, sampling: Sampling) -> dict:
        state = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "batches_yielded": self.yielded,
            "epoch_finished": self.finished,
            "seed": sampling.seed,
            "world_size": sampling.world_size,
            "rank": sampling.rank,
        }
        if self.sampler_epoch is not None:
            state["sampler_epoch"] = self.sampler_epoch
        for name, s in sampling.user_samplers:
            if s is not None and hasattr(s, "state_dict"):
                # As it was when this epoch started (see begin).
                state[name] = self.sampler_states.get(name, s.state_dict())
        return state

    @staticmethod
    def check(state: dict, sampling: Sampling) -> None:
        """Raise ValueError for a state this loader cannot continue."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unknown ringloader state version {state.get('version')}")
        if sampling.distributed and state.get("world_size", 1) != sampling.world_size:
            raise ValueError(
                f"this state was taken with world_size={state.get('world_size')}, "
                f"this loader has world_size={sampling.world_size}: the shards "
                "differ, so the position cannot be restored"
            )

    def restore(self, state: dict, sampling: Sampling) -> None:
        """Continue where ``state`` was taken at the next iteration."""
        epoch, done = int(state["epoch"]), int(state["batches_yielded"])
        # The samplers' epoch when the state was taken: the loader's unless
        # the sampler's alone was set (Sampling.draw_epoch).
        at = int(state.get("sampler_epoch", epoch))
        if state.get("epoch_finished") or done >= sampling.batches_per_epoch():
            epoch, at, done = epoch + 1, at + 1, 0
        self.epoch, self.skip = epoch, done
        self.explicit = True
        self.started = max(self.started, 1)
        self._forward(sampling, at)
        for name, s in sampling.user_samplers:
            if name in state and hasattr(s, "load_state_dict"):
                s.load_state_dict(state[name])
        self.sampler_states = {}


class EpochIterator:
    """One epoch of a Loader: the generator that runs it, whether a newer
    iter(loader) has taken its place, and whether the loader was closed.

    One thread at a time runs the generator. Python raises ValueError
    ("generator already executing") when a second thread enters a running
    generator, which a close() from another thread would do: here such a
    close() only marks the epoch closed (the Loader then closes its
    pipeline, which ends the iterating thread's wait with RuntimeError), and
    a second thread's next() is refused with RuntimeError."""

    def __init__(self, gen: Iterator) -> None:
        self._gen = gen
        self.superseded = False
        self._closed = False
        self._running = threading.Lock()  # held while a thread runs _gen

    def __iter__(self) -> "EpochIterator":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.superseded:
            raise RuntimeError(
                "this iterator was ended by a newer iter(loader): a ringloader "
                "Loader runs one epoch at a time (use two Loaders to iterate "
                "twice at once)"
            )
        if not self._running.acquire(blocking=False):
            raise RuntimeError(
                "this epoch is being iterated (or closed) by another thread: "
                "a ringloader Loader's epoch is iterated by one thread at a time"
            )
        try:
            if self._closed:
                raise RuntimeError("the loader is closed")
            return next(self._gen)
        finally:
            self._running.release()

    def close(self) -> None:
        """End the epoch, dropping its batches in flight. From another
        thread while one iterates it, only mark it closed."""
        self._closed = True
        if self._running.acquire(blocking=False):
            try:
                self._gen.close()
            finally:
                self._running.release()
