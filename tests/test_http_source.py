"""The HTTP(S) source (csrc/source/http.c) under the loader: tar shards
served by a real nginx on 127.0.0.1, through a real fault-injecting proxy
(tests/faultproxy.py) for the faults. Every fault kind is either retried, with
the epoch's samples then identical to the local shards' and each member
fetched exactly once, or reported naming the URL and the member; nothing
hangs (every wait here is bounded).
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from faultproxy import FaultProxy
from images import KINDS, jpeg_bytes
from remote_table import http_table
from test_shards import _add

import ringloader
from ringloader import _core
from rlbench.servers import MotoS3, Nginx, RcloneS3

TF = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.PILToTensor()])
SHARDS = 3
PER_SHARD = 24
RUN_BYTES = 16 << 20  # the most one GET of neighbouring members spans


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    """SHARDS tar shards of PER_SHARD JPEGs of every kind and size, with
    .cls labels; their indexes are built over HTTP, not beside them."""
    root = tmp_path_factory.mktemp("www")
    kinds = sorted(KINDS)
    for s in range(SHARDS):
        with tarfile.open(root / f"s{s}.tar", "w") as tf:
            for i in range(PER_SHARD):
                n = s * PER_SHARD + i
                kind = kinds[n % len(kinds)]
                h, w = 40 + (n * 7) % 90, 50 + (n * 13) % 70
                _add(tf, f"k{n:04d}.jpg", jpeg_bytes(kind, h, w, seed=n))
                _add(tf, f"k{n:04d}.cls", str(n % 5).encode())
    return root


@pytest.fixture(scope="module")
def nginx(www):
    with Nginx(www) as server:
        yield server


@pytest.fixture
def proxy(nginx):
    with FaultProxy(nginx.url) as p:
        yield p


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGLOADER_CACHE_DIR", str(tmp_path / "cache"))


def shards_at(base: str) -> str:
    return f"{base}/s{{0..{SHARDS - 1}}}.tar"


def bounded(fn, seconds: float = 120.0):
    """fn() on a daemon thread, failing the test if it takes longer than
    ``seconds``: a hang is a failure, never a stuck suite."""
    out: list = []

    def run():
        try:
            out.append((True, fn()))
        except BaseException as e:  # noqa: B036 - re-raised below
            out.append((False, e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"did not finish in {seconds} s"
    ok, value = out[0]
    if not ok:
        raise value
    return value


def epoch(ds, **kw):
    """One shuffled epoch: (images, labels, the loader's stats), within
    two minutes."""
    return bounded(lambda: _epoch(ds, **kw))


def _epoch(ds, **kw):
    kw.setdefault("num_threads", 2)
    kw.setdefault("shuffle", True)
    loader = ringloader.Loader(ds, batch_size=16, transform=TF, seed=7, **kw)
    try:
        xs, ys = [], []
        for x, y in loader:
            xs.append(x.clone())
            ys.append(y.clone())
        return torch.cat(xs), torch.cat(ys), loader.stats()
    finally:
        loader.close()


@pytest.fixture(scope="module")
def local(www):
    """The epoch read from the shards on local disk."""
    x, y, _ = epoch(ringloader.TarShards(shards_at(str(www))))
    return x, y


def remote(base: str, **kw) -> ringloader.TarShards:
    return ringloader.TarShards(shards_at(base), progress=False, **kw)


def members_fetched(proxy: FaultProxy) -> list[tuple[str, str]]:
    """(path, range) of every range GET of a shard that was answered in
    full (not faulted)."""
    return [
        (r.path, r.range)
        for r in proxy.requests
        if r.range and r.fault is None and r.status == 206
    ]


def test_http_gives_the_local_samples(nginx, local):
    x, y, stats = epoch(remote(nginx.url))
    assert stats["io_backend"] == "http"
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])
    assert stats["io_cpu_seconds"] > 0
    assert _core.http_library().startswith("libcurl/")


# Each kind of fault on every third range GET of a shard (first attempts and
# retries alike), with a 1 s no-progress timeout for the slow ones.
RETRIED = {
    "503 SlowDown": ("status", dict(status=503)),
    "429": ("status", dict(status=429, retry_after=0)),
    "500": ("status", dict(status=500)),
    "reset": ("reset", {}),
    "truncated body": ("truncate", dict(fraction=0.5)),
    "wrong range": ("wrong_range", dict(shift=1)),
    "slow headers": ("slow", dict(seconds=2.5, then="respond")),
    "stalled body": ("stall", dict(seconds=2.5, fraction=0.5)),
}


@pytest.mark.parametrize("name", sorted(RETRIED))
def test_faults_are_retried_and_nothing_is_lost_or_duplicated(name, proxy, local):
    kind, params = RETRIED[name]
    ds = remote(proxy.url, retries=4, timeout=1.0)  # indexed with no fault
    proxy.clear(log=True)
    every = 3 if kind not in ("slow", "stall") else 12  # slow ones cost 1 s
    proxy.fail(kind, every=every, match=".tar", **params)
    start = time.monotonic()
    x, y, stats = epoch(ds)
    assert time.monotonic() - start < 60
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])
    assert stats["errors"] == 0
    faulted = proxy.count(".tar", fault=kind)
    assert faulted >= 2, proxy.requests
    answered = [(r.path, r.range, r.status) for r in proxy.requests if not r.fault]
    assert_each_member_once(ds, answered_ranges(answered))
    assert not proxy.errors


# ---- runs: a batch's neighbouring samples in one GET ----


def run_gets(ds, batch_size=16, seed=7, epoch=0) -> int:
    """The GETs the runs of an epoch of shuffle="runs" take: per batch, one
    for each stretch of consecutive samples in one shard."""
    from ringloader._sampling import RunSampler

    order = list(RunSampler(len(ds), seed, epoch))
    gets = 0
    for b in range(0, len(order), batch_size):
        ids = sorted(order[b : b + batch_size])
        gets += 1 + sum(
            i != p + 1 or ds.shard_of(i) != ds.shard_of(p) for p, i in zip(ids, ids[1:])
        )
    return gets


@pytest.fixture(scope="module")
def local_runs(www):
    """The epoch of shuffle="runs", read from local disk."""
    x, y, _ = epoch(ringloader.TarShards(shards_at(str(www))), shuffle="runs")
    return x, y


def test_a_run_of_neighbours_comes_in_one_get(www, local_runs):
    with Nginx(www, access_log=True) as server:
        ds = remote(server.url)
        server.clear_requests()
        x, y, _ = epoch(ds, shuffle="runs")
        got = [(r[1], r[3], r[2]) for r in server.requests() if r[3]]
    assert torch.equal(x, local_runs[0]) and torch.equal(y, local_runs[1])
    assert len(got) == run_gets(ds) < len(ds) // 4
    assert_each_member_once(ds, answered_ranges(got))


@pytest.mark.parametrize(
    "name", ["503 SlowDown", "reset", "truncated body", "wrong range"]
)
def test_faults_in_runs_are_retried_and_nothing_is_lost(name, proxy, local_runs):
    kind, params = RETRIED[name]
    ds = remote(proxy.url, retries=4, timeout=1.0)
    proxy.clear(log=True)
    proxy.fail(kind, every=2, match=".tar", **params)
    x, y, stats = epoch(ds, shuffle="runs")
    assert torch.equal(x, local_runs[0]) and torch.equal(y, local_runs[1])
    assert stats["errors"] == 0 and proxy.count(".tar", fault=kind) >= 2
    answered = [(r.path, r.range, r.status) for r in proxy.requests if not r.fault]
    assert_each_member_once(ds, answered_ranges(answered))
    assert not proxy.errors


def test_a_run_that_fails_falls_back_to_its_members(proxy, local_runs):
    ds = remote(proxy.url, retries=1)
    proxy.clear(log=True)
    proxy.fail("status", status=503, times=2, match="/s1.tar")  # a run, twice
    x, y, stats = epoch(ds, shuffle="runs")
    assert torch.equal(x, local_runs[0]) and torch.equal(y, local_runs[1])
    assert stats["errors"] == 0
    ok = [r for r in proxy.requests if r.fault is None and r.status == 206]
    assert len(ok) > run_gets(ds)  # the failed run's members, one GET each
    answered = [(r.path, r.range, r.status) for r in ok]
    assert_each_member_once(ds, answered_ranges(answered))


def test_connections_are_kept_open_from_batch_to_batch(proxy):
    """Each batch's GETs go over the connections the batches before it
    opened, even when a slow response leaves one GET of a batch in flight
    while the others are done: no more connections in two epochs than
    GETs in one batch."""
    ds = remote(proxy.url)
    proxy.clear(log=True)
    proxy.fail("slow", seconds=0.2, every=16)
    bounded(lambda: two_epochs(ds))
    gets = [r for r in proxy.requests if r.range]
    batches = 2 * -(-len(ds) // 16)
    # (neighbours that a shuffled batch happens to hold come in one GET)
    assert len(gets) > len(ds) and batches >= 10
    used = {r.conn for r in gets}
    assert len(used) <= 16, f"{len(used)} connections for {batches} batches of 16"


@pytest.mark.parametrize("cache_limit", [None, 1 << 30])
def test_a_missing_shard_names_its_url_and_member(proxy, cache_limit):
    ds = remote(proxy.url, cache_limit=cache_limit)  # with it: a block first
    proxy.fail("status", status=404, match="/s1.tar")
    with pytest.raises(FileNotFoundError) as e:
        epoch(ds)
    text = str(e.value)
    assert f"{proxy.url}/s1.tar" in text and "HTTP 404" in text
    assert re.search(r"s1\.tar\[k00\d\d\]", text), text
    assert "attempts" not in text  # a 404 is not retried
    assert e.value.errno == errno.ENOENT


def test_skip_replaces_the_samples_of_a_missing_shard(proxy, local):
    ds = remote(proxy.url)
    proxy.fail("status", status=404, match="/s1.tar")
    x, y, stats = epoch(ds, on_error="skip", max_consecutive_errors=PER_SHARD + 1)
    assert x.shape == local[0].shape
    assert stats["skipped"] > 0 and stats["errors"] >= stats["skipped"]
    # Replacements come from the shards that answer: the worker's own reads
    # (read_one), which see the 404 too for the samples of s1.
    hits = proxy.count("/s1.tar", fault="status")
    assert hits >= stats["skipped"]


def test_retries_are_bounded_and_say_how_many(proxy):
    ds = remote(proxy.url, retries=2)
    proxy.fail("status", status=503, match="/s0.tar")
    start = time.monotonic()
    with pytest.raises(OSError) as e:
        epoch(ds)
    assert time.monotonic() - start < 30
    text = str(e.value)
    assert "HTTP 503 (SlowDown) (3 attempts)" in text and "/s0.tar[" in text


def test_a_server_ignoring_ranges_is_refused_clearly(proxy):
    ds = remote(proxy.url)
    proxy.fail("ignore_range", match=".tar")
    with pytest.raises(OSError) as e:
        epoch(ds)
    assert "ignored the Range header" in str(e.value)
    assert e.value.errno == errno.EPROTO


def test_connection_refused_is_retried_then_reported(nginx, tmp_path):
    ds = remote(nginx.url, retries=1)
    # Another port, where nothing listens: the fetch URLs move there.
    dead = nginx.url.rsplit(":", 1)[0] + ":9"
    src = ds.ringloader_sources()
    urls = [u.replace(nginx.url, dead) for u in src.remote.urls()]
    p = _core.Pipeline(TF_SPEC, **http_table(src, urls=urls, retries=1))
    try:
        p.submit([0, 1], [0, 1], 0)
        with pytest.raises(ConnectionRefusedError) as e:
            p.next(timeout=30)
        assert "(2 attempts)" in str(e.value)
        # The right URLs again: the same pipeline reads.
        p.set_urls(src.remote.urls())
        p.submit([0, 1], [0, 1], 0)
        assert p.next(timeout=30) is not None
    finally:
        p.close()


TF_SPEC = ringloader.transforms.compile_transform(
    T.Compose([T.Resize(32), T.CenterCrop(32), T.PILToTensor()])
).spec


@pytest.mark.parametrize("where", ["stalled body", "no response", "stalled block"])
def test_close_abandons_requests_in_flight_promptly(proxy, where, tmp_path):
    ds = remote(proxy.url, timeout=60.0)
    src = ds.ringloader_sources()
    if where != "no response":
        proxy.fail("stall", seconds=60, fraction=0.5, match=".tar")
    else:
        proxy.fail("slow", seconds=60, match=".tar")
    http = dict(names=list(src.remote.names), urls=src.remote.urls(), timeout=60.0)
    if where == "stalled block":  # GETs of blocks into the cache
        http.update(cache_dir=str(tmp_path), cache_bytes=1 << 30, block_bytes=1 << 20)
    p = _core.Pipeline(TF_SPEC, **http_table(src, **http))
    ids = list(range(16))
    p.submit(ids, ids, 0)
    kind = "slow" if where == "no response" else "stall"
    deadline = time.monotonic() + 10
    while proxy.count(".tar", fault=kind) == 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    start = time.monotonic()
    p.close()
    assert time.monotonic() - start < 2.0
    assert p.closed
    assert list(tmp_path.glob("*.part")) == []  # the cache files went too


def test_a_loader_closed_from_another_thread_mid_epoch(proxy):
    ds = remote(proxy.url, timeout=60.0)
    proxy.fail("slow", seconds=60, match=".tar")
    loader = ringloader.Loader(ds, batch_size=8, transform=TF, num_threads=2)
    seen: list = []

    def consume():
        try:
            for _ in loader:
                pass
        except BaseException as e:  # noqa: B036 - whatever ends the loop
            seen.append(e)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.5)
    start = time.monotonic()
    loader.close()
    t.join(10)
    assert not t.is_alive()
    assert time.monotonic() - start < 5


def test_whole_objects_over_http(nginx, www, tmp_path):
    """A FileList of URLs: whole objects, no Range."""
    d = tmp_path / "files"
    d.mkdir()
    os.symlink(d, os.path.join(www, "files"))  # served by nginx from now on
    paths, labels = [], []
    for i in range(10):
        (d / f"{i}.jpg").write_bytes(jpeg_bytes("baseline", 30 + i, 41, seed=i))
        paths.append(f"files/{i}.jpg")
        labels.append(i)
    try:
        lx, ly, _ = epoch(ringloader.FileList([str(www / p) for p in paths], labels))
        rx, ry, _ = epoch(
            ringloader.FileList([f"{nginx.url}/{p}" for p in paths], labels)
        )
        assert torch.equal(lx, rx) and torch.equal(ly, ry)
    finally:
        os.unlink(os.path.join(www, "files"))


SIGINT_CHILD = r"""
import sys, time
import ringloader
from ringloader import transforms as T
ds = ringloader.TarShards(sys.argv[1], timeout=60.0, progress=False)
loader = ringloader.Loader(ds, batch_size=8, num_threads=2,
                           transform=T.Compose([T.RandomResizedCrop(32)]))
print("RUNNING", flush=True)
try:
    for _ in loader:
        pass
except KeyboardInterrupt:
    print("INTERRUPTED", time.monotonic(), flush=True)
"""


def test_ctrl_c_while_requests_hang(proxy):
    remote(proxy.url)  # the index, cached for the child (same cache dir)
    proxy.fail("stall", seconds=60, nbytes=0, match=re.compile(r"\.tar$"))
    python_dir = os.path.dirname(os.path.dirname(ringloader.__file__))
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGINT_CHILD, shards_at(proxy.url)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=python_dir),
    )
    try:
        assert proc.stdout.readline().strip() == "RUNNING"
        deadline = time.monotonic() + 20
        while proxy.count(".tar", fault="stall") == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        exited = time.monotonic()
    finally:
        proc.kill()
    assert out.startswith("INTERRUPTED"), out + err
    assert float(out.split()[1]) - sent < 2.0
    assert exited - sent < 5.0  # the loader's close at exit did not wait
    assert proc.returncode == 0, err


# ---- S3 (moto's S3-API server), through presigned URLs ----


@pytest.fixture(scope="module")
def moto(www):
    with MotoS3() as server:
        server.upload("shards", {f"s{s}.tar": www / f"s{s}.tar" for s in range(SHARDS)})
        yield server


def test_s3_gives_the_local_samples(moto, local):
    with moto.environ():
        x, y, stats = epoch(remote("s3://shards"))
    assert stats["io_backend"] == "http"
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])


@pytest.mark.parametrize("presigned", [False, True])
def test_s3_slowdown_is_retried(moto, local, presigned, monkeypatch):
    """The endpoint is a proxy in front of moto: the GETs are signed (in C,
    or presigned by boto3 where libcurl cannot sign) for it, and every
    third range GET gets S3's 503 SlowDown."""
    if presigned:  # as with a libcurl older than 7.75
        monkeypatch.setattr(_core, "http_sigv4", lambda: False)
    with FaultProxy(moto.endpoint_url) as proxy, moto.environ():
        os.environ["AWS_ENDPOINT_URL_S3"] = proxy.url
        ds = remote("s3://shards", retries=4)
        proxy.clear(log=True)
        proxy.fail("status", status=503, every=3, match=".tar")
        x, y, _ = epoch(ds)
        assert proxy.count(".tar", fault="status") >= 2
        fetched = members_fetched(proxy)
        assert ("X-Amz-Signature=" in fetched[0][0]) == presigned
        answered = [(r.path, r.range, r.status) for r in proxy.requests if not r.fault]
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])
    assert_each_member_once(ds, answered_ranges(answered))


def test_presigned_urls_are_made_again_while_an_epoch_runs(moto, local, monkeypatch):
    from ringloader.datasets import presign as presign_mod
    from ringloader.datasets.remote import Client

    calls = []
    presign = Client.fetch_urls

    def counted(self, names, signed=False):
        calls.append(len(names))
        return presign(self, names, signed)

    # Due at every batch, and past due: made on the loop before each one.
    monkeypatch.setattr(presign_mod, "LONG_TERM_REFRESH_S", 0.0)
    # Presigned as with a libcurl older than 7.75 (else signed in C).
    monkeypatch.setattr(_core, "http_sigv4", lambda: False)
    monkeypatch.setattr(Client, "fetch_urls", counted)
    with moto.environ():
        x, y, _ = epoch(remote("s3://shards"))
    batches = -(-SHARDS * PER_SHARD // 16)
    assert len(calls) >= batches  # at creation, then before each batch
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])


@pytest.fixture(scope="module")
def rclone(www):
    with RcloneS3() as server:
        server.upload("shards", {f"s{s}.tar": www / f"s{s}.tar" for s in range(SHARDS)})
        yield server


@pytest.mark.parametrize("cache_limit", [None, 1 << 30])
def test_s3_on_a_server_that_checks_signatures(rclone, local, cache_limit):
    """rclone's S3 server checks every presigned URL's signature (and
    answers a range GET with 200 and the Content-Range asked for)."""
    with rclone.environ():
        x, y, stats = epoch(remote("s3://shards", cache_limit=cache_limit))
    assert stats["errors"] == 0
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])


def test_s3_with_the_wrong_secret_is_refused_clearly(rclone):
    import boto3

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=rclone.endpoint_url,
        aws_access_key_id=rclone.ACCESS_KEY,
        aws_secret_access_key="wrong",
        region_name=rclone.REGION,
    )
    with pytest.raises(PermissionError) as e:
        remote("s3://shards", s3_client=client)
    text = str(e.value)
    assert "403" in text and "s3://shards/s0.tar" in text, text


# ---- HTTPS: certificates verified, HTTP/2 where offered ----


@pytest.fixture(scope="module")
def tls_nginx(www, tmp_path_factory):
    """nginx over HTTPS with a self-signed certificate for 127.0.0.1."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = str(d / "cert.pem"), str(d / "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            key,
            "-out",
            cert,
        ],
        check=True,
        capture_output=True,
    )
    with Nginx(www, tls=(cert, key), access_log=True) as server:
        yield server, cert


def test_https_verifies_the_certificate_and_speaks_http2(tls_nginx, local, monkeypatch):
    server, cert = tls_nginx
    monkeypatch.setenv("SSL_CERT_FILE", cert)  # the CA bundle users name
    ds = remote(server.url)
    src = ds.ringloader_sources()
    assert src.remote.options["ca_file"] == cert
    server.clear_requests()
    x, y, _ = epoch(ds)
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])
    ranged = [r for r in server.requests() if r[3]]
    assert_each_member_once(ds, answered_ranges([(r[1], r[3], r[2]) for r in ranged]))
    assert {r[5] for r in ranged} == {"HTTP/2.0"}

    # Without the certificate's CA the C source refuses the server.
    options = dict(src.remote.options, ca_file=None, retries=0)
    p = _core.Pipeline(TF_SPEC, **http_table(src, **options))
    try:
        p.submit([0], [0], 0)
        with pytest.raises(PermissionError) as e:
            p.next(timeout=30)
    finally:
        p.close()
    assert "certificate" in str(e.value) and "SSL_CERT_FILE" in str(e.value)
    assert f"{server.url}/s0.tar" in str(e.value)


# ---- DDP ranks and exact resume, as for local shards ----


@pytest.mark.parametrize("rank", [0, 1])
def test_ranks_split_remote_shards_as_local_ones(nginx, www, rank):
    kw = dict(rank=rank, world_size=2)
    lx, ly, _ = epoch(ringloader.TarShards(shards_at(str(www))), **kw)
    rx, ry, _ = epoch(remote(nginx.url), **kw)
    assert torch.equal(lx, rx) and torch.equal(ly, ry)
    assert len(ly) == SHARDS * PER_SHARD // 2


@pytest.mark.parametrize("shuffle", [True, "runs"])
def test_resume_over_http_is_exact(nginx, shuffle, request):
    local = request.getfixturevalue("local" if shuffle is True else "local_runs")

    def loader(threads):
        return ringloader.Loader(
            remote(nginx.url),
            batch_size=16,
            transform=TF,
            seed=7,
            shuffle=shuffle,
            num_threads=threads,
        )

    first = loader(2)
    for k, _ in enumerate(first, 1):
        if k == 3:
            break
    state = first.state_dict()
    first.close()
    second = loader(1)  # another thread count on purpose
    second.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in second]
    second.close()
    assert torch.equal(torch.cat([x for x, _ in rest]), local[0][3 * 16 :])
    assert torch.equal(torch.cat([y for _, y in rest]), local[1][3 * 16 :])


# ---- the local cache of fetched members (cache_limit=) ----


def two_epochs(ds, during=None):
    """Epochs 0 and 1 of one loader, each as (images, labels); during(e)
    runs before epoch e."""
    loader = ringloader.Loader(
        ds, batch_size=16, transform=TF, seed=7, shuffle=True, num_threads=2
    )
    out = []
    try:
        for e in range(2):
            if during is not None:
                during(e)
            xs, ys = zip(*[(x.clone(), y.clone()) for x, y in loader])
            out.append((torch.cat(xs), torch.cat(ys)))
    finally:
        loader.close()
    return out


def member_bytes(www) -> int:
    return sum(
        m.size
        for s in range(SHARDS)
        for m in tarfile.open(www / f"s{s}.tar")
        if m.name.endswith(".jpg")
    )


@pytest.mark.parametrize("fraction", [2.0, 0.5])
def test_fetched_members_are_kept_for_later_epochs(www, tmp_path, fraction, request):
    if fraction < 1:
        request.getfixturevalue("small_blocks")  # a few fit in the limit
    total = member_bytes(www)
    limit = int(total * fraction)
    fetched = tmp_path / "cache" / "fetched"
    with Nginx(www, access_log=True) as server:
        reference = two_epochs(remote(server.url))
        requests = []
        sizes = []

        def during(e):
            if e == 1:
                sizes.append(
                    sum(p.stat().st_blocks * 512 for p in fetched.rglob("*.part"))
                )
            requests.append(len([r for r in server.requests() if r[3]]))
            server.clear_requests()

        got = two_epochs(remote(server.url, cache_limit=limit), during)
        requests.append(len([r for r in server.requests() if r[3]]))
    for (rx, ry), (gx, gy) in zip(reference, got):
        assert torch.equal(rx, gx) and torch.equal(ry, gy)
    n = SHARDS * PER_SHARD
    if fraction > 1:
        # Epoch 0: each shard (under 8 MiB) in one GET; epoch 1: none.
        assert requests[1:] == [SHARDS, 0]
        assert total <= sizes[0] <= total + n * 4096
    else:
        # Epoch 0: a block while there was room, then members one by one.
        assert 0 < requests[1] < n
        assert 0 < requests[2] < n  # the shards used least recently went
        assert sizes[0] <= limit + n * 4096
    assert list(fetched.iterdir()) == []  # removed with the loader


def answered_ranges(requests) -> dict[str, list[tuple[int, int]]]:
    """{shard file name: sorted [(first, last)]} of the range GETs
    answered in full, from (path, Range header, status) triples."""
    out: dict[str, list[tuple[int, int]]] = {}
    for path, rng, status in requests:
        if rng and status == 206:
            a, b = rng.removeprefix("bytes=").split("-")
            name = path.split("?")[0].rsplit("/", 1)[1]  # no presigned query
            out.setdefault(name, []).append((int(a), int(b)))
    return {k: sorted(v) for k, v in out.items()}


def assert_each_member_once(ds, ranges, block_bytes=None):
    """The GETs did not overlap, none spanned more than block_bytes (by
    default a run's most), and every member of ds lay in exactly one of
    them: nothing fetched twice, nothing missed."""
    block_bytes = block_bytes or RUN_BYTES
    for spans in ranges.values():
        for (_, last), (first, _) in zip(spans, spans[1:]):
            assert first > last, spans
        assert all(b - a + 1 <= block_bytes for a, b in spans), spans
    for i, (off, length) in enumerate(zip(ds.offsets, ds.lengths)):
        url = ds.shards[ds.shard_of(i)]
        spans = ranges[url.rsplit("/", 1)[1]]
        inside = [a <= off and off + length - 1 <= b for a, b in spans]
        assert sum(inside) == 1, (url, off, length, spans)


@pytest.fixture
def small_blocks(www, monkeypatch) -> int:
    """A block size of a third of a shard, so that each shard takes a few
    block GETs."""
    size = (www / "s0.tar").stat().st_size // 3
    monkeypatch.setattr(ringloader.datasets.shards, "CACHE_BLOCK_BYTES", size)
    return size


def test_members_come_in_blocks_of_neighbours(www, local, small_blocks):
    with Nginx(www, access_log=True) as server:
        ds = remote(server.url, cache_limit=1 << 30)
        server.clear_requests()
        x, y, _ = epoch(ds)
        got = [(r[1], r[3], r[2]) for r in server.requests()]
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])
    assert all(status == 206 for _, _, status in got)
    assert SHARDS * 3 <= len(got) <= SHARDS * 6  # not one GET per member
    assert_each_member_once(ds, answered_ranges(got), small_blocks)


@pytest.mark.parametrize(
    "name", ["503 SlowDown", "reset", "truncated body", "wrong range"]
)
def test_faults_in_block_gets_are_retried_and_nothing_is_lost(
    name, proxy, local, small_blocks
):
    kind, params = RETRIED[name]
    ds = remote(proxy.url, retries=4, timeout=1.0, cache_limit=1 << 30)
    proxy.clear(log=True)
    proxy.fail(kind, every=2, match=".tar", **params)
    x, y, stats = epoch(ds)
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])
    assert stats["errors"] == 0
    assert proxy.count(".tar", fault=kind) >= 2
    answered = [(r.path, r.range, r.status) for r in proxy.requests if r.fault is None]
    assert_each_member_once(ds, answered_ranges(answered), small_blocks)
    assert not proxy.errors


def test_a_block_that_fails_falls_back_to_its_members(proxy, local):
    ds = remote(proxy.url, retries=1, cache_limit=1 << 30)
    proxy.clear(log=True)
    proxy.fail("status", status=503, times=2, match="/s1.tar")  # its block, twice
    x, y, stats = epoch(ds)
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])
    assert stats["errors"] == 0
    ok = [r for r in proxy.requests if r.fault is None and r.status == 206]
    assert len([r for r in ok if "/s1.tar" in r.path]) == PER_SHARD  # one by one
    assert len([r for r in ok if "/s1.tar" not in r.path]) == SHARDS - 1  # blocks


def test_stats_count_requests_retries_and_bytes(proxy, local):
    ds = remote(proxy.url, retries=5, timeout=5.0)
    proxy.clear(log=True)
    proxy.fail("truncate", every=3, fraction=0.5, match=".tar")
    x, y, stats = epoch(ds)
    assert torch.equal(x, local[0]) and torch.equal(y, local[1])
    gets = [r for r in proxy.requests if r.path.endswith(".tar")]
    cut = [r for r in gets if r.fault is not None]
    assert stats["errors"] == 0 and len(cut) >= 2
    assert stats["http_requests"] == len(gets)
    assert stats["http_retries"] == len(cut)  # each cut GET, once more
    assert stats["http_bytes"] == sum(r.nbytes for r in gets)  # cut ones' part too
    assert stats["http_cache_hits"] == 0


def test_stats_count_cache_hits(nginx, www):
    loader = ringloader.Loader(
        remote(nginx.url, cache_limit=1 << 30), batch_size=16, transform=TF
    )
    try:
        seen = []
        for _ in range(2):
            n = sum(len(y) for _, y in loader)
            seen.append({k: v for k, v in loader.stats().items() if "http" in k})
    finally:
        loader.close()
    # Epoch 0, in order: each shard in one GET (its block), made by the
    # first batch that asks for one of its members; that batch's members of
    # the shard come with the block, the later ones are cache hits.
    # Epoch 1: every sample a hit, no request.
    shard = [i // PER_SHARD for i in range(n)]
    first = {s: i // 16 for i, s in reversed(list(enumerate(shard)))}
    misses = sum(i // 16 == first[s] for i, s in enumerate(shard))
    assert seen[0]["http_requests"] == seen[1]["http_requests"] == SHARDS
    assert seen[0]["http_bytes"] >= member_bytes(www)
    assert seen[0]["http_retries"] == 0
    assert seen[0]["http_cache_hits"] == n - misses > 0
    assert seen[1]["http_cache_hits"] - seen[0]["http_cache_hits"] == n
    local = ringloader.Loader(
        ringloader.TarShards(shards_at(str(www))), batch_size=16, transform=TF
    )
    try:
        next(iter(local))
        assert all(local.stats()[k] == 0 for k in seen[0])
    finally:
        local.close()


@pytest.fixture(scope="module")
def big_www(tmp_path_factory):
    """Shards of large members (noise JPEGs of ~200 kB): s0 with 4, s1 with
    12, s2 with 4, so that the cache's room can be reckoned in members."""
    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("big_www")
    n = 0
    for s, count in enumerate((4, 12, 4)):
        with tarfile.open(root / f"s{s}.tar", "w") as tf:
            for _ in range(count):
                rng = np.random.default_rng(n)
                buf = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (256, 256, 3), np.uint8)).save(
                    buf, "JPEG", quality=95
                )
                _add(tf, f"k{n:04d}.jpg", buf.getvalue())
                _add(tf, f"k{n:04d}.cls", str(n % 5).encode())
                n += 1
    return root


def spans(path) -> list[tuple[int, int]]:
    """(offset, length) of each JPEG member of a tar, in order."""
    with tarfile.open(path) as tf:
        return [(m.offset_data, m.size) for m in tf if m.name.endswith(".jpg")]


def test_a_failed_block_leaves_only_cached_members_on_disk(big_www, tmp_path):
    """A block that fails after writing part of itself: what it wrote is
    removed from the cache file, except the members cached before it, which
    are read back intact; the disk holds no more than the members cached."""
    a, b = spans(big_www / "s0.tar"), spans(big_www / "s1.tar")
    c = spans(big_www / "s2.tar")
    m = max(length for _, length in a + b + c)
    span_a = a[-1][0] + a[-1][1] - a[0][0]
    span_b = b[-1][0] + b[-1][1] - b[0][0]
    limit = span_b + m + 1024
    # In this order, one sample a batch: B0 brings all of s1 in a block;
    # A0 comes alone (s0's block does not fit beside s1's); C0 comes alone
    # and its room evicts s1; A1 finds room for s0's block (A1 to A3, beside
    # the cached A0), whose GET is cut short, so A1 comes alone; A0 is then
    # read from the cache.
    order = [4, 0, 16, 1, 0]
    assert span_b + span_a > limit and a[0][1] + c[0][1] > m + 1024
    assert a[0][1] + c[0][1] + span_a <= limit
    local = ringloader.TarShards(
        shards_at(str(big_www)), progress=False, cache_dir=tmp_path / "local"
    )

    def read(loader):
        try:
            return [(x.clone(), y.clone()) for x, y in loader]
        finally:
            loader.close()

    def loader_of(ds):
        return ringloader.Loader(
            ds, batch_size=1, sampler=order, transform=TF, seed=7, num_threads=2
        )

    want = bounded(lambda: read(loader_of(local)))
    fetched = tmp_path / "cache" / "fetched"
    with Nginx(big_www) as server, FaultProxy(server.url) as proxy:
        ds = remote(proxy.url, retries=0, cache_limit=limit)
        proxy.clear(log=True)
        # The GETs of s0: A0, then s0's block (cut short), then A1.
        rule = proxy.fail(
            "truncate", every=2, fraction=0.9, match=re.compile(r"/s0\.tar$")
        )
        loader = loader_of(ds)
        try:
            got = bounded(lambda: [(x.clone(), y.clone()) for x, y in loader])
            on_disk = sum(p.stat().st_blocks * 512 for p in fetched.rglob("*.part"))
            stats = loader.stats()
        finally:
            loader.close()
        s0 = [r for r in proxy.requests if r.path.endswith("/s0.tar")]
    assert rule.applied == 1 and stats["errors"] == 0
    cut = [r for r in s0 if r.fault is not None]
    first, last = (int(v) for v in cut[0].range.split("=")[1].split("-"))
    # s0's block, from A1: A0, cached, is not fetched again
    assert (first, last + 1) == (a[1][0], a[0][0] + span_a)
    assert [r.range for r in s0 if r.fault is None] == [
        f"bytes={off}-{off + n - 1}" for off, n in (a[0], a[1])
    ]  # A0 and A1 alone; A0 read again from the cache
    assert len(got) == len(want) == len(order)
    for (gx, gy), (wx, wy) in zip(got, want):
        assert torch.equal(gx, wx) and torch.equal(gy, wy)
    cached = a[0][1] + a[1][1] + c[0][1]  # A0, A1, C0
    assert on_disk <= cached + 3 * 2 * 4096, (on_disk, cached)


FULL_DISK_CHILD = r"""
import hashlib, resource, signal, sys
import torch, torchvision.transforms as T
import ringloader
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit: EFBIG
ds = ringloader.TarShards(sys.argv[1], progress=False, cache_limit=1 << 30)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]),) * 2)
tf = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.PILToTensor()])
loader = ringloader.Loader(ds, batch_size=16, transform=tf, seed=7, shuffle=True,
                           num_threads=2)
xs, ys = zip(*[(x.clone(), y.clone()) for x, y in loader])
h = hashlib.sha256(torch.cat(xs).numpy().tobytes())
h.update(torch.cat(ys).numpy().tobytes())
print(h.hexdigest(), loader.stats()["errors"])
"""


def test_a_cache_that_cannot_be_written_costs_nothing(nginx, www, local):
    """Files limited to 20 kB (as a full disk would): the block GETs and
    member writes that fail leave their members to be fetched alone."""
    remote(nginx.url)  # the index, cached for the child (same cache dir)
    python_dir = os.path.dirname(os.path.dirname(ringloader.__file__))
    env = dict(os.environ, PYTHONPATH=python_dir)
    out = subprocess.run(
        [sys.executable, "-c", FULL_DISK_CHILD, shards_at(nginx.url), "20000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    h = hashlib.sha256()
    h.update(local[0].numpy().tobytes())
    h.update(local[1].numpy().tobytes())
    assert out.stdout.split() == [h.hexdigest(), "0"]


def test_an_http_table_by_starts_or_objects_reads_what_names_read(nginx):
    """An HTTP table gives each sample's object by the shards' starts or an
    int64 array, with no name looked up a sample; the same bytes come."""
    ds = remote(nginx.url)
    src = ds.ringloader_sources()
    http = dict(names=list(src.remote.names), urls=src.remote.urls())
    ids = np.arange(min(len(src.paths), 16), dtype=np.int64)
    # The per-sample form: each sample's range as an array.
    offsets = np.array([ds.offsets[i] for i in range(len(ds))], np.int64)
    lengths = np.array([ds.lengths[i] for i in range(len(ds))], np.int64)

    def read(**table):
        p = _core.Pipeline(TF_SPEC, offsets=offsets, lengths=lengths, **table)
        try:
            p.submit(ids, ids, 0)
            return torch.from_dlpack(p.next(timeout=60).views[0]).clone()
        finally:
            p.close()

    starts = src.paths.starts
    want = read(paths=src.paths, http=http)
    assert torch.equal(read(starts=starts, http=http), want)
    objects = np.searchsorted(starts, np.arange(len(src.paths)), side="right") - 1
    assert torch.equal(read(http=dict(http, objects=objects.astype(np.int64))), want)
    with pytest.raises(ValueError, match="starts: .*never falling"):
        read(starts=starts[::-1].copy(), http=http)
    with pytest.raises(ValueError, match="starts has"):
        read(starts=starts[:-1].copy(), http=http)
    with pytest.raises(TypeError, match="one of paths, starts"):
        read(paths=src.paths, starts=starts, http=http)
    with pytest.raises(TypeError, match=r"http\['objects'\] must be a 1-d int64"):
        read(http=dict(http, objects=objects.astype(np.int32)))
