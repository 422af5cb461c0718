"""Presigned S3 URLs: how long they live, when they are made again, and
making many of them (boto3 signs; nothing is signed by hand here).

The C source fetches an S3 object by a presigned GET URL. boto3 makes one
in about 0.13 ms of Python, so a refresh of many objects (a FileList of a
million images) takes minutes: the loader makes them again on a thread of
its own (``_pipeline.py``), which hands the GIL back after each URL here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, Callable
from urllib.parse import urlsplit

from .progress import bar as progress_bar

__all__ = ["long_term", "presigned", "split_s3"]

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


def split_s3(name: str) -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``; the key is taken literally
    (S3 keys may hold ``?`` and ``#``)."""
    parts = urlsplit(name, allow_fragments=False)
    key = parts.path.lstrip("/")
    if parts.query:
        key += "?" + parts.query
    if not parts.netloc or not key:
        raise ValueError(f"{name}: an S3 URL is s3://bucket/key")
    return parts.netloc, key


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
