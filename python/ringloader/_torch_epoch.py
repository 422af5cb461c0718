"""One epoch of a ringloader.DataLoader read as torch's DataLoader reads it.

A dataset's transform (a detection or segmentation dataset's transforms)
is read when the loader is made, and again at each epoch: a training
script may replace it between epochs (a schedule of sizes, augmentations
switched off for the last epochs). Where the new one is not run natively,
that epoch is read by ``torch.utils.data.DataLoader`` over the same
dataset, with a FallbackWarning saying why: the loader's own batches of
indices (its order, its shard of a distributed run, a resumed epoch's
remaining batches), its collate_fn, worker count and worker options, and
its device (each tensor of the batch placed there). Once the transform is
native again, the next epoch is read natively. ``on_error="skip"`` has no counterpart there: a
sample that fails raises, as under torch's DataLoader."""

from __future__ import annotations

import warnings
from collections import deque
from typing import Any, Callable, Iterator, Optional

from torch.utils.data import DataLoader as TorchDataLoader

from .errors import FallbackWarning


class _Batches:
    """The epoch's batches of indices as torch's DataLoader takes a batch
    sampler: drawn as it asks for them (an endless sampler of the user's
    too), each batch's size kept for the loader's stats. ``begin`` gives
    the epoch's batches; it is called at torch's first request, after
    torch's iterator drew its workers' base seed from the generator, as a
    sampler sharing that generator draws under torch's DataLoader (a
    resumed epoch replays the batches yielded before there too)."""

    def __init__(self, begin: Callable[[], Iterator[Any]]) -> None:
        self._begin = begin
        self.sizes: deque[int] = deque()  # drawn, not yet yielded

    def __iter__(self) -> Iterator[list[int]]:
        for idx in self._begin():
            out = [int(i) for i in idx]
            self.sizes.append(len(out))
            yield out


def torch_epoch(
    dataset: Any,
    begin: Callable[[], Iterator[Any]],
    why: str,
    options: dict,
    place: Optional[Callable[[Any], Any]],
    stacklevel: int,
) -> Iterator[tuple[int, Any]]:
    """(samples, batch) for each batch of one epoch from torch's DataLoader:
    ``begin`` what gives the indices of each (see :class:`_Batches`),
    ``options`` the DataLoader arguments to keep (collate_fn, num_workers,
    pin_memory, timeout, worker_init_fn, multiprocessing_context,
    generator, prefetch_factor, in_order), ``place`` what puts a batch on
    the loader's device (None: host)."""
    warnings.warn(
        "ringloader: this epoch is read by torch.utils.data.DataLoader "
        f"because the dataset's transforms changed: {why}. The next epoch is "
        "read natively again once they are",
        FallbackWarning,
        stacklevel=stacklevel,
    )
    kept = dict(options)
    if not kept.get("num_workers"):
        kept.pop("prefetch_factor", None)  # torch refuses it without workers
    if kept.get("in_order", True):
        kept.pop("in_order", None)  # the default (torch 2.6 added the argument)
    order = _Batches(begin)
    # Its workers end with the epoch: with this generator's frame, the
    # iterator's last reference goes, and torch's iterator shuts them down.
    for out in TorchDataLoader(dataset, batch_sampler=order, **kept):
        yield order.sizes.popleft(), place(out) if place is not None else out
