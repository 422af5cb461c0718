"""COCO person-keypoints annotations as a v2 detection dataset:
:class:`CocoKeypoints`, torchvision's ``CocoDetection`` whose target is
the dict ``wrap_dataset_for_transforms_v2`` makes of it (boxes, labels,
image_id, masks and the json's own fields, by ``target_keys``) with each
annotation's keypoints as well: ``"keypoints"``, a float32
``tv_tensors.KeyPoints`` (N, K, 2) on the image's canvas, and
``"keypoints_visibility"``, COCO's v flags as an int64 tensor (N, K).
torchvision's wrapper offers no keypoints key, so the dataset builds its
target itself, then runs ``transforms(image, target)``: any DataLoader
reads it, and ``ringloader.DataLoader`` reads it natively as it reads a
wrapped CocoDetection (:mod:`.detection`, :mod:`.detection_batch`), the
keypoints moved by the plan its pixels went through.

K is the count most of the file's annotations give (``num_keypoints``
here: 17 for COCO's person category). An annotation whose keypoints are
not K x, y, v triples of finite numbers with v 0, 1 or 2 raises a
ValueError naming the annotation file, the image and the annotation when
its image is read (:func:`.coco.keypoints_of`; the loader's tables name
the same, :mod:`.coco`)."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.datasets import CocoDetection
from torchvision.transforms.v2 import functional as F

from .coco import annotation_error, keypoint_count, keypoints_of
from .detection_tables import COCO_POINT_DEFAULT, COCO_POINT_KEYS, POINT_KEYS

__all__ = ["CocoKeypoints"]

_BUILT = frozenset({"image_id", "boxes", "masks", "labels"}) | POINT_KEYS


def _target_keys(given: Any) -> frozenset:
    """``target_keys`` as torchvision's wrapper reads it: None the
    defaults, "all" every key, else a collection of the keys."""
    if given is None:
        return COCO_POINT_DEFAULT
    if given == "all":
        return COCO_POINT_KEYS
    if isinstance(given, str) or not all(isinstance(k, str) for k in given):
        raise ValueError(
            f"target_keys is None, 'all' or a collection of keys, not {given!r}"
        )
    keys = frozenset(given)
    unknown = keys - COCO_POINT_KEYS
    if unknown:
        raise ValueError(
            f"target_keys {sorted(unknown)} are not among {sorted(COCO_POINT_KEYS)}"
        )
    return keys


def _mask(segmentation: Any, height: int, width: int) -> torch.Tensor:
    """A segmentation (polygons, or an RLE with counts listed or
    compressed) as a uint8 mask, through pycocotools."""
    from pycocotools import mask as coco_mask

    if isinstance(segmentation, dict):
        rle = segmentation
        if not isinstance(rle["counts"], str):
            rle = coco_mask.frPyObjects(rle, height, width)
    elif isinstance(segmentation, list):
        rle = coco_mask.merge(coco_mask.frPyObjects(segmentation, height, width))
    else:
        raise ValueError(
            f"a segmentation is a list of polygons or an RLE dict, not {type(segmentation)}"
        )
    return torch.from_numpy(coco_mask.decode(rle))


class CocoKeypoints(CocoDetection):
    """torchvision's CocoDetection over a person-keypoints json, giving
    ``(image, target)`` with the target the dict torchvision's
    ``wrap_dataset_for_transforms_v2(..., target_keys=...)`` gives plus
    ``"keypoints"`` and ``"keypoints_visibility"``.

    ``root``, ``annFile``, ``transform``, ``target_transform``,
    ``transforms``: CocoDetection's (``transforms``: a v2 composition run
    on ``(image, target)``, what ringloader.DataLoader reads natively).
    ``target_keys``: None (``image_id``, ``boxes``, ``labels``,
    ``keypoints``, ``keypoints_visibility``), "all", or a collection of
    those and of ``masks``, ``segmentation``, ``area``, ``iscrowd``,
    ``bbox``, ``category_id``. An image without annotations gives
    ``{"image_id": id}``, as torchvision's wrapper does.

    ``num_keypoints``: K, the points each annotation has.
    """

    def __init__(
        self,
        root: Union[str, os.PathLike],
        annFile: Union[str, os.PathLike],
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
        transforms: Optional[Callable] = None,
        *,
        target_keys: Any = None,
    ) -> None:
        super().__init__(
            root, os.fspath(annFile), transform, target_transform, transforms
        )
        self.ann_file = os.fspath(annFile)
        self.target_keys = _target_keys(target_keys)
        self.num_keypoints = keypoint_count(self.coco)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        if not isinstance(index, int):
            raise ValueError(
                f"Index must be of type integer, got {type(index)} instead."
            )
        image_id = self.ids[index]
        image = self._load_image(image_id)
        target = self.target_of(image_id, image, self._load_target(image_id))
        if self.transforms is not None:
            image, target = self.transforms(image, target)
        return image, target

    def target_of(self, image_id: int, image: Any, anns: list[dict]) -> dict:
        """The target of image ``image_id`` (decoded as ``image``) from its
        annotations ``anns``, before the transforms."""
        if not anns:
            return {"image_id": image_id}
        keys = self.target_keys
        height, width = (int(v) for v in F.get_size(image))
        out: dict[str, Any] = {}
        if "image_id" in keys:
            out["image_id"] = image_id
        if "boxes" in keys:
            xywh = tv_tensors.BoundingBoxes(
                [a["bbox"] for a in anns],
                format=tv_tensors.BoundingBoxFormat.XYWH,
                canvas_size=(height, width),
            )
            out["boxes"] = F.convert_bounding_box_format(
                xywh, new_format=tv_tensors.BoundingBoxFormat.XYXY
            )
        if "masks" in keys:
            each = [_mask(a["segmentation"], height, width) for a in anns]
            out["masks"] = tv_tensors.Mask(torch.stack(each))
        if "labels" in keys:
            out["labels"] = torch.tensor([a["category_id"] for a in anns])
        if keys & POINT_KEYS:
            points = self._points(image_id, anns)
            if "keypoints" in keys:
                xy = torch.from_numpy(points[..., :2].astype(np.float32))
                out["keypoints"] = tv_tensors.KeyPoints(xy, canvas_size=(height, width))
            if "keypoints_visibility" in keys:
                out["keypoints_visibility"] = torch.from_numpy(
                    points[..., 2].astype(np.int64)
                )
        for key in keys - _BUILT:
            out[key] = [a[key] for a in anns]
        return out

    def _points(self, image_id: int, anns: list[dict]) -> np.ndarray:
        """The annotations' keypoints, float64 (N, K, 3); a ValueError
        naming the annotation file, image and annotation for a bad one."""
        out = np.zeros((len(anns), self.num_keypoints, 3))
        for j, ann in enumerate(anns):
            try:
                out[j] = keypoints_of(ann, self.num_keypoints)
            except ValueError as e:
                name = self.coco.imgs[image_id]["file_name"]
                raise annotation_error(
                    self.ann_file, image_id, name, ann.get("id"), str(e)
                ) from None
        return out
