"""The segmentation reference's own ``PadIfSmaller``
(``references/segmentation/v2_extras.py`` in torchvision's repository, not
part of the torchvision package), written as the reference writes it so
that the benchmark's segmentation preset is the reference's as it stands:
a v2 transform adding the rows and columns an input lacks to reach
``size``, at the bottom and right only, each input with its type's fill.
"""

from __future__ import annotations

from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F


class PadIfSmaller(v2.Transform):
    def __init__(self, size, fill=0):
        super().__init__()
        self.size = size
        self.fill = v2._utils._setup_fill_arg(fill)

    def make_params(self, flat_inputs):
        _, height, width = v2._utils.query_chw(flat_inputs)
        padding = [0, 0, max(self.size - width, 0), max(self.size - height, 0)]
        return dict(padding=padding, needs_padding=any(padding))

    def transform(self, inpt, params):
        if not params["needs_padding"]:
            return inpt
        fill = v2._utils._get_fill(self.fill, type(inpt))
        return F.pad(
            inpt, padding=params["padding"], fill=v2._utils._convert_fill_arg(fill)
        )
