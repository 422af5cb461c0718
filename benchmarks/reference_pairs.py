"""The segmentation reference's own pair transforms, as its ``train.py``
uses them without ``--use-v2`` (``references/segmentation/transforms.py``
and, for COCO, the category filter and mask merge of its
``coco_utils.py``, in torchvision's repository, not part of any package):
each object is called on the (image, target) pair and returns the pair,
drawing from Python's ``random`` and torch. Written for the benchmarks and the tests
from how those classes behave; ``train_preset`` and ``eval_preset``
assemble them as the reference's presets do (backend "pil" or
"tensor")."""

from __future__ import annotations

import copy
import random

import numpy as np
import torch
from torchvision import transforms as v1
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# The COCO category ids the reference keeps, each mapped to its place here
# (VOC's 21 classes; 0, no COCO id, the background).
VOC_FROM_COCO = [
    0,
    5,
    2,
    16,
    9,
    44,
    6,
    3,
    17,
    62,
    21,
    67,
    18,
    19,
    4,
    1,
    64,
    20,
    63,
    7,
    72,
]


class FilterAndRemapCocoCategories:
    """Keeps the annotations of the listed categories, each category id
    made its place in the list (remap) or left."""

    def __init__(self, categories, remap=True):
        self.categories, self.remap = categories, remap

    def __call__(self, image, anno):
        kept = [a for a in anno if a["category_id"] in self.categories]
        if self.remap:
            kept = copy.deepcopy(kept)
            for a in kept:
                a["category_id"] = self.categories.index(a["category_id"])
        return image, kept


class ConvertCocoPolysToMask:
    """The annotations as one PIL mask of the image's size: each one's
    category where it alone covers a pixel, 255 where several do, 0
    elsewhere (pycocotools rasterizes them)."""

    def __call__(self, image, anno):
        from PIL import Image
        from pycocotools import mask as coco_mask

        width, height = image.size
        layers = []
        for a in anno:
            rle = coco_mask.frPyObjects(a["segmentation"], height, width)
            pixels = coco_mask.decode(rle)
            if pixels.ndim == 2:
                pixels = pixels[..., None]
            layers.append(torch.as_tensor(pixels, dtype=torch.uint8).any(dim=2))
        if not layers:
            return image, Image.fromarray(np.zeros((height, width), np.uint8))
        stack = torch.stack(layers).to(torch.uint8)
        values = torch.as_tensor([a["category_id"] for a in anno], dtype=torch.uint8)
        merged = (stack * values[:, None, None]).max(dim=0).values
        merged[stack.sum(dim=0) > 1] = 255
        return image, Image.fromarray(merged.numpy())


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image, target):
        for step in self.transforms:
            image, target = step(image, target)
        return image, target


class RandomResize:
    """The shorter side to a size drawn from min_size..max_size, both
    included; the target nearest."""

    def __init__(self, min_size, max_size=None):
        self.min_size = min_size
        self.max_size = min_size if max_size is None else max_size

    def __call__(self, image, target):
        side = random.randint(self.min_size, self.max_size)
        nearest = InterpolationMode.NEAREST
        return (
            F.resize(image, side, antialias=True),
            F.resize(target, side, interpolation=nearest),
        )


class RandomHorizontalFlip:
    def __init__(self, flip_prob):
        self.flip_prob = flip_prob

    def __call__(self, image, target):
        if random.random() >= self.flip_prob:
            return image, target
        return F.hflip(image), F.hflip(target)


def _grow(picture, side, fill):
    """The PIL picture padded at the right and bottom to at least side x
    side where its shorter side is below side."""
    width, height = picture.size
    if min(width, height) >= side:
        return picture
    extra = [0, 0, max(side - width, 0), max(side - height, 0)]
    return F.pad(picture, extra, fill=fill)


class RandomCrop:
    """A square of size, drawn by v1.RandomCrop.get_params, after padding
    the image with 0 and the target with 255 where smaller."""

    def __init__(self, size):
        self.size = size

    def __call__(self, image, target):
        image, target = _grow(image, self.size, 0), _grow(target, self.size, 255)
        box = v1.RandomCrop.get_params(image, (self.size, self.size))
        return F.crop(image, *box), F.crop(target, *box)


class PILToTensor:
    def __call__(self, image, target):
        values = torch.as_tensor(np.array(target), dtype=torch.int64)
        return F.pil_to_tensor(image), values


class ToDtype:
    def __init__(self, dtype, scale=False):
        self.dtype, self.scale = dtype, scale

    def __call__(self, image, target):
        if self.scale:
            return F.convert_image_dtype(image, self.dtype), target
        return image.to(dtype=self.dtype), target


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, image, target):
        return F.normalize(image, mean=self.mean, std=self.std), target


class Preset:
    """As the reference's preset classes: a Compose called on the pair."""

    def __init__(self, steps):
        self.transforms = Compose(steps)

    def __call__(self, img, target):
        return self.transforms(img, target)


def coco_transforms(preset, categories=VOC_FROM_COCO):
    """What the reference's COCO dataset is given without --use-v2: the
    filter, the merge, then the preset, in its Compose."""
    return Compose(
        [FilterAndRemapCocoCategories(categories), ConvertCocoPolysToMask(), preset]
    )


def train_preset(base, crop, hflip_prob=0.5, backend="pil"):
    """SegmentationPresetTrain(base_size=base, crop_size=crop) as the
    reference assembles it without --use-v2."""
    head = [PILToTensor()] if backend == "tensor" else []
    steps = head + [RandomResize(base // 2, base * 2)]
    if hflip_prob > 0:
        steps.append(RandomHorizontalFlip(hflip_prob))
    steps.append(RandomCrop(crop))
    if backend == "pil":
        steps.append(PILToTensor())
    steps += [ToDtype(torch.float, scale=True), Normalize(MEAN, STD)]
    return Preset(steps)


def eval_preset(base, backend="pil"):
    """SegmentationPresetEval(base_size=base) without --use-v2."""
    head = [PILToTensor()] if backend == "tensor" else []
    tail = [PILToTensor()] if backend == "pil" else []
    steps = head + [RandomResize(base, base)] + tail
    return Preset(steps + [ToDtype(torch.float, scale=True), Normalize(MEAN, STD)])
