"""The segmentation reference's COCO masks, at a sample's output pixels.

The reference makes one mask an image from its COCO annotations before its
preset runs: without ``--use-v2`` its ``FilterAndRemapCocoCategories`` and
``ConvertCocoPolysToMask``, with it the v2 wrapper's instance masks and its
``CocoDetectionToVOCSegmentation``. Each kept annotation's value (its
category's place in the filter's list, or the label map's value) where it
alone covers a pixel, 255 where two or more do, 0 elsewhere; the preset
then resizes, crops and flips that mask nearest. Sampling is pixel by pixel,
so the merge commutes with it: :func:`merged` rasterizes each kept
annotation at the sampled pixels only (``DetectionTables.mask`` through the
plan's index maps) and merges there.

An image whose annotations the tables refused (``DetectionTables.problems``:
a bad bbox, area, id, category or segmentation) is made by the reference's
own objects instead (:func:`through_objects`): its annotations as the COCO
object gives them, through the user's filter and merge (or, wrapped, the
wrapper's own target of them and the user's converter) on an image of its
size, then sampled. The reference reads only what those objects read, so an
annotation it never reads cannot fail the image; one it fails on is a
``ValueError`` naming the image, as under torch's DataLoader.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["merged", "through_objects"]


def sampled(full: np.ndarray, rows: np.ndarray, cols: np.ndarray, fill: int) -> Any:
    """The (h, w) mask ``full`` taken at ``rows`` and ``cols`` (-1: ``fill``)."""
    return padded(full[np.maximum(rows, 0)][:, np.maximum(cols, 0)], rows, cols, fill)


def padded(out: np.ndarray, rows: np.ndarray, cols: np.ndarray, fill: int) -> Any:
    """``out`` (taken at ``rows`` x ``cols``) with ``fill`` where either map
    is -1 (padding), in place."""
    out[rows < 0, :] = fill
    out[:, cols < 0] = fill
    return out


def merged(
    t: Any, row: int, rows: np.ndarray, cols: np.ndarray, values: dict, fill: int
) -> np.ndarray:
    """Image ``row``'s mask from the tables ``t`` at ``rows`` x ``cols``:
    the annotations whose category ``values`` maps, merged; ValueError
    naming the annotation (a compressed RLE, which the reference's
    ``ConvertCocoPolysToMask`` cannot read, where the dataset is not
    wrapped)."""
    from .detection_tables import RLE_STRING

    out = np.zeros((len(rows), len(cols)), np.uint8)
    count = np.zeros(out.shape, np.uint16)
    span = t.annotations(row)
    for j in range(span.start, span.stop):
        value = values.get(int(t.category_id[j]))
        if value is None:  # filtered out, as the reference's filter does
            continue
        where = (
            f"{t.source}: image {t.paths[row]}, annotation {int(t.annotation_id[j])}"
        )
        if int(t.seg_kind[j]) == RLE_STRING and not t.wrapped:
            raise ValueError(
                f"{where}: a compressed RLE (counts a string), which the "
                "reference's ConvertCocoPolysToMask cannot read (pycocotools' "
                "frPyObjects takes its counts as a list)"
            )
        try:
            m = t.mask(j, rows, cols, 0)
        except ValueError as e:
            raise ValueError(f"{where}: the mask cannot be made: {e}") from None
        np.maximum(out, m * np.uint8(value), out=out)
        count += m
    out[count > 1] = 255
    return padded(out, rows, cols, fill)


def through_objects(
    dataset: Any, t: Any, row: int, size: tuple[int, int], objects: tuple
) -> np.ndarray:
    """Image ``row``'s full-size (h, w) uint8 mask as the reference's own
    ``objects`` make it (unwrapped: its filter and merge; wrapped: its
    converter, after the v2 wrapper's own target of the annotations, its
    ``_wrapper``) from the annotations the CocoDetection's COCO object
    holds (``dataset``: it, or its wrapper); ValueError naming the image
    where they raise."""
    from PIL import Image

    h, w = size
    inner = dataset
    if t.wrapped:
        inner = object.__getattribute__(dataset, "_dataset")
    image_id = int(t.image_ids[row])
    anno = inner.coco.loadAnns(inner.coco.getAnnIds(imgIds=image_id))
    canvas = Image.new("L", (w, h))
    # the v2 wrapper's own target function (segmentation_batch checked it is there)
    target_of = object.__getattribute__(dataset, "_wrapper") if t.wrapped else None
    try:
        if target_of is not None:  # the wrapper's target of them, then the converter
            pair = objects[0](*target_of(row, (canvas, anno)))
        else:
            pair = objects[1](*objects[0](canvas, anno))
        return np.asarray(pair[1], dtype=np.uint8).reshape(h, w)
    except Exception as e:  # noqa: BLE001 - the user's objects, as torch runs them
        raise ValueError(
            f"{t.source}: image {t.paths[row]} (id {image_id}): making its mask "
            f"raised {type(e).__name__}: {e}"
        ) from None
