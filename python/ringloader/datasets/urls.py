"""The names of remote objects (http://, https://, s3:// URLs) as the
datasets handle them: which specs are URLs, a URL with its signing
parameters redacted for messages, the index file beside a shard, the last
part of a name, and whether a name holds glob wildcards."""

from __future__ import annotations

import glob
import posixpath
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .presign import split_s3 as _s3_split

__all__ = ["has_magic", "is_url", "local_name", "redact", "sidecar_url"]

SCHEMES = ("http", "https", "s3")
_SECRET_PARAMS = ("signature", "sig", "token", "credential", "policy", "key-pair-id")


def is_url(spec: str) -> bool:
    """Whether ``spec`` is a URL ringloader reads remotely (http, https, s3)."""
    return urlsplit(spec).scheme.lower() in SCHEMES


def redact(url: str) -> str:
    """``url`` with the values of signing parameters (``X-Amz-Signature``,
    ``X-Amz-Credential``, ``X-Amz-Security-Token``, ``Signature``, ...)
    replaced, for messages."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    query = [
        (k, "REDACTED" if any(s in k.lower() for s in _SECRET_PARAMS) else v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(parts._replace(query=urlencode(query, safe="/")))


def sidecar_url(name: str) -> str:
    """The URL of the index file beside a shard: its path plus ``.idx.npz``
    (before any query string)."""
    parts = urlsplit(name)
    return urlunsplit(parts._replace(path=parts.path + ".idx.npz"))


def local_name(name: str) -> str:
    """The last part of an object's path (for cache file labels)."""
    return posixpath.basename(urlsplit(name).path) or "object"


def has_magic(name: str) -> bool:
    """Whether a URL holds glob wildcards: in an S3 key (where ``?`` is
    one), in an HTTP URL's path (where ``?`` starts the query)."""
    if name.startswith("s3://"):
        return glob.has_magic(_s3_split(name)[1])
    return glob.has_magic(urlsplit(name).path)
