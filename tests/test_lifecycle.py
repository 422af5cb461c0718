"""Lifecycle: Ctrl-C, break/del/exceptions/close, interpreter exit, many
create/destroy cycles, fork, and a long soak. Threads (/proc/self/task),
file descriptors (/proc/self/fd) and memory must return to baseline."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import ringloader
from conftest import thread_count
from images import jpeg_bytes
from ringloader import transforms as T
from subproc import HERE, run_python

EVAL = T.Compose([T.Resize(48), T.CenterCrop(40)])


class Files:
    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("life")
    paths = []
    for i in range(24):
        p = d / f"{i:02d}.jpg"
        p.write_bytes(jpeg_bytes("baseline", 50 + i, 70, seed=i))
        paths.append(str(p))
    return Files(paths)


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def resources() -> tuple[int, int]:
    gc.collect()
    return thread_count(), fd_count()


def warm(ds):
    """One full epoch, so lazily created process-wide state exists before
    the baseline is taken."""
    with ringloader.Loader(ds, batch_size=4, transform=EVAL, num_threads=2) as ld:
        for _ in ld:
            pass


# ---- Ctrl-C ----

SIGINT_CHILD = r"""
import sys, time
import ringloader
from ringloader import transforms as T
folder = sys.argv[1]
paths = sorted(f"{folder}/{n}" for n in __import__("os").listdir(folder))
class DS:
    samples = [(p, 0) for p in paths]
loader = ringloader.Loader(DS, batch_size=16, num_threads=1, prefetch=4,
                           transform=T.Compose([T.RandomResizedCrop(224)]))
started = False
try:
    while True:  # epochs on end: the signal may come in any of them
        for _ in loader:
            if not started:
                print("RUNNING", flush=True)
                started = True
except KeyboardInterrupt:
    print("INTERRUPTED", time.monotonic(), flush=True)
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Large JPEGs, so one decode thread takes a while per batch."""
    d = tmp_path_factory.mktemp("big")
    data = jpeg_bytes("progressive", 1200, 1600, seed=1)
    for i in range(64):
        (d / f"{i:02d}.jpg").write_bytes(data)
    return str(d)


@pytest.mark.parametrize("delay", [0.0, 0.13, 0.51, 1.7])
def test_sigint_raises_keyboard_interrupt_within_2s(big, delay):
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGINT_CHILD, big],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=HERE),
    )
    try:
        assert proc.stdout.readline().strip() == "RUNNING"
        time.sleep(delay)
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert out.startswith("INTERRUPTED"), out + err
    took = float(out.split()[1]) - sent
    assert took < 2.0, f"KeyboardInterrupt after {took:.2f} s"
    assert proc.returncode == 0, err


# ---- break, del, exceptions, close ----


def test_break_del_exception_close_release_everything(small):
    warm(small)
    base = resources()

    loader = ringloader.Loader(small, batch_size=4, transform=EVAL, num_threads=3)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    del loader
    assert resources() == base, "after break + del"

    loader = ringloader.Loader(small, batch_size=4, transform=EVAL, num_threads=3)
    with pytest.raises(ZeroDivisionError):
        for i, _ in enumerate(loader):
            if i == 2:
                1 / 0  # noqa: B018 - a failing training step
    loader.close()
    assert resources() == base, "after an exception + close"

    loader = ringloader.Loader(small, batch_size=4, transform=EVAL, num_threads=3)
    it = iter(loader)
    next(it)
    del it
    assert resources()[0] > base[0]  # the loader's threads live on
    loader.close()
    assert resources() == base, "after close mid-epoch"
    loader.close()
    assert len(list(loader)) == len(loader)  # usable again after close
    del loader
    assert resources() == base


def test_thousand_create_destroy_cycles(small):
    warm(small)
    base = resources()
    rss = []
    for cycle in range(1000):
        loader = ringloader.Loader(
            small, batch_size=4, transform=EVAL, num_threads=2, prefetch=2
        )
        it = iter(loader)
        next(it)  # threads, ring and slots all exist
        if cycle % 2:
            loader.close()
        del it, loader
        if cycle % 100 == 99:
            rss.append(rss_mb())
    assert resources() == base
    # Steady memory: no growth between the 200th and 1000th cycle. Under
    # AddressSanitizer freed memory sits in its quarantine for a while, so
    # RSS says nothing about leaks there (the normal run checks this).
    if not under_asan():
        assert rss[-1] - rss[1] < 8, f"RSS (MB) every 100 cycles: {rss}"


def under_asan() -> bool:
    with open("/proc/self/maps") as f:
        return "libasan" in f.read()


# ---- interpreter exit ----

EXIT_CHILD = r"""
import sys
import ringloader
from ringloader import transforms as T
paths = sys.argv[2:]
class DS:
    samples = [(p, 0) for p in paths]
loader = ringloader.Loader(DS, batch_size=2, num_threads=3,
                           transform=T.Compose([T.Resize(48), T.CenterCrop(40)]))
it = iter(loader)
images, _ = next(it)
keep = images  # a tensor alive at exit too
if sys.argv[1] == "exit":
    sys.exit(0)
raise SystemExit(3)
"""


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_interpreter_exit_mid_epoch(small, how):
    paths = [p for p, _ in small.samples]
    proc = run_python(EXIT_CHILD, how, *paths, timeout=60)
    assert proc.returncode == (0 if how == "exit" else 3), proc.stderr


def test_close_from_another_thread_while_iterating(big):
    """A watchdog thread closes the loader while the training thread waits
    for a batch: the training thread gets an error, nothing crashes, and
    the threads end."""
    import threading

    paths = sorted(os.path.join(big, n) for n in os.listdir(big))

    class DS:
        samples = [(p, 0) for p in paths]

    base = resources()
    loader = ringloader.Loader(
        DS, batch_size=8, num_threads=1, transform=T.Compose([T.RandomResizedCrop(64)])
    )
    outcome = []

    def train():
        try:
            for _ in loader:
                pass
            outcome.append("finished")
        except RuntimeError as e:
            outcome.append(str(e))

    t = threading.Thread(target=train)
    t.start()
    time.sleep(0.3)  # the training thread is in next(), decoding big files
    loader.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert outcome and "closed" in outcome[0], outcome
    assert resources() == base


# ---- fork ----

# What both fork children share: the data set and a digest of an epoch.
FORK_PRELUDE = r"""
import hashlib, os, sys
import ringloader
from ringloader import transforms as T
paths = sys.argv[1:]
class DS:
    samples = [(p, i) for i, p in enumerate(paths)]
def digest(loader):
    h = hashlib.sha256()
    for images, labels in loader:
        h.update(images.numpy().tobytes())
        h.update(labels.numpy().tobytes())
    return h.hexdigest()
"""

FORK_CHILD = (
    FORK_PRELUDE
    + r"""
def make():
    return ringloader.Loader(DS, batch_size=4, num_threads=2,
                             transform=T.Compose([T.Resize(48), T.CenterCrop(40)]))
inherited = make()
it = iter(inherited)
next(it)                      # threads running, an epoch in flight
expected = digest(make())
pid = os.fork()
if pid == 0:
    ok = digest(make()) == expected
    inherited.set_epoch(0)
    ok = ok and digest(inherited) == expected
    os._exit(0 if ok else 1)
inherited.set_epoch(0)
parent_ok = digest(inherited) == expected   # the parent's still works
_, status = os.waitpid(pid, 0)
print(parent_ok, os.waitstatus_to_exitcode(status))
"""
)


def test_fork_after_use(small):
    paths = [p for p, _ in small.samples]
    proc = run_python(FORK_CHILD, *paths, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "0"], proc.stdout + proc.stderr


FORK_IN_FLIGHT_CHILD = (
    FORK_PRELUDE
    + r"""
def make():
    return ringloader.Loader(DS, batch_size=2, num_threads=1, prefetch=6,
                             transform=T.Compose([T.RandomResizedCrop(64)]))
inherited = make()
it = iter(inherited)
batch = next(it)              # and fork at once: batches still decoding
pid = os.fork()
if pid == 0:
    stats = inherited.stats()             # no lock of the parent's is taken
    inherited.set_epoch(0)                # abandons the inherited epoch
    ok = digest(inherited) == digest(make())
    del batch                             # a tensor of the parent's slot
    inherited.close()
    os._exit(0 if ok else 1)
rest = sum(1 for _ in it)                 # the parent's epoch goes on
_, status = os.waitpid(pid, 0)
print(rest + 1 == len(inherited), os.waitstatus_to_exitcode(status))
"""
)


def test_fork_with_batches_in_flight(big):
    # The child inherits a pipeline whose batches its parent's threads were
    # still decoding: using, closing and dropping it must not wait for them.
    paths = sorted(os.path.join(big, n) for n in os.listdir(big))[:24]
    proc = run_python(FORK_IN_FLIGHT_CHILD, *paths, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "0"], proc.stdout + proc.stderr


# ---- soak ----


@pytest.mark.slow
def test_soak_memory_flat_over_many_epochs(small):
    warm(small)
    base = resources()
    loader = ringloader.Loader(
        small,
        batch_size=5,
        shuffle=True,
        num_threads=2,
        transform=T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip()]),
    )
    rss = []
    deadline = time.monotonic() + 90
    epochs = 0
    while epochs < 400 and time.monotonic() < deadline:
        for images, _ in loader:
            # Read the batch without torch ops, whose thread pool would
            # count as a leaked thread.
            images.numpy().sum()
        epochs += 1
        rss.append(rss_mb())
    assert epochs >= 60, f"only {epochs} epochs in 90 s"
    settled = rss[epochs // 4 :]  # after warm-up
    slope = np.polyfit(np.arange(len(settled)), settled, 1)[0]
    if not under_asan():  # (see test_thousand_create_destroy_cycles)
        assert slope < 1.0, f"RSS grows {slope:.3f} MB/epoch"
    loader.close()
    del loader
    assert resources() == base
