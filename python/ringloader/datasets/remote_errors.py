"""What a failure of an HTTP(S) server or of S3 means to the user: an
OSError naming the object and what to do (FileNotFoundError for 404,
PermissionError for 401/403, ConnectionError for refused or unreachable,
TimeoutError for no progress), from an HTTP status, an S3 error code, a
urllib3 or botocore failure; and the redirects that are refused."""

from __future__ import annotations

import http.client
from typing import Any
from urllib.parse import urljoin, urlsplit

from .urls import redact

__all__ = [
    "http_failure",
    "http_guarded",
    "redirect_target",
    "s3_guarded",
    "status_error",
]


def redirect_target(name: str, url: str, location: str, status: int) -> str:
    """The URL a redirect from ``url`` to ``location`` goes to; raises
    OSError naming ``name`` when it is refused: a scheme other than
    http/https, or from https down to http."""
    target = urljoin(url, location)
    scheme = urlsplit(target).scheme.lower()
    if scheme == "http" and urlsplit(url).scheme.lower() == "https":
        why = "a redirect from https:// to http:// would send the request unencrypted"
    elif scheme not in ("http", "https"):
        why = "redirects are followed to http:// and https:// only"
    else:
        return target
    raise OSError(
        f"{name}: redirected to {redact(target)} (HTTP {status}): refused, {why}"
    )


def http_guarded(name: str, read: Any) -> bytes:
    """``read()``, urllib3's errors turned into OSErrors naming ``name``."""
    import urllib3

    try:
        return read()
    except urllib3.exceptions.HTTPError as e:
        raise http_failure(name, e) from None


def s3_guarded(name: str, call: Any) -> Any:
    """``call()``, botocore's errors turned into OSErrors naming ``name``."""
    from botocore import exceptions as bx

    try:
        return call()
    except bx.ClientError as e:
        err = e.response.get("Error", {})
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = str(err.get("Code", status))
        if code in ("404", "NoSuchKey", "NoSuchBucket"):
            status = 404
        if code in ("PreconditionFailed", "412"):
            status = 412
        raise status_error(name, int(status or 0), code) from None
    except (bx.ConnectTimeoutError, bx.ReadTimeoutError) as e:
        raise TimeoutError(f"{name}: no answer in time ({e})") from None
    except (bx.EndpointConnectionError, bx.ConnectionError) as e:
        raise ConnectionError(
            f"{name}: cannot reach S3 ({e}): is the endpoint right "
            "(AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL) and reachable?"
        ) from None
    except bx.NoCredentialsError as e:
        raise PermissionError(f"{name}: {e}") from None
    except bx.BotoCoreError as e:  # streaming errors, among others
        raise ConnectionError(f"{name}: {e}") from None


def status_error(name: str, status: int, reason: str) -> OSError:
    """The OSError for an HTTP status (or S3 error code) of ``name``."""
    if not reason or reason == str(status):
        reason = http.client.responses.get(status, "")
    if status == 404:
        return FileNotFoundError(f"{name}: no such object (404 {reason})")
    if status in (401, 403):
        hint = (
            "check the AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...) "
            "and the bucket's permissions"
            if name.startswith("s3://")
            else "check the server's access rules"
        )
        return PermissionError(f"{name}: access denied ({status} {reason}): {hint}")
    if status == 412:
        return OSError(f"{name}: the object changed while it was read; try again")
    if status == 416:
        return OSError(f"{name}: byte range not satisfiable (the object is shorter)")
    return OSError(f"{name}: {status} {reason}".rstrip())


def http_failure(name: str, e: Exception) -> OSError:
    """The OSError for a urllib3 failure (after its retries) on ``name``."""
    import urllib3.exceptions as ux

    reason = getattr(e, "reason", None) or e
    # NewConnectionError subclasses ConnectTimeoutError: it goes first.
    if isinstance(reason, ux.NewConnectionError):
        host = urlsplit(name).netloc
        return ConnectionError(
            f"{name}: cannot connect to {host}: is the server running and "
            f"reachable? ({_plain(reason)})"
        )
    if isinstance(reason, (ux.TimeoutError, TimeoutError)):
        return TimeoutError(f"{name}: no progress in time ({_plain(reason)})")
    if isinstance(reason, ux.SSLError):
        return ConnectionError(
            f"{name}: TLS failed ({_plain(reason)}): the CA bundle comes from "
            "SSL_CERT_FILE, REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE"
        )
    if isinstance(e, ux.MaxRetryError) and isinstance(reason, ux.ResponseError):
        return OSError(f"{name}: the server kept failing ({_plain(reason)})")
    return ConnectionError(f"{name}: {_plain(reason)}")


def _plain(e: Any) -> str:
    """An exception's text without the object's identity urllib3 adds."""
    text = str(e)
    if text.startswith("<") and ">: " in text:
        text = text.split(">: ", 1)[1]
    return text
