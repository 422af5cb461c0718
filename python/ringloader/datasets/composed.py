"""Datasets that torch composes from others by index, seen as what they are:
maps from their indices to samples of the datasets that hold the files.

``torch.utils.data.Subset`` (what ``random_split`` returns) maps index i to
``dataset[indices[i]]``; ``ConcatDataset`` maps it to a sample of one of its
parts. Nested to any depth, such a composition of datasets of files is still
a table of files: :func:`resolve` turns it into a :class:`Composed`, which
follows the protocol of :mod:`.base` (``ringloader_sources()``,
``describe``) and carries the ``transform`` and ``target_transform`` that
indexing the composition would apply: those of the datasets of files, the
same on every part (when they differ, reading them raises
:class:`UnreadableComposition` with the reason; a loader given a transform
of its own does not read the parts' transforms). ("Views", in ringloader,
are a sample's output chains: ``transforms.MultiView``.)

Only torch's own classes are resolved: a subclass that overrides
``__getitem__`` may return anything, so it is left alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from ..transforms import UnsupportedTransform, compile_views
from . import targets as _targets
from .base import Remote, Sources, provides_sources, sources_of
from .cache import StringBlob, join_blobs
from .detection_batch import NotNative, detection_stand_in
from .segmentation_batch import segmentation_stand_in
from .segmentation_pairs import coco_pairs
from .remote_parts import objects_of
from .timmdata import readable

__all__ = ["UnreadableComposition", "Composed", "leaves_of", "resolve", "samples_stamp"]


class UnreadableComposition(TypeError):
    """A Subset or ConcatDataset that is not a map onto datasets of files
    with one transform; the message says why."""


def _leaf(dataset: Any) -> Any:
    """What the loader reads for a dataset of files: a wrapped
    CocoDetection's images and tables (:mod:`.detection_batch`), a
    VOCSegmentation's or the segmentation reference's COCO dataset's
    (:mod:`.segmentation_batch`), else the dataset.
    UnreadableComposition for a detection or segmentation dataset that is
    not read natively, with the reason."""
    try:
        # the segmentation reference's COCO datasets go past the detection
        # reader to the segmentation one
        return segmentation_stand_in(detection_stand_in(dataset, coco_pairs))
    except NotNative as e:
        raise UnreadableComposition(str(e)) from None


def _kind(dataset: Any) -> Optional[str]:
    """The kind of a torch index-map dataset, "subset" or "concat"
    (subclasses that keep its ``__getitem__`` too), else None."""
    import sys

    data = sys.modules.get("torch.utils.data")
    if data is None:  # torch not imported: no torch dataset either
        return None
    for kind, cls in (("subset", data.Subset), ("concat", data.ConcatDataset)):
        if isinstance(dataset, cls):
            for method in ("__getitem__", "__getitems__"):
                if getattr(type(dataset), method, None) is not getattr(
                    cls, method, None
                ):
                    raise UnreadableComposition(
                        f"{type(dataset).__name__} overrides {method}"
                    )
            return kind
    return None


def _map(dataset: Any) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """(leaves, part, index, cuts): the datasets of files under
    ``dataset``, for each of its indices which leaf (``part``) and which
    index of it, and where each of its parts begins (``cuts``, see
    :meth:`Composed.parts`)."""
    kind = _kind(dataset)
    if kind is None:
        if getattr(dataset, "ringloader_order", None) is not None:
            raise UnreadableComposition(
                f"a {type(dataset).__name__} draws its own epochs and cannot be "
                "part of a Subset or ConcatDataset: give the datasets to one Mix"
            )
        n = len(dataset)
        return (
            [_leaf(dataset)],
            np.zeros(n, np.intp),
            np.arange(n),
            np.zeros(1, np.int64),
        )
    if kind == "subset":
        leaves, part, index, _ = _map(dataset.dataset)
        n = len(part)
        sel = np.asarray(dataset.indices, dtype=np.int64).reshape(-1)
        if sel.size and (sel.min() < -n or sel.max() >= n):
            raise UnreadableComposition(
                f"a Subset index is out of range for {n} samples"
            )
        sel = np.where(sel < 0, sel + n, sel)
        # One part: its indices follow its own order, not the parts below.
        return leaves, part[sel], index[sel], np.zeros(1, np.int64)
    leaves, parts, indices, cuts = [], [], [], []
    at = 0
    for sub in dataset.datasets:
        sub_leaves, part, index, sub_cuts = _map(sub)
        parts.append(part + len(leaves))
        indices.append(index)
        cuts.append(sub_cuts + at)
        leaves.extend(sub_leaves)
        at += len(part)
    if not parts:
        return [], np.zeros(0, np.intp), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return leaves, np.concatenate(parts), np.concatenate(indices), np.concatenate(cuts)


def leaves_of(dataset: Any) -> list:
    """The datasets holding the samples of ``dataset``: itself, or the
    datasets under a (nested) Subset or ConcatDataset, each once, in order.
    Raises :class:`UnreadableComposition` for a subclass overriding ``__getitem__``."""
    if _kind(dataset) is None:
        return [_leaf(dataset)]
    return _once(_map(dataset)[0])


def _once(leaves: list) -> list:
    """``leaves`` without repeats (a dataset in two parts), in order."""
    out: list = []
    for leaf in leaves:
        if not any(leaf is seen for seen in out):
            out.append(leaf)
    return out


def _same_transform(a: Any, b: Any) -> bool:
    """Whether two transforms do the same: one object, or transforms that
    compile to the same fused pipeline with nothing left to Python (two
    ``Compose`` built by one function, say)."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    try:
        # MultiViews view by view; a Loader takes varying sizes
        ca, cb = compile_views(a, varying=True), compile_views(b, varying=True)
    except UnsupportedTransform:
        return False
    return not any(c.rest for c in ca + cb) and ca == cb


class Composed:
    """A Subset or ConcatDataset (nested to any depth) of datasets of
    files, as the loader reads a dataset: the files and targets of its
    samples in its own order, their description, their transforms.

    ``dataset`` is the composition itself; indexing a Composed is not
    supported (index the composition)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self._refresh()
        if any(getattr(leaf, "describe", None) for leaf in self._unique):
            self.describe = self._describe

    def _refresh(self) -> None:
        """Map the composition as it is now (a Subset's indices may have
        been replaced since)."""
        self.leaves, self._part, self._index, self._cuts = _map(self.dataset)
        if not self.leaves:
            raise UnreadableComposition(
                f"{type(self.dataset).__name__} has no datasets"
            )
        self._unique = _once(self.leaves)

    def __len__(self) -> int:
        return len(self._part)

    def parts(self) -> Optional[np.ndarray]:
        """The parts of the table for ``on_error="skip"``, whose core
        replaces a sample that fails by another of its own part: each
        part's first index, then the table's length (int64), or None for
        one part. A part is what a ConcatDataset (or a Mix) lists, down
        through nested ConcatDatasets: a dataset of files, or a Subset
        (whose indices may interleave the datasets below it: one part)."""
        n = len(self._part)
        cuts = np.unique(np.append(self._cuts, n))  # empty parts dropped
        return cuts if len(cuts) > 2 else None

    def _common(self, name: str, same: Callable[[Any, Any], bool]) -> Any:
        first = getattr(self.leaves[0], name, None)
        for leaf in self._unique[1:]:
            if not same(first, getattr(leaf, name, None)):
                raise UnreadableComposition(
                    f"the parts of {type(self.dataset).__name__} have different {name}s"
                )
        return first

    @property
    def transform(self) -> Any:
        """The transform every part applies (read at each access, so that a
        transform replaced between epochs is followed). Raises UnreadableComposition
        when the parts' transforms differ."""
        return self._common("transform", _same_transform)

    @property
    def target_transform(self) -> Optional[Callable]:
        return self._common("target_transform", lambda a, b: a is b)

    def ringloader_sources(self) -> Sources:
        """The sources of the leaves, gathered in the composition's order
        (whole files next to byte ranges: length -1, as the file source
        reads it), remote objects merged (see :func:`_merge_remote`).
        Raises TypeError for a leaf that is not a dataset of files, and
        :class:`UnreadableComposition` for local and remote leaves together."""
        self._refresh()
        by_leaf = {id(leaf): sources_of(leaf) for leaf in self._unique}
        srcs = [by_leaf[id(leaf)] for leaf in self.leaves]
        if any(s.fields is not None for s in srcs):
            raise TypeError(
                "a Subset, ConcatDataset or Mix of TarShards with fields (or a "
                "label_key read as a field) cannot be read as one table yet; "
                "select the shards in the TarShards itself"
            )
        remote = _merge_remote([s.remote for s in by_leaf.values()])
        if remote is not None:
            # Each sample's object by index arrays: no str a sample.
            got = objects_of(
                list(by_leaf.values()), self._which(), self._part, self._index
            )
            remote = dataclasses.replace(
                remote, names=got.names, objects=got.objects, urls=got.urls
            )
            paths: Any = got.paths
        elif all(isinstance(s.paths, StringBlob) for s in by_leaf.values()):
            # Local files named in blobs: each sample's gathered into one.
            blobs = [s.paths for s in by_leaf.values()]
            begins = np.cumsum([0] + [len(b) for b in blobs])
            paths = (blobs[0] if len(blobs) == 1 else join_blobs(blobs)).take(
                begins[self._which()][self._part] + self._index
            )
        elif len(srcs) == 1:
            names = srcs[0].paths
            paths = [names[i] for i in self._index.tolist()]
        else:
            paths = [
                srcs[p].paths[i]
                for p, i in zip(self._part.tolist(), self._index.tolist())
            ]
        targets = _targets.concat(
            [s.targets for s in srcs],
            self._part,
            self._index,
            type(self.dataset).__name__,
        )
        parts = self.parts()
        table = _boxes_table(srcs, self._part, self._index)
        if all(s.offsets is None for s in srcs):
            return Sources(
                paths=paths,
                targets=targets,
                remote=remote,
                parts=parts,
                plan_boxes=table,
            )
        whole = [np.zeros(len(s), np.int64) for s in srcs]
        offsets = [w if s.offsets is None else s.offsets for s, w in zip(srcs, whole)]
        lengths = [
            w - 1 if s.lengths is None else s.lengths for s, w in zip(srcs, whole)
        ]
        return Sources(
            paths=paths,
            targets=targets,
            offsets=_gather(offsets, self._part, self._index),
            lengths=_gather(lengths, self._part, self._index),
            remote=remote,
            parts=parts,
            plan_boxes=table,
        )

    def _which(self) -> np.ndarray:
        """Each of ``leaves``' place among the leaves each once."""
        place = {id(leaf): k for k, leaf in enumerate(self._unique)}
        return np.array([place[id(leaf)] for leaf in self.leaves], dtype=np.intp)

    def leaf_index(self, indices: Any) -> np.ndarray:
        """Each of the samples ``indices``' index in its own dataset (a
        leaf's)."""
        return self._index[np.asarray(indices, dtype=np.int64)]

    def _describe(self, index: int) -> str:
        """Sample ``index`` as its leaf describes it (by its path when the
        leaf has no ``describe``)."""
        leaf = self.leaves[int(self._part[index])]
        i = int(self._index[index])
        describe = getattr(leaf, "describe", None)
        if describe is not None:
            return describe(i)
        return str(sources_of(leaf).paths[i])

    def stamp(self) -> tuple:
        """What changes when a samples list under the Composed, or a Subset's
        indices, is replaced (see :func:`samples_stamp`)."""
        out: list = [samples_stamp(leaf) for leaf in self._unique]
        stack = [self.dataset]
        while stack:
            d = stack.pop()
            kind = _kind(d)
            if kind == "subset":
                out.append((id(d.indices), len(d.indices)))
                stack.append(d.dataset)
            elif kind == "concat":
                out.append((id(d.datasets), len(d.datasets)))
                stack.extend(d.datasets)
        return tuple(out)


def _merge_remote(remotes: list[Optional[Remote]]) -> Optional[Remote]:
    """One ``Remote`` for the remote leaves of a composition, less its
    objects (:func:`.remote_parts.objects_of` gives them, each once: a
    shard in two leaves is fetched by the first leaf's URL): refreshed
    as often as the most often refreshed leaf,
    with the most patient numeric options. Raises UnreadableComposition for local and
    remote leaves together (not supported yet) and for leaves whose
    certificate options differ."""
    if all(r is None for r in remotes):
        return None
    if any(r is None for r in remotes):
        raise UnreadableComposition(
            "a composition of local and remote (http, https, s3) datasets is "
            "not supported yet; copy the local files to the server, or load "
            "them apart"
        )
    parts = [r for r in remotes if r is not None]
    if len(parts) == 1:
        return parts[0]
    options = dict(parts[0].options)
    for r in parts[1:]:
        for k, v in r.options.items():
            if k not in options or options[k] == v:
                options[k] = v
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                options[k] = max(options[k], v)
            else:
                raise UnreadableComposition(
                    f"the remote parts have different {k} options"
                )
    refresh = [r.refresh_s for r in parts if r.refresh_s is not None]
    # One set of keys signs the S3 GETs of every leaf that signs in C (its
    # URLs are plain; a leaf that presigns keeps its URLs as they are).
    keys = []
    for r in parts:
        if r.keys is not None and all(k != r.keys for k in keys):
            keys.append(r.keys)
    if len(keys) > 1:
        raise UnreadableComposition(
            "the remote parts read S3 with different credentials or regions; "
            "give them one s3_client, or load them apart"
        )
    # The objects, their URLs and each sample's: remote_parts.objects_of.
    return Remote(
        names=(),
        urls=list,
        refresh_s=min(refresh) if refresh else None,
        options=options,
        keys=keys[0] if keys else None,
        urls_expire=any(r.urls_expire for r in parts if r.refresh_s is not None),
    )


def _gather(arrays: list, part: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``arrays[part[i]][index[i]]`` for every i, as one int64 array."""
    if len(arrays) == 1:
        return np.asarray(arrays[0], dtype=np.int64)[index]
    out = np.empty(len(part), dtype=np.int64)
    for p, values in enumerate(arrays):
        sel = part == p
        out[sel] = np.asarray(values, dtype=np.int64)[index[sel]]
    return out


def _boxes_table(srcs: list, part: np.ndarray, index: np.ndarray) -> Optional[tuple]:
    """The leaves' boxes tables (``Sources.plan_boxes``) gathered in the
    composition's order: sample i's rows are its leaf's rows for its index
    there. None unless every leaf has one."""
    if not srcs or any(s.plan_boxes is None for s in srcs):
        return None
    tables = [s.plan_boxes for s in srcs]
    base = np.cumsum([0] + [len(b) for b, _ in tables[:-1]])
    boxes = np.concatenate(
        [np.asarray(b, np.float64).reshape(-1, 4) for b, _ in tables]
    )
    starts = np.empty(len(part), np.int64)
    sizes = np.empty(len(part), np.int64)
    for p, (_, offsets) in enumerate(tables):
        sel = part == p
        at = np.asarray(offsets, np.int64)[index[sel]]
        starts[sel] = at + base[p]
        sizes[sel] = np.asarray(offsets, np.int64)[index[sel] + 1] - at
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    at = np.repeat(starts - offsets[:-1], sizes) + np.arange(offsets[-1])
    return np.ascontiguousarray(boxes[at]), offsets


def resolve(dataset: Any) -> Any:
    """What the loader reads for ``dataset``: a :class:`Composed` of a
    (nested) Subset or ConcatDataset, else the dataset itself. Raises
    :class:`UnreadableComposition` for a composition that cannot be read as files with
    one transform; ValueError for a timm ``ImageDataset`` whose reader it
    cannot read (it reads the folder and tar readers: :mod:`.timmdata`)."""
    if _kind(dataset) is not None:
        return Composed(dataset)
    return _leaf(readable(dataset))


def samples_stamp(dataset: Any) -> tuple:
    """What changes when the samples the loader reads are replaced: the
    ``samples`` list of an ImageFolder-like dataset (as DataLoader reads it
    at every fetch), the lists under a Composed, a Subset's indices. Empty for
    a dataset giving ``ringloader_sources()``, which is read once."""
    if isinstance(dataset, Composed):
        return dataset.stamp()
    if provides_sources(dataset):
        return ()
    samples = getattr(dataset, "samples", None)
    return (id(samples), len(samples) if samples is not None else 0)
