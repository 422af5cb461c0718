"""A torchvision CocoDetection's images and annotations as
:class:`~.detection_tables.DetectionTables`, read from the ``COCO`` object
the dataset already holds (its json is not read again). One pass over the
annotations in Python; what it collects goes into arrays at the end and no
Python object is kept per image or annotation.

The images are the dataset's ``ids`` in order, each one's annotations in
the json's order (what ``coco.loadAnns(coco.getAnnIds(id))`` gives).

Bad input. What breaks the dataset as a whole (an image id that is not an
integer, an images entry without a ``file_name``) is a ValueError when the
tables are built. A bad annotation is its image's problem alone, as it is
for torchvision, which meets it when that image is read: the image's row
goes into ``DetectionTables.problems`` with a message naming the
annotation file (or, when it is not known, the dataset's root), the image
id, its file and the annotation id, and the loader raises it when that
sample is read (or, under ``on_error="skip"``, reads another image in its
place). Bad means what torchvision fails on or would silently get wrong:
a bbox not of 4 numbers, a category_id that is not an integer, an iscrowd
other than 0 or 1, an area that is not a finite number, an annotation id
given twice (COCO's index would give one annotation in place of both),
and, where the target has masks or segmentations, a segmentation neither
a list of polygons nor an RLE (a polygon of fewer than 3 points, a
coordinate not finite, an RLE of another size than its image, counts
that do not sum to it). What torchvision passes through is passed
through: a category_id absent from the categories (the label is the id),
a box with NaN or infinite numbers (SanitizeBoundingBoxes drops it), an
annotation of an image with no images entry (no image reads it), a
segmentation that the target does not use. The segmentation reference's
COCO datasets read less of an annotation than these checks: there an
image with a problem is made by the reference's own classes
(:mod:`.segmentation_coco`), and fails only where they fail.

Keypoints (a :class:`~.coco_keypoints.CocoKeypoints`' tables, ``count``
points an annotation): each annotation's ``keypoints`` must be a list of
``count`` x, y, v triples of finite numbers, v 0, 1 or 2 (COCO's not
labelled, labelled not visible, visible); anything else is its image's
problem as above. The numbers are checked as one array, not annotation by
annotation, and kept as ``DetectionTables.keypoints`` (float64 x, y) and
``visibility`` (uint8). :func:`keypoints_of` checks one annotation the
same way, with the same words, for the dataset's own ``__getitem__``."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from .cache import StringBlob
from .detection_tables import (
    AREA_INT,
    BOX_INT,
    NO_SEGMENTATION,
    POLYGONS,
    RLE_COUNTS,
    RLE_STRING,
    DetectionTables,
)

__all__ = ["annotation_error", "coco_tables", "keypoint_count", "keypoints_of"]

_U32 = 1 << 32


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _float(v: Any) -> bool:
    """A number a float64 holds (NaN and infinities too, as torchvision
    carries them), not an integer past it."""
    try:
        return _is_number(v) and (isinstance(v, float) or abs(v) < 2**63)
    except OverflowError:
        return False


def _finite(v: Any) -> bool:
    """A number a float64 holds, finite."""
    try:
        return _is_number(v) and math.isfinite(v)
    except OverflowError:
        return False


def _runs(counts: Any) -> np.ndarray | None:
    """An RLE's counts list as uint32, or None when it is not a list of
    integers 0 .. 2**32 - 1 (one numpy conversion, not a loop)."""
    if not isinstance(counts, (list, tuple)):
        return None
    try:
        runs = np.array(counts)
    except (ValueError, TypeError):
        return None
    if runs.ndim != 1 or (len(runs) and runs.dtype.kind not in "iu"):
        return None
    if len(runs) and (runs.min() < 0 or runs.max() >= _U32):
        return None
    return runs.astype(np.uint32)


def annotation_error(
    where: str, image_id: Any, file_name: str, ann_id: Any, what: str
) -> ValueError:
    """An annotation's problem, naming the annotation file, the image (its
    id and file) and the annotation id."""
    return ValueError(
        f"{where}: image id {image_id} ({file_name}), annotation id {ann_id}: {what}"
    )


def _points_shape(kp: Any, count: int) -> str | None:
    """Why an annotation's ``keypoints`` is not ``count`` triples (its
    list alone, not its numbers), or None."""
    if not isinstance(kp, (list, tuple)):
        return f"keypoints {type(kp).__name__} is not a list of x, y, v numbers"
    if len(kp) % 3:
        return f"keypoints has {len(kp)} numbers, not x, y, v triples"
    if len(kp) != 3 * count:
        return (
            f"keypoints has {len(kp) // 3} points where the file's other "
            f"annotations have {count}"
        )
    return None


def _points_values(values: np.ndarray) -> str | None:
    """Why an annotation's keypoints numbers (float64, x, y, v triples
    flat) are not finite x, y with v 0, 1 or 2, or None."""
    if not np.isfinite(values).all():
        return "keypoints has a number that is not finite"
    flags = values[2::3]
    if not np.isin(flags, (0, 1, 2)).all():
        bad = flags[~np.isin(flags, (0, 1, 2))][0]
        return f"keypoints has a visibility {bad:g}, not 0, 1 or 2"
    return None


def keypoint_count(coco: Any) -> int:
    """The points an annotation of the file has: the length most of its
    annotations' keypoints lists give (in triples), 0 when none has one.
    One pass over the lengths; an annotation of another length is its
    image's problem."""
    lengths: dict[int, int] = {}
    for ann in coco.dataset.get("annotations", ()):
        kp = ann.get("keypoints") if isinstance(ann, dict) else None
        if isinstance(kp, (list, tuple)) and len(kp) % 3 == 0:
            lengths[len(kp)] = lengths.get(len(kp), 0) + 1
    if not lengths:
        return 0
    # the most common length; of equally common ones, the first met
    return max(lengths, key=lengths.__getitem__) // 3


def keypoints_of(ann: dict, count: int) -> np.ndarray:
    """One annotation's keypoints as float64 (count, 3): x, y, v; a
    ValueError saying what is wrong (the words of the tables' problems,
    without the file, image and annotation that :meth:`_Collect.bad`
    adds)."""
    kp = ann.get("keypoints")
    why = _points_shape(kp, count)
    if why is None and not all(map(_float, kp)):
        why = "keypoints is not a list of numbers"
    if why is None:
        values = np.array(kp, np.float64)
        why = _points_values(values)
    if why is not None:
        raise ValueError(why)
    return values.reshape(count, 3)


class _Collect:
    """The lists one pass fills; turned into arrays by ``tables``.
    ``segmentations``: whether the target uses them (masks, or the
    segmentation itself); when not, they are neither checked nor kept.
    ``points``: each annotation's keypoints count, None when the target
    has none (then neither checked nor kept)."""

    def __init__(
        self, where: str, segmentations: bool = True, points: int | None = None
    ) -> None:
        self.where = where
        self.segmentations = segmentations
        self.points = points
        self.keypoints: list = []  # each annotation's list: x, y, v triples
        self.file_name = ""  # the image whose annotations are being read
        self.boxes: list = []
        self.is_int: list[int] = []
        self.category: list = []
        self.crowd: list = []
        self.area: list = []
        self.ann_id: list = []
        self.kind: list[int] = []
        self.n_polys: list[int] = []
        self.poly_len: list[int] = []
        self.coords: list = []
        self.n_runs: list[int] = []
        self.runs: list = []
        self.strings: list[bytes] = []
        self.rle_size: list = []
        self.image_id: list = []
        self.names: list[str] = []  # the images' file names, for messages
        self.problems: dict[int, str] = {}

    def bad(self, image_id: Any, ann_id: Any, what: str) -> ValueError:
        return annotation_error(self.where, image_id, self.file_name, ann_id, what)

    def polygons(self, seg: list, image_id: Any, ann_id: Any) -> None:
        """The polygons' numbers are checked as one array in ``arrays``;
        their lists here, all of them before anything is kept, so that a
        refused annotation leaves the lists as they were."""
        if not seg:
            raise self.bad(
                image_id, ann_id, "segmentation is an empty list (no polygon)"
            )
        for k, poly in enumerate(seg):
            if not isinstance(poly, (list, tuple)):
                raise self.bad(
                    image_id, ann_id, f"polygon {k} is not a list of numbers"
                )
            if len(poly) < 6 or len(poly) % 2:
                raise self.bad(
                    image_id,
                    ann_id,
                    f"polygon {k} has {len(poly)} numbers: 3 or more x, y pairs are needed",
                )
        for poly in seg:
            self.poly_len.append(len(poly))
            self.coords.extend(poly)
        self.kind.append(POLYGONS)
        self.n_polys.append(len(seg))
        self.no_runs()

    def no_runs(self) -> None:
        self.n_runs.append(0)
        self.strings.append(b"")
        self.rle_size.append(-1)
        self.rle_size.append(-1)

    def rle(self, seg: dict, size: list[int], image_id: Any, ann_id: Any) -> None:
        counts, shape = seg.get("counts"), seg.get("size")
        given = (
            [int(v) for v in shape if _is_number(v) and v >= 0]
            if isinstance(shape, (list, tuple))
            else []
        )
        if size == [-1, -1] and len(given) == 2:
            size = given  # the images entry gives no size: the RLE's own
        if given != size:
            raise self.bad(
                image_id,
                ann_id,
                f"RLE size {shape!r} is not the image's [height, width] {size}",
            )
        if isinstance(counts, (str, bytes)):
            text = (
                counts.encode("latin-1", "replace")
                if isinstance(counts, str)
                else counts
            )
            if not text.isascii():
                raise self.bad(image_id, ann_id, "RLE counts string is not ASCII")
            self.kind.append(RLE_STRING)
            self.strings.append(text)
            self.n_runs.append(0)
        else:
            runs = _runs(counts)
            if runs is None:
                raise self.bad(
                    image_id,
                    ann_id,
                    "RLE counts are neither a string nor a list of counts 0 .. 2**32 - 1",
                )
            total = int(runs.sum(dtype=np.int64))
            if total != size[0] * size[1]:
                raise self.bad(
                    image_id,
                    ann_id,
                    f"RLE counts sum to {total}, not {size[0]} x {size[1]}",
                )
            self.kind.append(RLE_COUNTS)
            self.runs.append(runs)
            self.n_runs.append(len(runs))
            self.strings.append(b"")
        self.n_polys.append(0)
        self.rle_size.append(size[0])
        self.rle_size.append(size[1])

    def annotation(self, ann: dict, size: list[int]) -> None:
        """Kept whole, or refused (a ValueError) with nothing kept."""
        image_id, ann_id = ann.get("image_id"), ann.get("id")
        if not isinstance(ann_id, int) or isinstance(ann_id, bool):
            raise self.bad(image_id, ann_id, "the annotation has no integer 'id'")
        box = ann.get("bbox")
        kinds = {type(v) for v in box} if isinstance(box, (list, tuple)) else {None}
        if not kinds <= {int, float} or len(box) != 4 or not all(map(_float, box)):
            raise self.bad(
                image_id,
                ann_id,
                f"bbox {box!r} is not 4 numbers [x, y, width, height]",
            )
        category = ann.get("category_id")
        if type(category) is not int or not -(2**63) <= category < 2**63:
            raise self.bad(
                image_id, ann_id, f"category_id {category!r} is not an integer"
            )
        crowd = ann.get("iscrowd", 0)
        if crowd not in (0, 1):
            raise self.bad(image_id, ann_id, f"iscrowd {crowd!r} is not 0 or 1")
        area = ann.get("area", math.nan)
        if "area" in ann and not _finite(area):
            raise self.bad(image_id, ann_id, f"area {area!r} is not a finite number")
        if self.points is not None:
            why = _points_shape(ann.get("keypoints"), self.points)
            if why is not None:
                raise self.bad(image_id, ann_id, why)
        seg = ann.get("segmentation")
        if not self.segmentations:
            self.kind.append(NO_SEGMENTATION)
            self.n_polys.append(0)
            self.no_runs()
        elif isinstance(seg, list):
            self.polygons(seg, image_id, ann_id)
        elif isinstance(seg, dict):
            self.rle(seg, size, image_id, ann_id)
        else:
            raise self.bad(
                image_id,
                ann_id,
                f"segmentation {type(seg).__name__} is neither a list of polygons nor an RLE dict",
            )
        self.boxes.append(box)
        self.is_int.append(
            (BOX_INT if float not in kinds else 0)
            | (AREA_INT if isinstance(area, int) else 0)
        )
        self.category.append(category)
        self.crowd.append(crowd)
        self.area.append(area)
        self.ann_id.append(ann_id)
        self.image_id.append(image_id)
        if self.points is not None:
            self.keypoints.append(ann["keypoints"])

    def points_table(self, first: np.ndarray) -> dict[str, np.ndarray]:
        """The keypoints as ``keypoints`` (float64 (m, K, 2)) and
        ``visibility`` (uint8 (m, K)), all checked at once: an annotation
        with a number that is not one or not finite, or a visibility other
        than 0, 1, 2, is its image's problem (zeros kept in its place)."""
        m, k = len(self.ann_id), self.points or 0
        if self.points is None:
            return {}
        try:  # the lists are 3K long each (_points_shape): one (m, 3K) array
            values = np.array(self.keypoints)
        except (ValueError, TypeError):
            values = np.zeros(0, object)
        numeric = values.shape == (m, 3 * k) and values.dtype.kind in "iuf"
        if numeric:
            values = values.astype(np.float64, copy=False).reshape(m, 3 * k)
            flags = values[:, 2::3]
            ok = np.isfinite(values).all(axis=1) & np.isin(flags, (0, 1, 2)).all(axis=1)
        else:
            ok = np.array(
                [all(map(_float, self.keypoints[j])) for j in range(m)],
                bool,
            )
            values = np.zeros((m, 3 * k))
            for j in np.flatnonzero(ok).tolist():
                values[j] = self.keypoints[j]
            ok &= np.isfinite(values).all(axis=1)
            ok &= np.isin(values[:, 2::3], (0, 1, 2)).all(axis=1)
        for j in np.flatnonzero(~ok).tolist():
            row = int(np.searchsorted(first, j, side="right")) - 1
            given = self.keypoints[j]
            why = (
                _points_values(values[j])
                if all(map(_float, given))
                else "keypoints is not a list of numbers"
            )
            self.file_name = self.names[row]
            self.problem(row, self.bad(self.image_id[j], self.ann_id[j], why))
            values[j] = 0
        points = values.reshape(m, k, 3)
        return {
            "keypoints": np.ascontiguousarray(points[..., :2]),
            "visibility": points[..., 2].astype(np.uint8),
        }

    def coordinates(
        self, poly_first: np.ndarray, coord_first: np.ndarray, first: np.ndarray
    ) -> np.ndarray:
        """The polygons' numbers as float64, all checked at once: a number
        that is not one, or not finite, is its image's problem (named by
        its annotation and polygon; NaN kept in its place)."""
        try:
            coords = np.array(self.coords)
        except (ValueError, TypeError):
            coords = np.zeros(0, object)
        if coords.ndim == 1 and coords.dtype.kind in "iuf":
            coords = coords.astype(np.float64, copy=False)
            finite = np.isfinite(coords)
            if finite.all():
                return coords
            at = np.flatnonzero(~finite)
        else:
            at = np.array(
                [i for i, v in enumerate(self.coords) if not _finite(v)], np.int64
            )
            coords = np.array(
                [v if _finite(v) else math.nan for v in self.coords], np.float64
            )
        for i in at.tolist():
            k = int(np.searchsorted(coord_first, i, side="right")) - 1
            j = int(np.searchsorted(poly_first, k, side="right")) - 1
            row = int(np.searchsorted(first, j, side="right")) - 1
            what = (
                "has a coordinate that is not finite"
                if _is_number(self.coords[i])
                else "is not a list of numbers"
            )
            self.file_name = self.names[row]
            self.problem(
                row,
                self.bad(
                    self.image_id[j],
                    self.ann_id[j],
                    f"polygon {k - int(poly_first[j])} {what}",
                ),
            )
        return coords

    def problem(self, row: int, error: ValueError) -> None:
        """Image ``row``'s first problem is the one it raises."""
        self.problems.setdefault(row, str(error))

    def arrays(self, first: np.ndarray) -> dict[str, Any]:
        m = len(self.ann_id)
        poly_first = np.zeros(m + 1, np.int64)
        np.cumsum(self.n_polys, out=poly_first[1:])
        coord_first = np.zeros(len(self.poly_len) + 1, np.int64)
        np.cumsum(self.poly_len, out=coord_first[1:])
        run_first = np.zeros(m + 1, np.int64)
        np.cumsum(self.n_runs, out=run_first[1:])
        blob = np.frombuffer(b"".join(self.strings), np.uint8).copy()
        string_first = np.zeros(m + 1, np.int64)
        np.cumsum([len(s) for s in self.strings], out=string_first[1:])
        return {
            "boxes": np.array(self.boxes, np.float64).reshape(m, 4),
            "is_int": np.array(self.is_int, np.uint8),
            "category_id": np.array(self.category, np.int64),
            "iscrowd": np.array(self.crowd, np.uint8),
            "area": np.array(self.area, np.float64),
            "annotation_id": np.array(self.ann_id, np.int64),
            "seg_kind": np.array(self.kind, np.uint8),
            "poly_first": poly_first,
            "coord_first": coord_first,
            "coords": self.coordinates(poly_first, coord_first, first),
            "run_first": run_first,
            "runs": np.concatenate([np.zeros(0, np.uint32), *self.runs]),
            "rle_strings": StringBlob(blob, string_first),
            "rle_size": np.array(self.rle_size, np.int64).reshape(m, 2),
            **self.points_table(first),
        }


def _image(coco: Any, image_id: Any, where: str) -> tuple[str, list[int]]:
    if not isinstance(image_id, int) or isinstance(image_id, bool):
        raise ValueError(f"{where}: image id {image_id!r} is not an integer")
    entry = coco.imgs.get(image_id)
    if not isinstance(entry, dict) or not isinstance(entry.get("file_name"), str):
        raise ValueError(
            f"{where}: image id {image_id!r} has no images entry with a 'file_name'"
        )
    h, w = entry.get("height", -1), entry.get("width", -1)
    if not (isinstance(h, int) and isinstance(w, int)):
        raise ValueError(
            f"{where}: image id {image_id}: height {h!r}, width {w!r} are not integers"
        )
    return entry["file_name"], [h, w]


def _given_twice(coco: Any) -> set:
    """The annotation ids given more than once: COCO's index keeps the last
    of them, which torchvision gives in place of each."""
    anns = coco.dataset.get("annotations", [])
    if len(coco.anns) == len(anns):
        return set()
    seen: set = set()
    twice: set = set()
    for ann in anns:
        ann_id = ann.get("id")
        (twice if ann_id in seen else seen).add(ann_id)
    return twice


def coco_tables(
    dataset: Any, where: str, segmentations: bool = True, points: int | None = None
) -> DetectionTables:
    """``dataset``: a CocoDetection (not wrapped); ``where``: how errors
    name its annotation file; ``segmentations``: whether its target uses
    them (masks or the segmentation key); ``points``: the keypoints each
    annotation has, where the target uses them (None: not read)."""
    coco = dataset.coco
    twice = _given_twice(coco)
    root = os.fspath(dataset.root)
    collect = _Collect(where, segmentations, points)
    paths, counts = [], []
    sizes: list[int] = []
    for row, image_id in enumerate(dataset.ids):
        name, size = _image(coco, image_id, where)
        paths.append(os.path.join(root, name))
        collect.names.append(name)
        collect.file_name = name
        sizes += size
        kept = 0
        for ann in coco.imgToAnns.get(image_id, ()):
            try:
                if ann.get("id") in twice:
                    raise collect.bad(image_id, ann.get("id"), "given twice")
                collect.annotation(ann, size)
                kept += 1
            except ValueError as e:
                collect.problem(row, e)
        counts.append(kept)
    n = len(paths)
    first = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    return DetectionTables(
        "coco",
        where,
        paths=StringBlob.of_paths(paths, f"{where}: file names"),
        image_ids=np.array(dataset.ids, np.int64).reshape(n),
        sizes=np.array(sizes, np.int64).reshape(n, 2),
        first=first,
        problems=collect.problems,
        **collect.arrays(first),
    )
