"""A torchvision CocoDetection's images and annotations as
:class:`~.detection_tables.DetectionTables`, read from the ``COCO`` object
the dataset already holds (its json is not read again). One pass over the
annotations in Python; what it collects goes into arrays at the end and no
Python object is kept per image or annotation.

The images are the dataset's ``ids`` in order, each one's annotations in
the json's order (what ``coco.loadAnns(coco.getAnnIds(id))`` gives).
Bad input is a ValueError naming the annotation file (or, when it is not
known, the dataset's root), the image id and the annotation id."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from .cache import StringBlob
from .detection_tables import (
    AREA_INT,
    BOX_INT,
    POLYGONS,
    RLE_COUNTS,
    RLE_STRING,
    DetectionTables,
)

__all__ = ["coco_tables"]

_U32 = 1 << 32


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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


class _Collect:
    """The lists one pass fills; turned into arrays by ``tables``."""

    def __init__(self, where: str) -> None:
        self.where = where
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

    def bad(self, image_id: Any, ann_id: Any, what: str) -> ValueError:
        return ValueError(
            f"{self.where}: image id {image_id}, annotation id {ann_id}: {what}"
        )

    def polygons(self, seg: list, image_id: Any, ann_id: Any) -> None:
        """The polygons' numbers are checked as one array in ``arrays``."""
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
            self.poly_len.append(len(poly))
            self.coords.extend(poly)
        self.kind.append(POLYGONS)
        self.n_polys.append(len(seg))
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

    def annotation(self, ann: dict, size: list[int], categories: Any) -> None:
        image_id, ann_id = ann.get("image_id"), ann.get("id")
        if not isinstance(ann_id, int) or isinstance(ann_id, bool):
            raise self.bad(image_id, ann_id, "the annotation has no integer 'id'")
        box = ann.get("bbox")
        kinds = {type(v) for v in box} if isinstance(box, (list, tuple)) else {None}
        if not kinds <= {int, float} or len(box) != 4 or not all(map(_finite, box)):
            raise self.bad(
                image_id,
                ann_id,
                f"bbox {box!r} is not 4 finite numbers [x, y, width, height]",
            )
        category = ann.get("category_id")
        if type(category) is not int or category not in categories:
            raise self.bad(
                image_id,
                ann_id,
                f"category_id {category!r} is not among the file's categories",
            )
        crowd = ann.get("iscrowd", 0)
        if crowd not in (0, 1):
            raise self.bad(image_id, ann_id, f"iscrowd {crowd!r} is not 0 or 1")
        area = ann.get("area", math.nan)
        if "area" in ann and not _finite(area):
            raise self.bad(image_id, ann_id, f"area {area!r} is not a finite number")
        seg = ann.get("segmentation")
        if isinstance(seg, list):
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

    def coordinates(
        self, poly_first: np.ndarray, coord_first: np.ndarray
    ) -> np.ndarray:
        """The polygons' numbers as float64, all checked at once: on a
        number that is not one, or not finite, its annotation named."""
        try:
            coords = np.array(self.coords)
        except (ValueError, TypeError):
            coords = np.zeros(0, object)
        if coords.ndim == 1 and coords.dtype.kind in "iuf":
            coords = coords.astype(np.float64, copy=False)
            finite = np.isfinite(coords)
            if finite.all():
                return coords
            at = int(np.argmin(finite))
            what = "has a coordinate that is not finite"
        else:
            at = next(i for i, v in enumerate(self.coords) if not _finite(v))
            what = (
                "has a coordinate that is not finite"
                if _is_number(self.coords[at])
                else "is not a list of numbers"
            )
        k = int(np.searchsorted(coord_first, at, side="right")) - 1
        j = int(np.searchsorted(poly_first, k, side="right")) - 1
        raise self.bad(
            self.image_id[j], self.ann_id[j], f"polygon {k - int(poly_first[j])} {what}"
        )

    def arrays(self) -> dict[str, Any]:
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
            "coords": self.coordinates(poly_first, coord_first),
            "run_first": run_first,
            "runs": np.concatenate([np.zeros(0, np.uint32), *self.runs]),
            "rle_strings": StringBlob(blob, string_first),
            "rle_size": np.array(self.rle_size, np.int64).reshape(m, 2),
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


def _check_ids(coco: Any, where: str) -> None:
    """Annotations naming no image, and ids given twice (COCO keeps the
    last one: torchvision would give it in place of both)."""
    anns = coco.dataset.get("annotations", [])
    seen: set = set()
    twice = len(coco.anns) != len(anns)
    for ann in anns:
        ann_id = ann.get("id")
        if ann.get("image_id") not in coco.imgs:
            raise ValueError(
                f"{where}: image id {ann.get('image_id')!r}, annotation id {ann_id!r}: "
                "the annotation's image has no images entry"
            )
        if twice:
            if ann_id in seen:
                raise ValueError(
                    f"{where}: image id {ann.get('image_id')}, annotation id {ann_id}: given twice"
                )
            seen.add(ann_id)


def coco_tables(dataset: Any, where: str) -> DetectionTables:
    """``dataset``: a CocoDetection (not wrapped); ``where``: how errors
    name its annotation file."""
    coco = dataset.coco
    _check_ids(coco, where)
    categories = set(coco.cats)
    root = os.fspath(dataset.root)
    collect = _Collect(where)
    paths, counts = [], []
    sizes: list[int] = []
    for image_id in dataset.ids:
        name, size = _image(coco, image_id, where)
        paths.append(os.path.join(root, name))
        sizes += size
        anns = coco.imgToAnns.get(image_id, ())
        for ann in anns:
            collect.annotation(ann, size, categories)
        counts.append(len(anns))
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
        **collect.arrays(),
    )
