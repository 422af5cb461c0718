"""A detection or segmentation dataset's targets as flat tables: per image
a range of annotations, and each annotation's box, category, crowd flag,
area, id, segmentation (polygons' coordinates, or an RLE's runs or
compressed string) and keypoints (x, y and visibility) in arrays, with no Python object per image or
annotation. Built by :mod:`.coco` and :mod:`.voc`, recognised by
:mod:`.detection`; :func:`.detection_target.target` rebuilds from them
the target torchvision's dataset gives (the reference for the pipeline to
come)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cache import StringBlob

__all__ = [
    "AREA_INT",
    "BOX_INT",
    "COCO_POINT_DEFAULT",
    "COCO_POINT_KEYS",
    "POINT_KEYS",
    "POLYGONS",
    "RLE_COUNTS",
    "RLE_STRING",
    "DetectionTables",
]

# An annotation's segmentation kind (``DetectionTables.seg_kind``).
POLYGONS, RLE_COUNTS, RLE_STRING, NO_SEGMENTATION = 0, 1, 2, 3

# ``DetectionTables.is_int`` flags: the json's numbers were integers.
BOX_INT, AREA_INT = 1, 2

# torchvision's target keys (wrap_dataset_for_transforms_v2) per kind.
COCO_KEYS = frozenset(
    {
        "segmentation",
        "area",
        "iscrowd",
        "image_id",
        "bbox",
        "category_id",
        "boxes",
        "masks",
        "labels",
    }
)
COCO_DEFAULT = frozenset({"image_id", "boxes", "labels"})
# CocoKeypoints' keys: the same and the keypoints (tv_tensors.KeyPoints)
# with their visibility flags.
POINT_KEYS = frozenset({"keypoints", "keypoints_visibility"})
COCO_POINT_KEYS = COCO_KEYS | POINT_KEYS
COCO_POINT_DEFAULT = COCO_DEFAULT | POINT_KEYS
VOC_KEYS = frozenset({"annotation", "boxes", "labels"})
VOC_DEFAULT = frozenset({"boxes", "labels"})


def empty_offsets(n: int) -> np.ndarray:
    return np.zeros(n + 1, dtype=np.int64)


class DetectionTables:
    """The description of a detection/segmentation dataset as arrays.

    ``kind``: "coco", "voc_detection" or "voc_segmentation". ``source``:
    the annotation file (COCO) or the VOC folder. ``wrapped``: whether the
    dataset is wrapped by ``wrap_dataset_for_transforms_v2`` (or is a
    CocoKeypoints, whose target is the wrapper's with keypoints);
    ``target_keys``: the keys its target has (torchvision's defaults when
    it was given none; None when not wrapped).

    Per image (n): ``paths`` (a :class:`~.cache.StringBlob`: blob +
    offsets, as FileList keeps them), ``image_ids`` (int64: COCO's ids, a
    VOC image's index), ``sizes`` (int64 (n, 2): height, width as the
    annotations give them; -1 where they give none), ``first`` (int64
    n + 1: image i's annotations are rows ``first[i]:first[i + 1]``),
    ``mask_paths`` (VOC segmentation's PNGs, else None); ``problems``
    (the rows of the images with an annotation that cannot be read, each
    with the error it raises when that image is read: a dict, empty when
    all is well).

    Per annotation (m), in the order the dataset gives them: ``boxes``
    (float64 (m, 4): COCO's XYWH as stored, VOC's XYXY), ``is_int``
    (uint8 flags: BOX_INT, the box's numbers were all JSON integers, which
    makes torchvision's boxes int64 rather than float32; AREA_INT, the
    area was one), ``category_id``
    (int64; VOC: the index torchvision's wrapper gives the name, -1 for a
    name it does not know), ``iscrowd`` (uint8; VOC: ``difficult``),
    ``area`` (float64; NaN where absent), ``annotation_id`` (int64; VOC:
    the object's index in its file), ``names`` (VOC: the objects' names).

    Segmentations (COCO): ``seg_kind`` (uint8 per annotation: POLYGONS,
    RLE_COUNTS, RLE_STRING); polygons as ``poly_first`` (int64 m + 1:
    annotation j's polygons are ``poly_first[j]:poly_first[j + 1]``),
    ``coord_first`` (int64 p + 1: polygon k's numbers are
    ``coords[coord_first[k]:coord_first[k + 1]]``) and ``coords``
    (float64 x, y pairs); RLE runs as ``run_first`` (int64 m + 1) into
    ``runs`` (uint32); compressed RLE strings as ``rle_strings`` (a blob
    with m + 1 offsets, empty for other kinds); ``rle_size`` (int64
    (m, 2), the RLE's height and width; -1 for polygons).

    Keypoints (a CocoKeypoints' tables; K points an annotation, the same
    for all): ``keypoints`` (float64 (m, K, 2): x, y as stored) and
    ``visibility`` (uint8 (m, K): COCO's v, 0, 1 or 2); (m, 0, 2) and
    (m, 0) where the target has none.
    """

    def __init__(self, kind: str, source: str, **arrays: Any) -> None:
        self.kind = kind
        self.source = source
        self.wrapped: bool = arrays.pop("wrapped", False)
        self.target_keys: frozenset | None = arrays.pop("target_keys", None)
        self.paths: StringBlob = arrays.pop("paths")
        n = len(self.paths)
        self.image_ids = arrays.pop("image_ids")
        self.sizes = arrays.pop("sizes")
        self.first = arrays.pop("first")
        self.mask_paths: StringBlob | None = arrays.pop("mask_paths", None)
        self.problems: dict[int, str] = arrays.pop("problems", {})
        m = int(self.first[-1])
        self.boxes = arrays.pop("boxes", np.zeros((m, 4)))
        self.is_int = arrays.pop("is_int", np.zeros(m, np.uint8))
        self.category_id = arrays.pop("category_id", np.zeros(m, np.int64))
        self.iscrowd = arrays.pop("iscrowd", np.zeros(m, np.uint8))
        self.area = arrays.pop("area", np.full(m, np.nan))
        self.annotation_id = arrays.pop("annotation_id", np.zeros(m, np.int64))
        self.names: StringBlob | None = arrays.pop("names", None)
        self.seg_kind = arrays.pop("seg_kind", np.full(m, NO_SEGMENTATION, np.uint8))
        self.poly_first = arrays.pop("poly_first", empty_offsets(m))
        self.coord_first = arrays.pop("coord_first", empty_offsets(0))
        self.coords = arrays.pop("coords", np.zeros(0))
        self.run_first = arrays.pop("run_first", empty_offsets(m))
        self.runs = arrays.pop("runs", np.zeros(0, np.uint32))
        self.rle_strings: StringBlob = arrays.pop(
            "rle_strings", StringBlob(np.zeros(0, np.uint8), empty_offsets(m))
        )
        self.rle_size = arrays.pop("rle_size", np.full((m, 2), -1, np.int64))
        self.keypoints = arrays.pop("keypoints", np.zeros((m, 0, 2)))
        self.visibility = arrays.pop("visibility", np.zeros((m, 0), np.uint8))
        if arrays:
            raise TypeError(f"unknown tables: {sorted(arrays)}")
        if len(self.first) != n + 1 or len(self.image_ids) != n:
            raise ValueError("tables of different lengths")

    def __len__(self) -> int:
        return len(self.paths)

    def __repr__(self) -> str:
        return (
            f"<DetectionTables {self.kind}: {len(self)} images, "
            f"{int(self.first[-1])} annotations, {self.nbytes()} bytes>"
        )

    def nbytes(self) -> int:
        """The bytes the arrays hold (the paths' and strings' blobs too)."""
        total = 0
        for value in vars(self).values():
            if isinstance(value, np.ndarray):
                total += value.nbytes
            elif isinstance(value, StringBlob):
                total += value.blob.nbytes + value.offsets.nbytes
        return total

    def annotations(self, i: int) -> slice:
        """Image i's rows of the per-annotation arrays."""
        return slice(int(self.first[i]), int(self.first[i + 1]))

    def polygons(self, j: int) -> list[list[float]]:
        """Annotation j's polygons as COCO lists them."""
        a, b = int(self.poly_first[j]), int(self.poly_first[j + 1])
        return [
            self.coords[self.coord_first[k] : self.coord_first[k + 1]].tolist()
            for k in range(a, b)
        ]

    def segmentation(self, j: int) -> Any:
        """Annotation j's segmentation as the COCO json gives it: a list of
        polygons, or an RLE dict (counts a list of ints or a str)."""
        kind = int(self.seg_kind[j])
        if kind == POLYGONS:
            return self.polygons(j)
        size = [int(v) for v in self.rle_size[j]]
        if kind == RLE_COUNTS:
            a, b = int(self.run_first[j]), int(self.run_first[j + 1])
            return {"size": size, "counts": self.runs[a:b].tolist()}
        if kind == RLE_STRING:
            return {"size": size, "counts": self.rle_strings[j]}
        raise ValueError(
            f"{self.source}: annotation {int(self.annotation_id[j])} has no segmentation"
        )

    def mask(
        self,
        j: int,
        row_map: np.ndarray | None = None,
        col_map: np.ndarray | None = None,
        fill: int = 0,
    ) -> np.ndarray:
        """Annotation j's mask (uint8 0/1) rasterized by the C core, at the
        image's full size, or sampled through index maps (int32; ``fill``
        where a map holds -1: ``_core.plan_maps``' padding)."""
        from .. import _core

        i = int(np.searchsorted(self.first, j, side="right")) - 1
        h, w = (int(v) for v in self.sizes[i])
        rows = np.arange(h, dtype=np.int32) if row_map is None else row_map
        cols = np.arange(w, dtype=np.int32) if col_map is None else col_map
        seg = self.segmentation(j)
        if int(self.seg_kind[j]) == POLYGONS:
            raw = _core.mask_from_polygons(seg, h, w, rows, cols, fill)
        else:
            raw = _core.mask_from_rle(seg, h, w, rows, cols, fill)
        return np.frombuffer(raw, np.uint8).reshape(len(rows), len(cols))
