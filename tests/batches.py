"""Batches of a loader collected and compared, for the tests that hold a
dataset to a reference dataset over the same images (bit-exact: the same
bytes through the same pipeline), and resuming checked against a whole
epoch."""

from __future__ import annotations

import warnings

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


def assert_same_epochs(dataset, ref, transforms) -> dict:
    """``dataset`` gives ``ref``'s batches through each of ``transforms``,
    in order and shuffled; the stats of its last epoch."""
    for shuffle in (False, True):
        for transform in transforms:
            got, stats = collect(dataset, transform, shuffle=shuffle)
            assert_same(got, collect(ref, transform, shuffle=shuffle)[0])
    return stats


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


def assert_fields_epoch(dataset, labels, captions, transform) -> None:
    """A shuffled epoch of ``dataset`` with a caption field: each caption
    beside its sample's label, every sample once, not in order."""
    loader = ringloader.Loader(
        dataset, transform=transform, batch_size=4, num_threads=2, shuffle=True, seed=1
    )
    seen = []
    for images, y, caps in loader:
        assert len(images) == len(caps) == len(y)
        for label, cap in zip(y.tolist(), caps):
            i = captions.index(cap)
            assert labels[i] == label
            seen.append(i)
    loader.close()
    assert sorted(seen) == list(range(len(captions))) and seen != sorted(seen)


def assert_ranks_split(dataset, ref, transform) -> None:
    """Two ranks of ``dataset`` give the batches two ranks of ``ref`` do,
    and between them every sample once."""
    seen = []
    for rank in range(2):
        kw = dict(shuffle=True, distributed=True, rank=rank, world_size=2)
        got, _ = collect(dataset, transform, **kw)
        assert_same(got, collect(ref, transform, **kw)[0])
        seen += torch.cat([y for _, y in got]).tolist()
    assert sorted(seen) == sorted(ref.targets.tolist())


def assert_native_dataloader(dataset, ref) -> None:
    """ringloader.DataLoader reads ``dataset`` (which has its transform)
    natively, without a FallbackWarning, as it reads ``ref``."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = ringloader.DataLoader(
            dataset, batch_size=6, shuffle=True, num_workers=2
        )
    assert isinstance(loader, ringloader.DataLoader)
    got = [(x.clone(), y.clone()) for x, y in loader]
    assert sorted(torch.cat([y for _, y in got]).tolist()) == sorted(
        ref.targets.tolist()
    )
    want = [(x.clone(), y.clone()) for x, y in ringloader.DataLoader(ref, batch_size=6)]
    loader = ringloader.DataLoader(dataset, batch_size=6)
    assert_same([(x.clone(), y.clone()) for x, y in loader], want)
