"""A semantic segmentation dataset as the loader reads it: torchvision's
``VOCSegmentation``, wrapped by ``wrap_dataset_for_transforms_v2`` with v2
transforms, or unwrapped with the segmentation reference's own pair
transforms (:mod:`.segmentation_pairs`: its ``train.py`` without
``--use-v2``, each mask then an int64 (h, w) tensor, resized by Pillow's
nearest rule while a PIL image), or that reference's COCO datasets (a
``CocoDetection``, unwrapped with those transforms or wrapped with its
``--use-v2`` ones, each mask its annotations merged at the sampled pixels:
:mod:`.segmentation_coco`), seen as its image files (decoded, resized,
cropped, flipped and converted in C: the dataset's transforms fused whole)
and, per batch, each sample's mask taken from its PNG in C
(``_core.mask_from_png``), or made from its annotations, through the index
maps of the sample's own plan (``_core.plan_maps``: same seed, epoch and
key as its pixels).

A wrapped dataset's ``transforms`` (a v2 ``Compose``, or the reference's preset
class whose ``__call__(img, target)`` only returns ``self.transforms(img,
target)``) must be steps the compiler fuses and the maps follow: the
geometry (``Resize``, ``RandomResize``, ``RandomHorizontalFlip``,
``RandomCrop`` padding with a constant, ``CenterCrop``) and conversions
(``ToImage``, ``PILToTensor``, ``ToDtype``, also with a dtype per type,
``Normalize``, ``ToPureTensor``). The mask is a ``tv_tensors.Mask`` (uint8,
its padding the crop's fill for masks) that the conversions then run on,
the user's own objects (``ToDtype``'s int64 entry, ``ToPureTensor``), as
the Compose would on the pair (:func:`_beside`), or, where they are seen
on a probe to do no more than convert it (:func:`_mask_as`), the dtype
and type they give at once. The train preset's own ``PadIfSmaller(size, fill)``
directly before ``RandomCrop(size)`` is fused as one crop padding at the
bottom and right (``adapt.torchvision_pad.PadIfSmallerCrop``), once it is
seen to pad as the reference's does. Geometry after a ``ToPureTensor``
(which v2 no longer applies to the mask, then a plain tensor after the
image) and any other step raise :class:`~.detection_batch.NotNative`
naming it, and
``ringloader.DataLoader`` falls back to torch's DataLoader with that reason.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from . import base, detection_batch

NotNative = detection_batch.NotNative

__all__ = [
    "MaskError",
    "SegmentationImages",
    "segmentation_of",
    "segmentation_stand_in",
]
__all__ += ["segmentation_reason"]

_GEOMETRY = (
    "Resize",
    "RandomResize",
    "RandomHorizontalFlip",
    "RandomCrop",
    "CenterCrop",
)
_CONVERSIONS = ("ToImage", "PILToTensor", "ToDtype", "Normalize", "ToPureTensor")


def _steps(transforms: Any, name: str) -> list:
    """The v2 steps of the wrapped dataset's ``transforms``, in order: the
    reference's preset class opened (``adapt.pair_wrapped``), then its
    Compose, nested ones too (``adapt.flatten``); ``name``: the dataset's,
    for the message."""
    from torchvision.transforms import v2

    from ..adapt import flatten, pair_wrapped

    while transforms is not None and pair_wrapped(transforms) is not None:
        transforms = pair_wrapped(transforms)
    if transforms is not None and not isinstance(transforms, v2.Transform):
        kind = type(transforms).__name__
        raise NotNative(
            f"{name}: its transforms is a {kind}, not a "
            "torchvision.transforms.v2.Compose"
        )
    return flatten(transforms)


def _why_step(t: Any, why_pad: Optional[str] = None) -> Optional[str]:
    """Why the step ``t`` is not followed on a segmentation mask, or None
    (``why_pad``: why a PadIfSmaller was not paired with its crop)."""
    from ..adapt.torchvision_pad import PadIfSmallerCrop

    name = type(t).__name__
    v2 = type(t).__module__.startswith("torchvision.transforms.v2")
    if isinstance(t, PadIfSmallerCrop):
        return None
    if name == "PadIfSmaller":
        return (
            f"{why_pad or 'PadIfSmaller is not fused'} (natively: the "
            "segmentation reference's PadIfSmaller(size, fill) directly "
            "before v2.RandomCrop(size))"
        )
    if not v2 or name not in _GEOMETRY + _CONVERSIONS:
        return (
            f"{name} is not followed on a segmentation mask (natively: "
            "ToImage, Resize, RandomResize, RandomHorizontalFlip, RandomCrop, "
            "ToDtype, Normalize, ToPureTensor)"
        )
    if name == "RandomCrop" and getattr(t, "padding_mode", "constant") != "constant":
        return f"RandomCrop(padding_mode={t.padding_mode!r}) on a segmentation mask"
    return None


def _mask_fill(t: Any) -> int:
    """The value a crop pads a mask with: its fill's entry for
    tv_tensors.Mask, else "others", else 0 (v2's default)."""
    from torchvision import tv_tensors

    fill = getattr(t, "fill", 0)
    if isinstance(fill, dict):
        fill = fill.get(tv_tensors.Mask, fill.get("others", 0))
    if fill is None:
        fill = 0
    if isinstance(fill, (list, tuple)) and len(fill) == 1:
        fill = fill[0]
    if isinstance(fill, float) and fill.is_integer():
        fill = int(fill)
    if not isinstance(fill, int) or not 0 <= fill <= 255:
        raise NotNative(
            f"{type(t).__name__}(fill={getattr(t, 'fill', None)!r}): a mask's fill "
            "must be one integer 0-255"
        )
    return fill


def _mask_as(steps: list) -> Optional[tuple[Any, type]]:
    """(NumPy dtype, tensor type) the conversions ``steps`` turn a uint8
    Mask into beside its image (:func:`_beside`), where they are
    torchvision's own classes and do just that (a dtype conversion, value
    for value, seen on every uint8 value), so each mask is converted at
    once rather than through the steps; else None (the steps run on each
    mask, as they are when each batch is read)."""
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    own = (v2.ToImage, v2.PILToTensor, v2.ToDtype, v2.Normalize, v2.ToPureTensor)
    if any(type(t) not in own for t in steps):
        return None
    probe = torch.arange(256, dtype=torch.uint8).view(1, 16, 16)
    try:
        out = _beside(steps, tv_tensors.Mask(probe.clone()))
    except Exception:  # noqa: BLE001 - the steps raise on each mask too
        return None
    if type(out) not in (torch.Tensor, tv_tensors.Mask) or out.shape != probe.shape:
        return None
    try:
        dtype = torch.empty(0, dtype=out.dtype).numpy().dtype
    except TypeError:  # no NumPy dtype (bfloat16, ...)
        return None
    same = torch.from_numpy(probe.numpy().astype(dtype))
    if not torch.equal(out.as_subclass(torch.Tensor), same):
        return None
    return dtype, type(out)


def _beside(steps: list, mask: Any, which: int = 1) -> Any:
    """``mask`` through the conversions ``steps`` as a Compose runs them on
    the (image, mask) pair, beside a PIL image as VOCSegmentation gives
    it (what a step does to the mask depends on the pair's types: after
    ToPureTensor, a plain-tensor mask is left to the image before it);
    ``which`` 0: the image instead."""
    from PIL import Image

    sample = (Image.new("RGB", (2, 2)), mask)
    for step in steps:
        sample = step(*sample)
    return sample[which]


class MaskError(ValueError):
    """A sample's mask (or its image's header) cannot be read, or does not
    fit its image: the data's fault, which ``on_error="skip"`` skips (a
    ValueError of the plan, a fault of ours, is not)."""


class SegmentationImages:
    """What the loader reads for a segmentation dataset (module docstring):
    its image files (``ringloader_sources``, each sample's target its row in
    the tables), the fused ``transform`` and, per batch, :meth:`batch`."""

    target_transform = None  # the mask is the target: no transform of its own
    _given: Any = None
    _head: Any = None
    _pil = False  # masks resized as PIL images (the reference's own transforms)
    _values: Optional[dict] = None  # COCO: each kept category's mask value
    _merge: tuple = ()  # COCO: the user's objects that make the mask
    _seen: Any = None  # each image's header read (its size known, checked)

    def __init__(self, wrapper: Any, tables: Any) -> None:
        self.wrapper, self.tables = wrapper, tables
        self._first_mask()
        self._split()

    def _first_mask(self) -> None:
        """NotNative where the first mask PNG's header says a kind the C
        core does not read (RGB, 16-bit or 1-bit grey, grey with alpha): a
        dataset's masks are of one kind, and these would fail each batch.
        A mask that cannot be read at all is left to the batch that reads
        it (a MaskError naming it, skipped under on_error="skip")."""
        paths = self.tables.mask_paths
        if paths is None or not len(paths):
            return
        try:
            with open(paths[0], "rb") as f:
                head = f.read(26)
        except OSError:
            return
        # the signature, then IHDR: length, type, width, height, depth, colour
        if len(head) >= 8 and head[:8] != b"\x89PNG\r\n\x1a\n":
            raise NotNative(
                f"{paths[0]}: the mask is not a PNG; masks are read natively as "
                "palette or 8-bit greyscale PNGs (torch's DataLoader reads others)"
            )
        if len(head) < 26 or head[12:16] != b"IHDR":
            return  # cut short or damaged: the batch that reads it names it
        depth, colour = head[24], head[25]
        if colour == 3 or (colour == 0 and depth == 8):
            return  # palette (any depth), 8-bit grey: what mask_from_png reads
        kinds = {0: "greyscale", 2: "RGB", 4: "greyscale with alpha", 6: "RGBA"}
        kind = f"{depth}-bit {kinds.get(colour, f'colour type {colour}')}"
        raise NotNative(
            f"{paths[0]}: the mask PNG is {kind}; masks are read natively as "
            "palette or 8-bit greyscale PNGs (torch's DataLoader reads these)"
        )

    def _split(self) -> None:
        """Reads the wrapper's transforms again where they changed."""
        given = object.__getattribute__(self.wrapper, "transforms")
        if given is not self._given or self._head is None:
            self._read(given)

    def _name(self) -> str:
        kind = "CocoDetection" if self.tables.kind == "coco" else "VOCSegmentation"
        return f"the {'wrapped ' if self.tables.wrapped else ''}{kind}"

    def _read(self, given: Any) -> None:
        """The fused transform, the mask's fill and its conversions, whether
        the plan draws and the image's type, from the transforms ``given``;
        NotNative where they are not followed."""
        from ..adapt.torchvision_pad import PadIfSmallerCrop, pad_if_smaller_pairs

        if not self.tables.wrapped:  # the reference's own pair transforms
            from .segmentation_pairs import read_pairs

            pairs = read_pairs(given, coco=self.tables.kind == "coco")
            steps, why_pad = pad_if_smaller_pairs(pairs.steps)
            if why_pad is not None:
                raise NotNative(f"the dataset's transforms: {why_pad}")
            self._compile(steps, "the dataset's transforms")
            self._fill, self._pil, self._mask_steps = pairs.fill, pairs.pil, None
            self._values, self._merge = pairs.values, pairs.merge
            self._image_type = None
            self._given = given
            return
        from torchvision import tv_tensors
        from torchvision.transforms import v2

        name = self._name()
        if self.tables.kind == "coco":  # the reference's --use-v2 COCO
            from .segmentation_pairs import coco_v2

            keys = self.tables.target_keys or frozenset()
            if not {"masks", "labels"} <= keys:
                raise NotNative(
                    f"{name}: its target_keys {sorted(keys)} lack masks or labels, "
                    "which the reference's CocoDetectionToVOCSegmentation merges "
                    "(it wraps with target_keys={'masks', 'labels'})"
                )
            try:  # what an image with refused annotations is made through
                object.__getattribute__(self.wrapper, "_wrapper")
            except AttributeError:
                raise NotNative(
                    f"{name}: this torchvision's v2 wrapper has no _wrapper, "
                    "through which ringloader makes an image's mask where its "
                    "annotations are refused"
                ) from None
            self._values, first, rest = coco_v2(given)
            self._merge = (first,)
            steps = [t for r in rest for t in _steps(r, name)]
        else:
            steps = _steps(given, name)
        steps, why_pad = pad_if_smaller_pairs(steps)
        pure = False
        for t in steps:
            why = _why_step(t, why_pad)
            if why is None and pure and type(t).__name__ not in _CONVERSIONS:
                # the mask, a plain tensor after the image, is left by v2's
                # geometry from here on: the plan would move it
                why = (
                    f"{type(t).__name__} after a ToPureTensor (the mask is then "
                    "left where it is, which its plan does not follow)"
                )
            if why is not None:
                raise NotNative(f"{name}: {why}")
            pure = pure or isinstance(t, v2.ToPureTensor)
        self._compile(steps, f"{name}'s transforms")
        crops = [
            t
            for t in steps
            if type(t).__name__ in ("RandomCrop", "CenterCrop")
            or isinstance(t, PadIfSmallerCrop)
        ]
        self._fill = _mask_fill(crops[-1]) if crops else 0
        self._pil = False  # the wrapper's masks are tensors
        self._mask_steps = [t for t in steps if type(t).__name__ in _CONVERSIONS]
        # the image's type as the conversions leave it beside its mask (a
        # PILToTensor after ToImage leaves an Image as it is)
        try:
            image = _beside(
                self._mask_steps, tv_tensors.Mask(np.zeros((1, 2, 2), np.uint8)), 0
            )
        except Exception:  # noqa: BLE001 - they raise on each sample too
            image = None
        from PIL import Image

        if isinstance(image, Image.Image):
            raise NotNative(
                f"{name}: its image is still a PIL image after "
                "the conversions (v2's ToDtype and ToPureTensor leave a PIL image "
                "as it is): end them with ToImage() or PILToTensor() to read it natively"
            )
        self._image_type = tv_tensors.Image if type(image) is tv_tensors.Image else None
        self._given = given

    def _compile(self, steps: list, where: str) -> None:
        """``steps`` (each PadIfSmaller already paired with its crop) as the
        pixels' Compose (``_head``), fused whole, or NotNative naming
        ``where`` they are."""
        from torchvision.transforms import v2

        from ..transforms import UnsupportedTransform, compile_transform

        head = v2.Compose(steps)
        try:
            compiled = compile_transform(head, varying=True)
        except UnsupportedTransform as e:
            raise NotNative(f"{where}: {e}") from None
        if compiled.reason:
            raise NotNative(
                f"{where}: {compiled.reason} (a segmentation sample's transforms "
                "are fused whole)"
            )
        self._head = head

    @property
    def transform(self) -> Any:
        """The dataset's transforms as one Compose, the pixels' part (the
        same object while the transforms are)."""
        self._split()
        return self._head

    def __len__(self) -> int:
        return len(self.tables.paths)

    def ringloader_sources(self) -> base.Sources:
        """The images' paths; each sample's target its row of the tables."""
        rows = np.arange(len(self), dtype=np.int64)
        return base.Sources(paths=self.tables.paths, targets=rows)

    def describe(self, index: int) -> str:
        return str(self.tables.paths[index])

    def collated(
        self,
        collate: Any,
        src: Any,
        images: Any,
        taken: Any,
        spec: Any,
        seed: int,
        skip: bool,
        place: Optional[Callable[[Any], Any]] = None,
    ) -> Any:
        """``collate`` on the batch's items (:meth:`batch`); torch's
        ``default_collate`` gives ``[images, masks]``, the images the
        pipeline's stacked batch where it has one (fixed sizes).
        ``place``: puts each mask where the images are (the GPU path)."""
        from torch.utils.data import default_collate

        items, kept = self.batch(src, images, taken, spec, seed, skip)
        if place is not None:
            items = [(image, place(mask)) for image, mask in items]
        if collate is not default_collate or isinstance(images, list):
            return collate(items)
        stacked = images if len(kept) == len(taken.idx) else images[kept]
        return [stacked, default_collate([mask for _, mask in items])]

    def batch(
        self, src: Any, images: Any, taken: Any, spec: Any, seed: int, skip: bool
    ) -> tuple[list[tuple[Any, Any]], list[int]]:
        """(the batch's ``(image, mask)`` items as indexing the wrapped
        dataset gives them, the positions they hold): ``images`` the
        batch's images (a tensor or a list, one a position), ``taken`` the
        batch as the pipeline gave it (indices, random keys, epoch),
        ``spec`` the fused transform's, ``skip``: a sample whose mask
        cannot be read is left out with a warning rather than raised."""
        from .. import _core
        from . import targets as _targets

        # the steps as they stand now
        how = None if self._mask_steps is None else _mask_as(self._mask_steps)
        items, kept = [], []
        for k, i in enumerate(taken.idx):
            # a replacement's index and key are its own (the core's report)
            row = int(_targets.item(src.targets, int(i)))
            try:
                mask = self._mask(
                    _core, row, spec, seed, taken.epoch, int(taken.keys[k])
                )
            except MaskError as e:
                if not skip:
                    raise
                import warnings

                from ..errors import DataWarning

                text = f"ringloader: skipped a sample whose mask cannot be read ({e})"
                warnings.warn(text, DataWarning, stacklevel=3)
                continue
            mask = self._converted(mask, how)
            image = images[k]
            if self._image_type is not None:
                image = image.as_subclass(self._image_type)
            items.append((image, mask))
            kept.append(k)
        return items, kept

    def _mask(
        self, _core: Any, row: int, spec: Any, seed: int, epoch: int, key: int
    ) -> Any:
        """Image ``row``'s mask through its plan's maps: uint8 (1, h, w)
        from a PNG, (h, w) from COCO's annotations (the shape the wrapper's
        Mask and the reference's merge have); ValueError naming the file."""
        if self.tables.kind == "coco":
            return self._coco_mask(_core, row, spec, seed, epoch, key)
        path = self.tables.mask_paths[row]
        try:
            with open(path, "rb") as f:
                data = f.read()
            mh, mw = _core.png_mask_size(data)
        except (OSError, ValueError) as e:
            raise MaskError(f"{path}: the mask cannot be read: {e}") from None
        h, w = self._image_size(row)
        if (mh, mw) != (h, w):
            raise MaskError(
                f"{path}: the mask is {mh}x{mw} (height x width) but its image "
                f"{self.tables.paths[row]} is {h}x{w}"
            )
        rows, cols = (
            np.frombuffer(m, np.int32)
            for m in _core.plan_maps(spec, w, h, seed, epoch, key, pil=self._pil)
        )
        try:
            raw = _core.mask_from_png(data, rows, cols, self._fill)
        except ValueError as e:
            raise MaskError(f"{path}: the mask cannot be read: {e}") from None
        return np.frombuffer(raw, np.uint8).reshape(1, len(rows), len(cols))

    def _converted(self, mask: np.ndarray, how: Any) -> Any:
        """The mask (uint8 (1, h, w), read-only) as the user's conversions
        leave it: the tv_tensors.Mask the wrapper makes, through the steps
        themselves (:func:`_beside`), or straight to the dtype and type
        ``how`` (:func:`_mask_as`) they were seen to give."""
        import torch
        from torchvision import tv_tensors

        if self._mask_steps is None:  # the reference's PILToTensor: int64 (h, w)
            return torch.from_numpy(mask.reshape(mask.shape[-2:]).astype(np.int64))
        if how is None:
            given = tv_tensors.Mask(torch.from_numpy(mask.copy()))
            return _beside(self._mask_steps, given)
        dtype, kind = how
        out = torch.from_numpy(mask.astype(dtype))
        return tv_tensors.Mask(out) if kind is tv_tensors.Mask else out

    def _coco_mask(
        self, _core: Any, row: int, spec: Any, seed: int, epoch: int, key: int
    ) -> Any:
        """Image ``row``'s COCO annotations merged as the segmentation
        reference merges them, taken through the plan's maps
        (:mod:`.segmentation_coco`: from the tables, or, for an image whose
        annotations the tables refused, through the reference's own
        objects), the crop's fill on padding; MaskError naming the
        annotation file, image and annotation."""
        from . import segmentation_coco as coco

        t = self.tables
        h, w = self._image_size(row)
        rows, cols = (
            np.frombuffer(m, np.int32)
            for m in _core.plan_maps(spec, w, h, seed, epoch, key, pil=self._pil)
        )
        try:
            if row not in t.problems:
                return coco.merged(t, row, rows, cols, self._values or {}, self._fill)
            full = coco.through_objects(self.wrapper, t, row, (h, w), self._merge)
        except ValueError as e:
            raise MaskError(str(e)) from None
        return coco.sampled(full, rows, cols, self._fill)

    def _image_size(self, row: int) -> tuple[int, int]:
        """(height, width) of image ``row``, from its header once (kept in
        the tables' sizes); where the tables give a size (COCO's images
        entry, at which its masks are drawn) it must be the header's.
        MaskError naming the file."""
        sizes = self.tables.sizes
        if self._seen is None:
            self._seen = np.zeros(len(sizes), dtype=bool)
        if not self._seen[row]:
            from PIL import Image

            path = self.tables.paths[row]
            try:
                with Image.open(path) as im:
                    w, h = im.size
            except OSError as e:
                raise MaskError(f"{path}: the image cannot be read: {e}") from None
            given = (int(sizes[row][0]), int(sizes[row][1]))
            if given[0] >= 0 and given != (h, w):
                raise MaskError(
                    f"{path}: the image is {h}x{w} (height x width) but "
                    f"{self.tables.source} gives {given[0]}x{given[1]}: fix its "
                    "images entry (the masks are drawn at the size it gives)"
                )
            sizes[row] = (h, w)
            self._seen[row] = True
        return int(sizes[row][0]), int(sizes[row][1])


def segmentation_stand_in(dataset: Any) -> Any:
    """A :class:`SegmentationImages` for a VOCSegmentation (or the
    segmentation reference's COCO dataset, which
    :func:`.detection_batch.detection_stand_in` passes on) whose tables
    that function made and kept on it (made once per dataset), else
    ``dataset``. :class:`NotNative` where its transforms are not followed
    or its masks are PNGs of a kind not read natively."""
    if isinstance(dataset, SegmentationImages):
        return dataset
    kept = getattr(dataset, "__dict__", {})
    tables = kept.get("_ringloader_tables")
    if tables is None or tables.kind not in ("voc_segmentation", "coco"):
        return dataset  # detection_stand_in passed on the reference's COCO only
    out = kept.get("_ringloader_segmentation")
    if out is None:
        out = kept["_ringloader_segmentation"] = SegmentationImages(dataset, tables)
    out._split()  # the transforms as they are now
    return out


def segmentation_of(data: Any) -> Optional[SegmentationImages]:
    """The segmentation dataset a loader reads (``data``: what it resolved,
    a dataset or a composition's ``leaves``), or None."""
    leaves = getattr(data, "leaves", None) or [data]
    return leaves[0] if isinstance(leaves[0], SegmentationImages) else None


def segmentation_reason(leaves: list, options: dict) -> Optional[str]:
    """Why the datasets ``leaves``, with a segmentation dataset among
    them, are not read natively with the DataLoader's ``options``, or
    None."""
    mine = any(isinstance(leaf, SegmentationImages) for leaf in leaves)
    why = {
        "a ConcatDataset of segmentation datasets is not read natively yet": (
            len(leaves) > 1
        ),
        "a segmentation dataset is read natively with layout='NCHW' only": (
            options.get("layout", "NCHW") != "NCHW"
        ),
    }
    return next((text for text, refused in why.items() if mine and refused), None)
