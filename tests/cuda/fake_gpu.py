"""The GPU path's double for the fake CUDA runtime (fake_cudart.c), used by
test_cuda_fake.py and the dry run of benchmarks/gpu/run.py: a machine
without a GPU has a CPU build of torch, so device buffers come from the
fake's cudaMalloc (``_core.cuda_malloc``, test builds only) and a "device"
tensor is a host view of that memory. Everything else a Loader does on the
GPU path (the C core's copies, events, its own copy stream, the device-side
conversion of ``ringloader._gpu.Gpu``) is the code users run.

``install()`` makes every Loader made afterwards in this process use it.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import weakref
from typing import Any

import torch

import ringloader._gpu
from ringloader import _core


SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_cudart.c")


def run_script(fake: str, script: str, args: list, **env: Any) -> dict:
    """Runs ``script`` (Python, ending in a ``report()`` that prints a
    "RESULT <json>" line) in a fresh process on the fake runtime ``fake``,
    from tests/ with ``args`` as its argv, ``env`` added to the
    environment; returns that JSON. The runtime is loaded once per
    process: each scenario needs its own."""
    full = dict(
        os.environ, RINGLOADER_CUDART=fake, **{k: str(v) for k, v in env.items()}
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
        cwd=os.path.dirname(os.path.dirname(SOURCE)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[7:])


def report(**kw: Any) -> None:
    """Prints, for :func:`run_script`, a "RESULT <json>" line of ``kw``
    and the fake runtime's counters: violations (and the last one),
    pinned and device allocations, events and streams outstanding, copies
    run."""
    fake = ctypes.CDLL(os.environ["RINGLOADER_CUDART"])
    fake.fake_cuda_last_violation.restype = ctypes.c_char_p
    kw.update(
        violations=fake.fake_cuda_violations(),
        last=fake.fake_cuda_last_violation().decode(),
        host=fake.fake_cuda_host_outstanding(),
        dev=fake.fake_cuda_device_outstanding(),
        streams=fake.fake_cuda_streams_outstanding(),
        events=fake.fake_cuda_events_outstanding(),
        copies=fake.fake_cuda_copies(),
    )
    print("RESULT " + json.dumps(kw))


def build(out: str) -> str:
    """Compiles the fake runtime into the shared library ``out`` (returned).
    -Bsymbolic: its own entry points call one another (cudaStreamCreate
    calls cudaStreamCreateWithFlags), and the CUDA runtime that torch loads
    into the process with its symbols global would otherwise take those
    calls, answering 35 (no driver) on a machine without a GPU."""
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-Wl,-Bsymbolic", "-O1", "-Wall", "-Wextra"]
        + ["-Werror", "-pthread", SOURCE, "-o", out],
        check=True,
    )
    return out


class FakeGpu(ringloader._gpu.Gpu):
    def __init__(self, device: torch.device) -> None:
        ok, msg, lib, count = _core.cuda_probe()
        if not ok:
            raise RuntimeError(f"device={str(device)!r}: no fake runtime ({msg})")
        if not hasattr(_core, "cuda_malloc"):
            raise RuntimeError("the fake GPU needs a test build of ringloader")
        self.index = device.index if device.index is not None else 0
        if not 0 <= self.index < count:
            raise RuntimeError(f"CUDA device {self.index} requested, {count} present")
        self.device = torch.device("cuda", self.index)
        self.library = lib
        self.copy_stream = 0
        self._consumer = 0
        # The targets' tensors placed, by id (tensors compare by value).
        self._placed: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def use_stream(self, handle: int) -> None:
        self.copy_stream = handle
        if not self._consumer:
            self._consumer = _core.cuda_stream_create(self.index)

    def alloc(self, nbytes: int) -> tuple[Any, int]:
        buf = _core.cuda_malloc(self.index, nbytes)
        return buf, int(buf.ptr)

    def consumer_stream(self) -> int:
        return int(self._consumer)

    def tensor(self, batch: Any) -> torch.Tensor:
        # The fake's device memory is host memory, viewed without waiting:
        # like a real device tensor its content is only defined for work
        # ordered after the copy (see synchronize()).
        # (A view of a multi-view batch is its own region of the buffer.)
        count = 1
        for n in batch.shape:
            count *= n
        return torch.frombuffer(
            batch.owner, dtype=torch.uint8, offset=batch.offset, count=count
        ).view(batch.shape)

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        # A CPU build of torch has no device to move a target to: a copy
        # stands for it, remembered so that tests can tell placed tensors
        # from the host tensors the targets were made of.
        out = t.clone()
        self._placed[id(out)] = out
        return out

    def placed(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is a target's tensor this GPU placed."""
        return self._placed.get(id(t)) is t

    def before_compute(self) -> None:
        # The "device" tensors are host tensors computed at once: wait for
        # the copy first, as the consumer's stream would.
        self.synchronize()

    def synchronize(self) -> None:
        _core.cuda_stream_sync(self.index, self._consumer)


def install() -> None:
    """Loaders made from now on in this process use FakeGpu."""
    ringloader._gpu.gpu_class = FakeGpu
