"""loader.stats(): the stall fraction at both ends (a training loop slower
than the loader never waits; a faster one waits 1 - loader rate / loop rate
of its time) and the sanity of the other figures.

The loader runs on one decode thread over large JPEGs, so that one batch
costs tens of milliseconds: far more than the loop's own overhead, and far
less than the slow loop's sleep. The loader's own rate is measured in the
same test, by passes that do not sleep, before and after the slept pass."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import ringloader
from ringloader import transforms as T

from images import jpeg_bytes

BATCH = 4
BATCHES = 24
EVAL = T.Compose([T.Resize(256), T.CenterCrop(224)])
KEYS = {
    "images_per_second",
    "batches_per_second",
    "stall_fraction",
    "wait_seconds",
    "wall_seconds",
    "first_batch_seconds",
    "read_seconds",
    "io_cpu_seconds",
    "decode_seconds",
    "samples_decoded",
    "bytes_read",
    "errors",
    "inflight",
    "queue_depth",
    "io_backend",
    "epoch",
    "rank",
}


class Repeated:
    def __init__(self, paths, n):
        self.samples = [(paths[i % len(paths)], i) for i in range(n)]

    def __len__(self):
        return len(self.samples)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("stats")
    paths = []
    for i in range(6):
        p = d / f"{i}.jpg"
        p.write_bytes(jpeg_bytes("s444", 600, 800, seed=i))
        paths.append(str(p))
    return Repeated(paths, BATCH * BATCHES)


def run(loader, sleep: float = 0.0, probe=None):
    """One epoch; returns (batches/s of the whole loop by our own clock
    from the first batch on, the loop's own rate: batches per second of
    time spent outside next(), stats())."""
    it = iter(loader)
    next(it)
    t_first = time.perf_counter()
    own = 0.0
    n = 0
    while True:
        t0 = time.perf_counter()
        try:
            images, labels = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        n += 1
        if sleep:
            time.sleep(sleep)
        if probe is not None:
            probe(loader.stats())
        own += time.perf_counter() - t1
        del images, labels
    wall = t0 - t_first
    return n / wall, n / own, loader.stats()


def test_stall_fraction_both_ends(dataset):
    with ringloader.Loader(
        dataset, batch_size=BATCH, num_threads=1, prefetch=2, transform=EVAL
    ) as loader:
        assert loader.stats()["stall_fraction"] == 0.0  # nothing measured yet
        run(loader)  # warm the page cache
        rate0, own0, fast = run(loader)
        # A loop with (almost) nothing to do waits nearly all the time.
        assert fast["stall_fraction"] > 0.8, fast
        assert fast["stall_fraction"] == pytest.approx(1 - rate0 / own0, abs=0.15)
        assert fast["images_per_second"] == pytest.approx(rate0 * BATCH, rel=0.15)
        assert fast["batches_per_second"] == pytest.approx(rate0, rel=0.15)

        # A loop that needs half the loader's time per batch stalls half of
        # the time. The loader's own rate comes from un-slept passes just
        # before and after the slept one; other processes sharing the CPUs
        # can change it from one second to the next, so an attempt counts
        # only when the two agree within 15% (else it is repeated; if none
        # does, the last is judged with a wider tolerance).
        for _ in range(4):
            before = run(loader)[0]
            wall_rate, own, half = run(loader, sleep=0.5 / before)
            after = run(loader)[0]
            # First what the loop measured itself: its share of time in
            # next() (which also holds the loader's own Python overhead, a
            # millisecond or two per batch that the meter leaves out).
            assert half["stall_fraction"] == pytest.approx(
                1 - wall_rate / own, abs=0.1
            ), (half, 1 - wall_rate / own)
            loader_rate = (before + after) / 2
            expected = 1 - loader_rate / own
            stable = abs(before - after) < 0.15 * loader_rate
            print(
                f"loader {before:.1f} then {after:.1f} batches/s, loop "
                f"{own:.1f}/s: stall {half['stall_fraction']:.3f}, expected "
                f"{expected:.3f}"
            )
            if stable:
                break
        assert 0.25 < expected < 0.75, (before, after, own)
        assert half["stall_fraction"] == pytest.approx(
            expected, abs=0.15 if stable else 0.3
        ), (before, after, own, half)

        # A loop five times slower than the loader never waits, and finds
        # decoded batches queued when it asks (the margin absorbs other
        # processes slowing the loader down for a while).
        depths = []
        wall_rate, own, slow = run(
            loader,
            sleep=5 / loader_rate,
            probe=lambda s: depths.append(s["queue_depth"]),
        )
        assert max(depths) >= 1 and all(0 <= d <= loader.prefetch for d in depths)
        # What the stats say is what the loop measured itself; and it barely
        # waited, unless other processes slowed the loader down below twice
        # the loop's pace meanwhile (measured right after), which shared
        # CPUs do for seconds at a time (a fixed bound failed so, 0.095).
        assert slow["stall_fraction"] == pytest.approx(1 - wall_rate / own, abs=0.1), (
            slow,
            1 - wall_rate / own,
        )
        after = run(loader)[0]
        if after > 2 * own:
            assert slow["stall_fraction"] < 0.08, (slow, after, own)


def test_stats_keys_and_sanity(dataset):
    with ringloader.Loader(
        dataset, batch_size=BATCH, num_threads=1, transform=EVAL
    ) as loader:
        before = loader.stats()
        assert KEYS <= set(before)
        assert before["images_per_second"] == 0.0 and before["io_backend"] is None
        seen = []
        for i, _ in enumerate(loader):
            if i == 3:
                seen.append(loader.stats())
        s = loader.stats()
    assert KEYS <= set(s)
    assert s["images_per_second"] > 0 and s["batches_per_second"] > 0
    assert s["images_per_second"] == pytest.approx(s["batches_per_second"] * BATCH)
    assert 0.0 <= s["stall_fraction"] <= 1.0
    assert s["wall_seconds"] > 0 and s["first_batch_seconds"] > 0
    assert s["read_seconds"] > 0 and s["decode_seconds"] > 0
    assert s["decode_seconds"] > s["read_seconds"]  # big JPEGs, page cache
    assert s["samples_decoded"] == len(dataset)
    assert s["bytes_read"] == sum(os.path.getsize(p) for p, _ in dataset.samples)
    assert s["errors"] == 0
    for key in (
        "queue_depth",
        "inflight",
        "samples_decoded",
        "bytes_read",
        "errors",
        "epoch",
        "rank",
    ):
        assert isinstance(s[key], int), key
        assert isinstance(seen[0][key], int), key
    assert 0 <= seen[0]["queue_depth"] <= loader.prefetch
    assert 0 <= seen[0]["inflight"] <= loader.prefetch
    assert s["io_backend"] in ("io_uring", "pread")
    assert s["epoch"] == 0 and s["rank"] == 0
    assert np.isfinite([s[k] for k in ("images_per_second", "wait_seconds")]).all()
