"""The random keys of an epoch's samples: the key each draw of a sample
is augmented with (its index, and which occurrence of it this is), and the
dataset index a key stands for."""

from __future__ import annotations

from typing import Sequence

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
