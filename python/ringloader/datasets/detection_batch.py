"""A COCO detection dataset as the loader reads it: torchvision's
``CocoDetection`` wrapped by ``wrap_dataset_for_transforms_v2`` (what the
detection reference builds), seen as its image files (decoded in C) and,
per batch, each sample's target rebuilt from the
:class:`~.detection_tables.DetectionTables` on the plan its pixels went
through.

The dataset's ``transforms`` (a v2 ``Compose``, or the reference's preset
class whose ``__call__(img, target)`` only returns ``self.transforms(img,
target)``) is split in two: the pixels' head, every step before the first
one on the targets alone, which the compiler must fuse whole (geometry the
targets follow: Resize with or without max_size, RandomResize,
RandomShortestSize, ScaleJitter, RandomCrop with its padding and pad_if_needed,
CenterCrop, RandomResizedCrop, RandomZoomOut, RandomIoUCrop, the flips,
RandomAffine, RandomRotation and RandomPerspective, alone or in RandomApply,
RandomChoice and RandomOrder (which the C augment chain runs after the plan,
on the fixed size or, without a crop, each sample's own); and steps that
move no pixel:
ToImage, PILToTensor, ToDtype or ConvertImageDtype of images, colour ops),
and a tail that touches the targets alone (``ConvertBoundingBoxFormat``,
``SanitizeBoundingBoxes``, ``ClampBoundingBoxes``, ``ClampKeyPoints``,
``SanitizeKeyPoints``, ``ToPureTensor``), which
runs, the user's own objects, on each ``(image, target)`` as the Compose
would. Where the head moves pixels, each sample's plan (same seed, epoch
and key as its pixels) moves its target: boxes through
``_core.plan_boxes`` onto the plan's output canvas, a CocoKeypoints'
keypoints through ``_core.plan_keypoints`` (never clamped), masks rasterized
through ``_core.plan_maps``' index maps (padded as torchvision pads a
Mask, a RandomZoomOut's canvas too); a RandomIoUCrop's crop is drawn
from the sources' boxes table
(``Sources.plan_boxes``: each image's finite boxes), and its target's
boxes are mapped with those rows (cropped, clamped, the boxes whose centre
it leaves out zeroed for SanitizeBoundingBoxes); a ``ConvertImageDtype``,
which converts boxes and masks too, runs again on the pair. The warps
of the augment chain (RandomAffine, RandomRotation, RandomPerspective, with the parameters
and group picks the pixels drew) follow the plan: ``_core.plan_boxes``
maps the boxes through them after the plan's steps, and
``_core.plan_warp_masks`` warps the masks sampled through the maps with
the pixels' kernel, nearest, with their fill for a Mask (one value for
all of them). Any other step (a policy, which torchvision
itself refuses on boxes) is not followed on the targets: reading such a
dataset raises :class:`~.composed.UnreadableComposition` saying so, and
``ringloader.DataLoader`` hands it to torch's DataLoader with that reason.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import numpy as np

from .base import Sources
from .detection_tail import QuickTail
from .detection_target import plan_table

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


def _kinds() -> tuple[tuple, tuple, tuple]:
    """(geometry the targets follow, pixel steps that move no pixel, steps
    on the targets alone): torchvision.transforms.v2's classes."""
    from torchvision.transforms import v2

    from ..transforms_v2 import FixedSizeCrop

    geometry = (
        FixedSizeCrop,
        v2.Resize,
        v2.RandomResize,
        v2.RandomShortestSize,
        v2.ScaleJitter,
        v2.RandomCrop,
        v2.CenterCrop,
        v2.RandomResizedCrop,
        v2.RandomZoomOut,
        v2.RandomIoUCrop,
        v2.RandomHorizontalFlip,
        v2.RandomVerticalFlip,
    ) + _warps()
    pixels = (
        v2.ToImage,
        v2.PILToTensor,
        v2.ToDtype,
        v2.ConvertImageDtype,
        v2.ColorJitter,
        v2.RandomPhotometricDistort,
        v2.Grayscale,
        v2.RandomGrayscale,
        v2.RandomAutocontrast,
        v2.RandomEqualize,
        v2.RandomPosterize,
        v2.RandomSolarize,
        v2.RandomAdjustSharpness,
        v2.RandomInvert,
        v2.RandomChannelPermutation,
        v2.Normalize,
    )
    targets = (
        v2.ConvertBoundingBoxFormat,
        v2.SanitizeBoundingBoxes,
        v2.ClampBoundingBoxes,
        v2.ToPureTensor,
    )
    # torchvision 0.23 and later: the keypoints' own steps
    targets += tuple(
        getattr(v2, name)
        for name in ("ClampKeyPoints", "SanitizeKeyPoints")
        if hasattr(v2, name)
    )
    return geometry, pixels, targets


def _warps() -> tuple:
    """The steps the augment chain warps the pixels by (``_core.plan_warp_masks``
    and ``plan_boxes`` follow them), and the groups that may hold them."""
    from torchvision.transforms import v2

    return (v2.RandomAffine, v2.RandomRotation, v2.RandomPerspective)


def _groups() -> tuple:
    from torchvision.transforms import v2

    return (v2.RandomApply, v2.RandomChoice, v2.RandomOrder)


def _leaves(group: Any) -> list:
    """The steps a group (RandomApply, RandomChoice, RandomOrder) holds,
    through nested groups and Composes."""
    from torchvision.transforms import v2

    out: list = []
    for t in group.transforms:
        if isinstance(t, (v2.Compose,) + _groups()):
            out += _leaves(t)
        else:
            out.append(t)
    return out


def _group_reason(group: Any) -> Optional[str]:
    """Why a group's steps are not followed on the targets (each must be a
    RandomAffine, a RandomRotation, a RandomPerspective or a colour op), or
    None."""
    pixels = _kinds()[1]
    for t in _leaves(group):
        if type(t) not in _warps() + pixels:
            return (
                f"{type(t).__name__} in a {type(group).__name__} is not followed "
                f"on a detection sample's targets yet ({NATIVE})"
            )
    return None


def _flat(head: list) -> list:
    """The head's steps, each group's in its place."""
    out: list = []
    for t in head:
        out += _leaves(t) if isinstance(t, _groups()) else [t]
    return out


def _warp_fill(head: list) -> Any:
    """The one value the head's warps (RandomAffine, RandomRotation,
    RandomPerspective) fill a Mask with (0 without them), or a str saying
    why it is not followed."""
    fills = {_mask_fill(t) for t in _flat(head) if isinstance(t, _warps())}
    for fill in fills:
        if isinstance(fill, str):
            return fill
    if len(fills) > 1:
        return f"RandomAffine, RandomRotation and RandomPerspective fill masks with {sorted(fills)}: one fill is followed"
    return fills.pop() if fills else 0


NATIVE = (
    "natively: Resize, RandomResize, RandomShortestSize, ScaleJitter, RandomCrop, "
    "CenterCrop, RandomResizedCrop, RandomZoomOut, RandomIoUCrop, the flips, "
    "ringloader.transforms_v2.FixedSizeCrop, "
    "RandomAffine, RandomRotation, RandomPerspective (in RandomApply, RandomChoice, "
    "RandomOrder too), "
    "ToImage, ToDtype and colour ops, then ConvertBoundingBoxFormat, SanitizeBoundingBoxes, "
    "ClampBoundingBoxes, ClampKeyPoints, SanitizeKeyPoints, ToPureTensor"
)


def _pads() -> tuple:
    """The steps that pad a Mask with their fill."""
    from torchvision.transforms import v2

    from ..transforms_v2 import FixedSizeCrop

    return (v2.RandomCrop, v2.RandomZoomOut, FixedSizeCrop)


def _mask_fill(step: Any) -> Any:
    """The value a RandomCrop, RandomZoomOut or FixedSizeCrop pads a Mask
    with (its fill dict's Mask entry, "others", or its one fill), or a str
    saying why it is not followed."""
    from torchvision import tv_tensors
    from torchvision.transforms.v2._utils import _get_fill

    name = type(step).__name__
    if getattr(step, "padding_mode", "constant") != "constant":
        return (
            f"{name} with padding_mode={step.padding_mode!r} (torchvision "
            "refuses bounding boxes under it)"
        )
    fill = _get_fill(step._fill, tv_tensors.Mask)
    if isinstance(fill, (list, tuple)) and len(fill) == 1:
        fill = fill[0]
    if fill is None:
        return 0
    if isinstance(fill, (int, float)) and float(fill).is_integer() and 0 <= fill <= 255:
        return int(fill)
    return f"{name}'s fill {fill!r} for masks (an integer 0..255 is followed)"


def _head_and_tail(transforms: Any) -> tuple[list, list, Optional[str]]:
    """(pixel steps, target steps, why not) for the wrapped dataset's
    ``transforms``: the head is every step before the first one on the
    targets alone, each geometry the targets follow or a step that moves
    no pixel."""
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
    geometry, pixels, targets = _kinds()
    head: list = []
    tail: list = []
    for t in items:
        name = type(t).__name__
        tensor = any(isinstance(h, (v2.ToImage, v2.PILToTensor)) for h in head)
        if isinstance(t, v2.ConvertImageDtype) and not tensor:
            # It passes the PIL image by but converts the targets; the
            # tail's second run (_split) would convert the image too.
            return [], [], f"{name} before ToImage or PILToTensor"
        if type(t) in targets:
            tail.append(t)
        elif type(t) in geometry + pixels and tail:
            return [], [], f"{name} comes after a step on the targets"
        elif isinstance(t, v2.ToDtype) and isinstance(t.dtype, dict):
            return [], [], "ToDtype with a dict of dtypes"
        elif type(t) in _pads() and isinstance(_mask_fill(t), str):
            return [], [], _mask_fill(t)
        elif type(t) in _groups() and _group_reason(t) is not None:
            return [], [], _group_reason(t)
        elif type(t) in geometry + pixels + _groups():
            head.append(t)
        elif name == "FixedSizeCrop" and not type(t).__module__.startswith("torch"):
            return [], [], _FIXED_SIZE_CROP
        else:
            why = f"{name} is not followed on a detection sample's targets yet"
            return [], [], f"{why} ({NATIVE})"
    return head, tail, None


# The detection reference's own FixedSizeCrop (its lsj preset, also with
# --use-v2) edits v1's plain-tensor targets: on v2's BoundingBoxes its
# boolean index gives a plain tensor, which the v2 steps after it no longer
# see as boxes (tests/test_detect_geometry.py runs it under torch's
# DataLoader). Not followed, rather than made to give what it does not.
_FIXED_SIZE_CROP = (
    "FixedSizeCrop (the detection reference's own class, written for v1 "
    "targets) is not followed on v2 targets: where it crops, it leaves the "
    "boxes a plain tensor, which SanitizeBoundingBoxes then does not find "
    '("No bounding boxes were found"). ringloader.transforms_v2.FixedSizeCrop('
    'size, fill={tv_tensors.Mask: 0, "others": mean}), the same crop for v2 '
    "targets, runs natively in its place"
)


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
        self._quick: Optional[QuickTail] = None
        self._moves = False
        self._sized = False  # a resize or crop: the output hides the size
        self._mask_fill = 0
        self._warp_fill: Any = 0  # the head's warps' (RandomAffine, ...)
        self._warped = False  # the head has one
        self._iou_crop = False  # the plan draws from the boxes table
        self._image_type: Any = None
        # Whether each image's header was read (its size checked against
        # the tables) once the geometry hides the decoded size.
        self._seen = np.zeros(len(tables), dtype=bool)
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
        if why is None and isinstance(_warp_fill(head), str):
            why = _warp_fill(head)
        if why is None and head:
            why = _unfused(v2.Compose(head))
        if why is not None:
            name = type(self.wrapper).__name__  # WrappedCocoDetection, CocoKeypoints
            what = "the wrapped CocoDetection" if name.startswith("Wrapped") else name
            raise NotNative(f"{what}: {why}")
        self._given = given
        self._head = v2.Compose(head) if head else None
        # ConvertImageDtype converts boxes and masks too (ToDtype of one
        # dtype, images alone): run again on the pair, where the image,
        # already of its dtype, is left as it is.
        again = [t for t in head if isinstance(t, v2.ConvertImageDtype)]
        self._tail = again + tail
        # the reference's tail as plain tensor arithmetic, where it gives
        # what the user's steps give (detection_tail)
        self._quick = QuickTail.of(self._tail) if tail and not again else None
        geometry = _kinds()[0] + _groups()
        self._moves = any(isinstance(t, geometry) for t in head)
        self._warp_fill = _warp_fill(head)
        self._warped = any(isinstance(t, _warps()) for t in _flat(head))
        flips = (v2.RandomHorizontalFlip, v2.RandomVerticalFlip)
        self._sized = any(
            isinstance(t, geometry) and not isinstance(t, flips) for t in head
        )
        self._iou_crop = any(isinstance(t, v2.RandomIoUCrop) for t in head)
        crops = [_mask_fill(t) for t in head if type(t) in _pads()]
        self._mask_fill = crops[0] if crops else 0
        to_image = any(isinstance(t, v2.ToImage) for t in head)
        self._image_type = tv_tensors.Image if to_image else None

    @property
    def transform(self) -> Any:
        """The pixels' part of the dataset's transforms (the same object
        while the transforms are)."""
        self._split()
        return self._head

    @property
    def moves(self) -> bool:
        """Whether the transform moves pixels (a resize, crop or flip), so
        that each sample's targets follow its plan."""
        return self._moves

    def __len__(self) -> int:
        return len(self.tables)

    def ringloader_sources(self) -> Sources:
        """The images' files, each sample's target its row in the tables.
        An image with a problem (``DetectionTables.problems``) is read as
        the next image without one (the last wrapping to the first), which
        is what ``on_error="skip"`` gives in its place; otherwise
        :meth:`batch` raises its problem. Where the transform has a
        RandomIoUCrop, ``plan_boxes`` is each sample's boxes (the same
        rows: :func:`.detection_target.plan_table`)."""
        self._split()
        if (
            self._sources is not None
            and self._iou_crop
            and (self._sources.plan_boxes is None)
        ):
            self._sources = None
        if self._sources is None:
            rows = np.arange(len(self.tables), dtype=np.int64)
            bad = np.zeros(len(rows), bool)
            bad[list(self.tables.problems)] = True
            good = np.flatnonzero(~bad)
            if bad.any() and len(good):
                after = np.searchsorted(good, rows[bad]) % len(good)
                rows[bad] = good[after]
            paths = self.tables.paths.take(rows) if bad.any() else self.tables.paths
            table = plan_table(self.tables, rows) if self._iou_crop else None
            self._sources = Sources(paths=paths, targets=rows, plan_boxes=table)
        return self._sources

    def describe(self, index: int) -> str:
        return str(self.tables.paths[index])

    def batch(
        self,
        src: Any,
        images: Any,
        taken: Any,
        spec: Any,
        seed: int,
        on_error: str = "raise",
        images_of: Optional[Any] = None,
    ) -> list[tuple[Any, Any]]:
        """A batch's items (:meth:`items`): ``taken`` the batch as the
        pipeline gave it (its positions' indices, the keys each position's
        pixels were drawn with, a replacement's own, and the epoch),
        ``spec`` the fused transform's, whose plan each sample's targets
        follow. A sample whose image has a problem raises it (a ValueError
        naming the annotation file, image and annotation) unless
        ``on_error`` is "skip" (its sources read another image in its
        place). ``images_of``: each position's row in the tables, where
        the loader reads a composition of this dataset (a Subset's index
        is not the row); None: the positions' indices are the rows."""
        from . import targets as _targets

        problems = self.tables.problems
        if problems and on_error != "skip":
            for i in taken.idx if images_of is None else images_of:
                if int(i) in problems:
                    raise ValueError(problems[int(i)])
        rows = [_targets.item(src.targets, int(i)) for i in taken.idx]
        for image, r in zip(images, rows):
            if self._sized:
                self._read_size(r)
            else:  # flips at most: the decoded size
                self._check_size(r, image.shape[-2], image.shape[-1])
        if not self._moves:
            return self.items(images, rows)
        boxes, offsets = src.plan_boxes or (None, None)
        plans = [
            (spec, seed, taken.epoch, int(k), _rows(boxes, offsets, int(i)))
            for i, k in zip(taken.idx, taken.keys)
        ]
        return self.items(images, rows, plans)

    def _read_size(self, row: int) -> None:
        """Checks the image's size once from its header (the output no
        longer shows it): the boxes' canvas and the plan's source."""
        if self._seen[row]:
            return
        from PIL import Image

        with Image.open(self.tables.paths[row]) as im:
            width, height = im.size
        self._check_size(row, height, width)
        self._seen[row] = True

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
        self, images: Any, rows: list[int], plans: Optional[list] = None
    ) -> list[tuple[Any, Any]]:
        """Each ``(image, target)`` as indexing the wrapped dataset gives
        it: ``rows`` the images' rows in the tables, ``plans`` each
        sample's (spec, seed, epoch, key, boxes table rows or None) where the transform moves pixels
        (None: the target as it is)."""
        from .detection_target import target

        out = []
        for k, (image, i) in enumerate(zip(images, rows)):
            if plans is None:
                t = target(self.tables, i)
            else:
                t = self._planned(i, plans[k])
            if self._image_type is not None:
                image = image.as_subclass(self._image_type)
            out.append((image, t))
        if self._quick is not None:
            return self._quick.each(out)
        for k, sample in enumerate(out):
            for step in self._tail:
                sample = step(*sample)
            out[k] = sample
        return out

    def _planned(self, i: int, plan: tuple) -> Any:
        """Image i's target through its plan: masks sampled through the
        plan's index maps (padded with the window's fill for a Mask), then
        warped by the chain's RandomAffine, RandomRotation and RandomPerspective
        (``_core.plan_warp_masks``: nearest, their fill for a Mask), boxes
        mapped by ``_core.plan_boxes`` onto the output canvas, through the
        plan and those warps."""
        import torch
        from torchvision import tv_tensors

        from .. import _core
        from .detection_target import target

        spec, seed, epoch, key, rows = plan
        height, width = (int(v) for v in self.tables.sizes[i])
        maps = None
        keys = self.tables.target_keys or frozenset()
        if "masks" in keys:
            raw = _core.plan_maps(spec, width, height, seed, epoch, key, 0, rows)
            maps = tuple(np.frombuffer(m, dtype=np.int32) for m in raw)
        t = target(self.tables, i, maps, self._mask_fill)
        masks = t.get("masks")
        if masks is not None and self._warped:
            flat = np.ascontiguousarray(masks.numpy()).reshape(-1)
            warped = _core.plan_warp_masks(
                spec,
                seed,
                epoch,
                key,
                0,
                flat,
                len(masks),
                self._warp_fill,
                size=tuple(masks.shape[-2:]),  # the plan's: a varying sample's own
            )
            t["masks"] = tv_tensors.Mask(
                torch.frombuffer(bytearray(warped), dtype=torch.uint8).view(masks.shape)
            )
        boxes = t.get("boxes")
        if boxes is not None:
            whole = not boxes.is_floating_point()
            single = boxes.dtype == torch.float32
            values = boxes.as_subclass(torch.Tensor).double().numpy()
            mapped, canvas = _core.plan_boxes(
                spec,
                width,
                height,
                seed,
                epoch,
                key,
                0,
                values,
                "XYXY",
                rows,
                whole=whole,
                single=single,
            )
            new = np.frombuffer(mapped, dtype=np.float64).reshape(-1, 4)
            t["boxes"] = tv_tensors.BoundingBoxes(
                torch.from_numpy(new.copy()).to(boxes.dtype),
                format=tv_tensors.BoundingBoxFormat.XYXY,
                canvas_size=canvas,
            )
        points = t.get("keypoints")
        if points is not None:  # a CocoKeypoints' (N, K, 2), never clamped
            flat = points.as_subclass(torch.Tensor).double().reshape(-1, 2).numpy()
            mapped, canvas = _core.plan_keypoints(
                spec,
                width,
                height,
                seed,
                epoch,
                key,
                0,
                flat,
                rows,
                single=points.dtype == torch.float32,
            )
            new = np.frombuffer(mapped, dtype=np.float64).reshape(points.shape)
            t["keypoints"] = tv_tensors.KeyPoints(
                torch.from_numpy(new.copy()).to(points.dtype), canvas_size=canvas
            )
        return t


def _rows(boxes: Any, offsets: Any, i: int) -> Any:
    """Sample i's rows of the boxes table (what its plan drew from), or
    None without a table."""
    if boxes is None:
        return None
    return boxes[int(offsets[i]) : int(offsets[i + 1])]


def _unfused(head: Any) -> Optional[str]:
    """Why the pixel steps are not fused whole (the targets follow only the
    plan), or None; a transform the compiler refuses is the loader's
    reason to give."""
    from ..errors import UnsupportedTransform
    from ..transforms import compile_transform

    try:
        compiled = compile_transform(head, varying=True)
    except UnsupportedTransform:
        return None
    if compiled.rest:
        return (
            f"{compiled.reason} (a detection sample's targets follow fused steps only)"
        )
    return None


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


def _refuse_coco_subclass(dataset: Any) -> None:
    """NotNative for a CocoDetection of a class that reads its samples
    its own way (the detection reference's own class, without --use-v2),
    saying what is read natively; not for one that says where its files
    are (``ringloader_files()``, read as the user's dataset)."""
    try:
        from torchvision import datasets as tvd
    except ImportError:  # (blocked: sys.modules["torchvision"] is None)
        return

    from .base import FILES_PROTOCOL
    from .coco_keypoints import CocoKeypoints
    from .detection import _unwrap

    inner = _unwrap(dataset)[0]
    if (
        not isinstance(inner, tvd.CocoDetection)
        or isinstance(inner, (tvd.CocoCaptions, CocoKeypoints))
        or getattr(dataset, "ringloader_files", None) is not None
        or getattr(inner, "ringloader_files", None) is not None
    ):
        return
    raise NotNative(
        f"{type(inner).__module__}.{type(inner).__name__} reads its samples "
        "its own way (a subclass of torchvision's CocoDetection with its own "
        "__getitem__ or loading): ringloader reads torchvision's own "
        "CocoDetection wrapped by wrap_dataset_for_transforms_v2 (torchvision's "
        f"detection reference builds it with --use-v2), or a dataset with {FILES_PROTOCOL}"
    )


def detection_stand_in(
    dataset: Any, passes: Optional[Callable[[Any], Any]] = None
) -> Any:
    """A :class:`DetectionImages` for a wrapped CocoDetection (made once
    per dataset), else ``dataset``; also ``dataset`` itself, its tables
    kept on it, for a CocoDetection whose ``transforms`` ``passes`` says
    another reader takes. Raises :class:`NotNative` for a
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
            _refuse_coco_subclass(dataset)
            return dataset
        kept["_ringloader_tables"] = tables
    if tables.kind == "voc_segmentation":
        return dataset  # segmentation_batch.segmentation_stand_in reads it
    if tables.kind != "coco":
        raise NotNative("VOCDetection is not read natively yet (only CocoDetection)")
    if passes is not None and passes(getattr(dataset, "transforms", None)):
        return dataset  # another reader's (the segmentation reference's COCO)
    if not tables.wrapped:
        raise NotNative(
            "a CocoDetection not wrapped by wrap_dataset_for_transforms_v2 gives "
            "its json's dicts, which are not read natively"
        )
    out = DetectionImages(dataset, tables)
    kept["_ringloader_detection"] = out
    return out
