"""torchvision ``transforms.v2`` classes of ringloader's own, for steps
that torchvision's references write as classes of their own which do not
work on v2's targets. They run under torch's DataLoader as any v2
transform does (on images, ``BoundingBoxes``, ``Mask`` and the rest) and
ringloader fuses them.

Importing this module imports torchvision.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

__all__ = ["FixedSizeCrop"]


class FixedSizeCrop(v2.Transform):
    """The detection reference's ``FixedSizeCrop`` (its lsj preset) for
    v2's targets: crop to at most ``size`` (h, w), both offsets from one
    ``torch.rand(1)`` (``int((H - h) * r)`` and ``int((W - w) * r)``,
    drawn only where the image is larger), then pad at the bottom and
    right up to ``size`` in ``padding_mode``: the image with ``fill`` (a
    number or a sequence per channel, as the reference's ``fill=mean``),
    masks with 0, as the reference pads them; or v2's dict per type, such
    as ``{tv_tensors.Mask: 0, "others": mean}``, as given. Boxes, masks
    and keypoints move with the image as v2's ``crop`` and ``pad`` move
    them; the boxes a crop leaves empty are dropped by the
    ``SanitizeBoundingBoxes`` that the reference's presets end with, where
    the reference's class drops them itself.

    In place of the reference's class in its lsj preset::

        v2.ScaleJitter(target_size=(1024, 1024), antialias=True),
        FixedSizeCrop((1024, 1024), fill={tv_tensors.Mask: 0, "others": mean}),
        v2.RandomHorizontalFlip(p=hflip_prob),
    """

    def __init__(
        self,
        size: Union[int, Sequence[int]],
        fill: Any = 0,
        padding_mode: str = "constant",
    ) -> None:
        super().__init__()
        if isinstance(size, int):
            size = (size, size)
        size = tuple(int(s) for s in size)
        if len(size) != 2 or min(size) < 1:
            raise ValueError(f"FixedSizeCrop: size must be (h, w) >= 1, not {size!r}")
        self.size = size
        if not isinstance(fill, dict):  # the reference pads masks with 0
            fill = {tv_tensors.Mask: 0, "others": fill}
        self.fill = self._fill = v2._utils._setup_fill_arg(fill)  # (v2's name)
        self.padding_mode = padding_mode

    def make_params(self, flat_inputs: list) -> dict:
        height, width = v2._utils.query_size(flat_inputs)
        crop_h, crop_w = min(height, self.size[0]), min(width, self.size[1])
        top = left = 0
        cropped = (crop_h, crop_w) != (height, width)
        if cropped:
            r = torch.rand(1)
            top = int(max(height - self.size[0], 0) * r)
            left = int(max(width - self.size[1], 0) * r)
        padding = [0, 0, self.size[1] - crop_w, self.size[0] - crop_h]
        return dict(
            cropped=cropped,
            top=top,
            left=left,
            height=crop_h,
            width=crop_w,
            padding=padding,
        )

    def transform(self, inpt: Any, params: dict) -> Any:
        if params["cropped"]:
            inpt = F.crop(
                inpt, params["top"], params["left"], params["height"], params["width"]
            )
        if any(params["padding"]):
            fill = v2._utils._get_fill(self.fill, type(inpt))
            inpt = F.pad(
                inpt,
                padding=params["padding"],
                fill=fill,
                padding_mode=self.padding_mode,
            )
        return inpt
