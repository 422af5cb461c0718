"""The streaming order of a shard set (ringloader._stream_order): exact,
sized as DistributedSampler sizes its parts, local in the stream, and
computable from any position."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from ringloader._stream_order import StreamOrder
from torch.utils.data import DistributedSampler

CASES = [
    # (samples of each shard, world size, window)
    ([7] * 5, 1, 4),
    ([100] * 13, 3, 16),
    ([3, 0, 50, 1, 9, 200, 4], 4, 8),
    ([10], 4, 3),
    ([1000] * 40, 8, 512),
    ([5, 6, 7], 2, 1),
]


def _starts(counts: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


@pytest.mark.parametrize("counts,world,window", CASES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_each_rank_is_sized_as_distributed_sampler_and_all_are_read(
    counts, world, window, drop_last
):
    n = sum(counts)
    parts = []
    for rank in range(world):
        order = StreamOrder(_starts(counts), 3, 1, rank, world, drop_last, window)
        ref = DistributedSampler(
            range(n), world, rank, shuffle=True, drop_last=drop_last
        )
        assert len(order) == len(ref)
        parts.append((order.ids(0), order.occurrences(0)))
    ids = np.concatenate([p[0] for p in parts])
    again = np.concatenate([p[1] for p in parts])
    assert ((ids >= 0) & (ids < n)).all()
    firsts = ids[again == 0]
    assert len(set(firsts.tolist())) == len(firsts)  # no sample twice
    if drop_last:
        assert len(firsts) == len(ids) == (n // world) * world
    else:
        assert sorted(firsts.tolist()) == list(range(n))  # every sample
        assert len(ids) - n == (-n) % world  # the padding, as repeats


def test_a_shard_is_read_in_its_neighbourhood_of_the_stream():
    counts, window = [1000] * 40, 256
    order = StreamOrder(_starts(counts), 0, 0, window=window)
    ids = order.ids(0)
    # Where each sample sits in the epoch's stream (shards end to end).
    shard = ids // 1000
    stream_pos = order._at[np.argsort(order._first)][shard] + ids % 1000
    moved = np.abs(stream_pos - np.arange(len(ids)))
    assert moved.max() <= window + window // 2
    # A batch of 64 draws from at most 3 shards: reads stay sequential.
    per_batch = [len(set(shard[i : i + 64].tolist())) for i in range(0, len(ids), 64)]
    assert max(per_batch) <= 3
    # ... and is shuffled: not the stream's order, neighbours mixed.
    assert (np.diff(stream_pos) != 1).mean() > 0.9


def test_the_order_depends_on_seed_and_epoch_only():
    starts = _starts([300] * 10)
    a = StreamOrder(starts, 5, 2, window=64).ids(0)
    assert (StreamOrder(starts, 5, 2, window=64).ids(0) == a).all()
    assert (StreamOrder(starts, 5, 3, window=64).ids(0) != a).mean() > 0.9
    assert (StreamOrder(starts, 6, 2, window=64).ids(0) != a).mean() > 0.9


def test_any_position_resumes_exactly():
    order = StreamOrder(_starts([97] * 31), 1, 4, rank=1, world_size=3, window=50)
    whole = order.ids(0)
    for at in (0, 1, 49, 50, 333, len(order) - 1, len(order)):
        fresh = StreamOrder(_starts([97] * 31), 1, 4, rank=1, world_size=3, window=50)
        assert (np.concatenate([whole[:at], fresh.ids(at)]) == whole).all()


def test_a_billion_samples_cost_o_shards_and_o_batch():
    # 100,000 shards of 10,000 samples: the order holds the shards'
    # arrays, and a batch anywhere in the epoch needs a window's worth.
    starts = _starts([10_000] * 100_000)
    tracemalloc.start()
    try:
        order = StreamOrder(starts, 0, 7, rank=3, world_size=8)
        made = tracemalloc.get_traced_memory()[0]
        ids = order.ids(60_000_000, 60_000_256)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(order) == 125_000_000 and len(ids) == 256
    assert made < 100_000 * 24 + (1 << 20)
    assert peak < made + (4 << 20)
    assert len(set(ids.tolist())) == 256
