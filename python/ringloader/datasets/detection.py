"""Which detection and segmentation datasets ringloader describes as
tables, recognised from what users build: torchvision's CocoDetection,
VOCDetection and VOCSegmentation, plain or wrapped by
``torchvision.datasets.wrap_dataset_for_transforms_v2`` (with its
``target_keys``), ringloader's :class:`~.coco_keypoints.CocoKeypoints`
(not wrapped: its target is already the wrapper's, with keypoints), and
subclasses that read samples as they do (no ``__getitem__`` or loader of
their own). DataLoader reads a wrapped CocoDetection and a CocoKeypoints
through them (:mod:`.detection_batch`); the others go to
torch's DataLoader with a reason."""

from __future__ import annotations

import os
from typing import Any

from .coco import coco_tables
from .detection_target import target
from .detection_tables import (
    COCO_DEFAULT,
    COCO_KEYS,
    POINT_KEYS,
    VOC_DEFAULT,
    VOC_KEYS,
    DetectionTables,
)
from .voc import voc_detection_tables, voc_segmentation_tables

__all__ = ["DetectionTables", "detection_tables", "target"]

# Methods a subclass must not override for its samples to be the tables'.
_COCO_READERS = ("__getitem__", "_load_image", "_load_target")
_VOC_READERS = ("__getitem__",)
_POINT_READERS = _COCO_READERS + ("target_of", "_points")


def _unwrap(dataset: Any) -> tuple[Any, bool, Any]:
    """(the dataset under torchvision's v2 wrapper, wrapped?, its keys)."""
    try:
        from torchvision.tv_tensors._dataset_wrapper import VisionDatasetTVTensorWrapper
    except ImportError:
        return dataset, False, None
    if isinstance(dataset, VisionDatasetTVTensorWrapper):
        inner = object.__getattribute__(dataset, "_dataset")
        return inner, True, object.__getattribute__(dataset, "_target_keys")
    return dataset, False, None


def _keys(given: Any, available: frozenset, default: frozenset) -> frozenset:
    """The target keys torchvision's wrapper uses for ``given``."""
    if given is None:
        return default
    if given == "all":
        return available
    return frozenset(given)


def _reads_as(dataset: Any, base: type, readers: tuple[str, ...]) -> bool:
    cls = type(dataset)
    return isinstance(dataset, base) and all(
        getattr(cls, r) is getattr(base, r) for r in readers
    )


def detection_tables(
    dataset: Any, *, ann_file: str | os.PathLike | None = None
) -> DetectionTables | None:
    """The tables of ``dataset`` (:class:`~.detection_tables.DetectionTables`),
    or None when it is not one of the datasets above.

    ``ann_file``: the COCO annotation file, for error messages (a
    CocoDetection does not keep its name; without it they name the
    dataset's root). A COCO annotation that cannot be read is its image's
    problem (``DetectionTables.problems``, see :mod:`.coco`), raised when
    that image is read; a COCO image id that is not an integer or an
    images entry without file_name, a VOC mask PNG that is not a file, a
    VOC box not of integers, a VOC name outside the classes when the
    wrapped dataset's labels need it raise ValueError here, naming the
    file and image.
    """
    try:
        from torchvision import datasets as tvd

        from .coco_keypoints import CocoKeypoints
    except ImportError:
        return None
    inner, wrapped, given = _unwrap(dataset)
    if _reads_as(inner, CocoKeypoints, _POINT_READERS) and not wrapped:
        keys = inner.target_keys
        tables = coco_tables(
            inner,
            os.fspath(ann_file) if ann_file is not None else inner.ann_file,
            segmentations=bool(keys & {"masks", "segmentation"}),
            points=inner.num_keypoints if keys & POINT_KEYS else None,
        )
        tables.wrapped = True  # its target is the wrapper's, with keypoints
        tables.target_keys = keys
        return tables
    if _reads_as(inner, tvd.CocoDetection, _COCO_READERS) and not isinstance(
        inner, tvd.CocoCaptions
    ):
        where = (
            os.fspath(ann_file)
            if ann_file is not None
            else f"the annotation file of CocoDetection at {inner.root}"
        )
        keys = _keys(given, COCO_KEYS, COCO_DEFAULT) if wrapped else None
        uses = keys is None or bool(keys & {"masks", "segmentation"})
        tables = coco_tables(inner, where, segmentations=uses)
    elif _reads_as(inner, tvd.VOCSegmentation, _VOC_READERS):
        tables = voc_segmentation_tables(inner)
        keys = None
    elif _reads_as(inner, tvd.VOCDetection, _VOC_READERS) and (
        type(inner).parse_voc_xml is tvd.VOCDetection.parse_voc_xml
    ):
        keys = _keys(given, VOC_KEYS, VOC_DEFAULT) if wrapped else None
        tables = voc_detection_tables(
            inner, labels_needed=keys is not None and "labels" in keys
        )
    else:
        return None
    tables.wrapped = wrapped
    tables.target_keys = keys
    return tables
