"""Running out of memory raises MemoryError saying what asked for how much
and what to lower, never a ValueError, and leaves nothing behind: no
thread, no file descriptor. The failures are real: a child process lowers
its own address-space limit (RLIMIT_AS) just above what it uses, so that
the decode threads' stacks, or a batch's buffer, cannot be mapped,
whatever the machine's overcommit setting."""

from __future__ import annotations

import json
import os

import pytest

from subproc import run_python

# Under the sanitizer run (make test-asan) libasan is preloaded. Its
# allocator aborts when the system refuses it memory unless told to return
# NULL instead, as malloc does; its own bookkeeping of a new thread aborts
# whatever it is told, so the threads' case is left to the normal run.
ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")

SETUP = r"""
import json, os, resource, sys
import numpy as np
from PIL import Image
import ringloader
from ringloader import transforms as T

root = sys.argv[1]
os.makedirs(os.path.join(root, "c"), exist_ok=True)
for i in range(8):
    px = np.full((48, 64, 3), i * 30, np.uint8)
    Image.fromarray(px).save(os.path.join(root, "c", f"{i}.jpg"))
ds = ringloader.ImageFolder(root)
SOFT, HARD = resource.getrlimit(resource.RLIMIT_AS)

def vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

def limit(extra):
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + extra, HARD))

def unlimit():
    resource.setrlimit(resource.RLIMIT_AS, (SOFT, HARD))

def held():
    return (len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd")))

def outcome(fn):
    try:
        fn()
        return ["ok", ""]
    except BaseException as e:
        return [type(e).__name__, str(e)]
"""

CREATE = (
    SETUP
    + r"""
def make():
    with ringloader.Loader(ds, batch_size=4, num_threads=4,
                           transform=T.Resize((32, 32))) as loader:
        next(iter(loader))

base = held()
out = []
# From no room at all to room for some of the threads' stacks (8 MiB
# each): every margin fails somewhere in making the pipeline.
for mib in (0, 2, 4, 8, 16):
    limit(mib << 20)
    got = outcome(make)
    unlimit()
    out.append(got + [list(held())])
unlimit()
out.append(outcome(make))
print(json.dumps({"base": list(base), "runs": out}))
"""
)

SLOT = (
    SETUP
    + r"""
# 8 samples (the whole data set) of 2048 x 2048 x 3 bytes: 96 MiB for
# one batch, over the 64 MiB the limit leaves.
def big():
    with ringloader.Loader(ds, batch_size=8, num_threads=2,
                           transform=T.Resize((2048, 2048))) as loader:
        next(iter(loader))

base = held()
limit(64 << 20)
got = outcome(big)
unlimit()
after = held()

def small():
    with ringloader.Loader(ds, batch_size=4, num_threads=2,
                           transform=T.Resize((32, 32))) as loader:
        x, y = next(iter(loader))
        assert x.shape == (4, 3, 32, 32), x.shape

print(json.dumps({"base": list(base), "got": got, "after": list(after),
                  "then": outcome(small)}))
"""
)

HTTP = (
    SETUP
    + r"""
from ringloader import _core

# An HTTP source of 200,000 samples on one object: its table (24 bytes a
# sample) is the largest thing made for it. Nothing is fetched: the
# pipeline is made and closed.
n = 200_000
paths = ["a.tar"] * n
offsets = np.arange(0, 10 * n, 10, dtype=np.int64)
lengths = np.full(n, 10, dtype=np.int64)
http = dict(names=["a.tar"], urls=["http://127.0.0.1:9/a.tar"])

def make():
    p = _core.Pipeline({"kind": "resize_crop", "out_h": 8, "out_w": 8},
                       paths=paths, offsets=offsets, lengths=lengths,
                       http=http, num_threads=1)
    p.close()

base = held()
out = []
# Room for none of it, then for more and more of what is made in turn:
# the Python side's arrays, the source's copies, the threads.
for kib in range(0, 12 << 10, 128):
    limit(kib << 10)
    got = outcome(make)
    unlimit()
    out.append(got + [list(held())])
print(json.dumps({"base": list(base), "runs": out, "then": outcome(make)}))
"""
)


def child(code: str, tmp_path) -> dict:
    env = {}
    if ASAN:
        opts = os.environ.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = f"{opts}:allocator_may_return_null=1"
    proc = run_python(code, str(tmp_path), timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(ASAN, reason="libasan aborts when a thread's memory is refused")
def test_threads_that_cannot_start_raise_memory_error(tmp_path):
    r = child(CREATE, tmp_path)
    *limited, unlimited = r["runs"]
    failed = [(kind, msg) for kind, msg, _ in limited if kind != "ok"]
    assert failed, r
    for kind, msg in failed:
        # Before: ValueError("cannot start decode threads: Resource
        # temporarily unavailable").
        assert kind == "MemoryError", (kind, msg)
        assert "num_threads" in msg and "thread" in msg, msg
    # Each failure joined what it had started and closed what it opened.
    for _, _, now in limited:
        assert now == r["base"], (now, r["base"])
    assert unlimited == ["ok", ""], unlimited


def test_batch_over_memory_says_its_size_and_what_to_lower(tmp_path):
    r = child(SLOT, tmp_path)
    kind, msg = r["got"]
    assert kind == "MemoryError", r
    # Before: a bare MemoryError(), no message.
    nbytes = 8 * 2048 * 2048 * 3
    assert f"{nbytes} bytes" in msg and "8 samples" in msg, msg
    for knob in ("batch_size", "prefetch", "output size"):
        assert knob in msg, msg
    assert r["after"] == r["base"], r
    assert r["then"] == ["ok", ""], r


@pytest.mark.skipif(ASAN, reason="libasan aborts when a thread's memory is refused")
def test_http_source_out_of_memory_is_memory_error(tmp_path):
    r = child(HTTP, tmp_path)
    kinds = {kind for kind, _, _ in r["runs"]}
    # Before: ValueError('out of memory') where the source's copies failed.
    assert kinds <= {"ok", "MemoryError"}, [x[:2] for x in r["runs"]]
    msgs = [msg for kind, msg, _ in r["runs"] if kind == "MemoryError"]
    assert any("HTTP source of 200000 samples" in m for m in msgs), msgs
    for _, _, now in r["runs"]:
        assert now == r["base"], (now, r["base"])
    assert r["then"] == ["ok", ""], r
