"""Objects on HTTP(S) servers and in S3, as the datasets see them from
Python: their size and ETag, a byte range, a stream of the whole object,
an ``s3://`` prefix listed, and the fetch URLs handed to the C source.

An object is named by its *display name*, the URL the user gave
(``http://host/a.tar``, ``s3://bucket/key``): that is what messages,
reprs and ``Sources.paths`` show. The C source fetches objects by *fetch
URL*: the same URL for HTTP(S); for S3 a plain URL the C source signs
per request, or a presigned one (``presign.py``). Keys and presigned
query strings never reach a message, a repr or a log.

HTTP(S) goes through urllib3 (its ``Retry`` policy: 5xx, 429 and connection
errors, exponential backoff with jitter; up to 5 redirects, to HTTP(S) only,
never from https to http; certificates verified, the CA bundle from
``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE``). S3 goes
through boto3, which finds credentials, endpoint (``AWS_ENDPOINT_URL_S3``,
``AWS_ENDPOINT_URL``), region and CA bundle (``AWS_CA_BUNDLE``) where it
always does; without credentials, S3 is read anonymously (public buckets).
Both are imported on first use.

Errors are OSErrors naming the object and what to do (``remote_errors.py``:
FileNotFoundError for 404, PermissionError for 401/403, ConnectionError
for refused or unreachable, TimeoutError for no progress in ``timeout``
seconds). What a URL is, and how it is shown, is ``urls.py``'s.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import numpy as np

from . import presign
from .base import Remote
from .presign import split_s3 as _s3_split
from .remote_errors import (
    http_failure,
    http_guarded,
    redirect_target,
    s3_guarded,
    status_error,
)
from .urls import redact

__all__ = ["Client"]

log = logging.getLogger("ringloader")

CHUNK = 1 << 16
_RETRY_STATUS = (429, 500, 502, 503, 504)
_REDIRECT_STATUS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5  # as the C source (CURLOPT_MAXREDIRS)


def ca_file(s3: bool) -> Optional[str]:
    """The CA bundle named by the standard variables (``AWS_CA_BUNDLE``
    first for S3, then ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``,
    ``CURL_CA_BUNDLE``), else the one Python's ssl module trusts on this
    system, else None. The C source gets it too: a wheel's libcurl, built
    elsewhere, does not know where this distribution keeps its CAs."""
    names = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
    for var in (("AWS_CA_BUNDLE",) if s3 else ()) + names:
        value = os.environ.get(var)
        if value:
            return value
    import ssl

    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


class Client:
    """Reads objects by display name, over one connection pool (HTTP) and
    one boto3 client (S3), both made on first use; thread-safe.

    Args:
        retries: attempts after the first for a failed request (5xx, 429,
            connection errors, timeouts) and for a stream cut short.
        timeout: seconds without progress before an attempt is abandoned.
        s3_client: a boto3 S3 client to use (its credentials, endpoint,
            region); None: one made from the standard configuration,
            anonymous when no credentials are found.
        connect_timeout: seconds to connect.
        max_connections: connections per host, here and in the C source.
        progress: presigning many S3 URLs shows a bar (the dataset's).
    """

    def __init__(
        self,
        retries: int = 5,
        timeout: float = 30.0,
        s3_client: Any = None,
        connect_timeout: float = 10.0,
        max_connections: int = 64,
        progress: bool = True,
    ) -> None:
        if retries < 0 or timeout <= 0:
            raise ValueError(f"retries={retries}, timeout={timeout}: need >= 0, > 0")
        self.retries = int(retries)
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.max_connections = int(max_connections)
        self.progress = bool(progress)
        self._user_s3 = s3_client
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        # New in a forked child: a thread of the parent (the URL refresh)
        # may have held the parent's at the fork.
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._http: Any = None
        self._s3: Any = self._user_s3
        self._long_term = False  # the client signs with long-term keys
        self._creds: Any = None  # the credentials of the client made here
        self._signing: Any = None  # presign.Keys or False, once decided

    def __getstate__(self) -> dict:
        """Pools and boto3 clients do not travel; a copy makes its own (a
        user's ``s3_client`` must be picklable itself)."""
        state = self.__dict__.copy()
        for name in ("_lock", "_http", "_s3", "_creds", "_signing"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def _fresh(self) -> None:
        if self._pid != os.getpid():  # after fork: the parent's sockets
            self._reset()

    # -- the two kinds of store -------------------------------------------

    def http(self) -> Any:
        """The urllib3 PoolManager (made on first use)."""
        self._fresh()
        with self._lock:
            if self._http is None:
                self._http = self._make_http()
            return self._http

    def _make_http(self) -> Any:
        try:
            import urllib3
        except ImportError:
            raise ImportError(
                'reading shards over HTTP needs urllib3: pip install "ringloader[http]"'
            ) from None
        retry_args: dict[str, Any] = dict(
            total=self.retries,
            connect=self.retries,
            read=self.retries,
            status=self.retries,
            backoff_factor=0.25,
            status_forcelist=_RETRY_STATUS,
            allowed_methods=frozenset({"GET", "HEAD"}),
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        try:
            retry = urllib3.Retry(backoff_jitter=0.5, backoff_max=10.0, **retry_args)
        except TypeError:  # urllib3 1.26: no jitter
            retry = urllib3.Retry(**retry_args)
        return urllib3.PoolManager(
            num_pools=64,
            maxsize=self.max_connections,
            retries=retry,
            timeout=urllib3.Timeout(connect=self.connect_timeout, read=self.timeout),
            cert_reqs="CERT_REQUIRED",
            ca_certs=ca_file(s3=False),
        )

    def s3(self) -> Any:
        """The boto3 S3 client: the user's, or one made on first use."""
        self._fresh()
        with self._lock:
            if self._s3 is None:
                self._s3 = self._make_s3()
            return self._s3

    def _make_s3(self) -> Any:
        try:
            import boto3
            from botocore import UNSIGNED
            from botocore.config import Config
        except ImportError:
            raise ImportError(
                'reading s3:// URLs needs boto3: pip install "ringloader[s3]"'
            ) from None
        session = boto3.session.Session()
        # SigV4 presigned URLs: every region takes them (not all take V2).
        extra: dict[str, Any] = {"signature_version": "s3v4"}
        creds = session.get_credentials()
        if creds is None:
            log.info("ringloader: no AWS credentials found; reading S3 anonymously")
            extra["signature_version"] = UNSIGNED
        else:
            self._long_term = presign.long_term(creds)
            self._creds = creds
        config = Config(
            retries={"max_attempts": self.retries + 1, "mode": "standard"},
            connect_timeout=self.connect_timeout,
            read_timeout=self.timeout,
            max_pool_connections=self.max_connections,
            **extra,
        )
        return session.client("s3", config=config)

    # -- what the C source is given ---------------------------------------

    def options(self, s3: bool) -> dict[str, Any]:
        """``Remote.options``: how the C source fetches."""
        return {
            "retries": self.retries,
            "timeout": self.timeout,
            "connect_timeout": self.connect_timeout,
            "ca_file": ca_file(s3),
            "verify": True,
            "max_connections": self.max_connections,
        }

    def keys(self, bucket: str) -> Optional[presign.Keys]:
        """The keys the C source signs S3 GETs with, when it can
        (``presign.signing_keys``); None: URLs presigned, or anonymous."""
        if self._signing is None or self._pid != os.getpid():
            s3, creds = self.s3(), self._credentials()
            keys = presign.signing_keys(s3, creds, bucket, self._credentials)
            self._signing = keys or False
        return self._signing or None

    def _credentials(self) -> Any:
        """The boto3 credentials of the S3 client (None: unreadable)."""
        s3 = self.s3()
        return self._creds if self._user_s3 is None else presign.client_credentials(s3)

    def fetch_urls(self, names: Sequence[str], signed: bool = False) -> Sequence[str]:
        """The fetch URL of each object: HTTP(S) URLs as they are, S3 objects
        plain when ``signed`` (in C) or anonymous, else presigned by boto3.
        Plain URLs are a ``presign.FromNames``: made from the names when
        read, nothing kept per object."""
        buckets = presign.buckets_of(names)
        if signed or not buckets or not presign.signs(self.s3()):
            if not buckets:
                return presign.FromNames(names, {})  # no boto3 needed
            return presign.plain(names, self.s3())
        return presign.presigned(names, self.s3, lambda: self._long_term, self.progress)

    def remote(
        self, names: Sequence[str], objects: Optional[np.ndarray] = None
    ) -> Remote:
        """``Sources.remote`` for objects ``names`` (display names, each
        once: a sequence, or a blob of them kept as it is) and, if given,
        each sample's object (``Remote.objects``); S3's keys are read again
        every minute if refreshable, presigned URLs made again daily for
        long-term keys, else every 5 minutes."""
        if not hasattr(names, "offsets"):
            names = list(names)
        buckets = presign.buckets_of(names)
        bucket = buckets[0] if buckets else ""
        keys, refresh = self.keys(bucket) if bucket else None, None
        if keys is not None:
            refresh = presign.KEYS_REFRESH_S if keys.refreshed else None
        elif bucket and presign.signs(self.s3()):
            long = self._long_term
            refresh = presign.LONG_TERM_REFRESH_S if long else presign.REFRESH_S
        return Remote(
            names=names,
            urls=presign.Urls(self.fetch_urls, names, keys is not None),
            refresh_s=refresh,
            options=self.options(bool(bucket)),
            keys=keys,
            urls_expire=keys is None,
            objects=objects,
        )

    # -- metadata and bytes -----------------------------------------------

    def head(self, name: str) -> tuple[int, str]:
        """(size, validator) of an object: its ETag (or Last-Modified when
        the server gives no ETag; "" with neither)."""
        if name.startswith("s3://"):
            bucket, key = _s3_split(name)
            r = self._s3_call(name, "head_object", Bucket=bucket, Key=key)
            return int(r["ContentLength"]), str(
                r.get("ETag") or r.get("LastModified", "")
            )
        r = self._http_request(name, "HEAD")
        size = r.headers.get("Content-Length")
        if r.status in (405, 501) or size is None:  # no HEAD: ask for 1 byte
            r = self._http_request(name, "GET", 0, 1)
            total = r.headers.get("Content-Range", "").rpartition("/")[2]
            size = total if total.isdigit() else r.headers.get("Content-Length")
        if size is None:
            raise OSError(f"{name}: the server gives no size (no Content-Length)")
        return int(size), r.headers.get("ETag") or r.headers.get("Last-Modified", "")

    def get(
        self, name: str, start: int = 0, end: Optional[int] = None, if_match: str = ""
    ) -> bytes:
        """Bytes ``start..end`` of an object (to its end when ``end`` is
        None), of the version whose ETag is ``if_match`` when one is given
        (another version fails with 412, "the object changed"). Raises
        OSError when fewer come back."""
        # If-Match compares strongly: a weak ETag would never match.
        strong = if_match if if_match.startswith('"') else ""
        if name.startswith("s3://"):
            bucket, key = _s3_split(name)
            args: dict[str, Any] = {"Bucket": bucket, "Key": key}
            if start or end is not None:
                args["Range"] = _range(start, end)
            if strong:
                args["IfMatch"] = strong
            body = self._s3_call(name, "get_object", **args)["Body"]
            data = s3_guarded(name, lambda: body.read())
        else:
            headers = {"If-Match": strong} if strong else {}
            r = self._http_request(name, "GET", start, end, headers)
            if r.status == 200 and (start or end is not None):
                raise OSError(
                    f"{name}: the server ignores Range requests (answered 200); "
                    "shards are read by byte range"
                )
            data = r.data
        if end is not None and len(data) != end - start:
            raise OSError(
                f"{name}: bytes {start}..{end} asked, {len(data)} received "
                "(the object is shorter: truncated or replaced?)"
            )
        return data

    def get_optional(self, name: str) -> Optional[bytes]:
        """The whole object, or None when there is none (404; 403 too for
        S3, which answers so for a missing key without ListBucket)."""
        try:
            return self.get(name)
        except FileNotFoundError:
            return None
        except PermissionError:
            if name.startswith("s3://"):
                return None
            raise

    def stream(self, name: str, validator: str = "") -> Iterator[bytes]:
        """The object's bytes in chunks, from the start. A connection cut
        short is resumed where it stopped (a range request, up to
        ``retries`` times), checked against ``validator`` (If-Match) so
        that an object replaced meanwhile fails rather than mixes."""
        pos, failures = 0, 0
        while True:
            try:
                for chunk in self._chunks(name, pos, validator):
                    pos += len(chunk)
                    yield chunk
                return
            except (ConnectionError, TimeoutError) as e:
                failures += 1
                if failures > self.retries:
                    raise
                log.warning("ringloader: %s: resuming at byte %d (%s)", name, pos, e)

    def _chunks(self, name: str, start: int, validator: str) -> Iterator[bytes]:
        if name.startswith("s3://"):
            bucket, key = _s3_split(name)
            args: dict[str, Any] = {"Bucket": bucket, "Key": key}
            if start:
                args["Range"] = _range(start, None)
            if validator.startswith('"'):
                args["IfMatch"] = validator
            body = self._s3_call(name, "get_object", **args)["Body"]
            chunks = body.iter_chunks(CHUNK)
            try:
                while True:
                    chunk = s3_guarded(name, lambda: next(chunks, b""))
                    if not chunk:
                        return
                    yield chunk
            finally:
                body.close()
        # If-Match compares strongly: a weak ETag would never match.
        headers = {"If-Match": validator} if validator.startswith('"') else {}
        r = self._http_request(name, "GET", start, None, headers, stream=True)
        done = False
        try:
            if start and r.status != 206:
                raise OSError(f"{name}: the server ignores Range requests")
            while True:
                chunk = http_guarded(name, lambda: r.read(CHUNK))
                if not chunk:
                    done = True
                    return
                yield chunk
        finally:
            if not done:  # unread data: the connection cannot be reused
                r.close()
            r.release_conn()

    def list_glob(self, pattern: str) -> list[str]:
        """The objects of ``s3://bucket/pattern`` (``*``, ``?``, ``[..]``
        matching within one ``/``-separated part, as a local glob),
        listed from the prefix before the first wildcard, sorted."""
        if not pattern.startswith("s3://"):
            raise ValueError(
                f"{redact(pattern)}: an HTTP server cannot be listed; name the "
                "shards with braces (train-{0000..1023}.tar) or a list"
            )
        bucket, key = _s3_split(pattern)
        first = min(key.find(c) for c in "*?[" if c in key)
        prefix = key[:first]
        parts = key.split("/")
        paginator = self._s3_call(pattern, "get_paginator", "list_objects_v2")

        def matching() -> list[str]:
            found = []
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
                for obj in page.get("Contents", ()):
                    got = obj["Key"].split("/")
                    if len(got) == len(parts) and all(
                        fnmatch.fnmatchcase(a, b) for a, b in zip(got, parts)
                    ):
                        found.append(f"s3://{bucket}/{obj['Key']}")
            return found

        found = s3_guarded(pattern, matching)
        if not found:
            raise FileNotFoundError(f"no object matches {pattern!r}")
        return sorted(found)

    # -- requests ----------------------------------------------------------

    def _http_request(
        self,
        name: str,
        method: str,
        start: int = 0,
        end: Optional[int] = None,
        headers: Optional[dict] = None,
        stream: bool = False,
    ) -> Any:
        """A urllib3 response, after retries; raises for error statuses."""
        import urllib3

        headers = {"Accept-Encoding": "identity", **(headers or {})}
        if start or end is not None:
            headers["Range"] = _range(start, end)
        url, kw = name, dict(headers=headers, preload_content=not stream)
        # Redirects are followed here, not by urllib3, which would follow
        # one from https:// to http://.
        for _ in range(MAX_REDIRECTS + 1):
            try:
                r = self.http().request(method, url, redirect=False, **kw)
            except urllib3.exceptions.HTTPError as e:
                raise http_failure(name, e) from None
            location = r.headers.get("Location")
            if r.status not in _REDIRECT_STATUS or not location:
                break
            r.drain_conn()
            url = redirect_target(name, url, location, r.status)
        else:
            raise OSError(f"{name}: more than {MAX_REDIRECTS} redirects")
        if r.status >= 400 and not (method == "HEAD" and r.status in (405, 501)):
            r.drain_conn()
            raise status_error(name, r.status, r.reason or "")
        return r

    def _s3_call(self, name: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return s3_guarded(name, lambda: getattr(self.s3(), method)(*args, **kwargs))


def _range(start: int, end: Optional[int]) -> str:
    return f"bytes={start}-" + ("" if end is None else str(end - 1))
