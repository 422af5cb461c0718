"""Batches of a loader collected and compared, for the tests that hold a
dataset to a reference dataset over the same images (bit-exact: the same
bytes through the same pipeline), and resuming checked against a whole
epoch."""

from __future__ import annotations

import ringloader
import torch


def collect(dataset, transform, **kw) -> tuple[list, dict]:
    """(the (images, targets) batches of one epoch, cloned, without the
    fields a dataset's batches carry beside; the loader's stats), 2
    threads, seed 3, batches of 5 unless ``kw`` says."""
    kw.setdefault("batch_size", 5)
    loader = ringloader.Loader(
        dataset, transform=transform, num_threads=2, seed=3, **kw
    )
    out = [(x.clone(), y.clone()) for x, y, *_ in loader]
    stats = loader.stats()
    loader.close()
    return out, stats


def assert_same(a: list, b: list) -> None:
    """Two lists of (images, targets) batches are equal, bit for bit."""
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(ya, yb)
        assert torch.equal(xa, xb)


def assert_resumes(make, skip: int = 3) -> None:
    """A loader made by ``make()`` that takes the state of one stopped
    after ``skip`` batches yields exactly the rest of the epoch."""
    whole = [(x.clone(), t.clone()) for x, t in make()]
    loader = make()
    it = iter(loader)
    for _ in range(skip):
        next(it)
    state = loader.state_dict()
    loader.close()
    fresh = make()
    fresh.load_state_dict(state)
    rest = [(x.clone(), t.clone()) for x, t in fresh]
    fresh.close()
    assert len(rest) == len(whole) - skip
    assert_same(rest, whole[skip:])
