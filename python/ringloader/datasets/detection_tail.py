"""The tail the detection reference ends its presets with
(``ConvertBoundingBoxFormat(XYXY)``, ``SanitizeBoundingBoxes()``,
``ToPureTensor()``), run on the targets :mod:`.detection_target` builds
without torchvision's per-call machinery: the same arithmetic on plain
tensors, where the user's objects would flatten each sample into a tree,
dispatch every op through the tv_tensors and rebuild the tree, once a
step (most of the main thread's time a sample, for a recipe that only
flips).

:meth:`QuickTail.of` takes the tail only where each step is torchvision's
own class (a subclass may do anything) with what is followed here:
``ConvertBoundingBoxFormat`` to XYXY (the boxes' format already: nothing to
do), ``SanitizeBoundingBoxes`` with its default ``labels_getter`` or None
(``min_size``, ``min_area`` Python numbers) and ``ToPureTensor`` as the
last step; and only after the user's own steps and this give the same on
probe targets: fixed ones (a box exactly 1 x 1, one exactly on the
canvas' edge, a negative corner, under 1 in area, none kept, every one
kept, whole-number boxes, no box) and boxes exactly on the steps' own
``min_size`` and ``min_area`` and the float just under, so that another
torchvision that sanitizes otherwise keeps its own steps. The steps'
settings are read again for each batch. A target that is not as
:mod:`.detection_target` builds it (not a dict, boxes of another format,
a tensor of another type such as keypoints, a dict or a list holding a
tensor among its values, no labels to find or labels that are not a
plain tensor of one a box) is handed to the user's steps, which give
what torchvision gives, its errors too.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

__all__ = ["QuickTail"]


class QuickTail:
    """The tail as plain tensor arithmetic; call it as the Compose's steps
    are called, ``(image, target) -> (image, target)``. The steps'
    settings are read on each call (once a batch: :meth:`each`), as the
    steps read them: one changed to what is not followed here sends the
    samples to the steps."""

    def __init__(self, steps: list) -> None:
        self.steps = steps  # the user's own objects

    @classmethod
    def of(cls, steps: list) -> Optional["QuickTail"]:
        """The quick form of ``steps``, or None where they are not the
        steps it follows or it does not give what they give."""
        reading = _reading(steps)
        if reading is None:
            return None
        quick = cls(list(steps))
        return quick if _agrees(quick, reading[0]) else None

    def __call__(self, image: Any, target: Any) -> tuple[Any, Any]:
        return self.each([(image, target)])[0]

    def each(self, samples: list) -> list:
        """Each ``(image, target)`` of a batch through the tail, the
        steps' settings read once for the batch."""
        reading = _reading(self.steps)
        return [self._one(image, target, reading) for image, target in samples]

    def _one(self, image: Any, target: Any, reading: Any) -> tuple[Any, Any]:
        boxes = _boxes(target)
        if boxes is None or reading is None:
            return self._slow(image, target)
        import torch
        from torchvision import tv_tensors

        sanitize, pure = reading
        out = dict(target)
        for min_size, min_area, find in sanitize:
            key = _labels_key(out) if find else None
            if find and (key is None or not _plain(out[key], len(boxes))):
                return self._slow(image, target)  # torchvision's error
            valid = _valid(boxes, min_size, min_area)
            if bool(valid.all()):
                continue
            for k, v in out.items():
                if k == key:
                    out[k] = v[valid]
                elif (
                    isinstance(v, tv_tensors.TVTensor)
                    and v.ndim
                    and len(v) == len(valid)
                ):
                    out[k] = tv_tensors.wrap(v.as_subclass(torch.Tensor)[valid], like=v)
            boxes = out["boxes"]
        if pure:
            if isinstance(image, tv_tensors.TVTensor):
                image = image.as_subclass(torch.Tensor)
            for k, v in out.items():
                if isinstance(v, tv_tensors.TVTensor):
                    out[k] = v.as_subclass(torch.Tensor)
        return image, out

    def _slow(self, image: Any, target: Any) -> tuple[Any, Any]:
        sample = (image, target)
        for step in self.steps:
            sample = step(*sample)
        return sample


def _reading(steps: list) -> Optional[tuple[list, bool]]:
    """What the steps ask, as their settings stand: ([(min_size, min_area,
    whether labels are looked for)] a SanitizeBoundingBoxes, whether a
    last ToPureTensor follows), or None where a step is not torchvision's
    own ConvertBoundingBoxFormat to XYXY, SanitizeBoundingBoxes with
    number sizes and the default or no ``labels_getter``, or a last
    ToPureTensor."""
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    sanitize: list = []
    pure = False
    for k, step in enumerate(steps):
        kind = type(step)
        if kind is v2.ToPureTensor and k == len(steps) - 1:
            pure = True
        elif kind is v2.ConvertBoundingBoxFormat:
            fmt = step.format
            if isinstance(fmt, str):  # one torchvision does not know: its error
                fmt = tv_tensors.BoundingBoxFormat.__members__.get(fmt.upper())
            if fmt != tv_tensors.BoundingBoxFormat.XYXY:
                return None
        elif kind is v2.SanitizeBoundingBoxes:
            sizes = (step.min_size, step.min_area)
            finds = _finds_labels(step)
            if finds is None or not all(map(_number, sizes)):
                return None
            sanitize.append(sizes + (finds,))
        else:
            return None
    return sanitize, pure


def _finds_labels(step: Any) -> Optional[bool]:
    """Whether a SanitizeBoundingBoxes looks for the labels with the
    default heuristic (True) or has none (False), by the getter it calls
    (made from ``labels_getter`` when it was built, as torchvision does);
    None for a getter of the user's own."""
    from torchvision.transforms.v2 import _utils

    getter = getattr(step, "_labels_getter", None)
    if getter is not None and getter is getattr(
        _utils, "_find_labels_default_heuristic", object()
    ):
        return True
    parse = getattr(_utils, "_parse_labels_getter", None)
    code = getattr(getter, "__code__", None)
    if parse is not None and code is not None and code is parse(None).__code__:
        return False
    return None


def _number(v: Any) -> bool:
    """A size compared here as torchvision compares it: a Python float, or
    an int a float64 holds exactly (torch casts a larger one to float32
    in one step, NumPy through float64)."""
    return type(v) is float or (type(v) is int and abs(v) <= 2**53)


def _boxes(target: Any) -> Any:
    """The target's boxes where it is as :mod:`.detection_target` builds
    it (a dict whose tensors are its one XYXY BoundingBoxes under "boxes",
    Masks and plain tensors; its other values numbers, strings or lists
    of them), else None."""
    import torch
    from torchvision import tv_tensors

    if type(target) is not dict:
        return None
    boxes = target.get("boxes")
    if (
        type(boxes) is not tv_tensors.BoundingBoxes
        or boxes.format != tv_tensors.BoundingBoxFormat.XYXY
        or boxes.ndim != 2
    ):
        return None
    for k, v in target.items():
        if not isinstance(k, str):
            return None
        if isinstance(v, torch.Tensor):
            if type(v) not in (torch.Tensor, tv_tensors.Mask) and k != "boxes":
                return None
        elif isinstance(v, dict) or (
            isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v)
        ):
            return None
    return boxes


def _labels_key(target: dict) -> Optional[str]:
    """The key SanitizeBoundingBoxes' default ``labels_getter`` takes:
    "labels" in any case, else the first holding "label"."""
    keys = list(target)
    for k in keys:
        if k.lower() == "labels":
            return k
    for k in keys:
        if "label" in k.lower():
            return k
    return None


def _plain(labels: Any, n: int) -> bool:
    import torch

    return type(labels) is torch.Tensor and labels.ndim > 0 and len(labels) == n


def _valid(boxes: Any, min_size: float, min_area: float) -> Any:
    """The boxes SanitizeBoundingBoxes keeps: at least ``min_size`` wide
    and high, of at least ``min_area``, no corner negative or past the
    canvas; compared in the boxes' dtype, the numbers cast to it, as
    torchvision's tensor arithmetic compares (floating boxes in NumPy, a
    few microseconds where torch's ops take tens; other boxes in torch)."""
    import torch

    b = boxes.as_subclass(torch.Tensor)
    height, width = boxes.canvas_size
    if b.dtype in (torch.float32, torch.float64) and b.device.type == "cpu":
        a = b.detach().numpy()
        of = a.dtype.type
        # torch's arithmetic overflows to inf and subtracts infs to NaN
        # without a word: so here
        with np.errstate(over="ignore", invalid="ignore"):
            ws = a[:, 2] - a[:, 0]
            hs = a[:, 3] - a[:, 1]
            keep = (ws >= of(min_size)) & (hs >= of(min_size)) & (a >= 0).all(axis=1)
            keep &= ws * hs >= of(min_area)
            keep &= (a[:, 0] <= of(width)) & (a[:, 2] <= of(width))
            keep &= (a[:, 1] <= of(height)) & (a[:, 3] <= of(height))
        return torch.from_numpy(keep)
    ws = b[:, 2] - b[:, 0]
    hs = b[:, 3] - b[:, 1]
    valid = (ws >= min_size) & (hs >= min_size) & (b >= 0).all(dim=-1)
    valid &= ws * hs >= min_area
    valid &= (b[:, 0] <= width) & (b[:, 2] <= width)
    valid &= (b[:, 1] <= height) & (b[:, 3] <= height)
    return valid


def _edges(sizes: list, dtype: Any) -> np.ndarray:
    """Boxes from (0, 0) on the steps' own edges in ``dtype`` (each
    SanitizeBoundingBoxes' ``min_size`` square, its ``min_area`` at the
    larger of 1 and ``min_size`` wide; each exactly, then one side the
    float just under), for sizes under 2**31 (rows (m, 4))."""
    of = np.dtype(dtype).type
    rows = []
    for min_size, min_area, _ in sizes:
        if not all(np.isfinite(v) and 0 <= v < 2**31 for v in (min_size, min_area)):
            continue
        wide = max(float(min_size), 1.0)
        for w, h in ((of(min_size), of(min_size)), (of(wide), of(min_area / wide))):
            under_w, under_h = np.nextafter(w, of(0)), np.nextafter(h, of(0))
            rows += [[0, 0, w, h], [0, 0, under_w, h], [0, 0, w, under_h]]
    return np.array(rows, dtype=dtype).reshape(-1, 4)


def _probes(sizes: list) -> list:
    """Targets on the edges SanitizeBoundingBoxes draws, as
    :mod:`.detection_target` builds them: fixed ones, and boxes on the
    edges of the steps' own ``sizes`` (:func:`_edges`)."""
    import torch

    edges = [
        [0.0, 0.0, 8.0, 6.0],  # the whole canvas
        [1.0, 1.0, 2.0, 2.0],  # exactly 1 x 1
        [1.0, 1.0, 1.5, 4.0],  # narrower than 1
        [2.0, 1.0, 5.0, 1.75],  # lower than 1
        [-0.5, 1.0, 3.0, 3.0],  # a negative corner
        [5.0, 2.0, 8.25, 4.0],  # past the right edge
        [1.0, 5.5, 3.0, 6.5],  # past the bottom
        [3.0, 3.0, 4.2, 3.9],  # 1.08 in area, 0.9 high
        [0.0, 0.0, 0.0, 0.0],  # zeroed by a RandomIoUCrop
        [2.5, 0.5, 7.5, 5.5],
    ]
    out = [
        _probe(edges, torch.float32, (6, 8)),
        _probe(edges, torch.float64, (6, 8), clamping="hard"),
        _probe(
            [[0, 0, 8, 6], [1, 1, 2, 3], [2, 2, 2, 4], [0, 0, 9, 2]],
            torch.int64,
            (6, 8),
        ),
        _probe(edges[:2] + edges[-1:], torch.float32, (6, 8)),  # every box kept
        _probe(edges[2:4] + edges[8:9], torch.float32, (6, 8), clamping=None),  # none
        _probe([], torch.float32, (6, 8)),
    ]
    for dtype in (np.float32, np.float64):
        own = _edges(sizes, dtype)
        if len(own):
            side = int(np.ceil(own.max())) + 1  # the boxes inside the canvas
            out.append(_probe(own, getattr(torch, np.dtype(dtype).name), (side, side)))
    return out


def _probe(rows: Any, dtype: Any, canvas: tuple, clamping: Any = "soft") -> tuple:
    """An image and its target as :mod:`.detection_target` builds it, of
    one pixel (what the tail reads of the image and the masks is their
    type and first axis)."""
    import torch
    from torchvision import tv_tensors

    n = len(rows)
    boxes = torch.as_tensor(np.asarray(rows), dtype=dtype).reshape(n, 4)
    target = {
        "image_id": 7,
        "boxes": tv_tensors.BoundingBoxes(
            boxes, format="XYXY", canvas_size=canvas, clamping_mode=clamping
        ),
        "masks": tv_tensors.Mask(torch.arange(n, dtype=torch.uint8).view(n, 1, 1)),
        "labels": torch.arange(1, n + 1, dtype=torch.int64),
        "area": [float(k) for k in range(n)],
        "iscrowd": [0] * n,
    }
    image = tv_tensors.Image(torch.zeros(3, 1, 1, dtype=torch.uint8))
    return image, target


def _agrees(quick: QuickTail, sizes: list) -> bool:
    """Whether ``quick`` gives what the user's steps give on every probe
    (``sizes``: the SanitizeBoundingBoxes' own, :func:`_reading`'s) in
    values, dtypes, types, the boxes' format, canvas and clamping mode;
    False where either raises on one."""
    try:
        for image, target in _probes(sizes):
            want = quick._slow(image, dict(target))
            got = quick(image, dict(target))
            if not _same(want, got):
                return False
    except Exception:  # noqa: BLE001 - the user's steps, or sizes we do not probe
        return False
    return True


def _same(a: Any, b: Any) -> bool:
    import torch

    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        meta = ("format", "canvas_size", "clamping_mode")
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and bool(
                torch.equal(a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor))
            )
            and all(getattr(a, m, None) == getattr(b, m, None) for m in meta)
        )
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)
