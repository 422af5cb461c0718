"""Several datasets mixed by weight into epochs of a given length, read by
one pipeline.

The sources' samples are one id space, as a ``ConcatDataset`` of them is
(:class:`.composed.Composed` maps it: one table of files or byte ranges, one C
source, one transform); what a :class:`Mix` adds is the order. Each epoch
is ``samples_per_epoch`` draws, a function of (the Mix's seed, epoch)
alone:

- how many draws each source gets: ``weights`` (normalised) times the
  epoch's length, rounded by largest remainders, so that the shares are
  the weights' to within one sample in every epoch;
- which samples: with ``replacement`` each draw picks a sample of its
  source uniformly at random; without, each source is gone through in a
  random order (a new one each time it is exhausted), and the next epoch
  carries on where this one stopped, so every sample of a source comes
  once before any comes twice, across epochs too;
- in what order: the draws of all sources shuffled together, so that every
  batch holds each source in about its share.

Position i of the epoch is the Mix's index i: a sampler over the Mix (the
loader's own, ``DistributedSampler``, Lightning's or Accelerate's) chooses
positions, and the loader reads the samples drawn at them. DDP ranks thus
get disjoint positions of one epoch, and resuming replays the same draws.

With ``on_error="skip"`` a draw that cannot be loaded is replaced by the C
core with the next sample of its own source that loads (the table's parts,
:meth:`.composed.Composed.parts`), never another source's: each source keeps
exactly its share, and a source of weight 0 is never read.

Nothing here imports the loader: the loader asks ``ringloader_order``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

from .base import decode_item, read_file, sources_of
from .composed import UnreadableComposition, Composed, leaves_of

__all__ = ["Mix"]


def _apportion(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total`` in the proportions of
    ``weights`` (largest remainders; ties to the earlier source)."""
    share = weights / weights.sum() * total
    counts = np.floor(share).astype(np.int64)
    left = total - int(counts.sum())
    if left:
        order = np.argsort(-(share - counts), kind="stable")
        counts[order[:left]] += 1
    return counts


def _rng(*words: int) -> np.random.Generator:
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([w & (2**64 - 1) for w in words]))
    )


# Stream tags, so that no two uses of one (seed, epoch) share a generator.
_ORDER, _PICK, _PERM = 1, 2, 3


class Mix:
    """Datasets mixed by weight, for :class:`ringloader.Loader` and
    ``ringloader.DataLoader``: each epoch draws ``samples_per_epoch``
    samples, each source's share of them its weight's.

    Args:
        datasets: the sources: any datasets the loader reads (ImageFolder,
            FileList, TarShards, IndexedImageFolder, torch's Subset or
            ConcatDataset of those), all local or all remote (http(s), s3).
        weights: each source's share of the draws (normalised; zero leaves
            a source out). None: in proportion to their lengths.
        samples_per_epoch: draws per epoch (over all DDP ranks), the Mix's
            ``len``. None: the sources' total length.
        replacement: True: each draw picks a sample of its source at
            random (a sample may come twice in an epoch); False: each
            source is gone through in a random order before any sample
            comes again (across epochs too), so an epoch shorter than a
            source covers a different part of it each time.
        transform, target_transform: applied to every source's samples;
            None: the sources' own, which must then be the same (one
            pipeline runs one transform).
        seed: seeds the draws, under every loader (not the loader's seed,
            which seeds augmentations): every DDP rank draws the same
            epochs whatever it seeds torch with. Change it to draw other
            epochs.

    With one source this is open_clip's "resampled" mode: epochs of a
    chosen length from shards too large to go through, ``Mix([shards],
    samples_per_epoch=N)``. Every epoch's draws are fixed by the Mix's
    ``seed`` and the epoch: under ringloader's loaders, the epoch of the
    sampler over the Mix where it has one (DistributedSampler's
    ``set_epoch``), else the loader's; for indexing (``mix[i]`` is the
    sample of draw i, as torch's DataLoader reads it) the ``epoch``
    attribute (``set_epoch``). Targets are the sources' (of one kind: the
    same shape; numbers promoted).
    """

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Optional[Sequence[float]] = None,
        samples_per_epoch: Optional[int] = None,
        replacement: bool = True,
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
        seed: int = 0,
    ) -> None:
        import torch.utils.data as tud

        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("Mix needs at least one dataset")
        for d in self.datasets:
            if isinstance(d, Mix) or any(isinstance(x, Mix) for x in leaves_of(d)):
                raise ValueError(
                    "a Mix cannot hold another Mix: give its datasets, with "
                    "their weights multiplied out, to one Mix"
                )
        self.lengths = np.array([len(d) for d in self.datasets], dtype=np.int64)
        if weights is None:
            w = self.lengths.astype(np.float64)
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (len(self.datasets),):
                raise ValueError(
                    f"{len(self.datasets)} datasets but {w.size} weights: give "
                    "one weight per dataset"
                )
        if not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
            raise ValueError(
                f"weights must be finite, >= 0 and not all 0, not {w.tolist()}"
            )
        empty = [i for i in range(len(w)) if w[i] > 0 and self.lengths[i] == 0]
        if empty:
            raise ValueError(f"dataset {empty[0]} of the Mix is empty but has a weight")
        self.weights = w / w.sum()
        n = int(self.lengths.sum()) if samples_per_epoch is None else samples_per_epoch
        if int(n) != n or n < 1:
            raise ValueError(
                f"samples_per_epoch must be a positive integer, not {samples_per_epoch!r}"
            )
        self.samples_per_epoch = int(n)
        self.replacement = bool(replacement)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)])
        self.counts = _apportion(self.weights, self.samples_per_epoch)
        self._check_one_medium()
        # One id space: the sources concatenated (composed.Composed maps it).
        self._view = Composed(tud.ConcatDataset(self.datasets))
        self._own_transforms = transform is not None or target_transform is not None
        self.transform = (
            transform if transform is not None else self._common("transform")
        )
        self.target_transform = (
            target_transform
            if target_transform is not None
            else self._common("target_transform")
        )
        if any(getattr(leaf, "describe", None) for leaf in self._view.leaves):
            self.describe = self._view.describe
        self.seed = int(seed)
        self.epoch = 0
        self._cached: Optional[tuple[tuple[int, int, int], np.ndarray]] = None

    def _check_one_medium(self) -> None:
        """Refuse local and remote sources together: one C source reads
        either files or HTTP(S) objects."""
        remote = []
        for d in self.datasets:
            kinds = {sources_of(leaf).remote is not None for leaf in leaves_of(d)}
            if len(kinds) > 1:
                remote.append(None)
            else:
                remote.append(kinds.pop())
        if len(set(remote)) > 1:
            local = [i for i, r in enumerate(remote) if r is False]
            far = [i for i, r in enumerate(remote) if r is True]
            raise ValueError(
                f"Mix: datasets {local} are local files and datasets {far} are "
                "remote (http, https, s3); one pipeline reads one kind. Put "
                "the local data on the server or bucket too (or mount the "
                "remote data as local files), so that every dataset of the "
                "Mix is remote, or every one local"
            )

    def _common(self, name: str) -> Any:
        try:
            return getattr(self._view, name)
        except UnreadableComposition:
            raise ValueError(
                f"the datasets of a Mix have different {name}s, and one pipeline "
                f"runs one: pass Mix({name}=...)"
                + (" (or the Loader's transform=)" if name == "transform" else "")
            ) from None

    def __len__(self) -> int:
        return self.samples_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose draws indexing gives (ringloader's loaders use
        the epoch of their sampler or their own)."""
        self.epoch = int(epoch)

    def ringloader_sources(self) -> Any:
        """The sources' samples as one table (ids: the sources' samples one
        after the other, in the order of ``datasets``)."""
        return self._view.ringloader_sources()

    def ringloader_order(self, seed: int, epoch: int, run: int = 1) -> np.ndarray:
        """The ids (into :meth:`ringloader_sources`) of the epoch's
        ``samples_per_epoch`` draws, in order: a function of (seed, epoch,
        run) alone. With ``run`` > 1 (the loader's ``shuffle="runs"``) a
        draw is ``run`` consecutive samples of its source (a source's
        last run wraps to its first samples), placed at positions
        ``j * run ...``, so that remote shards serve each in one range
        GET."""
        key = (seed, epoch, run)
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        total = -(-self.samples_per_epoch // run)  # draws of `run` samples
        counts = _apportion(self.weights, total) if run > 1 else self.counts
        starts = np.empty(total, dtype=np.int64)
        which = np.repeat(np.arange(len(counts)), counts)
        which = _rng(seed, epoch, _ORDER, run).permutation(which)
        for s, k in enumerate(counts.tolist()):
            if k == 0:
                continue
            picks = self._picks(seed, epoch, s, k, run)
            starts[which == s] = self.starts[s] + picks
        if run == 1:
            out = starts
        else:
            # Each run's ids, wrapping within its source.
            src = np.searchsorted(self.starts, starts, side="right") - 1
            base, n = self.starts[src], self.lengths[src]
            steps = np.arange(run, dtype=np.int64)
            local = ((starts - base)[:, None] + steps) % n[:, None]
            out = (base[:, None] + local).reshape(-1)[: self.samples_per_epoch]
        self._cached = (key, out)
        return out

    def _picks(self, seed: int, epoch: int, s: int, k: int, run: int) -> np.ndarray:
        """The ``k`` draws of source s in ``epoch``: sample indices into
        the source (the first of each run, at multiples of ``run`` without
        replacement)."""
        n = int(self.lengths[s])
        if self.replacement:
            return _rng(seed, epoch, s, _PICK, run).integers(0, n, size=k)
        # Without replacement: positions epoch*k ... of the endless stream
        # of the source's random orders (of its runs' starts), order j
        # seeded by (seed, s, j).
        m = -(-n // run)  # the source's runs
        first = epoch * k
        parts = []
        for j in range(first // m, (first + k - 1) // m + 1):
            perm = _rng(seed, s, j, _PERM, run).permutation(m)
            lo = max(first - j * m, 0)
            hi = min(first + k - j * m, m)
            parts.append(perm[lo:hi])
        return np.concatenate(parts) * run

    def source_of(self, ids: Any) -> np.ndarray:
        """The position in ``datasets`` of the source of each id."""
        return np.searchsorted(self.starts, ids, side="right") - 1

    def __getitem__(self, index: int) -> Any:
        """The sample of the ``index``-th draw of epoch ``self.epoch``
        (seed ``self.seed``), as indexing its source gives it, or with the
        Mix's own ``transform``/``target_transform`` when it was given
        them. (Torch's DataLoader over a Mix: call ``set_epoch`` each
        epoch, as for a DistributedSampler.)"""
        ident = int(self.ringloader_order(self.seed, self.epoch)[index])
        if not self._own_transforms:
            s = int(self.source_of(ident))
            return self.datasets[s][ident - int(self.starts[s])]
        view = self._view
        leaf = view.leaves[int(view._part[ident])]
        i = int(view._index[ident])
        sample = getattr(leaf, "_sample", None)
        if sample is not None:
            name, data, target = sample(i)
        else:  # an ImageFolder-like dataset's samples list
            name, target = leaf.samples[i]
            data = read_file(name)
        return decode_item(name, data, target, self.transform, self.target_transform)

    def __repr__(self) -> str:
        shares = ", ".join(f"{w:.3g}" for w in self.weights)
        return (
            f"ringloader.Mix({len(self.datasets)} datasets, weights [{shares}], "
            f"samples_per_epoch={self.samples_per_epoch}, "
            f"replacement={self.replacement}, seed={self.seed})"
        )
