"""Parquet files on HTTP(S) servers and in S3, read through the datasets'
remote client (:mod:`.remote`): a seekable file object whose reads are
range GETs, which pyarrow's Parquet reader takes as it takes a local file.
pyarrow asks for the footer, then for each row group's column chunks, one
range each: only the columns read cross the network."""

from __future__ import annotations

import io
from typing import Any, Optional

from .remote import Client
from .urls import has_magic, redact

__all__ = ["RemoteFile", "expand_url"]


class RemoteFile(io.RawIOBase):
    """An object read by range GETs, as a read-only seekable file: the
    version ``version`` (its size and validator, ETag) or, without one, the
    version a HEAD finds when it is made. Every GET carries the validator
    (If-Match), so a replaced object fails ("the object changed") rather
    than mixes two versions. ``failure``: the client's error of the last
    fetch that failed, None if none did."""

    def __init__(
        self, client: Client, name: str, version: Optional[tuple[int, str]] = None
    ) -> None:
        super().__init__()
        self.client, self.name = client, name
        self.size, self.validator = version or client.head(name)
        self._pos = 0
        # The last fetch that failed (pyarrow passes its error on as its
        # own): what the caller reports, naming the object.
        self.failure: Optional[OSError] = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}
        pos = base[whence] + offset
        if pos < 0:
            raise OSError(f"{redact(self.name)}: seek to {pos}, before the start")
        self._pos = pos
        return pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        end = min(self._pos + len(view), self.size)
        if end <= self._pos:
            return 0
        try:
            data = self.client.get(self.name, self._pos, end, self.validator)
        except OSError as e:
            self.failure = e
            raise
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def expand_url(spec: str, client: Client) -> list[str]:
    """The objects a URL names: itself, or for an ``s3://`` glob those it
    matches (an HTTP server cannot be listed: a ValueError says so)."""
    if has_magic(spec):
        return client.list_glob(spec)
    return [spec]
