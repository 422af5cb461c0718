"""The built-in orders: a keyed bijection computed per batch (no array of
n entries), sharded as DistributedSampler shards, keys known from the
position, and resuming at any batch without replaying the ones before."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from torch.utils.data import BatchSampler, DistributedSampler

from ringloader._keys import OCCURRENCE_SHIFT, Keys
from ringloader._position import STATE_VERSION, Position
from ringloader._sampling import RUN_LENGTH, Sampling


def Shuffle(n: int, seed: int, epoch: int):
    from ringloader._order import Shuffle

    return Shuffle(n, seed, epoch)


def sampling(n, batch_size=4, **kw) -> Sampling:
    args = dict(
        n=n,
        batch_size=batch_size,
        drop_last=False,
        shuffle=True,
        runs=False,
        sampler=None,
        batch_sampler=None,
        distributed=False,
        rank=0,
        world_size=1,
        seed=11,
    )
    args.update(kw)
    return Sampling(**args)


def epoch(s: Sampling, e: int = 0, at: int = 0, skip: bool = False):
    """(ids, keys) of each batch an iteration of epoch ``e`` yields, resumed
    after ``at`` batches as a new process resumes (load_state_dict)."""
    p = Position()
    state = {"version": STATE_VERSION, "epoch": e, "batches_yielded": at}
    p.restore(state, s)
    batches, keys = p.begin(s, p.next_iteration(), skip)
    return [(keys.ids(b), keys.draw(b)) for b in ([int(i) for i in b] for b in batches)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 16, 17, 255, 1000, 4097, 2**20 + 3])
def test_shuffle_is_a_permutation(n):
    for seed, e in [(0, 0), (1, 0), (0, 1), (12345, 7), (2**63 + 5, 2**40)]:
        s = Shuffle(n, seed, e)
        order = s(np.arange(n))
        assert np.array_equal(np.sort(order), np.arange(n)), (n, seed, e)
        assert np.array_equal(s.inverse(order), np.arange(n))


def test_shuffle_is_a_function_of_seed_and_epoch():
    at = np.arange(1000)
    first = Shuffle(1000, 3, 0)(at)
    assert np.array_equal(first, Shuffle(1000, 3, 0)(at))  # same seed, same order
    assert not np.array_equal(first, Shuffle(1000, 3, 1)(at))  # epochs differ
    assert not np.array_equal(first, Shuffle(1000, 4, 0)(at))  # seeds differ
    # Any slice of positions gives what the whole order has there.
    assert np.array_equal(Shuffle(1000, 3, 0)(at[517:530]), first[517:530])
    # Pinned: the same order on every platform (integer arithmetic only).
    assert Shuffle(10, 0, 0)(np.arange(10)).tolist() == [2, 7, 1, 9, 8, 5, 0, 6, 4, 3]


@pytest.mark.parametrize("n", [7, 10, 64])
def test_shuffle_places_a_sample_uniformly(n):
    """Where sample 0 lands over 3000 seeds: a chi-square over the n places
    (n - 1 degrees of freedom, mean n - 1) far below the bound, which a
    uniform placement passes with probability above 1 - 1e-6 (the seeds are
    fixed: the result is too)."""
    trials = 3000
    where = [
        int(Shuffle(n, seed, 0).inverse(np.array([0]))[0]) for seed in range(trials)
    ]
    counts = np.bincount(where, minlength=n)
    expected = trials / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < (n - 1) + 8 * math.sqrt(2 * (n - 1)), (chi2, counts)
    # Neighbours do not stay neighbours: about 1/n of pairs stay adjacent.
    order = Shuffle(4096, 1, 0)(np.arange(4096))
    assert (np.abs(np.diff(order)) == 1).mean() < 0.01


def test_runs_keep_runs_whole():
    n = 16 * 9 + 5  # a short last run
    for e in range(4):
        ids = [i for b, _ in epoch(sampling(n, 7, runs=True, seed=e), e) for i in b]
        assert sorted(ids) == list(range(n))
        # Inside a run, each sample follows the one before it.
        inside = [k for k in range(1, n) if ids[k] % RUN_LENGTH]
        assert all(ids[k] == ids[k - 1] + 1 for k in inside)
        assert ids != list(range(n))
    orders = {
        tuple(i for b, _ in epoch(sampling(n, 7, runs=True), e) for i in b)
        for e in range(4)
    }
    assert len(orders) == 4


@pytest.mark.parametrize("n", [10**7, 10**9])
def test_billion_sample_orders_take_memory_of_a_batch(n):
    """The first batches of an n-sample order, and a resume deep into it,
    allocate a few hundred KB at most: no permutation of n entries, no
    record per sample drawn."""
    kinds = [
        dict(),
        dict(runs=True),
        dict(distributed=True, rank=3, world_size=8),
        dict(distributed=True, rank=1, world_size=3, shuffle=False, drop_last=True),
    ]
    for kw in kinds:
        s = sampling(n, 256, **kw)
        for at in (0, s.batches_per_epoch() // 2):
            tracemalloc.start()
            try:
                p = Position()
                p.restore(
                    {"version": STATE_VERSION, "epoch": 5, "batches_yielded": at}, s
                )
                batches, keys = p.begin(s, p.next_iteration(), False)
                for _ in range(3):
                    b = next(batches)
                    assert len(b) == 256 and 0 <= min(b) and max(b) < n
                    keys.draw(b)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < 2 * 2**20, (kw, at, peak)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("n", [1, 3, 16, 17, 23, 40])
def test_distributed_shards_as_distributed_sampler(n, shuffle, drop_last):
    for world in range(1, 9):
        padded = {}
        for rank in range(world):
            shard = dict(shuffle=shuffle, drop_last=drop_last)
            s = sampling(n, 3, distributed=True, rank=rank, world_size=world, **shard)
            ref = DistributedSampler(range(n), num_replicas=world, rank=rank, **shard)
            got = epoch(s, 2)
            ids = [i for b, _ in got for i in b]
            want = list(BatchSampler(ref, 3, drop_last))
            assert [len(b) for b, _ in got] == [len(b) for b in want]
            assert s.batches_per_epoch() == len(want)
            if not shuffle:
                assert [b for b, _ in got] == want
            # Rank r holds positions r, r + world, ... of the padded order.
            for j, i in enumerate(ids):
                padded[j * world + rank] = i
        total = len(padded)
        order = [padded[g] for g in range(total)]
        if drop_last:  # a prefix of one permutation
            assert len(set(order)) == total
        else:  # the permutation, then its start again
            assert sorted(order[:n]) == list(range(n))
            assert order[n:] == [order[g % n] for g in range(n, total)]


def test_distributed_draws_never_share_a_key():
    """The padding's repeats are later draws of their samples: over all
    ranks, no two draws of an epoch have one key (so no two come out
    augmented alike), and each rank's first draws keep today's keys."""
    n, world = 13, 8
    keys = []
    for rank in range(world):
        s = sampling(n, 2, distributed=True, rank=rank, world_size=world)
        keys += [k for _, ks in epoch(s, 1) for k in ks]
    assert len(keys) == 16 and len(set(keys)) == 16
    assert sorted(k for k in keys if k >> OCCURRENCE_SHIFT == 0) == list(range(n))


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(shuffle=False),
        dict(runs=True),
        dict(distributed=True, rank=2, world_size=3),
        dict(distributed=True, rank=1, world_size=4, drop_last=True),
        dict(distributed=True, rank=0, world_size=2, runs=True),
        dict(drop_last=True),
    ],
)
def test_resume_at_any_batch_of_a_builtin_order(kw):
    s = sampling(53, 5, **kw)
    for skip in (False, True):
        whole = epoch(s, 3, 0, skip)
        assert len(whole) == s.batches_per_epoch()
        for at in range(len(whole)):
            assert epoch(s, 3, at, skip) == whole[at:], (kw, at)
        # A finished epoch resumes at the start of the next.
        assert epoch(s, 3, len(whole), skip) == epoch(s, 4, 0, skip)


def test_resume_with_a_sampler_with_replacement():
    draws = np.random.default_rng(0).integers(0, 20, 300).tolist()
    s = sampling(20, 7, sampler=draws, shuffle=False)
    whole = epoch(s, 0)
    assert [i for b, _ in whole for i in b] == draws
    for at in range(0, len(whole), 5):
        assert epoch(s, 0, at) == whole[at:]


def old_keys(batches, limit):
    """The keys of a sampler's draws as ringloader always made them: the
    index, plus how many times it came before in the iteration."""
    seen: dict = {}
    out = []
    for b in batches:
        ks = []
        for i in b:
            n = seen.get(i, 0)
            assert n < limit
            seen[i] = n + 1
            ks.append(i + (n << OCCURRENCE_SHIFT))
        out.append(ks)
    return out


def test_keys_of_a_sampler_with_replacement_are_unchanged():
    from ringloader._keys import MAX_DRAWS

    rng = np.random.default_rng(5)
    draws = rng.integers(0, 40, 2000)
    batches = [draws[k : k + 33].tolist() for k in range(0, len(draws), 33)]
    batches.append([3] * 40)  # one sample many times in a batch
    for skip in (False, True):
        keys = Keys(skip, 40)
        assert [keys.draw(b) for b in batches] == old_keys(batches, MAX_DRAWS[skip])
        # A counter per sample, of 2 or 4 bytes: not a record per draw.
        assert keys.seen.shape == (40,) and keys.seen.itemsize <= 4
    # Through the loader's path, a user's sampler keeps these keys.
    s = sampling(40, 33, sampler=draws.tolist(), shuffle=False)
    assert [k for _, k in epoch(s)] == old_keys(batches[:-1], MAX_DRAWS[False])


def test_builtin_keys_are_the_samples_once_each():
    for kw in (dict(), dict(shuffle=False), dict(runs=True)):
        ids_keys = epoch(sampling(100, 8, **kw), 4)
        assert [i for b, _ in ids_keys for i in b] == [
            k for _, ks in ids_keys for k in ks
        ]


def test_keys_leave_indices_outside_the_dataset_to_the_pipeline():
    """A sampler's index outside [0, n) is not counted (the pipeline
    rejects it, naming it), and draws nothing else out of step."""
    keys = Keys(False, 5)
    assert keys.draw([7, 9]) == [7, 9]
    assert keys.draw([1, 7, 1]) == [1, 7, 1 + (1 << OCCURRENCE_SHIFT)]
    assert keys.draw([]) == []
