"""The target torchvision's detection and segmentation datasets give for
an image, rebuilt from :class:`~.detection_tables.DetectionTables`: what
the pipeline's targets must equal. CocoDetection wrapped by
``wrap_dataset_for_transforms_v2``: boxes XYWH to XYXY in the dtype
torchvision's lists give (int64 when every number of the image's boxes is
a JSON integer, else float32, the sum taken in that dtype), labels, masks
rasterized by the C core at full size, image_id, and the json's own
fields (a CocoKeypoints' also its keypoints, a float32
``tv_tensors.KeyPoints`` (N, K, 2), and their visibility, int64 (N, K)); an image without annotations gives ``{"image_id": id}`` whatever
the keys, as torchvision does. Unwrapped CocoDetection: the annotation
dicts (their standard keys). VOCDetection wrapped: int64 XYXY boxes and
labels. VOCSegmentation: the palette PNG as Pillow opens it (wrapped: a
``Mask``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .detection_tables import AREA_INT, BOX_INT, POINT_KEYS, DetectionTables

__all__ = ["plan_table", "target"]


def _coco_boxes(t: DetectionTables, rows: slice, canvas: tuple[int, int]) -> Any:
    import torch
    from torchvision import tv_tensors

    xywh = t.boxes[rows]
    if (t.is_int[rows] & BOX_INT).all():
        xyxy = xywh.astype(np.int64)
    else:
        xyxy = xywh.astype(np.float32)
    xyxy[:, 2:] += xyxy[:, :2]
    return tv_tensors.BoundingBoxes(
        torch.from_numpy(xyxy),
        format=tv_tensors.BoundingBoxFormat.XYXY,
        canvas_size=canvas,
    )


def plan_table(t: DetectionTables, rows: np.ndarray) -> tuple[Any, Any]:
    """The boxes table a RandomIoUCrop's plan draws from (``Sources.plan_boxes``)
    for the samples reading the images ``rows``: each image's boxes as its
    wrapped target holds them (XYXY, float32 or int64 as :func:`_coco_boxes`
    makes them) in float64, the non-finite ones left out (they never take
    part in torchvision's draw), and int64 offsets, one a sample and one
    more."""
    n = len(t)
    counts = np.diff(t.first)
    image = np.repeat(np.arange(n), counts)
    floats = np.bincount(image, weights=(t.is_int & BOX_INT) == 0, minlength=n)
    whole = (floats == 0)[image]
    with np.errstate(over="ignore", invalid="ignore"):  # carried, then left out
        f32 = t.boxes.astype(np.float32)
        f32[:, 2:] += f32[:, :2]
        xyxy = f32.astype(np.float64)
        i64 = t.boxes[whole].astype(np.int64)
        i64[:, 2:] += i64[:, :2]
    xyxy[whole] = i64
    finite = np.isfinite(xyxy).all(axis=1)
    kept = np.bincount(image[finite], minlength=n)
    first = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)
    xyxy = xyxy[finite]
    rows = np.asarray(rows, dtype=np.int64)
    sizes = kept[rows]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    at = np.repeat(first[rows] - offsets[:-1], sizes) + np.arange(offsets[-1])
    return np.ascontiguousarray(xyxy[at], dtype=np.float64), offsets


def _number(v: float, is_int: bool) -> int | float:
    return int(v) if is_int else float(v)


def _coco_field(t: DetectionTables, key: str, rows: slice) -> list:
    if key == "bbox":
        return [
            [_number(v, bool(k & BOX_INT)) for v in box]
            for box, k in zip(t.boxes[rows], t.is_int[rows])
        ]
    if key == "segmentation":
        return [t.segmentation(j) for j in range(rows.start, rows.stop)]
    if key == "area":
        return [
            _number(v, bool(k & AREA_INT)) for v, k in zip(t.area[rows], t.is_int[rows])
        ]
    if key == "iscrowd":
        return t.iscrowd[rows].astype(np.int64).tolist()
    if key == "category_id":
        return t.category_id[rows].tolist()
    raise KeyError(key)


def _coco_wrapped(t: DetectionTables, i: int, maps: Any = None, fill: int = 0) -> dict:
    import torch
    from torchvision import tv_tensors

    image_id = int(t.image_ids[i])
    rows = t.annotations(i)
    if rows.start == rows.stop:
        return {"image_id": image_id}
    keys = t.target_keys or frozenset()
    canvas = (int(t.sizes[i][0]), int(t.sizes[i][1]))
    out: dict[str, Any] = {}
    if "image_id" in keys:
        out["image_id"] = image_id
    if "boxes" in keys:
        out["boxes"] = _coco_boxes(t, rows, canvas)
    if "masks" in keys:
        rm, cm = maps if maps is not None else (None, None)
        each = [t.mask(j, rm, cm, fill) for j in range(rows.start, rows.stop)]
        masks = np.stack(each)
        out["masks"] = tv_tensors.Mask(torch.from_numpy(masks))
    if "labels" in keys:
        out["labels"] = torch.from_numpy(t.category_id[rows].copy())
    if "keypoints" in keys:
        out["keypoints"] = tv_tensors.KeyPoints(
            torch.from_numpy(t.keypoints[rows].astype(np.float32)), canvas_size=canvas
        )
    if "keypoints_visibility" in keys:
        out["keypoints_visibility"] = torch.from_numpy(
            t.visibility[rows].astype(np.int64)
        )
    for key in keys - {"image_id", "boxes", "masks", "labels"} - POINT_KEYS:
        out[key] = _coco_field(t, key, rows)
    return out


def _coco_plain(t: DetectionTables, i: int) -> list[dict]:
    rows = t.annotations(i)
    fields = {
        k: _coco_field(t, k, rows)
        for k in ("segmentation", "area", "iscrowd", "bbox", "category_id")
    }
    image_id = int(t.image_ids[i])
    return [
        {
            "segmentation": fields["segmentation"][k],
            "area": fields["area"][k],
            "iscrowd": fields["iscrowd"][k],
            "image_id": image_id,
            "bbox": fields["bbox"][k],
            "category_id": fields["category_id"][k],
            "id": int(t.annotation_id[rows.start + k]),
        }
        for k in range(rows.stop - rows.start)
    ]


def _voc_detection(t: DetectionTables, i: int) -> dict:
    import torch
    from torchvision import tv_tensors

    keys = t.target_keys or frozenset()
    if not t.wrapped or "annotation" in keys:
        raise ValueError(
            f"{t.source}: the XML's dict (VOCDetection's own target, the 'annotation' key) is "
            "not kept in the tables: only boxes, names, labels and difficult"
        )
    rows = t.annotations(i)
    out: dict[str, Any] = {}
    if "boxes" in keys:
        out["boxes"] = tv_tensors.BoundingBoxes(
            torch.from_numpy(t.boxes[rows].astype(np.int64).reshape(-1, 4)),
            format=tv_tensors.BoundingBoxFormat.XYXY,
            canvas_size=(int(t.sizes[i][0]), int(t.sizes[i][1])),
        )
    if "labels" in keys:
        out["labels"] = torch.from_numpy(t.category_id[rows].copy())
    return out


def _voc_segmentation(t: DetectionTables, i: int) -> Any:
    from PIL import Image

    assert t.mask_paths is not None
    mask = Image.open(t.mask_paths[i])
    if not t.wrapped:
        return mask
    from torchvision import tv_tensors

    return tv_tensors.Mask(mask)


def target(t: DetectionTables, i: int, maps: Any = None, fill: int = 0) -> Any:
    """Image i's target, as the dataset t describes gives it. ``maps``:
    (row_map, col_map) a wrapped COCO target's masks are sampled through
    (``_core.plan_maps``, ``fill`` where they hold -1) instead of its full
    size; its boxes stay on the image's canvas."""
    if t.kind == "coco":
        return _coco_wrapped(t, i, maps, fill) if t.wrapped else _coco_plain(t, i)
    if t.kind == "voc_detection":
        return _voc_detection(t, i)
    return _voc_segmentation(t, i)
