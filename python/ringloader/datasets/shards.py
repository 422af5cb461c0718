"""WebDataset-style tar shards read in place, as random-access byte ranges.

A shard is a plain POSIX tar file (ustar, GNU or pax; not compressed) whose
members are grouped into samples as WebDataset groups them: consecutive
members of one key, ``dir/abc.jpg`` then ``dir/abc.cls``, form the sample
``dir/abc``; a key met again after another is a new sample (see
:mod:`.tarindex` for the rules). Nothing is
unpacked or converted: the loader reads each sample's image member straight
out of the shard with one ranged read, from a local file or, for shards
given by ``http(s)://`` or ``s3://`` URL, with a ranged GET (:mod:`.remote`).

On first use each shard gets an index (:mod:`.tarindex`): every member's
name, byte range and sample, kept in a small ``.npz`` file next to the shard
or in the cache directory, so later uses read no tar header at all, and a
truncated or corrupt shard fails when indexed, naming the shard and the
member, rather than in the middle of an epoch.

The set opens in O(shards) time and memory: each shard also gets a
record file (24 bytes a sample: image offset, length, label; with
``fields``, version 2: the sample's widened range, the image's place in
it and each field's), the set a manifest in the cache directory
(:mod:`.manifest`); opening reads the manifest, stats every shard (a
HEAD request for a remote one), indexes again only the shards that
changed, and builds no per-sample array: ``offsets``, ``lengths``,
``targets`` and the fields' places read the record files on demand. A
``label_key`` function is the exception in time: it is called on every
sample's key at open, its integer labels written to record files of
that open's own.
"""

from __future__ import annotations

import bisect
import collections
import glob
import logging
import os
import re
import shutil
import socket
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from .base import ImageDataset, PathLike, Sources
from .cache import StringBlob, default_cache_dir, load_npz
from .folder import IMAGE_KEYS
from .fields import (
    MAX_FIELD_BYTES,
    FieldTable,
    kind_of,
    parse_fields,
    refusal_messages,
)
from .manifest import Manifest, RecordColumn, RecordStore, manifest_path
from .progress import bar as progress_bar
from .remote import Client
from .targets import as_targets, item
from .tarindex import (
    RECORD,
    Selection,
    ShardError,
    key_of,
    map_records,
    records_bytes,
    remote_shard_index,
    remote_shard_records,
    select_samples,
    shard_index,
    shard_records,
    write_records,
)
from .urls import has_magic, is_url, redact

__all__ = ["IMAGE_KEYS", "ShardError", "TarShards"]

log = logging.getLogger("ringloader")

# Remote shards indexed at once (each waits on the network).
_INDEX_THREADS = 8
# With cache_limit: the most bytes of neighbouring members one ranged GET
# brings into the cache (object stores are fastest at 8-16 MiB ranges).
CACHE_BLOCK_BYTES = 8 << 20


def _expand_braces(pattern: str) -> list[str]:
    """WebDataset brace notation: ``a-{000..009}.tar`` (zero padding kept)
    and ``{train,val}.tar``, expanded left to right."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    head, tail, body = pattern[: m.start()], pattern[m.end() :], m.group(1)
    rng = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if rng is not None:
        lo, hi = rng.group(1), rng.group(2)
        width = len(lo) if lo.startswith("0") else 0
        items = [f"{i:0{width}d}" for i in range(int(lo), int(hi) + 1)]
    else:
        items = body.split(",")
    return [p for item in items for p in _expand_braces(head + item + tail)]


def _specs(urls_or_glob: PathLike | Iterable[PathLike]) -> list[str]:
    if isinstance(urls_or_glob, (str, os.PathLike)):
        return [os.fspath(urls_or_glob)]
    return [os.fspath(u) for u in urls_or_glob]


def _shard_paths(urls_or_glob: PathLike | Iterable[PathLike]) -> list[str]:
    """Local shard paths, in order: a path, a glob (sorted), WebDataset
    brace notation, ``file://`` URLs, or a list of any of these."""
    paths: list[str] = []
    for spec in _specs(urls_or_glob):
        if spec.startswith("file://"):
            spec = spec[len("file://") :]
        elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", spec):
            raise ValueError(
                f"{redact(spec)}: only local tar files and http://, https:// "
                "and s3:// URLs can be read by byte range (copy or mount "
                "other shards first)"
            )
        for pattern in _expand_braces(os.path.expanduser(spec)):
            if glob.has_magic(pattern):
                matches = sorted(glob.glob(pattern))
                if not matches:
                    raise FileNotFoundError(f"no shard matches {pattern!r}")
                paths.extend(matches)
            else:
                if not os.path.isfile(pattern):
                    raise FileNotFoundError(f"no such shard: {pattern!r}")
                paths.append(pattern)
    if not paths:
        raise FileNotFoundError(f"no shard in {urls_or_glob!r}")
    return paths


def _shown(urls_or_glob: PathLike | Iterable[PathLike]) -> str:
    """The shards as the user named them, for messages (URLs redacted)."""
    specs = [redact(s) for s in _specs(urls_or_glob)]
    return repr(specs[0]) if len(specs) == 1 else repr(specs)


def _shard_urls(specs: list[str], client: Client) -> list[str]:
    """Remote shard URLs, in order: URLs, brace notation, ``s3://`` globs
    (the prefix listed, sorted). An HTTP server cannot be listed: an
    http(s) glob raises ValueError."""
    urls: list[str] = []
    for spec in specs:
        for url in _expand_braces(spec):
            if not has_magic(url):
                urls.append(url)
            elif url.startswith("s3://"):
                urls.extend(client.list_glob(url))
            else:
                raise ValueError(
                    f"{redact(url)}: an HTTP server cannot be listed; name "
                    "the shards with braces (train-{0000..1023}.tar) or a list"
                )
    return urls


class TarShards(ImageDataset):
    """Samples stored in WebDataset tar shards, for :class:`ringloader.Loader`.

    Args:
        urls_or_glob: a shard path, a glob (``"data/train-*.tar"``, sorted),
            WebDataset brace notation (``"train-{000000..000146}.tar"``), a
            ``file://`` URL, or a list of these. Shards are plain,
            uncompressed tar files on a local or mounted file system.
        image_key: extensions that hold the image, in order of preference
            (a tuple, or ``"jpg;png"``); a sample with none is skipped.
            Extensions are what follows the first dot of the member's base
            name, lowercased (``abc.seg.png`` has ``seg.png``).
        label_key: the extension of the member holding the integer label
            (``"cls"``), a function from the sample key (``"dir/abc"``) to
            its target (an int, or any kind: a float, an array row, a
            tuple; batched as torch's ``default_collate`` batches them), or
            None (labels are -1).
        cache_dir: where indexes go when a shard's folder is not writable,
            and those of remote shards.
        transform, target_transform: as ImageFolder's; the loader uses
            ``transform`` when it is given none.
        progress: show a bar while indexing many shards, and while
            presigning many ``s3://`` URLs (when tqdm is installed; on the
            first rank of a distributed job only).
        retries: remote shards: attempts after the first for a failed
            request (5xx, 429, connection errors, timeouts).
        timeout: remote shards: seconds without progress before an
            attempt is abandoned and retried.
        s3_client: a boto3 S3 client for ``s3://`` shards (its
            credentials, endpoint and region); None: one made from the
            standard configuration (credential chain, ``AWS_ENDPOINT_URL``,
            ``AWS_REGION``...), anonymous when there are no credentials.
        cache_limit: remote shards: keep up to this many bytes of the
            members fetched on local disk (under the cache directory, for
            the loader's life), so that later epochs read them from there;
            past the limit the shards used least recently are dropped.
            While the cache has room, a member is fetched together with
            its neighbours in the shard, up to 8 MiB in one ranged GET, so
            that a data set the cache can hold comes down in a few large
            GETs rather than one per member. None (the default): no such
            cache.
        fields: the members of each sample to yield, as WebDataset's
            ``to_tuple`` names them (``("jpg;png;webp", "txt", "json")``):
            the loader then yields tuples in that order. One field is the
            image (decoded in C, as without fields); the others are read
            in the same read or range GET and decoded by extension (text
            -> str, json -> object, cls/index/id -> int, npy -> tensor,
            other -> bytes) and batched as WebDataset's ``batched()``
            (ints into a tensor, tensors stacked, others a list). See
            :mod:`ringloader.datasets.fields`. At most 16 fields beside
            the image (ValueError). None: ``(image, label)``.
        field_transforms: ``{field: callable}`` run once per batch on the
            field's batched column (a tokenizer taking a list of str).
        errors: how text that is not UTF-8 is decoded (``"strict"``: the
            sample fails, as a corrupt image does, naming the member, and
            ``on_error="skip"`` replaces it; ``"replace"``,
            ``"ignore"``...: as ``bytes.decode``). JSON is decoded as
            ``json.loads`` decodes bytes, whatever ``errors`` says.
        max_field_bytes: a field member larger than this fails its sample.

    Remote shards (``http://``, ``https://``, ``s3://`` URLs, brace
    notation, ``s3://`` globs; an HTTP server cannot be listed) are read by
    ranged GETs. Each is indexed once, from its sidecar
    ``<url>.idx.npz`` when one records its size, else by streaming it
    once (a few shards at a time); the index is cached in ``cache_dir``
    with the shard's size and ETag. Local and remote shards cannot be
    mixed in one dataset.

    Samples come shard by shard, each in the order its key first appears
    in the shard. Attributes: ``shards`` (paths or URLs), ``starts`` (the
    first sample of each shard, and the total), ``targets`` (int64, or
    what ``label_key``'s function gives, as an array),
    ``offsets`` and ``lengths`` (the image member's byte range).

    Opening costs O(shards): the set's manifest is read and every shard
    stat'ed; only shards that changed are indexed again (see
    :mod:`.manifest`). ``offsets``, ``lengths`` and ``targets`` are then
    read-only int64 views over the shards' record files (``len``,
    integer, slice, list and integer or boolean array indexing as an
    ndarray's; ``np.asarray`` reads the whole column), not arrays in
    memory; with ``fields`` the fields' places are read from the same
    records (version 2, one a sample), a batch's when it is decoded. A
    record file made for another selection (other fields, another
    ``max_field_bytes``) is never read as this one's: it is made again.

    A ``label_key`` function costs a call per sample at open (each
    shard's member index is read for the keys; a few seconds a million
    samples in Python), and disk, not memory: its integer labels go to
    record files made for this open only (a temporary folder in the
    cache directory, removed when the set is collected or the process
    exits; they are not reused by later opens, as a function cannot be
    told apart reliably). Labels of another kind (floats, rows, tuples)
    are kept as arrays in memory.

    With ``fields`` (or a ``label_key`` of a member that is not an integer:
    ``"json"``, ``"npy"``, read as the field after the image, float or
    vector targets with ``target_transform`` on each), ``targets`` are -1,
    ``offsets`` and ``lengths`` the range read (from the sample's first
    member asked for to the end of its last), ``image_offsets`` and
    ``image_lengths`` the image member's, and ``field_table`` says where
    each field lies (:mod:`.fields`), read from the records.
    """

    def __init__(
        self,
        urls_or_glob: PathLike | Iterable[PathLike],
        image_key: str | Sequence[str] = IMAGE_KEYS,
        label_key: str | Callable[[str], int] | None = "cls",
        cache_dir: PathLike | None = None,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        progress: bool = True,
        *,
        retries: int = 5,
        timeout: float = 30.0,
        s3_client: Any = None,
        cache_limit: int | None = None,
        fields: Sequence[str] | None = None,
        field_transforms: dict[str, Callable] | None = None,
        errors: str = "strict",
        max_field_bytes: int = MAX_FIELD_BYTES,
    ) -> None:
        if cache_limit is not None and int(cache_limit) <= 0:
            raise ValueError(
                f"cache_limit must be a positive byte count, not {cache_limit!r}"
            )
        self.cache_limit = None if cache_limit is None else int(cache_limit)
        if isinstance(image_key, str):
            image_key = image_key.split(";")
        self.image_key = tuple(k.lower().lstrip(".") for k in image_key)
        self.label_key = label_key
        self.errors = errors
        self.max_field_bytes = int(max_field_bytes)
        self.field_transforms = dict(field_transforms or {})
        self.fields: tuple[str, ...] | None = None
        label_field = isinstance(label_key, str) and kind_of(label_key.lower()) != "int"
        if fields is not None:
            self.fields = tuple(fields)
        elif label_field:
            assert isinstance(label_key, str)
            self.fields = (";".join(self.image_key), label_key)
        image_field, alts = 0, []
        if self.fields is not None:
            image_field, alts = parse_fields(self.fields, IMAGE_KEYS)
            self.image_key = alts[image_field]
        self.cache_dir = cache_dir
        self.transform = transform
        self.target_transform = target_transform
        specs = _specs(urls_or_glob)
        remote = [is_url(u) for u in specs]
        self.client: Client | None = None
        if any(remote):
            if not all(remote):
                raise ValueError(
                    "local shards and remote (http, https, s3) shards cannot "
                    "be mixed in one TarShards; make two and concatenate them"
                )
            self.client = Client(
                retries=retries,
                timeout=timeout,
                s3_client=s3_client,
                progress=progress,
            )
            self.shards = _shard_urls(specs, self.client)
        else:
            self.shards = _shard_paths(urls_or_glob)
        self.index_files: list[str] = []

        by_ext = label_key.lower().lstrip(".") if isinstance(label_key, str) else None
        if self.fields is not None:
            by_ext = None  # labels are a field, or not asked for
        self.image_offsets: Any
        self.image_lengths: Any
        self.field_table: FieldTable | None = None
        self._records: RecordStore | None = None
        sel = Selection(self.image_key, by_ext)
        if self.fields is not None:
            sel = Selection(
                self.image_key,
                None,
                self.fields,
                image_field,
                alts,
                self.max_field_bytes,
            )
        self._open_records(sel, progress)
        if self.starts[-1] == 0:
            raise ValueError(_no_sample(self.shards, urls_or_glob, self.image_key))
        self.paths = _ShardPaths(self.shards, self.starts)
        if callable(label_key):
            self.targets = self._call_labels(label_key, progress)
        if self.fields is not None:
            assert self._records is not None
            per_sample = {}
            if target_transform is not None and label_key in self.fields:
                per_sample[self.fields.index(label_key)] = target_transform
            self.field_table = FieldTable(
                self.fields,
                image_field,
                alts,
                self._records,
                refusal_messages(self.fields, image_field, alts, self.max_field_bytes),
                errors=errors,
                per_sample=per_sample,
                per_batch=self.field_transforms,
            )
            # The image member's range (offsets/lengths: the range read).
            self.image_offsets = RecordColumn(self._records, "image_offset")
            self.image_lengths = self.field_table.image_len

    def _call_labels(self, label_key: Callable[[str], Any], progress: bool) -> Any:
        """The targets ``label_key`` gives each sample's key, called shard
        by shard in sample order. Integer labels are written to record
        files of their own, made for this open only (a temporary folder
        in the cache directory, removed when nothing reads the labels any
        more, or at exit; one left by a process that was killed is removed
        by the next open on the same machine): the targets are then a lazy
        column over them, nothing per sample kept. Targets of another kind
        (floats, rows, tuples), or integer ones when the cache directory
        cannot be written, are kept as arrays (:func:`.targets.as_targets`)."""
        try:
            folder: _LabelFolder | None = _LabelFolder.make(
                default_cache_dir(self.cache_dir)
            )
        except OSError as e:
            log.debug("ringloader: label_key's labels kept in memory (%s)", e)
            folder = None
        # A tag no other open shares: these files are this open's alone.
        tag = b"labels\n" + os.urandom(8).hex().encode() + b"\n"
        files: list[str] = []
        values: list[Any] | None = None  # once the labels are kept in memory
        indexes = self._indexes(progress)
        try:
            for s, (z, _) in enumerate(indexes):
                images, _ = select_samples(self.shards[s], z, self.image_key, None)
                names = StringBlob(z["names_blob"], z["names_offsets"])
                got = [label_key(key_of(names[int(i)])) for i in images]
                if values is None and folder is not None:
                    path = os.path.join(folder.path, f"{s}.rec")
                    if _write_labels(path, tag, got):
                        files.append(path)
                        continue
                if values is None:  # earlier shards' ints, read back
                    values = []
                    for f in files:
                        values.extend(map_records(f, 0, 0, tag)["label"].tolist())
                values.extend(got)
        finally:
            indexes.close()
        if values is not None or folder is None:
            if folder is not None:
                folder.remove()
            return as_targets(values or [], len(self), "label_key")
        made = _LabelFiles(self.shards, files, tag, folder)
        store = RecordStore(self.shards, self.starts, files, made.expect, made.gone)
        return RecordColumn(store, "label")

    def _open_records(self, sel: Selection, progress: bool) -> None:
        """Open the shard set from its manifest and the shards' record
        files (:mod:`.manifest`): each shard's metadata compared with the
        manifest's, only the shards that changed (or all, without a
        manifest) indexed again; ``offsets``, ``lengths`` and ``targets``
        read records on demand."""
        remote = self.client is not None
        tag = sel.tag
        names = self.shards if remote else [os.path.abspath(p) for p in self.shards]
        where = manifest_path(names, tag, self.cache_dir)
        old = Manifest.load(where, names, tag)
        counts: dict[int, int] = {}  # the counts record files found must give
        sizes, mtimes, etags = self._metadata()
        n = len(self.shards)
        if old is None:
            todo = np.arange(n)
        else:
            same = (old.sizes == sizes) & (old.mtimes == mtimes)
            if remote:
                same &= np.array([a == b for a, b in zip(old.etags, etags)], bool)
            # A record file gone or not of its size since (a stat each; the
            # C reader would refuse it at every read): made again, and one
            # found must then hold the manifest's count, else it is derived
            # from the shard's index anew (which settles which was wrong).
            for k in np.nonzero(same)[0].tolist():
                want = records_bytes(
                    tag + old.etags[k].encode(), int(old.counts[k]), sel.dtype
                )
                try:
                    same[k] = os.stat(old.records[k]).st_size == want
                except OSError:
                    same[k] = False
                if not same[k]:
                    counts[k] = int(old.counts[k])
            todo = np.nonzero(~same)[0]
        if len(todo) == 0 and old is not None:
            m = old
        else:
            m = Manifest(n)
            m.sizes, m.mtimes, m.etags = sizes, mtimes, etags
            if old is not None:
                m.counts = old.counts.copy()
                m.records, m.indexes = list(old.records), list(old.indexes)
            else:
                m.records, m.indexes = [""] * n, [""] * n
            assert isinstance(m.records, list) and isinstance(m.indexes, list)
            for s, (file, count, index) in zip(
                todo, self._records_of(todo, sel, m, progress, counts)
            ):
                m.records[s], m.counts[s], m.indexes[s] = file, count, index
            m.save(where, names, tag)
        self._manifest, self._manifest_file = m, where
        self._tag, self._label_ext = tag, sel.label_key
        self._selection = sel
        self.index_files = list(m.indexes)
        self.starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(m.counts, out=self.starts[1:])
        self._records = RecordStore(
            self.shards,
            self.starts,
            m.records,
            self._expect,
            self._rebuild,
            dtype=sel.dtype,
        )
        self.offsets = RecordColumn(self._records, "offset")
        self.lengths = RecordColumn(self._records, "length")
        self.targets = RecordColumn(self._records, "label")
        self.image_offsets, self.image_lengths = self.offsets, self.lengths

    def _expect(self, s: int) -> tuple[int, int, bytes]:
        """What shard s's record file must say: size, mtime, selection."""
        m = self._manifest
        return int(m.sizes[s]), int(m.mtimes[s]), self._tag + m.etags[s].encode()

    def _rebuild(self, s: int) -> str:
        """Shard s's record file written anew (its own was missing or did
        not match); ShardError when the shard changed since opening."""
        # The manifest may be what is wrong: the next open checks every
        # shard's record file again.
        _drop_file(self._manifest_file)
        m, path = self._manifest, self.shards[s]
        count = int(m.counts[s])
        if self.client is not None:
            meta = (int(m.sizes[s]), m.etags[s])
            return remote_shard_records(
                path,
                self.client,
                self.image_key,
                self._label_ext,
                self.cache_dir,
                meta,
                count,
                self._selection,
            )[0]
        st = os.stat(path)
        if (st.st_size, st.st_mtime_ns) != (int(m.sizes[s]), int(m.mtimes[s])):
            raise ShardError(
                f"{path}: the shard changed since the shard set was opened "
                "(size or mtime); open the shard set again"
            )
        return shard_records(
            path,
            self.image_key,
            self._label_ext,
            self.cache_dir,
            st,
            count,
            self._selection,
        )[0]

    def _metadata(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """(sizes, mtimes in ns, ETags) of the shards now: ``os.stat`` of
        each local shard (mtimes 0 and ETags "" for remote shards, whose
        metadata a HEAD request gives, a few at a time)."""
        n = len(self.shards)
        sizes, mtimes = np.zeros(n, np.int64), np.zeros(n, np.int64)
        if self.client is None:
            for s, path in enumerate(self.shards):
                st = os.stat(path)
                sizes[s], mtimes[s] = st.st_size, st.st_mtime_ns
            return sizes, mtimes, [""] * n
        with ThreadPoolExecutor(_INDEX_THREADS) as pool:
            heads = list(pool.map(self.client.head, self.shards))
        for s, (size, _) in enumerate(heads):
            sizes[s] = size
        return sizes, mtimes, [etag for _, etag in heads]

    def _records_of(
        self,
        todo: np.ndarray,
        sel: Selection,
        m: Manifest,
        progress: bool,
        counts: dict[int, int],
    ) -> Iterator[tuple[str, int, str]]:
        """(record file, count, index file) of the shards ``todo``, in
        order: local ones one by one, remote ones a few at a time. A record
        file found for a shard in ``counts`` must hold that many samples
        (else it is derived from the shard's index again)."""

        def one(s: int) -> tuple[str, int, str]:
            path, count = self.shards[s], counts.get(s)
            if self.client is None:
                return shard_records(
                    path, sel.image_key, sel.label_key, self.cache_dir, None, count, sel
                )
            meta = (int(m.sizes[s]), m.etags[s])
            return remote_shard_records(
                path,
                self.client,
                sel.image_key,
                sel.label_key,
                self.cache_dir,
                meta,
                count,
                sel,
            )

        yield from self._each(todo, one, progress)

    def _index_of(self, shard: int) -> tuple[dict[str, np.ndarray], str, bool]:
        path = self.shards[shard]
        if self.client is not None:
            return remote_shard_index(path, self.client, self.cache_dir)
        return shard_index(path, self.cache_dir)

    def _indexes(self, progress: bool) -> Iterator[tuple[dict, str]]:
        """(arrays, index file) of each shard, in order."""
        for z, file, _ in self._each(range(len(self.shards)), self._index_of, progress):
            yield z, file

    def _each(self, todo: Any, one: Callable[[int], Any], progress: bool) -> Iterator:
        """``one(s)`` for each shard s of ``todo``, in order. Local shards
        are indexed one by one; remote ones a few at a time (the network,
        not the CPU, is what they wait for)."""
        bar = self._progress_bar(len(todo)) if progress else None
        try:
            if self.client is None:
                for s in todo:
                    out = one(int(s))
                    if bar is not None:
                        bar.update(1)
                    yield out
                return
            with ThreadPoolExecutor(_INDEX_THREADS) as pool:

                def submit(s: int) -> Future:
                    future = pool.submit(one, int(s))
                    if bar is not None:
                        future.add_done_callback(lambda _: bar.update(1))
                    return future

                # A future keeps its result: each is dropped once used.
                pending = collections.deque(map(submit, todo))
                try:
                    while pending:
                        yield pending.popleft().result()
                finally:
                    for future in pending:
                        future.cancel()
        finally:
            if bar is not None:
                bar.close()

    def _progress_bar(self, n: int) -> Any:
        """A tqdm bar over the shards still to index, when there are many
        of them (indexing reads every tar header once)."""
        if n < 16:
            return None
        return progress_bar(
            n,
            unit="shard",
            desc="indexing shards",
            leave=False,
            delay=2.0,
        )

    def ringloader_shards(self) -> np.ndarray:
        """The first sample of each shard, then the number of samples
        (int64): what ``shuffle="stream"`` reads shard by shard."""
        return self.starts

    def shard_of(self, index: int) -> int:
        """The position in ``shards`` of the shard holding sample ``index``."""
        return int(np.searchsorted(self.starts, index, side="right")) - 1

    def key(self, index: int) -> str:
        """The WebDataset key (``"dir/abc"``) of sample ``index``, looked up
        in its shard's index."""
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {n} samples")
        s = self.shard_of(index)
        z = load_npz(self.index_files[s]) if self.index_files[s] else None
        if z is None:
            z = self._index_of(s)[0]
        member = int(np.searchsorted(z["offsets"], self.offsets[index]))
        return key_of(StringBlob(z["names_blob"], z["names_offsets"])[member])

    def describe(self, index: int) -> str:
        """Where sample ``index`` is, for error messages:
        ``shard.tar[key] (bytes start..end)``."""
        off, length = int(self.offsets[index]), int(self.lengths[index])
        return f"{self.paths[index]}[{self.key(index)}] (bytes {off}..{off + length})"

    def read(self, index: int) -> bytes:
        """The bytes of sample ``index``'s image member."""
        return self._read(
            index, int(self.image_offsets[index]), int(self.image_lengths[index])
        )

    def _read(self, index: int, off: int, length: int) -> bytes:
        path = self.paths[index]
        if self.client is not None:
            return self.client.get(path, off, off + length)
        with open(path, "rb") as f:
            data = os.pread(f.fileno(), length, off)
        if len(data) != length:
            raise OSError(
                f"{path}: member at byte {off} is cut short (shard truncated)"
            )
        return data

    def __getitem__(self, index: int) -> Any:
        """(image, target), or with ``fields`` the tuple of the sample's
        fields decoded (the image as without fields; no
        ``field_transforms``, which take a batch)."""
        image, target = super().__getitem__(index)
        table = self.field_table
        if table is None:
            return image, target
        rec = table.store.rows([index % len(self)])[0]
        at, size = int(rec["image_at"]), int(rec["image_len"])
        if not -len(table.refusals) <= at or size < 0:
            raise ShardError(
                f"{self.describe(index)}: its record in "
                f"{table.store.file_of(index % len(self))} is out of range (a "
                "corrupt record file: remove it and open the shard set again)"
            )
        if at < 0:
            raise ShardError(f"{self.describe(index)}: {table.refusals[-at - 1]}")
        data = self._read(index, int(rec["offset"]), int(rec["length"]))
        field_bytes = data[:at] + data[at + size :]
        return tuple(
            image
            if f == table.image
            else table.value(f, index, field_bytes, self.describe)
            for f in range(len(table.names))
        )

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        """Named as :meth:`describe` names it; its image member's bytes."""
        where = self.describe(index)
        return where, self.read(index), item(self.targets, index)

    def ringloader_sources(self) -> Sources:
        """The shard of each sample with its image member's byte range."""
        remote = None
        if self.client is not None:
            remote = self.client.remote(self.shards)
            if self.cache_limit is not None:
                remote.options["cache_bytes"] = self.cache_limit
                remote.options["block_bytes"] = CACHE_BLOCK_BYTES
        offsets, lengths, records = self.offsets, self.lengths, None
        if self._records is not None:
            # The C source (file or HTTP) looks each range up in the record
            # files as it reads (csrc/source/shard_records.h): nothing per
            # sample. A local shard's record file must state the shard's
            # size, mtime and selection (_expect), checked in C when opened.
            # A remote shard's states its ETag too, one tag a shard, which
            # the C table's single tag cannot give: each is checked here
            # against _expect instead (a header read a shard), one that
            # does not fit made anew, and the C side checks its format,
            # record count and size (tag None).
            store, m = self._records, self._manifest
            files = [store.file(s) for s in range(len(self.shards))]
            tag = self._tag
            if remote is not None:
                from .tarindex import records_head

                dtype = store.dtype  # version 2 with fields
                for s, path in enumerate(files):
                    size, mtime_ns, want = self._expect(s)
                    count = int(self.starts[s + 1] - self.starts[s])
                    try:
                        with open(path, "rb") as f:
                            head = f.read(records_bytes(want, 0, dtype))
                            fits = records_head(
                                head,
                                os.fstat(f.fileno()).st_size,
                                size,
                                mtime_ns,
                                want,
                                count,
                                dtype,
                            )
                    except OSError:
                        fits = 0
                    if not fits:
                        files[s] = self._rebuild(s)
                tag = None
            records = (files, m.sizes, m.mtimes, tag)
        return Sources(
            paths=self.paths,
            targets=self.targets,
            offsets=offsets,
            lengths=lengths,
            remote=remote,
            fields=self.field_table,
            records=records,
        )

    def __repr__(self) -> str:
        return (
            f"ringloader.TarShards({len(self.shards)} shards, {len(self)} samples, "
            f"image_key={self.image_key}, label_key={self.label_key!r}"
            + (f", fields={self.fields!r})" if self.fields is not None else ")")
        )


def _no_sample(
    shards: list[str], given: PathLike | Iterable[PathLike], image_key: tuple
) -> str:
    return (
        f"no sample in the {len(shards)} shard(s) of {_shown(given)}: no member "
        f"has an image extension of {'/'.join(image_key)} (image_key)"
    )


def _made(folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    return folder


def _drop_file(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_labels(path: str, tag: bytes, got: list) -> bool:
    """A label function's labels of one shard written to ``path`` as
    records; False when they are not all integers or cannot be written
    (the caller keeps them in memory)."""
    if got and not isinstance(got[0], (int, np.integer)):
        return False
    try:
        labels = np.fromiter(got, dtype=np.int64, count=len(got))
    except (TypeError, ValueError, OverflowError):
        return False
    table = np.zeros(len(got), dtype=RECORD)
    table["label"] = labels
    try:
        write_records(path, 0, 0, tag, table)
    except OSError as e:
        log.debug("ringloader: label_key's labels kept in memory (%s)", e)
        return False
    return True


# The label folders of this process, by path: a copy of a shard set made
# here (pickle, deepcopy) shares its folder, and so its lifetime.
_LABEL_FOLDERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _label_folder(path: str) -> _LabelFolder:
    """The folder at ``path`` when this process made it; else (a worker
    that unpickled the set) a reference that removes nothing."""
    return _LABEL_FOLDERS.get(path) or _LabelFolder(path, owner=False)


class _LabelFolder:
    """The temporary folder of a label function's record files: removed
    when the last reader of the labels is collected, or at exit, by the
    process that made it only (a forked child exiting leaves it)."""

    PREFIX = "labels-"

    def __init__(self, path: str, owner: bool) -> None:
        self.path = path
        if owner:
            _LABEL_FOLDERS[path] = self
            self._finalizer = weakref.finalize(
                self, _remove_label_folder, path, os.getpid()
            )

    @classmethod
    def make(cls, cache_dir: str) -> _LabelFolder:
        """A new folder in ``cache_dir``, named by this machine and process
        (the folders of processes of this machine that are gone removed)."""
        where = _made(cache_dir)
        mine = f"{cls.PREFIX}{socket.gethostname()}-"
        _sweep_label_folders(where, mine)
        return cls(tempfile.mkdtemp(prefix=f"{mine}{os.getpid()}-", dir=where), True)

    def remove(self) -> None:
        """Removes the folder now."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()

    def __reduce__(self) -> tuple:
        return _label_folder, (self.path,)


def _remove_label_folder(path: str, pid: int) -> None:
    if os.getpid() == pid:
        shutil.rmtree(path, ignore_errors=True)


def _sweep_label_folders(where: str, mine: str) -> None:
    """Removes the label folders in ``where`` of this machine's processes
    that no longer run (killed before they could remove them)."""
    try:
        names = os.listdir(where)
    except OSError:
        return
    for name in names:
        if not name.startswith(mine):
            continue
        pid = name[len(mine) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(where, name), ignore_errors=True)
        except OSError:
            pass  # alive, another user's


class _LabelFiles:
    """What a label function's record files must state, and what a missing
    one means (a RecordStore's ``expect`` and ``rebuild``): a class, so
    that the set pickles (a spawned worker reads the same files). It holds
    the files' folder, which lasts as long as something reads them."""

    def __init__(
        self, shards: list[str], files: list[str], tag: bytes, folder: _LabelFolder
    ) -> None:
        self.shards, self.files, self.tag = shards, files, tag
        self.folder = folder

    def expect(self, s: int) -> tuple[int, int, bytes]:
        return 0, 0, self.tag

    def gone(self, s: int) -> str:
        raise ShardError(
            f"{self.shards[s]}: the labels label_key gave at open "
            f"({self.files[s]}) were removed; open the shard set again"
        )


class _ShardPaths(Sequence):
    """The shard path of each sample, from the first sample index of each
    shard: no per-sample memory."""

    def __init__(self, shards: list[str], starts: np.ndarray) -> None:
        self._shards = shards
        self._starts = [int(s) for s in starts]
        self._n = self._starts[-1]
        self._starts_array = np.asarray(starts, dtype=np.int64)

    @property
    def shards(self) -> list[str]:
        """The shards, in order."""
        return self._shards

    @property
    def starts(self) -> np.ndarray:
        """Each shard's first sample, then the number of samples (int64,
        shards + 1): the table the C source takes as it is."""
        return self._starts_array

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = int(index)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"index {index} out of range for {self._n} samples")
        return self._shards[bisect.bisect_right(self._starts, i) - 1]
