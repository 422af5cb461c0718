"""The streaming order of a shard set: for data in an object store, where a
request per sample costs too much, an epoch reads each shard's samples
nearly in order while still shuffling them.

The epoch's order, for ``(seed, epoch)``:

1. the shards in a random order (a permutation of the shards: O(shards)
   memory), their samples laid end to end: the epoch's *stream*;
2. the stream cut into ``world_size`` contiguous parts of equal length, as
   DistributedSampler sizes them (``ceil(N / world_size)``, or
   ``N // world_size`` with ``drop_last``; a part past the stream's end
   wraps to its start, as DistributedSampler pads), rank r taking part r;
   each rank so reads whole runs of shards, one after another;
3. within its part, the positions shuffled by two layers of windowed
   permutations: windows of ``window`` positions, then windows shifted by
   half of one, each permuted at random. A sample moves at most about one
   and a half windows from its place in the stream, so at any time the
   reads fall within a few shards' ranges (sequential reads), while any two
   samples of a window, or of neighbouring ones, may come in either order.

Every step is a function of (seed, epoch, rank, position): a batch is
computed on its own, in O(batch + window) memory, and resuming at any
position needs no replay. This plays the part of webdataset's shard
shuffle followed by ``shuffle(n)``, with an order that can be recomputed
from any point.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

__all__ = ["StreamOrder", "DEFAULT_WINDOW"]

# Samples a window shuffles: the reads stay within about 1.5 windows.
DEFAULT_WINDOW = 8192


def _generator(*words: int) -> np.random.Generator:
    """A generator that depends only on ``words`` (on any platform)."""
    state = np.random.SeedSequence([w & (2**64 - 1) for w in words])
    return np.random.Generator(np.random.Philox(state))


class StreamOrder:
    """The streaming order of one rank in one epoch (see the module).

    ``starts`` (int64, shards + 1): the first sample of each shard, then
    the number of samples. :meth:`ids` gives the dataset indices at this
    rank's positions ``[lo, hi)``, :meth:`occurrences` how many times each
    was drawn before in the epoch (1 for a padding repeat)."""

    def __init__(
        self,
        starts: np.ndarray,
        seed: int,
        epoch: int,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        starts = np.asarray(starts, dtype=np.int64)
        counts = np.diff(starts)
        if len(counts) == 0 or np.any(counts < 0):
            raise ValueError("starts must rise from the first shard's first sample")
        if window < 1:
            raise ValueError(f"window must be >= 1, not {window}")
        self.n = int(starts[-1] - starts[0])
        self.seed, self.epoch, self.rank = seed, epoch, rank
        self.window = int(window)
        shards = _generator(seed, epoch, 0x5EED).permutation(len(counts))
        self._first = starts[:-1][shards]  # first sample of each, in stream order
        self._at = np.concatenate([[0], np.cumsum(counts[shards])])  # stream pos.
        if drop_last:
            self.num_samples = self.n // world_size
        else:
            self.num_samples = math.ceil(self.n / world_size)
        self._base = rank * self.num_samples
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def __len__(self) -> int:
        return self.num_samples

    def _stream(self, pos: np.ndarray) -> np.ndarray:
        """Stream positions (padding past the end not wrapped yet) of this
        rank's positions ``pos``."""
        half = self.window // 2
        q = self._layer(pos, 1, half)  # the outer, shifted windows
        q = self._layer(q, 0, 0)
        return self._base + q

    def _layer(self, pos: np.ndarray, layer: int, shift: int) -> np.ndarray:
        """``pos`` mapped by layer ``layer``'s permutations of the windows
        ``[shift + k * window, shift + (k + 1) * window)`` (the first
        ``[0, shift)``), each clipped to the part's length."""
        out = np.empty_like(pos)
        w = self.window
        which = (pos - shift) // w  # -1: [0, shift)
        for k in np.unique(which).tolist():
            lo = max(0, shift + k * w)
            hi = min(self.num_samples, shift + (k + 1) * w)
            sel = which == k
            out[sel] = lo + self._perm(layer, k, hi - lo)[pos[sel] - lo]
        return out

    def _perm(self, layer: int, k: int, size: int) -> np.ndarray:
        """The permutation of window k of a layer (the last few kept)."""
        key = (layer, k)
        perm = self._perms.get(key)
        if perm is None:
            if len(self._perms) >= 8:
                self._perms.clear()
            gen = _generator(self.seed, self.epoch, self.rank, layer, k)
            perm = self._perms[key] = gen.permutation(size)
        return perm

    def ids(self, lo: int, hi: Optional[int] = None) -> np.ndarray:
        """The dataset indices at this rank's positions [lo, hi)."""
        hi = self.num_samples if hi is None else min(hi, self.num_samples)
        pos = np.arange(lo, max(lo, hi), dtype=np.int64)
        s = self._stream(pos) % max(self.n, 1)
        shard = np.searchsorted(self._at, s, side="right") - 1
        return self._first[shard] + (s - self._at[shard])

    def occurrences(self, lo: int, hi: Optional[int] = None) -> np.ndarray:
        """How many times the samples at positions [lo, hi) came before in
        this epoch (over all ranks): 0, or the padding's repeat count."""
        hi = self.num_samples if hi is None else min(hi, self.num_samples)
        pos = np.arange(lo, max(lo, hi), dtype=np.int64)
        return self._stream(pos) // max(self.n, 1)
