"""The objects of the remote datasets under a composition (a Subset,
ConcatDataset or Mix), as one table: their names one blob, each sample's
object one int64, their fetch URLs one blob or made from the names.

Nothing here is a Python object per object or per sample. A dataset's
objects are its ``Remote.names`` (a FileList's: its paths' own blob) and
each of its samples' object: ``Remote.objects``, or sample j's object j
(names that are the paths), or a shard set's shard of each sample. The
parts' names are joined into one blob (:func:`.cache.join_blobs`), each
part's ids moved by where its names begin; an object two parts name is
found in C (``_core.object_ids`` over the joined names) and fetched by
the first part's URL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

from .. import _core
from .base import Sources
from .cache import StringBlob, join_blobs
from .presign import FromNames

__all__ = ["Objects", "objects_of"]


class Objects:
    """The remote objects of a composition's samples: ``names`` (a blob,
    each once), ``objects`` (int64, each sample's place in ``names``),
    ``paths`` (each sample's name, read from the two) and ``urls`` (the
    callable of ``Remote.urls``)."""

    def __init__(
        self, names: StringBlob, objects: np.ndarray, urls: Callable[[], Any]
    ) -> None:
        self.names = names
        self.objects = objects
        self.urls = urls
        self.paths = _ObjectPaths(names, objects)


class _ObjectPaths(Sequence):
    """Each sample's object name, ``names[objects[i]]``, made when read."""

    def __init__(self, names: StringBlob, objects: np.ndarray) -> None:
        self._names = names
        self._objects = objects

    def __len__(self) -> int:
        return len(self._objects)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._names[j] for j in self._objects[index]]
        return self._names[int(self._objects[index])]

    def __repr__(self) -> str:
        return f"<object names of {len(self._objects)} samples>"


def _own(src: Sources) -> tuple[StringBlob, Optional[np.ndarray]]:
    """A remote dataset's objects' names as a blob and each sample's
    object (None: sample j is object j). Raises ValueError naming a
    sample whose name is not among the objects'."""
    remote = src.remote
    assert remote is not None
    names = remote.names
    blob = names if isinstance(names, StringBlob) else StringBlob.from_strings(names)
    if remote.objects is not None:
        return blob, np.asarray(remote.objects, dtype=np.int64)
    if names is src.paths:
        return blob, None
    starts = getattr(src.paths, "starts", None)
    if starts is not None and list(names) == list(src.paths.shards):  # type: ignore[attr-defined]
        return blob, np.repeat(np.arange(len(blob), dtype=np.int64), np.diff(starts))
    # Samples named by their object: matched among the names in C.
    both = join_blobs([blob, StringBlob.of_paths(src.paths)])
    ids = _core.object_ids(both.blob, both.offsets)
    n = len(blob)
    if ids is None:
        got = np.arange(n, len(both), dtype=np.int64)
    else:
        got = np.frombuffer(ids, dtype=np.int64)[n:]
    bad = np.flatnonzero(got >= n)
    if len(bad):
        i = int(bad[0])
        raise ValueError(
            f"sample {i}: {src.paths[i]!r} is not among the remote dataset's objects"
        )
    return blob, got


def objects_of(
    srcs: list[Sources], which: np.ndarray, part: np.ndarray, index: np.ndarray
) -> Objects:
    """The objects of a composition's samples: sample i is sample
    ``index[i]`` of dataset ``srcs[which[part[i]]]`` (``srcs``: each
    dataset once, all remote)."""
    own = [_own(s) for s in srcs]
    ids = np.empty(len(part), dtype=np.int64)
    begins = np.cumsum([0] + [len(names) for names, _ in own])
    for k, (_, local) in enumerate(own):
        sel = np.flatnonzero(which[part] == k)
        at = index[sel] if local is None else local[index[sel]]
        ids[sel] = at + begins[k]
    urls = [s.remote.urls for s in srcs]  # type: ignore[union-attr]
    if len(own) == 1:
        return Objects(own[0][0], ids, urls[0])
    names = join_blobs([names for names, _ in own])
    first = None
    same = _core.object_ids(names.blob, names.offsets)
    if same is not None:
        # An object of two parts: the first part's, numbered in order of
        # first use (a name is its object's first where the largest id
        # so far grows).
        to = np.frombuffer(same, dtype=np.int64)
        first = np.flatnonzero(np.diff(np.maximum.accumulate(to), prepend=-1) > 0)
        names, ids = names.take(first), to[ids]
    return Objects(names, ids, _MergedUrls(urls, names, first))


class _MergedUrls:
    """The fetch URLs of the objects of several remote datasets: the
    parts' ``urls()`` joined (the first part naming an object gives its
    URL). Plain URLs made from the names stay so (their buckets' bases
    together); others are joined as one blob."""

    def __init__(
        self, parts: list, names: StringBlob, first: Optional[np.ndarray]
    ) -> None:
        self._parts = parts
        self._names = names
        self._first = first

    def __call__(self) -> Sequence[str]:
        got = [urls() for urls in self._parts]
        if all(isinstance(u, FromNames) for u in got):
            bases: dict[str, str] = {}
            for u in got:
                for bucket, base in u.bases.items():
                    bases.setdefault(bucket, base)
            # One base a bucket (else each part's URLs, made here).
            if all(bases[b] == base for u in got for b, base in u.bases.items()):
                return FromNames(self._names, bases)
        # Presigned URLs are one str an object already (boto3 makes them so).
        blobs = [
            u if isinstance(u, StringBlob) else StringBlob.from_strings(u) for u in got
        ]
        joined = join_blobs(blobs)
        return joined if self._first is None else joined.take(self._first)

    def __repr__(self) -> str:
        return f"<fetch URLs of {len(self._names)} objects>"
