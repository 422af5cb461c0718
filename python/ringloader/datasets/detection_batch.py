"""A COCO detection dataset as the loader reads it: torchvision's
``CocoDetection`` wrapped by ``wrap_dataset_for_transforms_v2`` (what the
detection reference builds), seen as its image files (decoded in C, each at
its own size: a varying spec) and, per batch, each sample's target rebuilt
in Python from the :class:`~.detection_tables.DetectionTables`.

The dataset's ``transforms`` (a v2 ``Compose``, or the reference's preset
class whose ``__call__(img, target)`` only returns ``self.transforms(img,
target)``) is split in two: the pixels' head (``ToImage``,
``PILToTensor``, ``ToDtype`` or ``ConvertImageDtype`` of images,
``RandomHorizontalFlip``, on the PIL image or the tensor), which the compiler fuses, and a tail that
touches the targets alone (``ConvertBoundingBoxFormat``,
``SanitizeBoundingBoxes``, ``ClampBoundingBoxes``, ``ToPureTensor``), which
runs, the user's own objects, on each ``(image, target)`` as the Compose
would. A flip the plan drew for a sample (same seed, epoch and key as its
pixels) is applied to its boxes and masks by torchvision's functional
``horizontal_flip``; a ``ConvertImageDtype``, which converts boxes and
masks too, runs again on the pair. Any other step (a resize, crop, zoom-out, colour
jitter) is not followed on the targets yet: reading such a dataset raises
:class:`~.composed.UnreadableComposition` saying so, and
``ringloader.DataLoader`` hands it to torch's DataLoader with that reason.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import numpy as np

from .base import Sources

__all__ = [
    "DetectionImages",
    "NotNative",
    "detection_of",
    "detection_reason",
    "detection_stand_in",
]


class NotNative(TypeError):
    """A detection dataset ringloader recognises but cannot read natively
    (yet); the message says why. Raised as the composition errors are
    (``UnreadableComposition`` subclasses it too when imported there)."""


def _head_and_tail(transforms: Any) -> tuple[list, list, Optional[str]]:
    """(pixel steps, target steps, why not) for the wrapped dataset's
    ``transforms``."""
    from torchvision.transforms import v2

    from ..adapt import pair_wrapped

    # The reference's presets: a class whose __call__(img, target) returns
    # self.transforms(img, target).
    while transforms is not None and pair_wrapped(transforms) is not None:
        transforms = pair_wrapped(transforms)
    if transforms is None:
        return [], [], None
    if not isinstance(transforms, v2.Compose):
        return (
            [],
            [],
            (
                f"its transforms is a {type(transforms).__name__}, not a "
                "torchvision.transforms.v2.Compose"
            ),
        )
    items: list = []
    stack = list(reversed(transforms.transforms))
    while stack:
        t = stack.pop()
        if isinstance(t, v2.Compose):
            stack.extend(reversed(t.transforms))
        else:
            items.append(t)
    pixels = (
        v2.ToImage,
        v2.PILToTensor,
        v2.ToDtype,
        v2.ConvertImageDtype,
        v2.RandomHorizontalFlip,
    )
    targets = (
        v2.ConvertBoundingBoxFormat,
        v2.SanitizeBoundingBoxes,
        v2.ClampBoundingBoxes,
        v2.ToPureTensor,
    )
    head: list = []
    tail: list = []
    for t in items:
        name = type(t).__name__
        if type(t) in targets:
            tail.append(t)
        elif type(t) in pixels and not tail:
            if isinstance(t, v2.ToDtype) and isinstance(t.dtype, dict):
                return [], [], "ToDtype with a dict of dtypes"
            head.append(t)
        elif type(t) in pixels:
            return [], [], f"{name} comes after a step on the targets"
        else:
            return (
                [],
                [],
                (
                    f"{name} is not fused with a detection sample's targets yet "
                    "(natively: ToImage, ToDtype, RandomHorizontalFlip, then "
                    "ConvertBoundingBoxFormat, SanitizeBoundingBoxes, ToPureTensor)"
                ),
            )
    return head, tail, None


class DetectionImages:
    """What the loader reads for a wrapped CocoDetection: its image files
    (``ringloader_sources``, each sample's target its image's row in the
    tables), the fused ``transform`` and, per batch, :meth:`items`."""

    def __init__(self, wrapper: Any, tables: Any) -> None:
        self.wrapper = wrapper
        self.tables = tables
        self.target_transform = None
        self._given: Any = None
        self._head: Any = None
        self._tail: list = []
        self._flips = False
        self._image_type: Any = None
        self._split()
        self._sources: Optional[Sources] = None
        if tables.problems:
            import warnings

            from ..errors import DataWarning

            first = tables.problems[min(tables.problems)]
            warnings.warn(
                f"{len(tables.problems)} image(s) of {tables.source} have an "
                "annotation that cannot be read: each raises when it is read "
                '(with on_error="skip" the next image is read in its place). '
                f"The first: {first}",
                DataWarning,
                stacklevel=2,
            )

    def _split(self) -> None:
        from torchvision import tv_tensors
        from torchvision.transforms import v2

        given = object.__getattribute__(self.wrapper, "transforms")
        if given is self._given and self._head is not None:
            return
        head, tail, why = _head_and_tail(given)
        if why is not None:
            raise NotNative(f"the wrapped CocoDetection: {why}")
        self._given = given
        self._head = v2.Compose(head) if head else None
        # ConvertImageDtype converts boxes and masks too (ToDtype of one
        # dtype, images alone): run again on the pair, where the image,
        # already of its dtype, is left as it is.
        again = [t for t in head if isinstance(t, v2.ConvertImageDtype)]
        self._tail = again + tail
        self._flips = any(isinstance(t, v2.RandomHorizontalFlip) for t in head)
        to_image = any(isinstance(t, v2.ToImage) for t in head)
        self._image_type = tv_tensors.Image if to_image else None

    @property
    def transform(self) -> Any:
        """The pixels' part of the dataset's transforms (the same object
        while the transforms are)."""
        self._split()
        return self._head

    @property
    def flips(self) -> bool:
        return self._flips

    def __len__(self) -> int:
        return len(self.tables)

    def ringloader_sources(self) -> Sources:
        """The images' files, each sample's target its row in the tables.
        An image with a problem (``DetectionTables.problems``) is read as
        the next image without one (the last wrapping to the first), which
        is what ``on_error="skip"`` gives in its place; otherwise
        :meth:`batch` raises its problem."""
        if self._sources is None:
            rows = np.arange(len(self.tables), dtype=np.int64)
            bad = np.zeros(len(rows), bool)
            bad[list(self.tables.problems)] = True
            good = np.flatnonzero(~bad)
            if bad.any() and len(good):
                after = np.searchsorted(good, rows[bad]) % len(good)
                rows[bad] = good[after]
            paths = self.tables.paths.take(rows) if bad.any() else self.tables.paths
            self._sources = Sources(paths=paths, targets=rows)
        return self._sources

    def describe(self, index: int) -> str:
        return str(self.tables.paths[index])

    def batch(
        self,
        src: Any,
        images: list,
        taken: Any,
        spec: Any,
        seed: int,
        on_error: str = "raise",
    ) -> list[tuple[Any, Any]]:
        """A batch's items (:meth:`items`): ``taken`` the batch as the
        pipeline gave it (its positions' indices, random keys and epoch),
        ``spec`` the fused transform's, whose plan says whether each image
        was flipped. A sample whose image has a problem raises it (a
        ValueError naming the annotation file, image and annotation) unless
        ``on_error`` is "skip" (its sources read another image in its
        place)."""
        from .. import _core
        from . import targets as _targets

        problems = self.tables.problems
        if problems and on_error != "skip":
            for i in taken.idx:
                if int(i) in problems:
                    raise ValueError(problems[int(i)])
        rows = [_targets.item(src.targets, int(i)) for i in taken.idx]
        for image, r in zip(images, rows):
            self._check_size(r, image.shape[-2], image.shape[-1])
        flipped = None
        if self._flips:
            sizes = self.tables.sizes  # (height, width)
            flipped = [
                bool(
                    _core.plan_window(
                        spec,
                        int(sizes[r][1]),
                        int(sizes[r][0]),
                        seed,
                        taken.epoch,
                        int(k),
                    )["flip"]
                )
                for r, k in zip(rows, taken.keys)
            ]
        return self.items(images, rows, flipped)

    def _check_size(self, row: int, height: int, width: int) -> None:
        """The decoded image's size is the targets' canvas, as torchvision's
        wrapper takes it: one the images entry lacks (-1) is filled in; one
        that differs is refused, naming the file."""
        sizes = self.tables.sizes
        given = (int(sizes[row][0]), int(sizes[row][1]))
        if given == (-1, -1):
            sizes[row] = (height, width)
        elif given != (height, width):
            raise ValueError(
                f"{self.tables.paths[row]}: the image is {height}x{width} "
                f"(height x width) but {self.tables.source} gives "
                f"{given[0]}x{given[1]}: fix its images entry (ringloader takes "
                "the boxes' canvas and the masks' size from it)"
            )

    def items(
        self, images: list, rows: list[int], flipped: Optional[list[bool]]
    ) -> list[tuple[Any, Any]]:
        """Each ``(image, target)`` as indexing the wrapped dataset gives
        it: ``rows`` the images' rows in the tables, ``flipped`` whether
        the plan flipped each (None: no flip in the transform)."""
        from torchvision.transforms.v2 import functional as F

        from .detection_target import target

        out = []
        for k, (image, i) in enumerate(zip(images, rows)):
            t = target(self.tables, i)
            if flipped is not None and flipped[k] and len(t) > 1:
                t = {key: _flip(F, v) for key, v in t.items()}
            if self._image_type is not None:
                image = image.as_subclass(self._image_type)
            sample: Any = (image, t)
            for step in self._tail:
                sample = step(*sample)
            out.append(sample)
        return out


def _flip(F: Any, value: Any) -> Any:
    from torchvision import tv_tensors

    if isinstance(value, (tv_tensors.BoundingBoxes, tv_tensors.Mask)):
        return F.horizontal_flip(value)
    return value


def detection_reason(leaves: list, options: dict) -> Optional[str]:
    """Why the datasets ``leaves`` (a dataset's, :func:`.composed.leaves_of`),
    with a wrapped CocoDetection among them, are not read natively with
    the DataLoader's ``options``, or None."""
    det = [leaf for leaf in leaves if isinstance(leaf, DetectionImages)]
    if not det:
        return None
    if len(leaves) > 1:
        return "a ConcatDataset of detection datasets is not read natively yet"
    if options.get("layout", "NCHW") != "NCHW":
        return "a detection dataset is read natively with layout='NCHW' only"
    return None


def detection_of(leaves: list) -> Optional[DetectionImages]:
    """The wrapped CocoDetection a loader reads (``leaves``: the datasets
    it reads, one for a detection dataset alone or under a Subset), or
    None."""
    return leaves[0] if isinstance(leaves[0], DetectionImages) else None


def detection_stand_in(dataset: Any) -> Any:
    """A :class:`DetectionImages` for a wrapped CocoDetection (made once
    per dataset), else ``dataset``. Raises :class:`NotNative` for a
    detection or segmentation dataset that is not read natively yet. The
    tables are built once per dataset and kept on it, also when it is not
    read natively (DataLoader asks several times before it falls back)."""
    if "torchvision" not in sys.modules:
        return dataset  # nothing of torchvision's can be here
    if isinstance(dataset, DetectionImages):
        return dataset
    kept = getattr(dataset, "__dict__", {})
    cached = kept.get("_ringloader_detection")
    if cached is not None:
        cached._split()
        return cached
    tables = kept.get("_ringloader_tables")
    if tables is None:
        from .detection import detection_tables

        tables = detection_tables(dataset)
        if tables is None:
            return dataset
        kept["_ringloader_tables"] = tables
    if tables.kind == "voc_segmentation":
        return dataset  # segmentation_batch.segmentation_stand_in reads it
    if tables.kind != "coco":
        raise NotNative("VOCDetection is not read natively yet (only CocoDetection)")
    if not tables.wrapped:
        raise NotNative(
            "a CocoDetection not wrapped by wrap_dataset_for_transforms_v2 gives "
            "its json's dicts, which are not read natively"
        )
    out = DetectionImages(dataset, tables)
    kept["_ringloader_detection"] = out
    return out
