"""The segmentation reference's own pair transforms, read as v2 steps.

Without ``--use-v2``, torchvision's segmentation reference gives an
unwrapped ``VOCSegmentation`` its presets built from the classes of its
own ``transforms.py``: each called on the (PIL image, PIL mask) pair, the
random ones drawing from Python's ``random`` and ``torch``. Its COCO
dataset, an unwrapped ``CocoDetection``, gets a Compose of its own
``FilterAndRemapCocoCategories`` and ``ConvertCocoPolysToMask`` (which
make the PIL mask from the image's annotations) and the preset. They are the
user's classes, of no library, so they are recognised by what they do:

1. the preset's ``transforms`` (``adapt.pair_wrapped``) and any object
   holding a list or tuple ``transforms`` are opened, in order;
2. each other object is read, by its class name and attributes, as one of
   the steps below;
3. each of those is run on probe pairs (the chain of the steps before
   it), then its reading, with the same draws; and the whole object is
   run beside the chain (:mod:`.segmentation_probes`). Every image and
   mask must be equal, type, dtype, size and values. The global
   generators (``random``, NumPy's, torch's) are left as they were found.

The steps, and the v2 steps the pixels are fused as:

- ``RandomResize(min_size, max_size)``: the shorter side resized to
  ``random.randint(min_size, max_size)`` (both ends included), the image
  bilinear with antialiasing, the mask nearest: ``v2.RandomResize(min_size,
  max_size + 1)``, whose end is left out;
- ``RandomHorizontalFlip(flip_prob)``: both flipped where ``random.random()
  < flip_prob``: ``v2.RandomHorizontalFlip``;
- ``RandomCrop(size)``: the pair padded at the bottom and right to at least
  ``size`` a side (the image with 0, the mask with 255), then cropped to
  ``size`` x ``size`` where ``v1.RandomCrop.get_params`` draws: a
  ``PadIfSmaller`` of this module's then ``v2.RandomCrop(size)``, which the compiler
  fuses as one padded crop;
- ``PILToTensor()``: the image as ``F.pil_to_tensor`` gives it, the mask
  an int64 (height, width) tensor of its values: ``v2.PILToTensor``;
- ``ToDtype(dtype, scale)``: the image ``F.convert_image_dtype``'d (scale)
  or ``.to(dtype)``: v1's ``ConvertImageDtype`` or ``v2.ToDtype``;
- ``Normalize(mean, std)``: the image ``F.normalize``'d: ``v2.Normalize``;
- COCO's, first, no pixel step: ``FilterAndRemapCocoCategories(categories,
  remap)`` keeps the annotations of the listed ids, each id made its
  place in the list (remap); ``ConvertCocoPolysToMask()`` merges them
  into one mask of the image's size (pycocotools' rasterization), each
  one's category where it covers a pixel, 255 where two or more do
  (``PairSteps.values``: each kept id's value).

A mask resized while it is a PIL image takes Pillow's nearest pixel, one
resized after ``PILToTensor`` torch's (``_core.plan_maps(pil=...)``); a
preset that resizes it both ways, or leaves the image or the mask a PIL
image, is not read (:class:`~.detection_batch.NotNative`, naming why).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import random
from typing import Any, Callable, Optional

import numpy as np

from . import segmentation_probes as probes
from .detection_batch import NotNative

__all__ = ["PairSteps", "read_pairs"]

_MASK_FILL = probes.MASK_FILL  # the reference's RandomCrop pads masks with it
_WHERE = probes.WHERE


@dataclasses.dataclass(frozen=True)
class PairSteps:
    """What :func:`read_pairs` read: the v2 ``steps`` the pixels are fused
    as, whether the mask is resized as a PIL image (``pil``), the value a
    padded mask pixel takes (``fill``) and, for COCO, each kept category
    id's value in the merged mask (``values``; the others are left out).
    The mask ends an int64 (height, width) tensor."""

    steps: list
    pil: bool
    fill: int
    values: Optional[dict] = None  # COCO: category id -> its mask value
    merge: tuple = ()  # COCO: the user's filter and merge objects, checked


def _pad_if_smaller_class() -> type:
    from torchvision import tv_tensors
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F

    class PadIfSmaller(v2.Transform):
        """Pads each input at the bottom and right to at least ``size`` rows
        and columns, with ``fill``'s entry for its type (a dict as v2's
        fills), as the segmentation reference pads before its crop; the
        reference's own v2 PadIfSmaller does the same, and the compiler
        fuses either with the ``RandomCrop(size)`` after it."""

        def __init__(self, size: int, fill: dict) -> None:
            super().__init__()
            self.size, self.fill = size, fill

        def make_params(self, flat_inputs: list) -> dict:
            _, h, w = v2.query_chw(flat_inputs)
            return {"padding": [0, 0, max(self.size - w, 0), max(self.size - h, 0)]}

        def transform(self, inpt: Any, params: dict) -> Any:
            if not any(params["padding"]):
                return inpt
            kind = tv_tensors.Mask if isinstance(inpt, tv_tensors.Mask) else None
            fill = self.fill.get(kind, self.fill.get("others", 0))
            return F.pad(inpt, padding=params["padding"], fill=fill)

    return PadIfSmaller


_CLASSES: dict = {}


def _pad_if_smaller(size: int, fill: dict) -> Any:
    """A PadIfSmaller (its class made once, when first needed: it needs
    torchvision)."""
    if "PadIfSmaller" not in _CLASSES:
        _CLASSES["PadIfSmaller"] = _pad_if_smaller_class()
    return _CLASSES["PadIfSmaller"](size, fill)


@dataclasses.dataclass
class _Step:
    """One object of the user's, read: its name, the v2 ``steps`` its
    pixels are fused as, ``model`` (image, mask) -> (image, mask) drawing as
    the reference's does, and what it is (a resize, a conversion)."""

    name: str
    steps: list
    model: Callable[[Any, Any], tuple[Any, Any]]
    resizes: bool = False
    converts: bool = False
    values: Optional[dict] = None  # a category filter's
    # seeds whose draws are the step's edge cases, each probed on its own
    seeds: tuple = ()


@functools.lru_cache(maxsize=1)
def _first_draws() -> tuple:
    """The first ``random()`` of Python's generator seeded 0..9,999."""
    return tuple(random.Random(k).random() for k in range(10_000))


def _seeds_drawing(*wanted: Callable[[random.Random], bool]) -> tuple:
    """For each test in ``wanted``, the first seed whose Python generator's
    next draws pass it (none where none of 10,000 does)."""
    out = []
    for test in wanted:
        found = next((k for k in range(10_000) if test(random.Random(k))), None)
        if found is not None:
            out.append(found)
    return tuple(out)


def _int(value: Any) -> Optional[int]:
    """``value`` as an int where it is an integer (Python's or NumPy's),
    not a bool; else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def _resize(t: Any) -> _Step:
    from torchvision.transforms import InterpolationMode, v2
    from torchvision.transforms import functional as F

    low, high = _int(getattr(t, "min_size", None)), _int(getattr(t, "max_size", None))
    if low is None or high is None or not 0 < low <= high:
        raise NotNative(
            f"{_WHERE}: RandomResize(min_size={t.min_size!r}, "
            f"max_size={t.max_size!r}): two int sizes, 0 < min_size <= max_size"
        )

    def model(image: Any, mask: Any) -> tuple[Any, Any]:
        size = random.randint(low, high)
        nearest = InterpolationMode.NEAREST
        return (
            F.resize(image, size, antialias=True),
            F.resize(mask, size, interpolation=nearest),
        )

    steps = [v2.RandomResize(low, high + 1, antialias=True)]
    ends = _seeds_drawing(
        lambda r: r.randint(low, high) == low, lambda r: r.randint(low, high) == high
    )
    return _Step("RandomResize", steps, model, resizes=True, seeds=ends)


def _flip(t: Any) -> _Step:
    from torchvision.transforms import v2
    from torchvision.transforms import functional as F

    try:
        p = float(t.flip_prob)
    except (TypeError, ValueError):
        p = float("nan")
    if p != p:
        raise NotNative(
            f"{_WHERE}: RandomHorizontalFlip(flip_prob={t.flip_prob!r}): not a number"
        )

    def model(image: Any, mask: Any) -> tuple[Any, Any]:
        if random.random() < p:
            return F.hflip(image), F.hflip(mask)
        return image, mask

    steps = [v2.RandomHorizontalFlip(min(max(p, 0.0), 1.0))]
    # the seeds whose draws lie nearest p on each side: a class flipping at
    # another threshold shows on one of them
    draws = _first_draws()
    below = [k for k, r in enumerate(draws) if r < p]
    above = [k for k, r in enumerate(draws) if r >= p]
    both = tuple([max(below, key=draws.__getitem__)] if below else []) + tuple(
        [min(above, key=draws.__getitem__)] if above else []
    )
    return _Step("RandomHorizontalFlip", steps, model, seeds=both)


def _crop(t: Any) -> _Step:
    from torchvision import transforms as v1
    from torchvision import tv_tensors
    from torchvision.transforms import v2
    from torchvision.transforms import functional as F

    size = _int(getattr(t, "size", None))
    if size is None or size <= 0:
        raise NotNative(f"{_WHERE}: RandomCrop(size={t.size!r}): one positive int")

    def padded(x: Any, fill: int) -> Any:
        w, h = F.get_image_size(x)
        if min(w, h) >= size:
            return x
        return F.pad(x, [0, 0, max(size - w, 0), max(size - h, 0)], fill=fill)

    def model(image: Any, mask: Any) -> tuple[Any, Any]:
        image, mask = padded(image, 0), padded(mask, _MASK_FILL)
        top, left, h, w = v1.RandomCrop.get_params(image, (size, size))
        return F.crop(image, top, left, h, w), F.crop(mask, top, left, h, w)

    fill = {tv_tensors.Mask: _MASK_FILL, "others": 0}
    steps = [_pad_if_smaller(size, fill), v2.RandomCrop(size)]
    return _Step("RandomCrop", steps, model)


def _to_tensor(t: Any) -> _Step:
    import torch
    from torchvision.transforms import v2
    from torchvision.transforms import functional as F

    def model(image: Any, mask: Any) -> tuple[Any, Any]:
        values = torch.as_tensor(np.array(mask), dtype=torch.int64)
        return F.pil_to_tensor(image), values

    return _Step("PILToTensor", [v2.PILToTensor()], model, converts=True)


def _to_dtype(t: Any) -> _Step:
    import torch
    from torchvision.transforms import v2
    from torchvision.transforms import functional as F

    dtype = getattr(t, "dtype", None)
    # the older reference's ConvertImageDtype(dtype) scales, as ToDtype(scale=True)
    scale = True if type(t).__name__ == "ConvertImageDtype" else t.scale
    if not isinstance(dtype, torch.dtype) or not isinstance(scale, bool):
        raise NotNative(
            f"{_WHERE}: ToDtype(dtype={dtype!r}, scale={scale!r}): a torch.dtype "
            "and a bool"
        )

    def model(image: Any, mask: Any) -> tuple[Any, Any]:
        out = F.convert_image_dtype(image, dtype) if scale else image.to(dtype)
        return out, mask

    return _Step(type(t).__name__, [v2.ToDtype(dtype, scale=scale)], model)


def _normalize(t: Any) -> _Step:
    from torchvision.transforms import v2
    from torchvision.transforms import functional as F

    mean, std = t.mean, t.std

    def model(image: Any, mask: Any) -> tuple[Any, Any]:
        return F.normalize(image, mean=mean, std=std), mask

    try:
        steps = [v2.Normalize(list(mean), list(std))]
    except (TypeError, ValueError) as e:
        raise NotNative(
            f"{_WHERE}: Normalize(mean={mean!r}, std={std!r}): {e}"
        ) from None
    return _Step("Normalize", steps, model)


def _filter(t: Any) -> _Step:
    import copy

    cats, remap = t.categories, t.remap
    if not isinstance(cats, (list, tuple)) or not all(
        _int(c) is not None for c in cats
    ):
        raise NotNative(
            f"{_WHERE}: FilterAndRemapCocoCategories(categories={cats!r}): a list "
            "of int category ids"
        )
    if not isinstance(remap, bool):
        raise NotNative(f"{_WHERE}: FilterAndRemapCocoCategories(remap={remap!r})")
    values: dict = {}
    for k, c in enumerate(cats):  # list.index: a repeated id's first place
        values.setdefault(c, k if remap else c)
    if not all(0 <= v <= 255 for v in values.values()):
        raise NotNative(
            f"{_WHERE}: FilterAndRemapCocoCategories keeps values past 0..255, "
            "which the reference's uint8 mask cannot hold"
        )

    def model(image: Any, anno: Any) -> tuple[Any, Any]:
        kept = [obj for obj in anno if obj["category_id"] in cats]
        if remap:
            kept = copy.deepcopy(kept)
            for obj in kept:
                obj["category_id"] = values[obj["category_id"]]
        return image, kept

    return _Step("FilterAndRemapCocoCategories", [], model, values=values)


def _merge(t: Any) -> _Step:
    def model(image: Any, anno: Any) -> tuple[Any, Any]:
        from PIL import Image
        from pycocotools import mask as coco_mask

        w, h = image.size
        merged = np.zeros((h, w), np.uint8)
        if anno:
            each = []
            for obj in anno:
                rle = coco_mask.frPyObjects(obj["segmentation"], h, w)
                each.append(coco_mask.decode(rle).reshape(h, w, -1).any(axis=2))
            masks = np.stack(each).astype(np.uint8)
            cats = np.array([obj["category_id"] for obj in anno], np.uint8)
            merged = (masks * cats[:, None, None]).max(axis=0)
            merged[masks.sum(axis=0) > 1] = _MASK_FILL
        return image, Image.fromarray(merged)

    return _Step("ConvertCocoPolysToMask", [], model)


# class name -> (the attributes it must have, its reader)
_READERS: dict[str, tuple[tuple[str, ...], Callable[[Any], _Step]]] = {
    "RandomResize": (("min_size", "max_size"), _resize),
    "RandomHorizontalFlip": (("flip_prob",), _flip),
    "RandomCrop": (("size",), _crop),
    "PILToTensor": ((), _to_tensor),
    "ToDtype": (("dtype", "scale"), _to_dtype),
    "ConvertImageDtype": (("dtype",), _to_dtype),
    "Normalize": (("mean", "std"), _normalize),
}
# COCO's: the annotations filtered, then made the segmentation mask
_COCO_READERS: dict[str, tuple[tuple[str, ...], Callable[[Any], _Step]]] = {
    "FilterAndRemapCocoCategories": (("categories", "remap"), _filter),
    "ConvertCocoPolysToMask": ((), _merge),
}


def _opened(t: Any) -> list:
    """The objects ``t`` runs, in order: a preset and any object of no
    library holding a list or tuple ``transforms`` opened, recursively."""
    from ..adapt import adapter_of, pair_wrapped

    inner = pair_wrapped(t)
    if inner is None and adapter_of(t) is None:
        held = getattr(t, "transforms", None)
        inner = list(held) if isinstance(held, (list, tuple)) else None
    if inner is None:
        return [t]
    if not isinstance(inner, (list, tuple)):
        inner = [inner]
    return [leaf for item in inner for leaf in _opened(item)]


def _read(t: Any, coco: bool) -> _Step:
    from ..adapt import adapter_of

    name = type(t).__name__
    readers = {**_COCO_READERS, **_READERS} if coco else _READERS
    entry = readers.get(name)
    if adapter_of(t) is not None or entry is None:
        library = " (a library's transform, not the reference's pair one)"
        raise NotNative(
            f"{_WHERE}: {name}{library if adapter_of(t) is not None else ''} "
            "is not one of the segmentation reference's own transforms read "
            f"natively ({', '.join(readers)}); wrap the dataset with "
            "torchvision.datasets.wrap_dataset_for_transforms_v2 and give it v2 "
            "transforms"
        )
    attrs, reader = entry
    missing = [a for a in attrs if not hasattr(t, a)]
    if missing:
        raise NotNative(f"{_WHERE}: {name} has no {', '.join(missing)}")
    return reader(t)


def read_pairs(given: Any, coco: bool = False) -> PairSteps:
    """The unwrapped VOCSegmentation's ``transforms`` ``given`` (the
    reference's v1 preset), or with ``coco`` the unwrapped CocoDetection's
    (the reference's Compose of FilterAndRemapCocoCategories,
    ConvertCocoPolysToMask and the preset), as :class:`PairSteps`;
    NotNative naming why not."""
    kind = "CocoDetection" if coco else "VOCSegmentation"
    if given is None:
        raise NotNative(
            f"a {kind} with no transforms gives PIL images and "
            f"{'annotations' if coco else 'masks'}, which are not read natively"
        )
    objects = _opened(given)
    steps = [_read(t, coco) for t in objects]
    values = None
    if coco:
        names = [s.name for s in steps]
        if names[:2] != list(_COCO_READERS):
            raise NotNative(
                f"{_WHERE} begin with {', '.join(names[:2])}: natively, "
                "FilterAndRemapCocoCategories then ConvertCocoPolysToMask, as the "
                "segmentation reference's COCO dataset"
            )
        values = steps[0].values
    where = [k for k, s in enumerate(steps) if s.converts]
    if not where:
        raise NotNative(
            f"{_WHERE} leave the image and the mask PIL images (no PILToTensor), "
            "which are not read natively"
        )
    first = where[0]
    resized = {k < first for k, s in enumerate(steps) if s.resizes}
    if len(resized) > 1:
        raise NotNative(
            f"{_WHERE} resize the mask both as a PIL image and as a tensor "
            "(before and after PILToTensor), whose nearest pixels differ"
        )
    probes.check(given, objects, steps, None if values is None else list(values))
    flat = [v2 for s in steps for v2 in s.steps]
    merge = tuple(objects[:2]) if coco else ()
    return PairSteps(flat, resized != {False}, _MASK_FILL, values, merge)


_V1_MERGE, _V2_MERGE = "ConvertCocoPolysToMask", "CocoDetectionToVOCSegmentation"


def coco_pairs(given: Any) -> Optional[str]:
    """Which of the segmentation reference's COCO datasets a CocoDetection's
    ``transforms`` ``given`` look like, by the name of an object they hold:
    "v1" (``ConvertCocoPolysToMask``: :func:`read_pairs` reads them, or
    says why not), "v2" (``CocoDetectionToVOCSegmentation``, on the
    wrapped dataset: :func:`coco_v2`), or None."""
    try:
        names = {type(t).__name__ for t in _opened(given)} if given is not None else ()
    except Exception:  # noqa: BLE001 - the user's objects, looked at only
        return None
    return "v1" if _V1_MERGE in names else "v2" if _V2_MERGE in names else None


def coco_v2(given: Any) -> tuple[dict, Any, list]:
    """The wrapped CocoDetection's ``transforms`` ``given`` as the
    segmentation reference builds them with ``--use-v2``: its Compose of
    ``CocoDetectionToVOCSegmentation`` (first) and the v2 preset. Returns
    what follows once the converter is seen on probe samples to do what the
    reference's does: keep the instance masks whose label its
    ``COCO_TO_VOC_LABEL_MAP`` maps, merge them into one (h, w) uint8
    ``tv_tensors.Mask`` (the mapped value where one covers a pixel, 255
    where two or more do; zeros of the image's size where none is kept or
    the target has no masks), and the whole ``given`` is seen to give
    what the converter's model and the objects after it give. Returns (each
    COCO label's value, the converter, the objects after it); NotNative
    naming why not."""
    objects = _opened(given)
    first = objects[0] if objects else None
    if type(first).__name__ != _V2_MERGE:
        raise NotNative(
            f"{_WHERE} do not begin with {_V2_MERGE}: natively, the segmentation "
            "reference's Compose of it and the preset"
        )
    lut = getattr(first, "COCO_TO_VOC_LABEL_MAP", None)
    ok = isinstance(lut, dict) and all(
        _int(k) is not None
        and -(2**63) <= k < 2**63
        and _int(v) is not None
        and 0 <= v <= 255
        for k, v in lut.items()
    )
    if not ok:
        raise NotNative(
            f"{_WHERE}: {_V2_MERGE}.COCO_TO_VOC_LABEL_MAP is not a dict of int "
            "labels to values 0..255"
        )
    lut = dict(lut)
    step = _Step(_V2_MERGE, [], _v2_merge_model(lut))
    with probes.generators_kept():
        for k, start in enumerate(probes.v2_samples(list(lut))):
            probes.seeded(k)
            pair = probes.beside(first, step, start)
            for t in objects[1:]:  # the v2 preset: torchvision's own objects
                pair = probes.run(t, pair, f"{_WHERE}: {type(t).__name__}")
            probes.seeded(k)
            whole = probes.run(given, start, _WHERE)
            if not all(map(probes.same, whole, pair)):
                raise NotNative(
                    f"{_WHERE}: called whole, they do not give what their steps "
                    "give in order, so they are not read natively"
                )
    return lut, first, objects[1:]


def _v2_merge_model(lut: dict) -> Callable[[Any, Any], tuple[Any, Any]]:
    def model(image: Any, target: Any) -> tuple[Any, Any]:
        import torch
        from torchvision import tv_tensors
        from torchvision.transforms.v2 import functional as F

        merged = None
        if "masks" in target:
            labels = target["labels"].tolist()
            keep = [k for k, label in enumerate(labels) if label in lut]
            if keep:
                masks = target["masks"][keep].to(torch.uint8)
                values = torch.tensor([lut[labels[k]] for k in keep], dtype=torch.uint8)
                merged = (masks * values[:, None, None]).max(dim=0).values
                merged[masks.sum(dim=0) > 1] = _MASK_FILL
        if merged is None:
            merged = torch.zeros(F.get_size(image), dtype=torch.uint8)
        return image, tv_tensors.Mask(merged)

    return model
