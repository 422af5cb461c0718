"""torchvision's VOCSegmentation and VOCDetection as
:class:`~.detection_tables.DetectionTables`: the image paths, and the
segmentation masks' PNG paths (each checked to be a file) or the XML
objects' boxes (XYXY, float64 holding the integers torchvision reads),
names, labels (the index torchvision's wrapper gives a name) and
``difficult`` flags. The XML files are read once here, with the standard
library's parser; nothing of them is kept but the arrays."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from typing import Any

import numpy as np

from .cache import StringBlob
from .detection_tables import DetectionTables

__all__ = ["VOC_CATEGORIES", "voc_detection_tables", "voc_segmentation_tables"]

# The label of a name, as torchvision's wrapper gives it (0 is background).
VOC_CATEGORIES = (
    "__background__ aeroplane bicycle bird boat bottle bus car cat chair cow diningtable dog horse "
    "motorbike person pottedplant sheep sofa train tvmonitor"
).split()
_LABEL = {name: i for i, name in enumerate(VOC_CATEGORIES)}


def _root(dataset: Any) -> str:
    return os.fspath(dataset.root)


def voc_segmentation_tables(dataset: Any) -> DetectionTables:
    """A VOCSegmentation (not wrapped): its images and mask PNGs."""
    images, masks = list(dataset.images), list(dataset.masks)
    for k, path in enumerate(masks):
        if not os.path.isfile(path):
            raise ValueError(
                f"{_root(dataset)}: image {k} ({os.path.basename(images[k])}): its mask {path} "
                "is not a file (is SegmentationClass complete?)"
            )
    n = len(images)
    return DetectionTables(
        "voc_segmentation",
        _root(dataset),
        paths=StringBlob.of_paths(images, "VOC images"),
        mask_paths=StringBlob.of_paths(masks, "VOC masks"),
        image_ids=np.arange(n, dtype=np.int64),
        sizes=np.full((n, 2), -1, np.int64),
        first=np.zeros(n + 1, np.int64),
    )


def _text(node: ET.Element | None) -> str | None:
    return None if node is None or node.text is None else node.text.strip()


def _size(root: ET.Element) -> tuple[int, int]:
    size = root.find("size")
    try:
        return int(_text(size.find("height")) or ""), int(
            _text(size.find("width")) or ""
        )  # type: ignore[union-attr]
    except (AttributeError, ValueError):
        return -1, -1


class _Objects:
    def __init__(self, labels_needed: bool) -> None:
        self.labels_needed = labels_needed
        self.boxes: list = []
        self.names: list[str] = []
        self.labels: list[int] = []
        self.difficult: list[int] = []

    def read(self, path: str, image: int) -> tuple[int, tuple[int, int]]:
        """The objects of one XML file: (their count, the image's size)."""
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            raise ValueError(
                f"{path}: image {image}: the annotation XML cannot be read: {e}"
            ) from None
        objects = root.findall("object")
        for k, obj in enumerate(objects):
            self.one(obj, f"{path}: image {image}, object {k}")
        return len(objects), _size(root)

    def one(self, obj: ET.Element, where: str) -> None:
        name = _text(obj.find("name"))
        box = obj.find("bndbox")
        if name is None or box is None:
            raise ValueError(f"{where}: the object has no <name> or no <bndbox>")
        try:
            # int() of the text, as torchvision's wrapper reads it.
            coords = [
                int(_text(box.find(p)) or "") for p in ("xmin", "ymin", "xmax", "ymax")
            ]
        except ValueError:
            raise ValueError(
                f"{where} ({name}): bndbox coordinates must be integers"
            ) from None
        label = _LABEL.get(name, -1)
        if label < 0 and self.labels_needed:
            raise ValueError(f"{where}: name {name!r} is not one of the 20 VOC classes")
        difficult = _text(obj.find("difficult")) or "0"
        self.boxes.append(coords)
        self.names.append(name)
        self.labels.append(label)
        self.difficult.append(1 if difficult == "1" else 0)


def voc_detection_tables(dataset: Any, labels_needed: bool) -> DetectionTables:
    """A VOCDetection (not wrapped): its images and the XML objects;
    ``labels_needed``: a name outside the VOC classes is an error."""
    objects = _Objects(labels_needed)
    counts, sizes = [], []
    for k, path in enumerate(dataset.annotations):
        count, size = objects.read(path, k)
        counts.append(count)
        sizes.append(size)
    n, m = len(counts), len(objects.names)
    first = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    return DetectionTables(
        "voc_detection",
        _root(dataset),
        paths=StringBlob.of_paths(list(dataset.images), "VOC images"),
        image_ids=np.arange(n, dtype=np.int64),
        sizes=np.array(sizes, np.int64).reshape(n, 2),
        first=first,
        boxes=np.array(objects.boxes, np.float64).reshape(m, 4),
        category_id=np.array(objects.labels, np.int64),
        iscrowd=np.array(objects.difficult, np.uint8),
        annotation_id=np.arange(m, dtype=np.int64) - np.repeat(first[:-1], counts),
        names=StringBlob.from_strings(objects.names),
    )
