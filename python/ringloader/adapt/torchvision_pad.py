"""torchvision's RandomCrop padding as the C core's spec fields (the
``fields`` of a ``_steps.RandomCrop`` step).

torchvision pads the PIL image a dataset gives (``F.pad``): a constant
``fill`` through Pillow's ``ImageOps.expand`` (each value truncated to an
int, a number repeated for R, G and B, then clipped to 0..255 by Pillow),
the other modes through ``numpy.pad`` (``edge``, ``reflect``,
``symmetric``, repeated when the padding is wider than the image); v1's
class pads twice (``padding``, then what ``pad_if_needed`` adds around the
padded image), v2's once. The C
core does the same (``rl_pad_source`` in ``csrc/rl.h``); what it cannot say
the same way is refused with a reason, and runs in Python.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

from .. import _core
from ..errors import UnsupportedTransform

_FIELDS = ("pad_left", "pad_top", "pad_right", "pad_bottom")


def _is_v2(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.transforms.v2")


def _padding(t: Any) -> tuple[int, int, int, int]:
    """RandomCrop's padding as (left, top, right, bottom)."""
    pad = t.padding
    if pad is None:
        return 0, 0, 0, 0
    if _is_v2(t):
        left, right, top, bottom = (int(p) for p in pad)  # v2 keeps l, r, t, b
    else:
        pads = [int(pad)] if isinstance(pad, int) else [int(p) for p in pad]
        if len(pads) not in (1, 2, 4):
            raise UnsupportedTransform(f"RandomCrop(padding={pad!r})")
        if len(pads) == 1:
            pads = pads * 4
        elif len(pads) == 2:
            pads = pads * 2
        left, top, right, bottom = pads
    if min(left, top, right, bottom) < 0:
        raise UnsupportedTransform(f"RandomCrop(padding={pad!r}): negative padding")
    return left, top, right, bottom


def _pil_fill(fill: Any, cls: Any = None) -> Any:
    """The fill torchvision v2 gives an image of class ``cls`` from its
    per-type dict: that class's entry (by default PIL's Image, what a
    dataset's ``convert("RGB")`` returns), else "others", else none
    (0)."""
    if cls is None:
        from PIL import Image

        cls = Image.Image
    if cls in fill:
        return fill[cls]
    return fill.get("others")


def tensor_fills(t: Any, name: str = "RandomCrop") -> tuple:
    """A v2 RandomCrop's constant fill for an image converted before it:
    (("image", rgb), ("tensor", rgb)) from its per-type dict, the
    entries of tv_tensors.Image and of a plain tensor (rgb None where
    refused); () where the fill is one for all types."""
    if not isinstance(getattr(t, "fill", None), dict):
        return ()
    import torch
    from torchvision import tv_tensors

    out = []
    for kind, cls in (("image", tv_tensors.Image), ("tensor", torch.Tensor)):
        try:
            out.append((kind, _fill_rgb(_pil_fill(t.fill, cls), name)))
        except UnsupportedTransform:
            out.append((kind, None))
    return tuple(out)


def _fill_rgb(fill: Any, name: str = "RandomCrop") -> tuple[int, int, int]:
    """The 8-bit R, G, B a constant padding has, as torchvision's
    ``_parse_fill`` and Pillow make them for an RGB PIL image (``name``:
    the transform's, for the messages)."""
    if isinstance(fill, dict):  # transforms.v2: a fill per type
        fill = _pil_fill(fill)
    if fill is None:
        return 0, 0, 0
    values = [fill] if isinstance(fill, (int, float)) else fill
    if not isinstance(values, (list, tuple)):
        raise UnsupportedTransform(f"{name}(fill={fill!r}): not a number or tuple")
    if len(values) == 1:
        values = list(values) * 3
    if len(values) != 3:
        raise UnsupportedTransform(
            f"{name}(fill={fill!r}): {len(values)} values for an RGB image "
            "(torchvision raises for it)"
        )
    out = []
    for v in values:
        if not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            raise UnsupportedTransform(f"{name}(fill={fill!r}): not finite numbers")
        out.append(min(max(int(v), 0), 255))  # int() truncates; Pillow clips
    return out[0], out[1], out[2]


def random_crop_fields(t: Any, size: tuple[int, int]) -> dict:
    """RandomCrop's window size (h, w) and padding as spec fields, or
    UnsupportedTransform for a padding the core has not."""
    left, top, right, bottom = _padding(t)
    mode, fill = "constant", (0, 0, 0)
    if left or top or right or bottom or t.pad_if_needed:
        mode = t.padding_mode
        if mode not in _core.PAD_MODES:
            raise UnsupportedTransform(f"RandomCrop(padding_mode={mode!r})")
        if mode == "constant":
            fill = _fill_rgb(t.fill)
    fields = dict(zip(_FIELDS, (left, top, right, bottom)))
    # v1 pads `padding`, then pad_if_needed's share around the padded image:
    # a mirror of the mirror, unlike v2's one pad of both (edge: the same).
    twice = (
        mode in ("reflect", "symmetric")
        and bool(t.pad_if_needed)
        and bool(left or top or right or bottom)
        and type(t).__module__.startswith("torchvision.transforms")
        and not _is_v2(t)
    )
    return {
        "out_h": size[0],
        "out_w": size[1],
        **fields,
        "pad_if_needed": int(bool(t.pad_if_needed)),
        "pad_mode": _core.PAD_MODES.index(mode),
        "pad_twice": int(twice),
        "fill_r": fill[0],
        "fill_g": fill[1],
        "fill_b": fill[2],
    }


class PadIfSmallerCrop:
    """The segmentation reference's ``PadIfSmaller(size, fill)`` (its own
    class, ``references/segmentation/v2_extras.py``: the missing rows and
    columns added at the bottom and right, with the fill of each input's
    type) and the ``RandomCrop(size)`` after it, as one step: the C core's
    RandomCrop with ``pad_if_needed`` 2. Called, it runs the two objects
    in order, as the Compose would (:func:`pad_if_smaller_pairs` made it
    only once the pad was seen to do what the core does)."""

    def __init__(self, pad: Any, crop: Any) -> None:
        self.pad, self.crop = pad, crop
        self.fill = pad.fill  # the mask's fill is the pad's
        self.size = (int(pad.size), int(pad.size))

    def __call__(self, *inputs: Any) -> Any:
        out = self.pad(*inputs)
        return self.crop(*out) if len(inputs) > 1 else self.crop(out)

    def __repr__(self) -> str:
        return f"{self.pad!r} then {self.crop!r}"

    def fields(self) -> tuple[dict, tuple]:
        """The core's RandomCrop fields and the v2 fills per type."""
        fields = random_crop_fields(self.crop, self.size)
        rgb = _fill_rgb(self.fill, "PadIfSmaller")
        fields.update(pad_if_needed=2, fill_r=rgb[0], fill_g=rgb[1], fill_b=rgb[2])
        return fields, tensor_fills(self, "PadIfSmaller")


def _pads_as_the_core(t: Any, size: int) -> Optional[str]:
    """Why ``t`` (a PadIfSmaller) does not pad as the core's pad_if_needed
    2 does, or None: it is run on an image and a mask a few pixels smaller
    than ``size`` on both axes, on one, and larger on both. It must add the
    missing rows and columns at the bottom and right, the image's with its
    Image fill and the mask's with its Mask fill, and keep the rest."""
    import random

    import numpy as np
    import torch

    # The user's class may draw: the probe leaves the global generators
    # (torch's, Python's, NumPy's) as it found them.
    state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            return _probe_pads(t, size)
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])


def _probe_pads(t: Any, size: int) -> Optional[str]:
    import torch
    from torchvision import tv_tensors

    gen = torch.Generator().manual_seed(0)
    small, large = max(size - 3, 1), size + 2
    for h, w in ((small, small + 1), (large, small), (large + 1, large)):
        image = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen)
        mask = torch.randint(0, 256, (1, h, w), dtype=torch.uint8, generator=gen)
        try:
            out = t(tv_tensors.Image(image), tv_tensors.Mask(mask))
        except Exception as e:  # the user's class: anything it raises
            return f"it raised {type(e).__name__} on an image and a mask ({e})"
        if not (isinstance(out, tuple) and len(out) == 2):
            return "called on an image and a mask, it does not return the two"
        for got, given, cls in zip(
            out, (image, mask), (tv_tensors.Image, tv_tensors.Mask)
        ):
            fill = _pil_fill(t.fill, cls) if isinstance(t.fill, dict) else t.fill
            want = _padded(given, fill, size)
            if want is None or not (
                isinstance(got, torch.Tensor)
                and got.shape == want.shape
                and torch.equal(got.as_subclass(torch.Tensor), want)
            ):
                return (
                    f"on a {h}x{w} {cls.__name__} it does not pad as the "
                    "segmentation reference's does (to its size, at the bottom "
                    "and right, with its fill)"
                )
    return None


def _padded(given: Any, fill: Any, size: int) -> Any:
    """``given`` (C, h, w uint8) padded at the bottom and right to
    ``size`` with ``fill`` as v2 pads a uint8 tensor (a fraction
    truncated), or None for a fill of another channel count than
    ``given``'s or past 0..255 (whose cast to uint8 is no one value)."""
    import torch

    c, h, w = given.shape
    values = [0] if fill is None else fill
    values = [values] if isinstance(values, (int, float)) else list(values)
    if len(values) == 1:
        values = values * c
    numbers_ = all(isinstance(v, (int, float)) and 0 <= v < 256 for v in values)
    if len(values) != c or not numbers_:
        return None
    want = torch.empty(c, max(h, size), max(w, size), dtype=torch.uint8)
    want[:] = torch.tensor(values, dtype=torch.float64).view(-1, 1, 1).to(torch.uint8)
    want[:, :h, :w] = given
    return want


def pad_if_smaller_pairs(steps: list) -> tuple[list, Optional[str]]:
    """``steps`` with each ``PadIfSmaller(s)`` directly before a v2
    ``RandomCrop(s)`` (no padding of its own) as one
    :class:`PadIfSmallerCrop`, and why a PadIfSmaller was left as it is
    (None where none was)."""
    from torchvision.transforms import v2

    out: list = []
    why = None
    i = 0
    while i < len(steps):
        t = steps[i]
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        if type(t).__name__ != "PadIfSmaller" or not isinstance(t, v2.Transform):
            out.append(t)
            i += 1
            continue
        size = getattr(t, "size", None)
        reason = None
        if not isinstance(size, int) or size <= 0 or not hasattr(t, "fill"):
            reason = f"PadIfSmaller(size={size!r}) has no int size and fill"
        elif type(nxt) is not v2.RandomCrop or tuple(nxt.size) != (size, size):
            reason = (
                f"PadIfSmaller({size}) is fused only directly before a "
                f"v2.RandomCrop({size}), as the segmentation reference writes it"
            )
        elif nxt.padding is not None or nxt.pad_if_needed:
            reason = f"PadIfSmaller({size}) before a RandomCrop that pads too"
        else:
            probe = _pads_as_the_core(t, size)
            if probe is not None:
                reason = f"PadIfSmaller({size}): {probe}"
        if reason is not None:
            why = why or reason
            out.append(t)
            i += 1
            continue
        out.append(PadIfSmallerCrop(t, nxt))
        i += 2
    return out, why


def fixed_size_crop_fields(t: Any) -> tuple[dict, tuple]:
    """``ringloader.transforms_v2.FixedSizeCrop`` as the core's window
    ``fixed_size_crop`` (its constant fill as a RandomCrop's, the PIL
    image's entry, and the v2 fills per type); UnsupportedTransform for
    another padding mode."""
    name = type(t).__name__
    if t.padding_mode != "constant":
        raise UnsupportedTransform(f"{name}(padding_mode={t.padding_mode!r})")
    rgb = _fill_rgb(t.fill, name)
    fields = {
        "out_h": int(t.size[0]),
        "out_w": int(t.size[1]),
        "window": _core.WINDOWS.index("fixed_size_crop"),
        "pad_mode": _core.PAD_MODES.index("constant"),
        "fill_r": rgb[0],
        "fill_g": rgb[1],
        "fill_b": rgb[2],
    }
    return fields, tensor_fills(t, name)
