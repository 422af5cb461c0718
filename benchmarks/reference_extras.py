"""The segmentation reference's own v2 classes
(``references/segmentation/v2_extras.py`` in torchvision's repository, not
part of the torchvision package), written to behave as the reference's
so that the benchmark's and the tests' presets are the reference's as it
stands: ``PadIfSmaller``, a v2 transform adding the rows and columns an
input lacks to reach ``size``, at the bottom and right only, each input
with its type's fill; ``CocoDetectionToVOCSegmentation``, its COCO
dataset's merge of instance masks into one VOC-style mask.
"""

from __future__ import annotations

from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F


class PadIfSmaller(v2.Transform):
    """Pads each input to at least ``size`` rows and columns, adding them at
    the bottom and right only. ``fill`` is one value for every input, or a
    dict by input type with ``"others"`` for the rest; it is kept as such a
    dict in ``self.fill``, as v2's own transforms keep theirs."""

    def __init__(self, size, fill=0):
        super().__init__()
        self.size = size
        per_type = dict(fill) if isinstance(fill, dict) else {"others": fill}
        self.fill = {key: _as_fill(value) for key, value in per_type.items()}

    def make_params(self, flat_inputs):
        _, rows, cols = v2.query_chw(flat_inputs)  # the image's (or video's)
        return {
            "bottom": max(self.size - rows, 0),
            "right": max(self.size - cols, 0),
        }

    def transform(self, inpt, params):
        if params["bottom"] == 0 and params["right"] == 0:
            return inpt
        value = self.fill.get(type(inpt), self.fill.get("others"))
        return F.pad(
            inpt, padding=[0, 0, params["right"], params["bottom"]], fill=value
        )


def _as_fill(value):
    """A fill as v2's transforms hold one: None, a number, or a list of
    floats (one a channel); TypeError for anything else."""
    if value is None or isinstance(value, (int, float)):
        return value
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"fill is a number, a sequence of them or a dict, not {value!r}"
        )
    return [float(v) for v in value]


class CocoDetectionToVOCSegmentation(v2.Transform):
    """The segmentation reference's COCO-to-VOC step for ``--use-v2``
    (also ``v2_extras.py``): the v2 wrapper's instance masks whose COCO
    label is one of VOC's classes merged into one (h, w) uint8 Mask, each
    pixel its instance's VOC index, 255 where instances overlap, zeros of
    the image's size where none is left."""

    COCO_TO_VOC_LABEL_MAP = {
        coco: voc
        for voc, coco in enumerate(
            [0, 5, 2, 16, 9, 44, 6, 3, 17, 62, 21, 67, 18, 19, 4, 1, 64, 20, 63, 7, 72]
        )
    }
    INVALID_VALUE = 255

    def forward(self, image, target):
        import torch
        from torchvision import tv_tensors

        merged = None
        if "masks" in target:
            pairs = [
                (k, self.COCO_TO_VOC_LABEL_MAP[label])
                for k, label in enumerate(target["labels"].tolist())
                if label in self.COCO_TO_VOC_LABEL_MAP
            ]
            if pairs:
                rows, values = zip(*pairs)
                masks = target["masks"][list(rows)].to(torch.uint8)
                scale = torch.tensor(values, dtype=torch.uint8).reshape(-1, 1, 1)
                merged, _ = (masks * scale).max(dim=0)
                merged[masks.sum(dim=0) > 1] = self.INVALID_VALUE
        if merged is None:
            merged = torch.zeros(F.get_size(image), dtype=torch.uint8)
        return image, tv_tensors.Mask(merged)
