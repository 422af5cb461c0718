"""The segmentation reference's own pair transforms, as its ``train.py``
uses them without ``--use-v2`` (``references/segmentation/transforms.py``
in torchvision's repository, not part of any package): each object is
called on the (image, target) pair and returns the pair, drawing from
Python's ``random`` and torch. Written for the benchmarks and the tests
from how those classes behave; ``train_preset`` and ``eval_preset``
assemble them as the reference's presets do (backend "pil" or
"tensor")."""

from __future__ import annotations

import random

import numpy as np
import torch
from torchvision import transforms as v1
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


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
