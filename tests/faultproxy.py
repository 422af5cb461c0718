"""A fault-injecting HTTP/1.1 proxy for the tests of the HTTP(S)/S3 source.

`FaultProxy` listens on 127.0.0.1, serves each client connection in its own
thread with keep-alive, and forwards every request (any method, its body,
its target with the query string untouched, its headers with Host unchanged,
so presigned S3 URLs signed for the proxy's host:port still validate) to one
upstream HTTP server over a persistent connection per client connection. The
upstream's status, headers and body come back unchanged, except that the
framing is the proxy's own (Content-Length; a chunked upstream body is
buffered first).

A plan of rules, which a test may change while the proxy runs, makes chosen
requests fail instead::

    with FaultProxy(nginx_url) as proxy:
        proxy.fail("status", status=503, retry_after=1, every=3, match=".tar")
        proxy.fail("reset", times=2, match=re.compile(r"shard-00[01]"))
        ...  # point the client at proxy.url
        assert proxy.count(".tar", fault=None, status=206) == n_members

The kinds of fault (`FaultProxy.fail` documents their parameters): "reset",
"status", "slow", "truncate", "stall", "wrong_range", "ignore_range".

Rules are tried in the order they were added. A rule sees a request when its
`match` and `method` select it and it is applicable (the range faults only
see requests with a single-range Range header, "truncate" and "stall" no HEAD
requests); the first rule that sees the request and fires applies its fault,
and the rules after it do not see that request. Without `times` or `every` a
rule fires on every request it sees; with `times=n` on the first n; with
`every=k` on the k-th, 2k-th, ... (and with both, on at most `times` of
those). Nothing is random.

Every request is logged on arrival in `proxy.requests` (`Request` records;
their `status` and `nbytes` are filled in as the response goes out), which
`proxy.count` filters.
"""

from __future__ import annotations

import http.client
import itertools
import os
import re
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Pattern, Union
from urllib.parse import urlsplit

__all__ = ["ANY", "FaultProxy", "Request", "Rule"]

KINDS = (
    "reset",
    "status",
    "slow",
    "truncate",
    "stall",
    "wrong_range",
    "ignore_range",
)

_REQUIRED: Any = object()

# The parameters each kind takes, with their defaults.
_PARAMS: dict[str, dict[str, Any]] = {
    "reset": {},
    "status": {"status": 503, "retry_after": None, "code": None, "message": None},
    "slow": {"seconds": _REQUIRED, "then": "respond"},
    "truncate": {"fraction": 0.5, "nbytes": None},
    "stall": {"seconds": _REQUIRED, "fraction": 0.5, "nbytes": None, "then": "close"},
    "wrong_range": {"shift": 1, "claim": "actual"},
    "ignore_range": {},
}
_THEN = {"slow": ("respond", "close"), "stall": ("close", "resume")}

# S3's error codes and messages for the statuses a test is likely to inject.
_S3_ERRORS = {
    400: ("BadRequest", "Bad Request"),
    403: ("AccessDenied", "Access Denied"),
    404: ("NoSuchKey", "The specified key does not exist."),
    429: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
    502: ("BadGateway", "Bad Gateway"),
    503: ("SlowDown", "Please reduce your request rate."),
    504: ("GatewayTimeout", "Gateway Timeout"),
}

# Headers that describe one hop, never forwarded.
_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}

_CHUNK = 64 * 1024
_MAX_LINE = 64 * 1024
_RANGE = re.compile(r"\s*bytes\s*=\s*(\d+)\s*-\s*(\d*)\s*$", re.IGNORECASE)


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()
"""`count`'s default filter value: any fault, any status."""


@dataclass
class Request:
    """One request as the proxy saw it."""

    method: str
    path: str  # the request target: path and query string
    range: Optional[str]  # the Range header, if any
    fault: Optional[str]  # the kind applied, None when forwarded as is
    conn: int  # which client connection (1, 2, ... in accept order)
    time: float  # time.monotonic() when the request's head was read
    status: Optional[int] = None  # the status sent; None before/without one
    # Body bytes sent to the client, counted (like status) just before they are
    # sent, so that what a client has received is always in the log already.
    nbytes: int = 0


@dataclass
class Rule:
    """A rule of the plan, as `FaultProxy.fail` returns it."""

    kind: str
    params: dict[str, Any]
    times: Optional[int] = None
    every: Optional[int] = None
    match: Union[str, Pattern[str], None] = None
    method: Optional[str] = None
    seen: int = 0  # requests this rule saw
    applied: int = 0  # requests it faulted
    _lock: threading.Lock = field(
        default_factory=threading.Lock, repr=False, compare=False
    )

    def _selects(self, method: str, path: str, rng: Optional[str]) -> bool:
        if self.method is not None and method.upper() != self.method.upper():
            return False
        if isinstance(self.match, str) and self.match not in path:
            return False
        if isinstance(self.match, re.Pattern) and not self.match.search(path):
            return False
        if self.kind in ("wrong_range", "ignore_range"):
            return rng is not None and _RANGE.match(rng) is not None
        if self.kind in ("truncate", "stall"):
            return method.upper() != "HEAD"
        return True

    def _fires(self, method: str, path: str, rng: Optional[str]) -> bool:
        """Counts the request if this rule sees it; whether it faults it."""
        if not self._selects(method, path, rng):
            return False
        with self._lock:
            self.seen += 1
            if self.times is not None and self.applied >= self.times:
                return False
            if self.every is not None and self.seen % self.every:
                return False
            self.applied += 1
            return True


class _Gone(Exception):
    """The client connection is over (closed by either side, or stopping)."""


class FaultProxy:
    """A threaded HTTP/1.1 proxy on 127.0.0.1 in front of `upstream`
    ("http://host:port"), injecting faults on the requests a plan selects.
    Starts in the constructor; `stop()` (or leaving the `with` block) ends it
    and every connection within a second."""

    def __init__(
        self, upstream: str, *, port: int = 0, upstream_timeout: float = 30.0
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"upstream must be http://host[:port], not {upstream!r}")
        self.upstream = (parts.hostname, parts.port or 80)
        self.upstream_timeout = upstream_timeout
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._log: list[Request] = []
        self._conns: dict[int, _Connection] = {}
        self._nconns = 0
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self.errors: list[str] = []  # upstream failures and proxy bugs
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"faultproxy:{self.port}", daemon=True
        )
        self._acceptor.start()

    # -- the plan -----------------------------------------------------------

    def fail(
        self,
        kind: str,
        *,
        times: Optional[int] = None,
        every: Optional[int] = None,
        match: Union[str, Pattern[str], None] = None,
        method: Optional[str] = None,
        **params: Any,
    ) -> Rule:
        """Adds a rule: fault `kind` on the requests whose target (path and
        query) contains `match` (a str) or in which it finds a match (a
        compiled regex), of `method` if given; on the first `times` of them,
        or on every `every`-th, or (neither) on all. Returns the rule, whose
        `seen` and `applied` count as requests go by.

        kind and params:
        - "reset": reads the request, then closes with SO_LINGER 0 (the
          client sees ECONNRESET), no response.
        - "status": status=503, retry_after=None (seconds, sent as
          Retry-After), code/message (default: S3's for the status): answers
          with S3's XML error body and no upstream request; the connection
          stays open.
        - "slow": seconds (required), then="respond" | "close": sends nothing
          for `seconds`, then forwards as usual or closes.
        - "truncate": fraction=0.5 or nbytes: sends the upstream's status and
          headers (full Content-Length) and that part of the body (always
          less than all of a non-empty body), then closes.
        - "stall": seconds (required), fraction=0.5 or nbytes, then="close" |
          "resume": sends the head and that part of the body, sends nothing
          for `seconds` with the connection open, then closes or sends the
          rest.
        - "wrong_range": shift=1, claim="actual" | "requested": fetches the
          requested range shifted by `shift` bytes (the other way if that
          would start before 0) and answers with the upstream's 206 for those
          bytes; "actual" keeps its Content-Range (other bytes than asked),
          "requested" rewrites it to claim the requested start.
        - "ignore_range": drops the Range header, so the client gets 200 and
          the whole object.
        """
        if kind not in _PARAMS:
            raise ValueError(f"unknown fault {kind!r}; one of {KINDS}")
        allowed = _PARAMS[kind]
        unknown = set(params) - set(allowed)
        if unknown:
            raise TypeError(
                f"{kind!r} takes no {sorted(unknown)}; only {list(allowed)}"
            )
        full = {**allowed, **params}
        missing = [k for k, v in full.items() if v is _REQUIRED]
        if missing:
            raise TypeError(f"{kind!r} needs {missing}")
        if kind in _THEN and full["then"] not in _THEN[kind]:
            raise ValueError(f"{kind!r}: then must be one of {_THEN[kind]}")
        if kind == "wrong_range" and full["claim"] not in ("actual", "requested"):
            raise ValueError("wrong_range: claim must be 'actual' or 'requested'")
        if kind == "wrong_range" and not full["shift"]:
            raise ValueError("wrong_range: shift must not be 0")
        if match is not None and not isinstance(match, (str, re.Pattern)):
            raise TypeError(f"match must be a str or a compiled regex, not {match!r}")
        for name, value in (("times", times), ("every", every)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1")
        rule = Rule(kind, full, times, every, match, method)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self, *, log: bool = False) -> None:
        """Removes every rule (and empties the log and `errors` if `log`)."""
        with self._lock:
            self._rules.clear()
            if log:
                self._log.clear()
                self.errors.clear()

    def _choose(self, method: str, path: str, rng: Optional[str]) -> Optional[Rule]:
        with self._lock:
            rules = list(self._rules)
        for rule in rules:
            if rule._fires(method, path, rng):
                return rule
        return None

    # -- the log ------------------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        """The requests so far, in arrival order (a new list each time)."""
        with self._lock:
            return list(self._log)

    def count(
        self,
        match: Union[str, Pattern[str], None] = None,
        *,
        fault: Optional[str] = ANY,
        method: Optional[str] = None,
        status: Optional[int] = ANY,
    ) -> int:
        """How many logged requests have a target matching `match` (as in
        `fail`), `method`, the `fault` kind (None: forwarded as is) and the
        `status` sent (None: none sent)."""
        n = 0
        for r in self.requests:
            if method is not None and r.method.upper() != method.upper():
                continue
            if isinstance(match, str) and match not in r.path:
                continue
            if isinstance(match, re.Pattern) and not match.search(r.path):
                continue
            if fault is not ANY and r.fault != fault:
                continue
            if status is not ANY and r.status != status:
                continue
            n += 1
        return n

    # -- life ---------------------------------------------------------------

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        host, port = self.upstream
        return f"<FaultProxy {self.url} -> http://{host}:{port}>"

    def stop(self, timeout: float = 1.0) -> None:
        """Closes the listener and every client and upstream connection,
        wakes the connections sleeping in "slow" or "stall", and joins the
        threads (waiting at most `timeout` in all)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        os.write(self._wake_w, b"x")
        deadline = time.monotonic() + timeout
        self._acceptor.join(timeout)
        with self._lock:
            conns = list(self._conns.values())
        for c in conns:
            c.abort()
        for c in conns:
            c.thread.join(max(0.0, deadline - time.monotonic()))
        alive = [c for c in conns if c.thread.is_alive()]
        if not alive and not self._acceptor.is_alive():
            os.close(self._wake_r)
            os.close(self._wake_w)
        if alive:
            raise RuntimeError(
                f"FaultProxy.stop: {len(alive)} connection threads still running"
            )

    def _accept_loop(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._listener, self._wake_r], [], [])
                if self._wake_r in ready or self._stopping.is_set():
                    return
                try:
                    sock, _ = self._listener.accept()
                except OSError:
                    continue
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with self._lock:
                    if self._stopping.is_set():
                        sock.close()
                        return
                    self._nconns += 1
                    conn = _Connection(self, sock, self._nconns)
                    self._conns[conn.id] = conn
                    conn.thread.start()
        finally:
            self._listener.close()

    def _sleep(self, sock: socket.socket, seconds: float) -> bool:
        """Waits `seconds`; False as soon as the proxy stops or the client
        closes its end."""
        deadline = time.monotonic() + seconds
        watch = [sock, self._wake_r]
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if sock not in watch:  # client bytes pending: cannot see its EOF
                return not self._stopping.wait(left)
            try:
                ready, _, _ = select.select(watch, [], [], left)
            except (OSError, ValueError):
                return False
            if self._wake_r in ready:
                return False
            if sock in ready:
                try:
                    if not sock.recv(1, socket.MSG_PEEK):
                        return False
                except OSError:
                    return False
                watch = [self._wake_r]


class _Connection:
    """One client connection and its upstream connection, in one thread."""

    def __init__(self, proxy: FaultProxy, sock: socket.socket, ident: int) -> None:
        self.proxy = proxy
        self.sock = sock
        self.id = ident
        self.rfile = sock.makefile("rb")
        self.upstream: Optional[http.client.HTTPConnection] = None
        self.thread = threading.Thread(
            target=self.run, name=f"faultproxy:{proxy.port}#{ident}", daemon=True
        )

    def abort(self) -> None:
        for s in (self.sock, self.upstream and self.upstream.sock):
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def run(self) -> None:
        try:
            while not self.proxy._stopping.is_set():
                if not self.serve_one():
                    break
        except _Gone:
            pass
        except Exception as e:  # a bug of the proxy: keep it for the test
            if not self.proxy._stopping.is_set():
                self.proxy.errors.append(f"conn {self.id}: {e!r}")
        finally:
            self.close()
            with self.proxy._lock:
                self.proxy._conns.pop(self.id, None)

    def close(self, reset: bool = False) -> None:
        if reset:
            try:
                self.sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            except OSError:
                pass
        for f in (self.rfile.close, self.sock.close):
            try:
                f()
            except OSError:
                pass
        if self.upstream is not None:
            self.upstream.close()

    # -- reading the request ------------------------------------------------

    def readline(self) -> bytes:
        try:
            line = self.rfile.readline(_MAX_LINE + 1)
        except (OSError, ValueError):
            raise _Gone from None
        if len(line) > _MAX_LINE:
            raise _Gone
        return line

    def read(self, n: int) -> bytes:
        try:
            data = self.rfile.read(n)
        except (OSError, ValueError):
            raise _Gone from None
        if len(data) != n:
            raise _Gone
        return data

    def read_body(self, headers: list[tuple[str, str]]) -> Optional[bytes]:
        te = _get(headers, "transfer-encoding")
        if te is not None and "chunked" in te.lower():
            parts = []
            while True:
                size = int(self.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.read(size))
                self.readline()
        cl = _get(headers, "content-length")
        if cl is not None:
            return self.read(int(cl))
        return None

    def serve_one(self) -> bool:
        """Reads and answers one request; whether the connection goes on."""
        line = self.readline()
        while line in (b"\r\n", b"\n"):  # tolerated between requests
            line = self.readline()
        if not line:
            return False
        try:
            method, target, version = line.decode("latin-1").split()
        except ValueError:
            self.send_simple(400, "Bad Request")
            return False
        headers: list[tuple[str, str]] = []
        while True:
            h = self.readline()
            if h in (b"\r\n", b"\n"):
                break
            if not h:
                raise _Gone
            name, _, value = h.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        if not target.startswith("/"):  # absolute-form: forwarded as origin-form
            parts = urlsplit(target)
            if parts.scheme in ("http", "https") and parts.netloc:
                target = target[len(f"{parts.scheme}://{parts.netloc}") :] or "/"
        rng = _get(headers, "range")
        record = Request(method, target, rng, None, self.id, time.monotonic())
        with self.proxy._lock:
            self.proxy._log.append(record)
        expect = _get(headers, "expect")
        if expect is not None and expect.lower() == "100-continue":
            self.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self.read_body(headers)
        conn_tokens = (_get(headers, "connection") or "").lower()
        keep = "close" not in conn_tokens
        if version.upper() == "HTTP/1.0":
            keep = "keep-alive" in conn_tokens

        rule = self.proxy._choose(method, target, rng)
        kind = rule.kind if rule else None
        p = rule.params if rule else {}
        record.fault = kind
        if kind == "reset":
            self.close(reset=True)
            raise _Gone
        if kind == "status":
            self.send_status(record, method, p, keep)
            return keep
        if kind == "slow":
            if not self.proxy._sleep(self.sock, p["seconds"]) or p["then"] == "close":
                return False
        send_headers = headers
        if kind == "ignore_range":
            send_headers = [
                (k, v) for k, v in headers if k.lower() not in ("range", "if-range")
            ]
        elif kind == "wrong_range":
            m = _RANGE.match(rng or "")
            assert m is not None
            start, shift = int(m.group(1)), p["shift"]
            if start + shift < 0:
                shift = -shift
            end = str(int(m.group(2)) + shift) if m.group(2) else ""
            send_headers = [(k, v) for k, v in headers if k.lower() != "range"]
            send_headers.append(("Range", f"bytes={start + shift}-{end}"))

        resp = self.forward(method, target, send_headers, body)
        if resp is None:
            record.status = 502
            self.send_simple(502, "Bad Gateway")
            return False
        return self.relay(record, method, resp, kind, p, keep, rng)

    # -- upstream -----------------------------------------------------------

    def forward(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: Optional[bytes],
    ) -> Optional[http.client.HTTPResponse]:
        """Sends the request upstream (once more on a fresh connection if a
        kept-alive one turned out closed); the response, or None."""
        drop = set(_HOP) | {"expect", "content-length"}
        for token in (_get(headers, "connection") or "").split(","):
            drop.add(token.strip().lower())
        fwd = [(k, v) for k, v in headers if k.lower() not in drop]
        if body is not None:
            fwd.append(("Content-Length", str(len(body))))
        for attempt in (0, 1):
            reused = self.upstream is not None and self.upstream.sock is not None
            if self.upstream is None:
                host, port = self.proxy.upstream
                self.upstream = http.client.HTTPConnection(
                    host, port, timeout=self.proxy.upstream_timeout
                )
            try:
                self.upstream.putrequest(
                    method, target, skip_host=True, skip_accept_encoding=True
                )
                for k, v in fwd:
                    self.upstream.putheader(k, v)
                self.upstream.endheaders(body)
                return self.upstream.getresponse()
            except (http.client.HTTPException, OSError) as e:
                self.upstream.close()
                if self.proxy._stopping.is_set():
                    raise _Gone from None
                if (
                    reused
                    and attempt == 0
                    and isinstance(e, (http.client.RemoteDisconnected, ConnectionError))
                ):
                    continue
                self.proxy.errors.append(
                    f"conn {self.id}: upstream {method} {target}: {e!r}"
                )
                return None
        return None

    def relay(
        self,
        record: Request,
        method: str,
        resp: http.client.HTTPResponse,
        kind: Optional[str],
        p: dict[str, Any],
        keep: bool,
        rng: Optional[str],
    ) -> bool:
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP]
        no_body = (
            method.upper() == "HEAD" or resp.status in (204, 304) or resp.status < 200
        )
        length = None if no_body else resp.length  # None: chunked or till close
        chunks: Iterator[bytes]
        if no_body:
            self.upstream_read(resp, None)
            chunks = iter(())
        elif length is None or kind == "wrong_range":
            data = self.upstream_read(resp, None)
            length = len(data)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(length)))
            if (
                kind == "wrong_range"
                and p["claim"] == "requested"
                and resp.status == 206
            ):
                m = _RANGE.match(rng or "")
                assert m is not None
                start = int(m.group(1))
                cr = _get(headers, "content-range") or "/*"
                total = cr.rpartition("/")[2]
                headers = [(k, v) for k, v in headers if k.lower() != "content-range"]
                headers.append(
                    ("Content-Range", f"bytes {start}-{start + length - 1}/{total}")
                )
            chunks = iter((data,))
        else:
            chunks = self.upstream_chunks(resp)

        limit = None
        if kind in ("truncate", "stall") and length is not None:
            limit = int(length * p["fraction"]) if p["nbytes"] is None else p["nbytes"]
            limit = max(0, min(limit, length - 1))
        if not keep:
            headers.append(("Connection", "close"))
        head = f"HTTP/1.1 {resp.status} {resp.reason}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
        record.status = resp.status
        pending = head.encode("latin-1")
        held = b""  # what a stall holds back of the chunk it cut
        for chunk in chunks:
            if limit is not None and record.nbytes + len(chunk) > limit:
                cut = limit - record.nbytes
                chunk, held = chunk[:cut], chunk[cut:]
            record.nbytes += len(chunk)  # first: the log is never behind the client
            self.send(pending + chunk)
            pending = b""
            if held:
                break
        if pending:
            self.send(pending)
        if limit is None:
            return keep
        if kind == "truncate":
            return False
        if not self.proxy._sleep(self.sock, p["seconds"]) or p["then"] == "close":
            return False
        for chunk in itertools.chain((held,), chunks):
            record.nbytes += len(chunk)
            self.send(chunk)
        return keep

    def upstream_read(self, resp: http.client.HTTPResponse, n: Optional[int]) -> bytes:
        try:
            return resp.read(n)
        except (http.client.HTTPException, OSError) as e:
            if not self.proxy._stopping.is_set():
                self.proxy.errors.append(f"conn {self.id}: upstream body: {e!r}")
            raise _Gone from None

    def upstream_chunks(self, resp: http.client.HTTPResponse) -> Iterator[bytes]:
        while True:
            data = self.upstream_read(resp, _CHUNK)
            if not data:
                if resp.length:  # the upstream closed early
                    raise _Gone
                return
            yield data

    # -- writing ------------------------------------------------------------

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            raise _Gone from None

    def send_simple(self, status: int, reason: str) -> None:
        body = f"{status} {reason}\n".encode()
        self.send(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )

    def send_status(
        self, record: Request, method: str, p: dict[str, Any], keep: bool
    ) -> None:
        status = p["status"]
        code, message = _S3_ERRORS.get(status, (f"Status{status}", "Injected error"))
        code = p["code"] or code
        message = p["message"] or message
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<RequestId>FAULTPROXY{record.conn:04d}</RequestId>"
            "<HostId>faultproxy</HostId></Error>"
        ).encode()
        reason = http.client.responses.get(status, "Error")
        head = (
            f"HTTP/1.1 {status} {reason}\r\n"
            "Content-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Server: faultproxy\r\n"
        )
        if p["retry_after"] is not None:
            head += f"Retry-After: {p['retry_after']}\r\n"
        if not keep:
            head += "Connection: close\r\n"
        record.status = status
        payload = head.encode() + b"\r\n"
        if method.upper() != "HEAD":
            payload += body
            record.nbytes = len(body)
        self.send(payload)


def _get(headers: list[tuple[str, str]], name: str) -> Optional[str]:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None
