"""An interrupt never pairs a batch's images with another batch's labels.

A loader is interrupted at every batch position of an epoch, by Ctrl-C
(KeyboardInterrupt while it waits for the batch, or wherever it lands in
Python when the batch is ready first) and by close() from another thread;
the same epoch is then iterated again, and the next one. Every batch,
before and after the interrupt, must equal the one an uninterrupted loader
gives: images and labels. Each sample's label is its own index, so a batch
paired with another batch's labels cannot go unseen.

The interrupt is sent once the main thread is inside the loader's wait for
its batch (its innermost Python frame is ``Pipeline.take``); a batch takes
tens of milliseconds to decode, longer than the C wait's 50 ms step, so
most interrupts are raised from inside that wait.
"""

from __future__ import annotations

import _thread
import sys
import threading
import time

import pytest
import ringloader
import torch
from images import jpeg_bytes
from ringloader import transforms as T

BATCH = 3
BATCHES = 5
# Large output: the decode runs at full DCT scale, so a batch is slow
# enough for the wait to be interrupted.
TF = T.Compose([T.RandomResizedCrop((600, 800), scale=(0.8, 1.0))])


class Files:
    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("interrupt")
    paths = []
    for i in range(BATCH * BATCHES):
        p = d / f"{i:02d}.jpg"
        p.write_bytes(jpeg_bytes("baseline", 1600, 1200, seed=i))
        paths.append(str(p))
    return Files(paths)


def make(files, prefetch):
    return ringloader.Loader(
        files,
        batch_size=BATCH,
        shuffle=True,
        seed=5,
        transform=TF,
        num_threads=1,
        prefetch=prefetch,
    )


def epoch(loader, e):
    loader.set_epoch(e)
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.fixture(scope="module")
def reference(files):
    with make(files, 2) as loader:
        return [epoch(loader, e) for e in range(2)]


def same(got, want, what):
    assert len(got) == len(want), what
    for k, ((x, y), (wx, wy)) in enumerate(zip(got, want)):
        assert torch.equal(y, wy), f"{what}: batch {k} labels {y} != {wy}"
        assert torch.equal(x, wx), f"{what}: batch {k} images differ"


def waiting(main: int) -> bool:
    """Whether the main thread waits for its batch (or, the batch having
    been ready, has reached landing())."""
    frame = sys._current_frames().get(main)
    return frame is not None and frame.f_code.co_name in ("take", "landing")


def landing(it) -> None:
    """Where an interrupt lands when the batch was ready before it: a
    Ctrl-C during the sleep, a close() at the next batch."""
    time.sleep(2.0)
    next(it)


def when_waiting(act) -> threading.Thread:
    """Calls act() from another thread once the main thread waits for a
    batch (at most 5 s from now)."""
    main = threading.main_thread().ident

    def watch():
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not waiting(main):
            time.sleep(0.0005)
        act()

    t = threading.Thread(target=watch)
    t.start()
    return t


def interrupted_epoch(loader, k, how):
    """The batches of epoch 0 before position k, then the interrupt while
    batch k is awaited."""
    loader.set_epoch(0)
    it = iter(loader)
    got = [(x.clone(), y.clone()) for _, (x, y) in zip(range(k), it)]
    act = _thread.interrupt_main if how == "ctrl-c" else loader.close
    want = KeyboardInterrupt if how == "ctrl-c" else RuntimeError
    watcher = when_waiting(act)
    try:
        with pytest.raises(want):
            next(it)
            landing(it)
    finally:
        watcher.join()
    return got


@pytest.mark.parametrize("prefetch", [1, 2])
@pytest.mark.parametrize("how", ["ctrl-c", "close"])
def test_interrupt_at_every_batch_then_iterate_again(files, reference, how, prefetch):
    for k in range(BATCHES):
        with make(files, prefetch) as loader:
            got = interrupted_epoch(loader, k, how)
            same(got, reference[0][:k], f"{how} at {k}: before it")
            same(epoch(loader, 0), reference[0], f"{how} at {k}: epoch 0 again")
            same(epoch(loader, 1), reference[1], f"{how} at {k}: epoch 1")
