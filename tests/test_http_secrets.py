"""What the HTTP source keeps of S3 keys once it is done with them: an
easy handle back in the pool of idle handles cannot sign (its request,
sent as the pool left it, carries no Authorization and no session token,
seen by a real server on 127.0.0.1 that records headers); and comparing
two sets of keys reads neither set's credentials."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from botocore.credentials import Credentials
from images import jpeg_bytes
from ringloader.datasets import presign
from subproc import run_python

JPEG = jpeg_bytes("baseline", 40, 50)
TOKEN = "TokenThatMustNotBeResent"


class _Recorder(http.server.ThreadingHTTPServer):
    """Answers every GET with JPEG, and records each request's headers."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.seen.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Length", str(len(JPEG)))
                self.end_headers()
                self.wfile.write(JPEG)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def recorder():
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# In a child: one signed read, the keys dropped, then a read with the
# handle the pool gives back, its options as the pool left them
# (RINGLOADER_TEST_HTTP_AS_POOLED, a test build's switch). A crash there
# (a handle pointing at freed headers) fails the test, not pytest.
CHILD = """
import sys
import ringloader.transforms as T
from ringloader import _core
url = sys.argv[1]
spec = T.compile_transform(T.Compose([T.Resize(32), T.CenterCrop(32)])).spec
p = _core.Pipeline(spec, paths=["s3://bkt/a.jpg"],
                   http=dict(names=["s3://bkt/a.jpg"], urls=[url]))
try:
    p.set_keys("us-east-1", "AKIDEXAMPLE", "SecretThatMustGo", sys.argv[2])
    p.submit([0], [0], 0)
    p.next(timeout=30)
    p.set_keys(None)  # the keys freed; the handle waits in the pool
    p.submit([0], [0], 1)
    p.next(timeout=30)
finally:
    p.close()
print("done")
"""


def test_a_pooled_handle_keeps_no_key(recorder):
    url = f"http://127.0.0.1:{recorder.server_address[1]}/bkt/a.jpg"
    proc = run_python(
        CHILD, url, TOKEN, env={"RINGLOADER_TEST_HTTP_AS_POOLED": "1"}, timeout=60
    )
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-3000:]
    assert len(recorder.seen) == 2, json.dumps(recorder.seen)
    signed, pooled = recorder.seen
    assert signed["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKID")
    assert signed["x-amz-security-token"] == TOKEN
    assert "authorization" not in pooled, pooled
    assert "x-amz-security-token" not in pooled, pooled
    assert "x-amz-content-sha256" not in pooled, pooled


def test_keys_compare_without_reading_the_credentials():
    """``==`` on keys (when datasets are composed) calls no provider: a
    provider may renew credentials over the network, or be slow."""
    calls = []
    long_term = Credentials("AKIDEXAMPLE", "secret")

    def provider_a():
        calls.append("a")
        return long_term

    def provider_b():
        calls.append("b")
        return long_term

    a = presign.Keys(provider_a, "us-east-1", False)
    b = presign.Keys(provider_b, "us-east-1", False)
    results = [a == b, a != b, a == presign.Keys(provider_a, "us-east-1", False)]
    assert calls == []
    assert results == [False, True, True]
    # The credentials the keys were made from tell the rest, unread.
    same = presign.Keys(
        provider_b, "us-east-1", False, Credentials("AKIDEXAMPLE", "secret")
    )
    known = presign.Keys(provider_a, "us-east-1", False, long_term)
    assert known == same
    assert known != presign.Keys(
        provider_b, "us-east-1", False, Credentials("AK2", "secret")
    )
    assert known != presign.Keys(provider_a, "eu-west-1", False, long_term)
    assert calls == []
