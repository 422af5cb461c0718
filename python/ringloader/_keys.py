"""The random keys of an epoch's samples: the key each draw of a sample
is augmented with (its index, and which occurrence of it this is), and the
dataset index a key stands for."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

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


def index_of(key: int) -> int:
    """The dataset index of a sample's random key."""
    return key & INDEX_MASK


def rank_among_equal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each element of ``values``, how many equal ones come before it;
    with the distinct values and how often each comes."""
    n = len(values)
    if not n:
        return np.zeros(0, np.int64), values[:0], np.zeros(0, np.int64)
    by = np.argsort(values, kind="stable")
    ordered = values[by]
    first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[first, n])
    rank = np.empty(n, dtype=np.int64)
    rank[by] = np.arange(n) - np.repeat(first, sizes)
    return rank, ordered[first], sizes


class Keys:
    """Random keys of the samples of one epoch, in the order drawn. With
    ``skip`` (on_error="skip") the C core makes replacement keys from them,
    which leaves fewer bits for repeats (MAX_DRAWS).

    A draw's occurrence is ``repeats(idx)`` where the order knows it
    arithmetically (the built-in orders: see Sampling.keys), else counted:
    ``seen``, one counter per sample of the smallest unsigned type that
    holds MAX_DRAWS (2 or 4 bytes), allocated on the first draw for the
    ``n`` samples (grown to the largest index drawn where n is None). An
    index outside [0, n) is not counted: the pipeline rejects it."""

    def __init__(
        self,
        skip: bool = False,
        n: Optional[int] = None,
        repeats: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    ) -> None:
        self.skip = skip
        self.n = n
        self.repeats = repeats
        self.seen: Optional[np.ndarray] = None  # the counters, once drawn

    def ids(self, idx: Sequence[int]) -> list[int]:
        """The dataset indices of a batch the samplers gave: the same."""
        return list(idx)

    def draw(self, idx: Sequence[int]) -> list[int]:
        """The keys of the samples idx, drawn in this order. Raises
        ValueError for a sample that would come more than MAX_DRAWS times
        in the epoch: its key would be another draw's."""
        i = np.asarray(idx, dtype=np.int64).reshape(-1)
        return self._keys(i, self._repeats(i))

    def _keys(self, samples: np.ndarray, n: np.ndarray) -> list[int]:
        """The keys of ``samples`` drawn for the ``n``-th time."""
        limit = MAX_DRAWS[self.skip]
        over = np.flatnonzero(n >= limit)
        if over.size:
            self._too_many(int(samples[over[0]]), limit)
        return (samples + (n << OCCURRENCE_SHIFT)).tolist()

    def _repeats(self, idx: np.ndarray) -> np.ndarray:
        """How many times each of idx was drawn before in this iteration
        (earlier in idx included); counts these draws."""
        if self.repeats is not None:
            return np.asarray(self.repeats(idx), dtype=np.int64)
        size = len(self.seen) if self.seen is not None else 0
        if self.n is None and idx.size and idx.max() >= size:
            size = max(int(idx.max()) + 1, 2 * size)
        elif self.n is not None:
            size = self.n
        if self.seen is None or len(self.seen) < size:
            grown = np.zeros(size, dtype=np.min_scalar_type(MAX_DRAWS[self.skip]))
            if self.seen is not None:
                grown[: len(self.seen)] = self.seen
            self.seen = grown
        out = np.zeros(len(idx), dtype=np.int64)
        counted = (idx >= 0) & (idx < size)
        mine = idx[counted]
        rank, distinct, times = rank_among_equal(mine)
        out[counted] = self.seen[mine] + rank
        if not (out >= MAX_DRAWS[self.skip]).any():  # else draw raises
            self.seen[distinct] += times.astype(self.seen.dtype)
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
    past the sample's draws in the epoch: Keys' repeats, of positions."""

    def __init__(
        self,
        ids: np.ndarray,
        skip: bool = False,
        repeats: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    ) -> None:
        self._ids = np.asarray(ids, dtype=np.int64)
        super().__init__(skip, len(self._ids), repeats)
        n = len(self._ids)
        self._nth = np.zeros(n, dtype=np.int64)  # rank among the sample's draws
        self._count = np.ones(n, dtype=np.int64)  # the sample's draws
        if n:
            self._nth, distinct, sizes = rank_among_equal(self._ids)
            self._count = sizes[np.searchsorted(distinct, self._ids)]

    def ids(self, idx: Sequence[int]) -> list[int]:
        """The samples drawn at positions idx."""
        return self._ids[np.asarray(idx, dtype=np.int64)].tolist()

    def draw(self, idx: Sequence[int]) -> list[int]:
        """The keys of the draws at positions idx (see the class)."""
        p = np.asarray(idx, dtype=np.int64).reshape(-1)
        samples = self._ids[p]
        n = self._nth[p] + self._repeats(p) * self._count[p]
        return self._keys(samples, n)
