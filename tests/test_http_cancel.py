"""A worker's single GET of the HTTP source (read_one: the skip policy's
replacement samples, on a worker) ends at once when the pipeline is
closed, as source.h promises: mid-transfer against a server that sends
nothing, and in the backoff before a retry. Real nginx behind the
fault-injecting proxy (tests/faultproxy.py)."""

from __future__ import annotations

import tarfile
import time

import pytest
import torchvision.transforms as T
from faultproxy import ANY, FaultProxy
from images import jpeg_bytes
from test_shards import _add

import ringloader
from ringloader import _core
from rlbench.servers import Nginx
from remote_table import http_table

TF_SPEC = ringloader.transforms.compile_transform(
    T.Compose([T.Resize(32), T.CenterCrop(32), T.PILToTensor()])
).spec
TIMEOUT = 20.0  # seconds without a byte before an attempt fails


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    with tarfile.open(root / "s0.tar", "w") as tf:
        for i in range(8):
            _add(tf, f"k{i:04d}.jpg", jpeg_bytes("baseline", 40, 50, seed=i))
            _add(tf, f"k{i:04d}.cls", str(i % 3).encode())
    return root


@pytest.fixture(scope="module")
def nginx(www):
    with Nginx(www) as server:
        yield server


@pytest.fixture
def proxy(nginx, tmp_path, monkeypatch):
    monkeypatch.setenv("RINGLOADER_CACHE_DIR", str(tmp_path / "cache"))
    with FaultProxy(nginx.url) as p:
        yield p


@pytest.mark.parametrize("where", ["no response", "backoff"])
def test_close_ends_a_replacement_get_in_flight(proxy, where):
    """Sample 0's GET (the I/O thread's batch) gets a 404; the skip policy
    then reads sample 1 on a worker, whose GET hangs (or waits to be
    retried). close() must not wait for it: before read_one could be
    cancelled, it waited TIMEOUT seconds for the hung GET."""
    ds = ringloader.TarShards(f"{proxy.url}/s0.tar", progress=False)
    src = ds.ringloader_sources()
    proxy.fail("status", status=404, times=1, match=".tar")
    if where == "no response":
        proxy.fail("slow", seconds=60, match=".tar")
    else:  # a 503 asking for a retry in 60 s (the backoff's cap: 10 s)
        proxy.fail("status", status=503, retry_after=60, match=".tar")
    http = dict(
        names=list(src.remote.names),
        urls=src.remote.urls(),
        timeout=TIMEOUT,
        retries=0 if where == "no response" else 3,
    )
    p = _core.Pipeline(
        TF_SPEC,
        **http_table(src, **http),
        skip_errors=True,
        max_consecutive_errors=4,
    )
    kind, status = ("slow", ANY) if where == "no response" else ("status", 503)
    try:
        p.submit([0], [0], 0)
        deadline = time.monotonic() + 10
        while proxy.count(".tar", fault=kind, status=status) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.2)  # well into the hung GET, or the backoff
        start = time.monotonic()
    finally:
        p.close()
    assert time.monotonic() - start < 2.0
    assert p.closed
    # The replacement was read on a worker: one GET of sample 1 alone.
    assert proxy.count(".tar", fault=kind, status=status) == 1
