"""The URLs the C source fetches S3 objects from: plain URLs, which it
signs per request (libcurl's SigV4, keys from boto3), or presigned ones
(boto3 signs; nothing is signed by hand here): how long those live, when
they are made again, and making many of them.

A plain URL is the key, percent-encoded as S3's canonical request has it
(every byte but ``A-Z a-z 0-9 - . _ ~ /``), after the part of the URL
boto3 sends a GET of that bucket to (its endpoint, region, virtual-host
or path-style addressing), found once per bucket by presigning a made-up
key. Plain URLs are not kept: :class:`FromNames` holds the names and
each bucket's base, and the C source makes an object's URL when it
prepares its request (Python makes one only when asked for it). A presigned URL takes boto3
0.13 to 0.21 ms of Python, and with temporary credentials all of
them are made again every 5 minutes, on a thread of the loader's own
(``_pipeline.py``) which hands the GIL back after each URL here: they are
made only where the C source cannot sign (libcurl older than 7.75, a
user's ``s3_client`` whose credentials cannot be read).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from typing import Any, Callable, Optional
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from .progress import bar as progress_bar

__all__ = [
    "FromNames",
    "Keys",
    "Urls",
    "buckets_of",
    "client_credentials",
    "long_term",
    "plain",
    "presigned",
    "signing_keys",
    "signs",
    "split_s3",
    "url_base",
]

# How long presigned URLs live and when they are made again (the loader
# waits for new ones past 1.5 times that). With long-term access keys, a
# URL lives the 7 days SigV4 allows and is made again daily. A URL signed
# with temporary credentials (a session token: roles, SSO, instance
# profiles) dies with them: boto3 renews them 15 minutes before they
# expire, or at the latest 10 minutes before, so such a URL lives at least
# 10 minutes and at most an hour; it is made again after 5 and used at
# most 7.5, which leaves time for the batches in flight. So are the URLs
# of a user's s3_client, whose kind of credentials is not known.
PRESIGN_EXPIRES_S = 3600
REFRESH_S = 300.0
LONG_TERM_EXPIRES_S = 7 * 24 * 3600
LONG_TERM_REFRESH_S = 24 * 3600.0
# From this many objects on, presigning them (~0.13 ms each) shows a bar.
PRESIGN_BAR = 20000
# How often the keys the C source signs with are read again from boto3's
# refreshable credentials (a dict lookup unless boto3 renews them then):
# boto3 renews them 15 minutes before they expire and hands none out with
# under 10 left, so keys handed over a minute ago still have 9.
KEYS_REFRESH_S = 60.0
# The made-up key presigned to learn where a bucket's GETs go.
_PROBE = "ringloader-probe"


def split_s3(name: str) -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``, both taken literally, as the
    C source splits a name: the bucket ends at the first ``/``, ``?`` or
    ``#``, and the key is the rest, leading slashes dropped (S3 keys may
    hold ``?``, ``#``, tabs and line breaks, which ``urlsplit`` would
    drop or cut)."""
    _, sep, rest = name.partition("://")
    end = len(rest)
    for c in "/?#":
        i = rest.find(c)
        if 0 <= i < end:
            end = i
    bucket, key = rest[:end], rest[end:].lstrip("/")
    if not sep or not bucket or not key:
        raise ValueError(f"{name}: an S3 URL is s3://bucket/key")
    return bucket, key


def url_base(client: Any, bucket: str) -> tuple[str, Optional[str]]:
    """(prefix, region) of the GETs of ``bucket``'s objects by the boto3
    ``client``: the URL before the key (``https://b.s3.eu-west-1
    .amazonaws.com/``, ``http://127.0.0.1:9000/b/``) and the region boto3
    signs for (None for an unsigned client)."""
    url = client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": _PROBE}, ExpiresIn=60
    )
    parts = urlsplit(url)
    if not parts.path.endswith("/" + _PROBE):
        raise ValueError(f"s3://{bucket}: boto3 sends its GETs to an unknown URL")
    region = None
    for k, v in parse_qsl(parts.query):
        if k == "X-Amz-Credential":
            region = v.split("/")[2]
    base = parts._replace(path=parts.path[: -len(_PROBE)], query="", fragment="")
    return urlunsplit(base), region


def key_path(key: str) -> str:
    """An S3 key as the path of its URL and of its canonical request
    (SigV4 for S3 encodes once: every byte but ``A-Z a-z 0-9 - . _ ~``
    and ``/``, as UTF-8 ``%XX``)."""
    return quote(key, safe="/~")


def plain(names: Sequence[str], client: Any) -> FromNames:
    """The plain (unsigned) fetch URL of each object: HTTP(S) URLs as they
    are, S3 objects at their bucket's ``url_base`` (one boto3 call per
    bucket) plus their ``key_path``; made from the names when read (in C
    by the pipeline), nothing kept per object."""
    return FromNames(names, {b: url_base(client, b)[0] for b in buckets_of(names)})


# The bucket of an s3:// name: up to the first /, ? or # (as urlsplit
# ends the netloc), then its key's first byte after the slashes.
_S3_NAME = re.compile(r"s3://([^/?#]*)/*(.?)", re.S)


def buckets_of(names: Sequence[str]) -> list[str]:
    """The buckets of the ``s3://`` names, each once, in order. ``names``
    may be a blob of them (``blob``, ``offsets`` and ``prefix``, a
    StringBlob): when its prefix names the bucket and the start of every
    key, nothing is read per name. Raises ValueError for an S3 name with
    no bucket or key, as ``split_s3`` does."""
    prefix = getattr(names, "prefix", None)
    if isinstance(prefix, str) and hasattr(names, "offsets") and len(names):
        if not prefix.startswith("s3://"[: len(prefix)]):
            return []  # "http://...": none is S3's
        m = _S3_NAME.match(prefix)
        if m and m.group(1) and m.group(2):
            return [m.group(1)]
    out: dict[str, None] = {}
    for name in names:
        if name.startswith("s3://"):
            out.setdefault(split_s3(name)[0])
    return list(out)


class FromNames(Sequence):
    """Plain fetch URLs, made from the objects' names when read: an
    HTTP(S) name is its URL, ``s3://bucket/key`` is ``bases[bucket]``
    and the key's ``key_path``. The pipeline hands the C source the
    names and ``bases`` alone, which makes each URL as it prepares a
    request: nothing is kept per object. Compares equal to a sequence of
    the same URLs."""

    def __init__(self, names: Sequence[str], bases: dict[str, str]) -> None:
        self.names = names
        self.bases = bases

    def __len__(self) -> int:
        return len(self.names)

    def _url(self, name: str) -> str:
        if not name.startswith("s3://"):
            return name
        bucket, key = split_s3(name)
        return self.bases[bucket] + key_path(key)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._url(n) for n in self.names[index]]
        return self._url(self.names[index])

    def __iter__(self) -> Any:
        return (self._url(n) for n in self.names)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<plain fetch URLs of {len(self.names)} objects>"


def signs(client: Any) -> bool:
    """Whether a boto3 S3 client signs (not anonymous)."""
    from botocore import UNSIGNED

    return client.meta.config.signature_version is not UNSIGNED


def signing_keys(
    client: Any, creds: Any, bucket: str, creds_of: Callable[[], Any]
) -> Optional[Keys]:
    """The keys the C source signs the GETs of ``bucket``'s objects with,
    when it can: a libcurl with SigV4, a boto3 ``client`` that signs with
    SigV4 (or presigns with V2 by default: a user's client not told
    otherwise), credentials ``creds`` that can be read (``creds_of()``
    reads them again later); None where URLs are to be presigned, or
    not signed (an anonymous client)."""
    from botocore import UNSIGNED
    from botocore.credentials import RefreshableCredentials

    from .. import _core

    version = client.meta.config.signature_version
    if version is UNSIGNED or version not in (None, "s3v4"):
        return None
    if not _core.http_sigv4() or not hasattr(creds, "get_frozen_credentials"):
        return None
    # The region boto3 signs a GET of the bucket for (a client presigning
    # with SigV2 names none: then the client's own).
    region = url_base(client, bucket)[1] or client.meta.region_name
    if not region:
        return None
    return Keys(creds_of, region, isinstance(creds, RefreshableCredentials), creds)


def client_credentials(client: Any) -> Any:
    """The credentials a user's boto3 client signs with: botocore's request
    signer holds them, in an attribute that is not public (a botocore
    without it: None, and its URLs are presigned)."""
    signer = getattr(client, "_request_signer", None)
    return getattr(signer, "_credentials", None)


class Keys:
    """``Remote.keys``: (region, access key, secret key, session token or
    None) of the boto3 credentials ``creds_of()``, read at each call
    (``get_frozen_credentials``: boto3 renews refreshable ones there when
    due). ``refreshed``: they change over time. ``creds``: the credentials
    ``creds_of()`` gave when the keys were made, if known, for ``==``.
    Its repr names no key."""

    def __init__(
        self,
        creds_of: Callable[[], Any],
        region: str,
        refreshed: bool,
        creds: Any = None,
    ) -> None:
        self._creds_of = creds_of
        self._creds = creds
        self.region = region
        self.refreshed = refreshed

    def __call__(self) -> tuple[str, str, str, Optional[str]]:
        frozen = self._creds_of().get_frozen_credentials()
        return self.region, frozen.access_key, frozen.secret_key, frozen.token

    def __eq__(self, other: object) -> bool:
        """The same region and credentials (a composition of datasets is
        signed with one set of keys): the same provider, the same
        credentials object, or long-term keys of equal values. Nothing is
        read from a provider (which may renew credentials, or be slow)."""
        return (
            isinstance(other, Keys)
            and other.region == self.region
            and (
                other._creds_of == self._creds_of
                or _same_credentials(other._creds, self._creds)
            )
        )

    def __hash__(self) -> int:
        return hash(self.region)

    def __repr__(self) -> str:
        return f"<S3 signing keys for {self.region}>"


def _same_credentials(a: Any, b: Any) -> bool:
    """Whether boto3 credentials ``a`` and ``b`` are the same, known
    without renewing either: one object, or both long-term keys (botocore's
    plain ``Credentials``, whose fields are values, not properties that
    refresh) of equal values."""
    if a is None or b is None:
        return False
    if a is b:
        return True
    from botocore.credentials import Credentials

    return (
        type(a) is Credentials
        and type(b) is Credentials
        and (a.access_key, a.secret_key, a.token)
        == (b.access_key, b.secret_key, b.token)
    )


class Urls:
    """``Remote.urls``: ``fetch(names, signed)`` at each call (plain URLs
    when ``signed``: the C source signs them)."""

    def __init__(self, fetch: Callable, names: Sequence[str], signed: bool) -> None:
        self._fetch = fetch
        self._names = names
        self._signed = signed

    def __call__(self) -> Sequence[str]:
        return self._fetch(self._names, self._signed)

    def __repr__(self) -> str:
        return f"<fetch URLs of {len(self._names)} objects>"


def long_term(creds: Any) -> bool:
    """Whether boto3 credentials are long-term access keys: not refreshed
    by boto3 and without a session token."""
    from botocore.credentials import RefreshableCredentials

    return (
        not isinstance(creds, RefreshableCredentials)
        and creds.get_frozen_credentials().token is None
    )


def presigned(
    names: Sequence[str],
    s3: Callable[[], Any],
    is_long_term: Callable[[], bool],
    progress: bool = True,
) -> list[str]:
    """The fetch URL of each object: HTTP(S) URLs as they are, S3 objects
    presigned for GET by the boto3 client ``s3()`` (for 7 days when
    ``is_long_term()``, else an hour). On the main thread, many S3 objects
    show a bar, unless ``progress`` is False (the dataset's setting)."""
    out = []
    client = None
    # Off the main thread, the GIL is handed back after each URL (0.13 ms
    # of Python) instead of after the 5 ms switch interval: a training step
    # whose backward pass releases the GIL otherwise waits for it at every
    # op (benchmarks/remote/refresh_step.py).
    main = threading.current_thread() is threading.main_thread()
    bar = _presign_bar(names) if main and progress else None
    try:
        for name in names:
            if not name.startswith("s3://"):
                out.append(name)
                continue
            if client is None:
                client = s3()
                expires = LONG_TERM_EXPIRES_S if is_long_term() else PRESIGN_EXPIRES_S
            bucket, key = split_s3(name)
            out.append(
                client.generate_presigned_url(
                    "get_object",
                    Params={"Bucket": bucket, "Key": key},
                    ExpiresIn=expires,
                )
            )
            if bar is not None:
                bar.update(1)
            if not main:
                time.sleep(0)
    finally:
        if bar is not None:
            bar.close()
    return out


def _presign_bar(names: Sequence[str]) -> Any:
    """A tqdm bar over the S3 objects to presign, when there are many (on
    the main thread only: a refresh in the background draws none), drawn
    by the first rank of a distributed job only."""
    n = sum(1 for name in names if name.startswith("s3://"))
    if n < PRESIGN_BAR:
        return None
    return progress_bar(n, unit="URL", unit_scale=True, desc="presigning S3 URLs")
