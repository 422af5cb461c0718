"""The fault-injecting proxy (tests/faultproxy.py) in front of a real nginx
and a real moto S3 server: each fault does what it says, seen by urllib3
(retries off) and by raw sockets; what is not faulted is nginx's bytes
unchanged, on kept-alive connections; the plan selects the right requests
and the log counts them."""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest
import urllib3
from faultproxy import ANY, FaultProxy
from urllib3.exceptions import ProtocolError, ReadTimeoutError

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
BLOB = random.Random(20240611).randbytes(300_000)
SMALL = {"a.bin": b"a" * 1000, "b.bin": b"b" * 1000}

NGINX_CONF = """\
daemon off;
master_process off;
error_log {tmp}/error.log;
pid {tmp}/nginx.pid;
events {{}}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {tmp}/www;
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


@pytest.fixture(scope="module")
def nginx(tmp_path_factory):
    """A real nginx serving BLOB and SMALL; its base URL."""
    if not os.access(NGINX, os.X_OK):
        pytest.skip("nginx is not installed")
    tmp = tmp_path_factory.mktemp("nginx")
    (tmp / "www").mkdir()
    (tmp / "www" / "blob.bin").write_bytes(BLOB)
    for name, data in SMALL.items():
        (tmp / "www" / name).write_bytes(data)
    for _ in range(5):  # the free port may be taken before nginx binds it
        port = free_port()
        conf = tmp / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=tmp, port=port))
        proc = subprocess.Popen(
            [NGINX, "-c", str(conf), "-p", str(tmp)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if wait_port(port, proc):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("nginx did not start:\n" + (tmp / "error.log").read_text())
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def proxy(nginx):
    with FaultProxy(nginx) as p:
        yield p
        assert not p.errors


def pool(url: str, read: float = 10.0) -> urllib3.HTTPConnectionPool:
    """One kept-alive connection, no retries, no redirects."""
    return urllib3.connection_from_url(
        url,
        maxsize=1,
        block=True,
        retries=False,
        timeout=urllib3.Timeout(connect=5.0, read=read),
    )


def get(p: urllib3.HTTPConnectionPool, path: str, rng: str | None = None, **kw):
    headers = {"Range": rng} if rng else {}
    return p.request("GET", path, headers=headers, redirect=False, **kw)


def raw_request(url: str, path: str, rng: str | None = None) -> socket.socket:
    port = int(url.rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    extra = f"Range: {rng}\r\n" if rng else ""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}\r\n".encode())
    return s


def read_head(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers (lower-case names) and the body bytes read past the
    head."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        assert data, f"closed inside the head: {buf!r}"
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), headers, rest


def read_until_eof(s: socket.socket, have: bytes = b"") -> bytes:
    while True:
        data = s.recv(65536)
        if not data:
            return have
        have += data


def wait_for(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# -- pass-through -------------------------------------------------------------

RANGES = [
    None,
    "bytes=0-0",
    "bytes=100-199",
    "bytes=123456-",
    "bytes=-10",
    "bytes=299999-400000",
    "bytes=0-299999",
    "bytes=300000-",  # 416
]


def test_pass_through_equals_nginx(nginx, proxy):
    direct, via = pool(nginx), pool(proxy.url)
    for rng in RANGES:
        a, b = get(direct, "/blob.bin", rng), get(via, "/blob.bin", rng)
        assert (b.status, b.data) == (a.status, a.data), rng
        for h in ("Content-Range", "Content-Length", "Content-Type", "ETag"):
            assert b.headers.get(h) == a.headers.get(h), (rng, h)
    assert get(via, "/blob.bin").data == BLOB
    assert get(via, "/blob.bin", "bytes=100-199").data == BLOB[100:200]
    assert get(via, "/missing").status == 404
    head = via.request("HEAD", "/blob.bin")
    assert (head.status, head.headers["Content-Length"], head.data) == (
        200,
        str(len(BLOB)),
        b"",
    )
    assert proxy.count() == len(RANGES) + 4
    assert proxy.count(fault=None) == proxy.count()


def test_keep_alive_serves_many_requests_on_one_connection(proxy):
    via = pool(proxy.url)
    for i in range(50):
        r = get(via, "/blob.bin", f"bytes={i * 1000}-{i * 1000 + 999}")
        assert (r.status, r.data) == (206, BLOB[i * 1000 : i * 1000 + 1000])
    assert via.num_connections == 1
    assert {r.conn for r in proxy.requests} == {1}
    assert proxy.count("/blob.bin", fault=None, status=206) == 50


def test_query_string_and_host_go_upstream_untouched(proxy):
    via = pool(proxy.url)
    target = "/a.bin?X-Amz-Signature=ab%2Fcd&x=1&x=2"
    assert get(via, target).data == SMALL["a.bin"]
    assert proxy.requests[-1].path == target


# -- the faults ---------------------------------------------------------------


def test_reset(proxy):
    rule = proxy.fail("reset", times=2)
    via = pool(proxy.url)
    with pytest.raises(ProtocolError) as e:
        get(via, "/a.bin")
    assert isinstance(e.value.args[1], ConnectionResetError)
    s = raw_request(proxy.url, "/a.bin")
    with pytest.raises(ConnectionResetError):
        s.recv(65536)
    s.close()
    assert get(via, "/a.bin").data == SMALL["a.bin"]  # times=2: done
    assert rule.applied == 2
    assert [(r.fault, r.status) for r in proxy.requests] == [
        ("reset", None),
        ("reset", None),
        (None, 200),
    ]


@pytest.mark.parametrize(
    "status,code", [(503, "SlowDown"), (429, "SlowDown"), (500, "InternalError")]
)
def test_status_answers_s3_xml_and_keeps_the_connection(proxy, status, code):
    proxy.fail("status", status=status, retry_after=3, times=1)
    via = pool(proxy.url)
    r = get(via, "/blob.bin", "bytes=0-9")
    assert r.status == status
    assert r.headers["Content-Type"] == "application/xml"
    assert r.headers["Retry-After"] == "3"
    assert int(r.headers["Content-Length"]) == len(r.data)
    assert f"<Error><Code>{code}</Code>".encode() in r.data
    assert get(via, "/blob.bin", "bytes=0-9").data == BLOB[:10]
    assert via.num_connections == 1
    assert proxy.count(fault="status", status=status) == 1


def test_status_without_retry_after_and_on_head(proxy):
    proxy.fail("status", status=503, code="ServiceUnavailable", message="Busy")
    via = pool(proxy.url)
    r = get(via, "/a.bin")
    assert "Retry-After" not in r.headers
    assert b"<Code>ServiceUnavailable</Code><Message>Busy</Message>" in r.data
    h = via.request("HEAD", "/a.bin")
    assert (h.status, h.data) == (503, b"")
    assert get(via, "/a.bin").status == 503  # the connection is still usable


def test_slow_fires_the_client_read_timeout(proxy):
    proxy.fail("slow", seconds=60, times=1)
    via = pool(proxy.url, read=0.5)
    t0 = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        get(via, "/a.bin")
    assert time.monotonic() - t0 < 10
    # The client gave up and closed: the proxy's connection ends too, long
    # before its 60 s.
    wait_for(lambda: not proxy._conns)
    assert get(via, "/a.bin").data == SMALL["a.bin"]
    assert proxy.count(fault="slow", status=None) == 1


def test_slow_then_respond_or_close(proxy):
    proxy.fail("slow", seconds=0.3, then="respond", times=1)
    via = pool(proxy.url)
    t0 = time.monotonic()
    assert get(via, "/blob.bin").data == BLOB
    assert time.monotonic() - t0 >= 0.25
    proxy.fail("slow", seconds=0.1, then="close", times=1)
    with pytest.raises(ProtocolError):
        get(via, "/blob.bin")
    assert [(r.fault, r.status) for r in proxy.requests] == [
        ("slow", 200),
        ("slow", None),
    ]


def test_truncate(proxy):
    proxy.fail("truncate", times=1)
    via = pool(proxy.url)
    with pytest.raises(ProtocolError, match="IncompleteRead"):
        get(via, "/blob.bin")
    r = get(via, "/blob.bin", preload_content=False)  # times=1: whole again
    assert r.read() == BLOB
    r.release_conn()
    proxy.fail("truncate", nbytes=1000, match="blob")
    s = raw_request(proxy.url, "/blob.bin", "bytes=1000-99999")
    status, headers, rest = read_head(s)
    assert (status, headers["content-length"]) == (206, "99000")
    assert read_until_eof(s, rest) == BLOB[1000:2000]
    s.close()
    assert [r.nbytes for r in proxy.requests] == [150_000, len(BLOB), 1000]
    assert proxy.count(fault="truncate") == 2


def test_truncate_always_cuts_and_skips_head(proxy):
    proxy.fail("truncate", nbytes=10**9)
    s = raw_request(proxy.url, "/a.bin")
    status, headers, rest = read_head(s)
    assert int(headers["content-length"]) == 1000
    assert len(read_until_eof(s, rest)) == 999
    s.close()
    assert pool(proxy.url).request("HEAD", "/a.bin").status == 200
    assert proxy.count(fault="truncate") == 1


def test_stall_holds_the_connection_open(proxy):
    proxy.fail("stall", seconds=60, nbytes=1000, times=1)
    s = raw_request(proxy.url, "/blob.bin")
    status, headers, body = read_head(s)
    assert (status, int(headers["content-length"])) == (200, len(BLOB))
    while len(body) < 1000:
        body += s.recv(65536)
    assert body == BLOB[:1000]
    s.settimeout(0.5)
    with pytest.raises(socket.timeout):  # neither data nor EOF
        s.recv(65536)
    s.close()
    wait_for(lambda: not proxy._conns)  # the proxy noticed the client left
    proxy.fail("stall", seconds=60, times=1)
    via = pool(proxy.url, read=0.5)
    with pytest.raises(ReadTimeoutError):
        get(via, "/blob.bin")
    assert proxy.count(fault="stall") == 2


def test_stall_then_resume_sends_everything(proxy):
    proxy.fail("stall", seconds=0.3, then="resume")
    via = pool(proxy.url)
    t0 = time.monotonic()
    assert get(via, "/blob.bin", "bytes=10-200009").data == BLOB[10:200010]
    assert time.monotonic() - t0 >= 0.25
    assert get(via, "/a.bin").data == SMALL["a.bin"]
    assert via.num_connections == 1
    assert [r.nbytes for r in proxy.requests] == [200_000, 1000]


def test_wrong_range(proxy):
    n = len(BLOB)
    rule = proxy.fail("wrong_range", times=1)
    via = pool(proxy.url)
    assert get(via, "/blob.bin").data == BLOB  # no Range: not seen
    r = get(via, "/blob.bin", "bytes=100-199")
    assert (r.status, r.headers["Content-Range"]) == (206, f"bytes 101-200/{n}")
    assert r.data == BLOB[101:201]
    assert (rule.seen, rule.applied) == (1, 1)
    proxy.fail("wrong_range", shift=-1, claim="requested", times=1)
    r = get(via, "/blob.bin", "bytes=0-99")  # -1 would start before 0: +1
    assert (r.status, r.headers["Content-Range"]) == (206, f"bytes 0-99/{n}")
    assert r.data == BLOB[1:101]
    proxy.fail("wrong_range", shift=5, claim="requested", times=1)
    r = get(via, "/blob.bin", f"bytes={n - 10}-")  # the shifted range is cut
    assert r.headers["Content-Range"] == f"bytes {n - 10}-{n - 6}/{n}"
    assert r.data == BLOB[n - 5 :]
    assert get(via, "/blob.bin", "bytes=5-9").data == BLOB[5:10]
    assert proxy.count(fault="wrong_range") == 3
    assert proxy.count(fault=None) == 2


def test_ignore_range(proxy):
    proxy.fail("ignore_range", match="blob")
    via = pool(proxy.url)
    r = get(via, "/blob.bin", "bytes=100-199")
    assert (r.status, r.data, r.headers.get("Content-Range")) == (200, BLOB, None)
    assert get(via, "/a.bin", "bytes=0-9").status == 206  # match: not seen
    assert proxy.count(fault="ignore_range", status=200) == 1


# -- the plan and the log -----------------------------------------------------


def statuses(via, paths):
    return [get(via, p).status for p in paths]


def test_every_times_match_and_method_select(proxy):
    via = pool(proxy.url)
    rule = proxy.fail("status", status=503, every=3, match="a.bin")
    seq = ["/a.bin", "/b.bin", "/a.bin", "/b.bin", "/a.bin", "/a.bin", "/a.bin"]
    assert statuses(via, seq + ["/a.bin"]) == [200] * 4 + [503, 200, 200, 503]
    assert (rule.seen, rule.applied) == (6, 2)

    proxy.clear()
    proxy.fail("status", status=500, times=2, match=re.compile(r"^/b\.bin$"))
    paths = ["/b.bin", "/a.bin", "/b.bin?q", "/b.bin", "/b.bin"]
    assert statuses(via, paths) == [500, 200, 200, 500, 200]

    proxy.clear()
    proxy.fail("status", every=2, times=2)
    assert statuses(via, ["/a.bin"] * 8) == [200, 503, 200, 503] + [200] * 4

    proxy.clear()
    proxy.fail("status", status=429, method="head")
    assert via.request("HEAD", "/a.bin").status == 429
    assert get(via, "/a.bin").status == 200


def test_first_firing_rule_wins(proxy):
    via = pool(proxy.url)
    first = proxy.fail("status", status=500, times=1)
    second = proxy.fail("status", status=503)
    assert statuses(via, ["/a.bin"] * 3) == [500, 503, 503]
    assert (first.seen, first.applied) == (3, 1)
    assert (second.seen, second.applied) == (2, 2)


def test_bad_rules_are_refused(proxy):
    with pytest.raises(ValueError):
        proxy.fail("explode")
    with pytest.raises(TypeError):
        proxy.fail("slow")  # seconds is required
    with pytest.raises(TypeError):
        proxy.fail("reset", seconds=1)
    with pytest.raises(ValueError):
        proxy.fail("stall", seconds=1, then="later")
    with pytest.raises(ValueError):
        proxy.fail("status", times=0)
    with pytest.raises(TypeError):
        proxy.fail("status", match=b"/a.bin")


def test_log_counts_retries_until_each_member_succeeds(proxy):
    """What a loader test asserts: every faulted request was retried and each
    range was fetched successfully exactly once."""
    proxy.fail("reset", every=4)
    proxy.fail("status", status=503, every=3)
    proxy.fail("truncate", every=5)
    members = [(i * 7000, i * 7000 + 6999) for i in range(30)]
    via = pool(proxy.url)
    for lo, hi in members:  # a client that retries until it gets 206 whole
        while True:
            try:
                r = get(via, "/blob.bin", f"bytes={lo}-{hi}")
            except ProtocolError:
                continue
            if r.status == 206:
                assert r.data == BLOB[lo : hi + 1]
                break
    log = proxy.requests
    assert proxy.count(fault=None, status=206) == len(members)
    for lo, hi in members:
        tries = [r for r in log if r.range == f"bytes={lo}-{hi}"]
        assert [r.fault is None for r in tries].count(True) == 1
        assert tries[-1].fault is None
    faulted = proxy.count(fault="reset") + proxy.count(fault="status")
    faulted += proxy.count(fault="truncate")
    assert faulted == len(log) - len(members) > 10
    assert proxy.count(fault=ANY, status=ANY) == len(log)
    assert all(r.method == "GET" and r.path == "/blob.bin" for r in log)
    assert [r.time for r in log] == sorted(r.time for r in log)


def test_plan_changes_under_concurrent_clients(proxy):
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def client():
        via = pool(proxy.url)
        while not stop.is_set():
            try:
                seen.append(get(via, "/a.bin").status)
            except BaseException as e:  # noqa: B036 - reported below
                errors.append(e)
                return

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for _ in range(20):
            proxy.fail("status", status=503, times=3)
            time.sleep(0.01)
            proxy.clear()
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors
    assert set(seen) <= {200, 503}
    assert seen.count(503) == proxy.count(fault="status") <= 60
    assert seen.count(200) == proxy.count(fault=None)
    assert len({r.conn for r in proxy.requests}) == 4


def test_clear_log(proxy):
    via = pool(proxy.url)
    get(via, "/a.bin")
    proxy.fail("reset")
    proxy.clear(log=True)
    assert proxy.requests == []
    assert get(via, "/a.bin").status == 200
    assert proxy.count() == 1


# -- stopping -----------------------------------------------------------------


def test_stop_is_prompt_with_clients_stuck(nginx):
    proxy = FaultProxy(nginx)
    proxy.fail("stall", seconds=60, nbytes=10, match="blob")
    proxy.fail("slow", seconds=60, match="a.bin")
    stalled = raw_request(proxy.url, "/blob.bin")
    status, _, body = read_head(stalled)
    assert status == 200
    slowed = raw_request(proxy.url, "/a.bin")
    idle = pool(proxy.url)
    assert get(idle, "/b.bin").status == 200
    wait_for(lambda: proxy.count() == 3)
    t0 = time.monotonic()
    proxy.stop()
    took = time.monotonic() - t0
    assert took < 1.0, took
    assert not proxy._conns and not proxy._acceptor.is_alive()
    for s in (stalled, slowed):
        s.settimeout(5)
        try:
            assert read_until_eof(s, body if s is stalled else b"") in (b"", BLOB[:10])
        except ConnectionResetError:
            pass
        s.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    proxy.stop()  # again: nothing to do
    assert not proxy.errors


# -- in front of moto's S3 server ---------------------------------------------


@pytest.fixture(scope="module")
def moto_url():
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(
        ip_address="127.0.0.1", port=0, verbose=False
    )
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_s3_through_the_proxy(moto_url):
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    with FaultProxy(moto_url) as proxy:
        s3 = boto3.client(
            "s3",
            endpoint_url=proxy.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"mode": "standard", "max_attempts": 3}),
        )
        s3.create_bucket(Bucket="shards")
        s3.put_object(Bucket="shards", Key="s-000.tar", Body=BLOB)
        assert s3.head_object(Bucket="shards", Key="s-000.tar")["ContentLength"] == len(
            BLOB
        )
        keys = s3.list_objects_v2(Bucket="shards")["Contents"]
        assert [k["Key"] for k in keys] == ["s-000.tar"]

        # A SlowDown that boto3 itself retries.
        proxy.fail(
            "status", status=503, times=1, match="/shards/s-000.tar", method="GET"
        )
        got = s3.get_object(Bucket="shards", Key="s-000.tar", Range="bytes=10-1009")
        assert got["Body"].read() == BLOB[10:1010]
        assert proxy.count("s-000.tar", method="GET", fault="status") == 1
        assert proxy.count("s-000.tar", method="GET", fault=None, status=206) == 1

        # Presigned URLs, signed for the proxy's host:port, still validate.
        url = s3.generate_presigned_url(
            "get_object", Params={"Bucket": "shards", "Key": "s-000.tar"}
        )
        assert url.startswith(proxy.url) and "Signature" in url
        via = pool(proxy.url)
        path = url[len(proxy.url) :]
        r = via.request("GET", path, headers={"Range": "bytes=0-99"}, redirect=False)
        assert (r.status, r.data) == (206, BLOB[:100])
        assert proxy.requests[-1].path == path
        proxy.fail("ignore_range", times=1)
        r = via.request("GET", url, headers={"Range": "bytes=0-99"}, redirect=False)
        assert (r.status, r.data) == (200, BLOB)
        assert proxy.requests[-1].path == path  # absolute-form, logged as a path

        # A chunked request body is forwarded whole.
        put = s3.generate_presigned_url(
            "put_object", Params={"Bucket": "shards", "Key": "s-001.tar"}
        )
        chunks = (BLOB[i : i + 40_000] for i in range(0, len(BLOB), 40_000))
        r = via.request("PUT", put, body=chunks, chunked=True, redirect=False)
        assert r.status == 200, r.data
        got = s3.get_object(Bucket="shards", Key="s-001.tar")["Body"].read()
        assert got == BLOB
        assert not proxy.errors
