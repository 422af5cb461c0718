"""Redirects, as the HTTP source (C, libcurl) and the Python side (urllib3:
listing, HEAD, index GETs) follow them: to http:// and https:// only, and
never from https:// down to http://; a refused redirect fails at once with
a message naming the object, where it was sent and why. Real nginx servers
on 127.0.0.1 answer with 302 (`Nginx(redirect=...)`)."""

from __future__ import annotations

import errno
import socket
import subprocess
import tarfile
import threading

import pytest
import torch
import torchvision.transforms as T
from images import jpeg_bytes
from test_shards import _add

import ringloader
from ringloader import _core
from rlbench.servers import Nginx
from remote_table import http_table

TF = T.Compose([T.Resize(32), T.CenterCrop(32), T.PILToTensor()])
TF_SPEC = ringloader.transforms.compile_transform(TF).spec
N = 8


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    with tarfile.open(root / "s0.tar", "w") as tf:
        for i in range(N):
            _add(tf, f"k{i:04d}.jpg", jpeg_bytes("baseline", 40, 50, seed=i))
            _add(tf, f"k{i:04d}.cls", str(i % 3).encode())
    return root


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1: (cert file, key file)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = str(d / "cert.pem"), str(d / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", key, "-out", cert],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def plain(www):
    with Nginx(www) as server:
        yield server


@pytest.fixture(scope="module")
def tls(www, cert):
    with Nginx(www, tls=cert) as server:
        yield server


class Listener:
    """A TCP port that accepts connections and says nothing (where an FTP
    server would be), counting the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.accepted:
            c.close()


@pytest.fixture
def ftp():
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch, cert):
    monkeypatch.setenv("RINGLOADER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SSL_CERT_FILE", cert[0])


def c_read(index_base: str, url: str, cert: str, **http):
    """Sample 0 of s0.tar through the C source, its index built from
    ``index_base`` and its bytes fetched from ``url``: the batch, or the
    exception next() raised."""
    src = ringloader.TarShards(f"{index_base}/s0.tar", progress=False)
    srcs = src.ringloader_sources()
    opts = dict(names=[url], urls=[url], ca_file=cert, retries=0, timeout=5.0)
    p = _core.Pipeline(TF_SPEC, **http_table(srcs, **opts, **http))
    try:
        p.submit([0], [0], 0)
        try:
            return p.next(timeout=30)
        except OSError as e:
            return e
    finally:
        p.close()


def test_c_source_refuses_a_redirect_from_https_to_http(www, plain, cert):
    with Nginx(www, tls=cert, redirect=plain.url) as redirector:
        url = f"{redirector.url}/s0.tar"
        e = c_read(plain.url, url, cert[0])
    assert isinstance(e, OSError), "the redirect to http:// was followed"
    assert e.errno == errno.EPROTO
    text = str(e)
    assert url in text, text  # the object
    assert f"redirected to {plain.url}/s0.tar" in text, text
    assert "https:// to http://" in text and "unencrypted" in text, text


def test_c_source_refuses_a_redirect_to_ftp(www, plain, cert, ftp):
    target = f"ftp://127.0.0.1:{ftp.port}"
    with Nginx(www, redirect=target) as redirector:
        url = f"{redirector.url}/s0.tar"
        e = c_read(plain.url, url, cert[0])
    assert isinstance(e, OSError)
    text = str(e)
    assert e.errno == errno.EPROTO, text
    assert url in text and f"redirected to {target}/s0.tar" in text, text
    assert "http:// and https:// only" in text, text
    assert ftp.accepted == []  # no FTP connection was even tried


def test_redirects_from_http_to_https_are_followed(www, plain, tls, cert):
    """Up, never down: the Python side (index) and the C source (bytes)
    follow http:// -> https://, and the samples are the local ones."""

    def epoch(spec: str):
        ds = ringloader.TarShards(spec, progress=False)
        loader = ringloader.Loader(ds, batch_size=N, transform=TF)
        try:
            return [(x.clone(), y.clone()) for x, y in loader]
        finally:
            loader.close()

    with Nginx(www, redirect=tls.url) as redirector:
        got = epoch(f"{redirector.url}/s0.tar")
    want = epoch(str(www / "s0.tar"))
    assert len(got) == len(want) == 1
    assert torch.equal(got[0][0], want[0][0]) and torch.equal(got[0][1], want[0][1])


def test_python_side_refuses_a_redirect_from_https_to_http(www, plain, cert):
    with Nginx(www, tls=cert, redirect=plain.url) as redirector:
        url = f"{redirector.url}/s0.tar"
        with pytest.raises(OSError) as e:
            ringloader.TarShards(url, progress=False)
    text = str(e.value)
    assert url in text and f"redirected to {plain.url}/s0.tar" in text, text
    assert "https:// to http://" in text and "unencrypted" in text, text


def test_python_side_refuses_a_redirect_to_ftp(www, ftp):
    target = f"ftp://127.0.0.1:{ftp.port}"
    with Nginx(www, redirect=target) as redirector:
        url = f"{redirector.url}/s0.tar"
        with pytest.raises(OSError) as e:
            ringloader.TarShards(url, progress=False)
    text = str(e.value)
    assert url in text and f"redirected to {target}/s0.tar" in text, text
    assert "http:// and https:// only" in text, text
    assert ftp.accepted == []
