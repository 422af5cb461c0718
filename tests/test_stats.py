"""loader.stats(): the stall fraction at both ends and between (the share
of the loop's time spent waiting in next(): near 1 for a loop that asks at
once, near 0 for one that asks only when its batch is decoded, and what
the loop itself timed in next() in every case) and the sanity of the other
figures.

The loader runs on one decode thread over large JPEGs, so that one batch
costs milliseconds of decoding: far more than the loop's own overhead. The
loop is made slower or faster than the loader by construction, not by
timing: a loop that waits, outside next(), until the loader holds every
batch in flight decoded finds its batch ready whatever else the machine
runs; one that asks at once waits for a whole decode. So the test holds on
a loaded machine, where the loader's own rate changes from one moment to
the next."""

from __future__ import annotations

import itertools
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


def run(loader, work=None):
    """One epoch; before asking for each batch after the first, the loop
    runs work() (its training step). Returns (the share of the time from
    the first batch to the last that the loop spent inside next(), batches
    per second over that time, stats()): the loop's own measure of what
    stats() reports."""
    it = iter(loader)
    next(it)
    t_first = t_last = time.perf_counter()
    inside = 0.0
    n = 0
    while True:
        if work is not None:
            work()
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        t_last = time.perf_counter()
        inside += t_last - t0
        n += 1
        del batch
    wall = t_last - t_first
    return inside / wall, n / wall, loader.stats()


def decoded(loader, depths: list) -> None:
    """Wait, as a training step would take time, until every batch the
    loader has in flight is decoded (its queue depth is all of them), and
    note the depths seen. Fails if that never happens."""
    deadline = time.monotonic() + 60
    while True:
        s = loader.stats()
        depths.append(s["queue_depth"])
        if s["queue_depth"] >= s["inflight"]:
            return
        assert time.monotonic() < deadline, f"never all decoded: {s}"
        time.sleep(0.0005)


# What next() does outside the meter's clock (the epoch iterator's checks,
# resuming the generator) is microseconds a batch of milliseconds; this
# leaves room for another process preempting the loop there once or twice.
SAME = 0.05


def test_stall_fraction_both_ends(dataset):
    with ringloader.Loader(
        dataset, batch_size=BATCH, num_threads=1, prefetch=2, transform=EVAL
    ) as loader:
        assert loader.stats()["stall_fraction"] == 0.0  # nothing measured yet
        run(loader)  # warm the page cache

        # A loop with nothing to do waits for every batch's decode: nearly
        # all of its time is in next().
        inside, rate, fast = run(loader)
        assert fast["stall_fraction"] == pytest.approx(inside, abs=SAME), (fast, inside)
        assert fast["stall_fraction"] > 0.8, fast
        assert fast["batches_per_second"] == pytest.approx(rate, rel=0.05), fast
        assert fast["images_per_second"] == pytest.approx(rate * BATCH, rel=0.05)

        # A loop ten times slower than the loader was just now, which also
        # waits until its batch is decoded before it asks (so it never
        # waits for a decode in next(), whatever slows the loader down
        # meanwhile): only the loader's handing over of a batch is left,
        # about a millisecond of Python, and decoded batches are queued
        # when it asks.
        depths: list = []

        def slow_step():
            time.sleep(max(10 / rate, 0.1))
            decoded(loader, depths)

        inside, _, slow = run(loader, slow_step)
        assert slow["stall_fraction"] == pytest.approx(inside, abs=SAME), (slow, inside)
        assert slow["stall_fraction"] < 0.1, slow
        assert max(depths) >= 1 and all(0 <= d <= loader.prefetch for d in depths)

        # In between: a loop that asks at once for one batch (waiting in
        # next() for its whole decode) and waits outside next() for the
        # next one to be decoded, in turn, spends about half its time in
        # next(): 1 - loader rate / loop rate, the loader decoding all the
        # time. Both waits are one decode, whatever the machine's load.
        turn = itertools.cycle((True, False))

        def alternate():
            if next(turn):
                decoded(loader, [])

        inside, rate, half = run(loader, alternate)
        assert half["stall_fraction"] == pytest.approx(inside, abs=SAME), (half, inside)
        assert 0.2 < half["stall_fraction"] < 0.8, half
        assert half["batches_per_second"] == pytest.approx(rate, rel=0.05), half


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
