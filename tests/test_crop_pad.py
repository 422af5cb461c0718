"""RandomCrop's fill and padding_mode, fused: every mode ("constant" with
zero, grey and out-of-range per-channel fills; "edge", "reflect",
"symmetric") x pad_if_needed x with or without a Resize (bilinear or
bicubic) before x flips,
v1 and v2, on every JPEG kind at odd and tiny sizes (1 x 1 to 640 px;
padding wider than the image; windows wholly in the padding), as views of
one MultiView. Each view equals torchvision's RandomCrop on the PIL image
(its F.pad: Pillow's fill, numpy's modes; v1 pads twice, v2 once) given
the window ringloader drew (``_core.plan_window``'s wx, wy), then the
flips it drew: within 1 LSB where no DCT scale applies, 35 dB where one
does (the README's tolerances)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import datasets as tvd
from torchvision import tv_tensors
from torchvision import transforms as v1
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core
from ringloader.transforms import MultiView, compile_transform, compile_views

from images import KINDS, jpeg_bytes, psnr

SEED = 5
# (h, w): tiny and odd sizes, where padding is wider than the image, and
# larger ones that a Resize reduces enough for a DCT scale.
SIZES = [(1, 1), (3, 5), (9, 17), (31, 22), (2, 40), (64, 48), (150, 233), (480, 640)]
MODES = ["constant", "edge", "reflect", "symmetric"]
BILINEAR, BICUBIC = v2.InterpolationMode.BILINEAR, v2.InterpolationMode.BICUBIC
FILLS = [0, 7, (300, 128.9, -4)]  # the last: (255, 128, 0) as Pillow fills


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    d = tmp_path_factory.mktemp("pad") / "class_0"
    os.makedirs(d)
    kinds = list(KINDS)
    for k, (h, w) in enumerate(SIZES):
        kind = kinds[k % len(kinds)]
        (d / f"img_{k:02d}_{kind}.jpg").write_bytes(jpeg_bytes(kind, h, w, seed=k))
    return str(d.parent)


def crops(m, mode, fill):
    """RandomCrop's shapes: a small window that may lie wholly in the
    padding; the same with pad_if_needed; a window larger than the small
    images, padding and pad_if_needed together; pad_if_needed alone."""
    kw = dict(fill=fill, padding_mode=mode)
    return [
        m.RandomCrop((10, 12), padding=(14, 3, 2, 16), **kw),
        m.RandomCrop((10, 12), padding=(14, 3, 2, 16), pad_if_needed=True, **kw),
        m.RandomCrop((40, 36), padding=(2, 5), pad_if_needed=True, **kw),
        m.RandomCrop(24, pad_if_needed=True, **kw),
    ]


def views(m, mode, resize):
    fills = FILLS if mode == "constant" else [FILLS[2]]  # (ignored there)
    if m is v2 and mode == "constant":
        # v2's per-type fill: a PIL image takes PIL's Image entry, else
        # "others" (a tv_tensors.Image entry is not for it).
        fills = fills + [{tv_tensors.Image: 50, "others": 9}, {Image.Image: 77}]
    out = []
    for fill in fills:
        for crop in crops(m, mode, fill):
            for flips in ([], [m.RandomHorizontalFlip(), m.RandomVerticalFlip()]):
                head = [m.Resize(19, interpolation=resize)] if resize else []
                out.append(m.Compose(head + [crop] + flips + [m.PILToTensor()]))
    return out


def padding_of(spec, nh, nw):
    """torchvision's padding (left, top) of an nh x nw image, pad_if_needed
    included."""
    pl, pt, pr, pb = (
        spec[k] for k in ("pad_left", "pad_top", "pad_right", "pad_bottom")
    )
    if spec["pad_if_needed"] and nh + pt + pb < spec["out_h"]:
        pt += spec["out_h"] - (nh + pt + pb)
    if spec["pad_if_needed"] and nw + pl + pr < spec["out_w"]:
        pl += spec["out_w"] - (nw + pl + pr)
    return pl, pt


def reference(img, view, spec, p, monkeypatch):
    """torchvision's own Resize and RandomCrop on the PIL image, its window
    forced to the one ringloader drew, then the flips ringloader drew."""
    m = v2 if type(view).__module__.startswith("torchvision.transforms.v2") else v1
    resize = [t for t in view.transforms if type(t).__name__ == "Resize"]
    crop = next(t for t in view.transforms if type(t).__name__ == "RandomCrop")
    if resize:
        img = resize[0](img)
    size = img.height, img.width
    pl, pt = padding_of(spec, img.height, img.width)
    top, left = p["wy"] + pt, p["wx"] + pl
    oh, ow = spec["out_h"], spec["out_w"]
    if m is v1:
        forced = staticmethod(lambda img, size: (top, left, oh, ow))
        monkeypatch.setattr(v1.RandomCrop, "get_params", forced)
    else:
        drawn = v2.RandomCrop.make_params

        def make_params(self, flat):
            return {**drawn(self, flat), "top": top, "left": left, "needs_crop": True}

        monkeypatch.setattr(v2.RandomCrop, "make_params", make_params)
    out = crop(img)
    monkeypatch.undo()
    out = F.pil_to_tensor(out)
    if p["flip"]:
        out = F.horizontal_flip(out)
    if p["vflip"]:
        out = F.vertical_flip(out)
    return out, size


@pytest.mark.parametrize(
    "resize", [None, BILINEAR, BICUBIC], ids=["alone", "resize", "bicubic"]
)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("m", [v1, v2], ids=["v1", "v2"])
def test_padding_equals_torchvision_given_the_window(
    root, m, mode, resize, monkeypatch
):
    tf = MultiView(*views(m, mode, resize))
    compiled = compile_views(tf)
    assert all(c.rest == [] for c in compiled), [c.reason for c in compiled]
    with ringloader.Loader(
        tvd.ImageFolder(root), batch_size=4, transform=tf, seed=SEED
    ) as ld:
        batches = list(ld)
    got = [torch.cat([b[0][v] for b in batches]) for v in range(len(tf.views))]
    exact = mirrored = outside = 0
    for key, (path, _) in enumerate(tvd.ImageFolder(root).samples):
        img = Image.open(path).convert("RGB")
        w, h = img.size
        plans = [
            _core.plan_window(c.spec, w, h, SEED, 0, key, v)
            for v, c in enumerate(compiled)
        ]
        scale = max(
            _core.dct_scale(c.spec, w, h, SEED, 0, key, v)
            for v, c in enumerate(compiled)
        )
        exact += scale == 8
        for v, (view, c, p) in enumerate(zip(tf.views, compiled, plans)):
            ref, (nh, nw) = reference(img, view, c.spec, p, monkeypatch)
            mirrored += p["pad_mode"] != "constant"
            oh, ow = c.spec["out_h"], c.spec["out_w"]
            x, y = p["wx"], p["wy"]
            outside += x + ow <= 0 or x >= nw or y + oh <= 0 or y >= nh
            if scale == 8:
                diff = (got[v][key].int() - ref.int()).abs().max().item()
                assert diff <= 1, f"sample {key} ({w}x{h}) view {v}: {diff} LSB, {p}"
            else:
                assert psnr(got[v][key].numpy(), ref.numpy()) >= 35, (key, v, p)
    assert exact > 0 and outside > 0
    assert mode == "constant" or mirrored > 0


def fill_of(crop):
    spec = compile_transform(v2.Compose([v2.Resize((40, 40)), crop])).spec
    mode = _core.PAD_MODES[spec["pad_mode"]]
    return mode, (spec["fill_r"], spec["fill_g"], spec["fill_b"])


@pytest.mark.parametrize(
    "crop, want",
    [
        (v1.RandomCrop(8, padding=1, fill=(300, 128.9, -4)), (255, 128, 0)),
        (v1.RandomCrop(8, padding=1, fill=[5]), (5, 5, 5)),
        (v1.RandomCrop(8, padding=1, fill=None), (0, 0, 0)),
        (v1.RandomCrop(8, padding=1, fill=-0.5), (0, 0, 0)),
        (v2.RandomCrop(8, padding=1, fill=127.9), (127, 127, 127)),
        (v2.RandomCrop(8, padding=1, fill={tv_tensors.Image: 5}), (0, 0, 0)),
        (v2.RandomCrop(8, padding=1, fill={Image.Image: (1, 2, 3)}), (1, 2, 3)),
        (v2.RandomCrop(8, pad_if_needed=True, fill={"others": 200}), (200,) * 3),
    ],
)
def test_fill_is_pillows_8_bit_colour(crop, want):
    assert fill_of(crop) == ("constant", want)
    # Pillow itself, on what torchvision gives it.
    tv = type(crop)(3, padding=1, pad_if_needed=True, fill=crop.fill)
    padded = np.asarray(tv(Image.new("RGB", (1, 1))))
    assert tuple(padded[0, 0]) == want


def test_other_modes_ignore_fill_and_no_padding_is_plain():
    assert fill_of(v2.RandomCrop(8, padding=1, fill=9, padding_mode="edge")) == (
        "edge",
        (0, 0, 0),
    )
    # No padding: no mode, the spec of a zero-padded crop (the same bytes).
    assert fill_of(v1.RandomCrop(8, fill=9, padding_mode="reflect")) == (
        "constant",
        (0, 0, 0),
    )


def test_v1_pads_twice_v2_once():
    """v1 mirrors `padding`, then mirrors that again for pad_if_needed; v2
    pads both at once: the two differ on a small image, and each is
    followed."""
    img = Image.fromarray(np.arange(3 * 5 * 3, dtype=np.uint8).reshape(3, 5, 3))
    a = compile_transform(
        v1.RandomCrop(11, padding=2, pad_if_needed=True, padding_mode="reflect")
    )
    b = compile_transform(
        v2.RandomCrop(11, padding=2, pad_if_needed=True, padding_mode="reflect")
    )
    assert a.spec["pad_twice"] == 1 and b.spec["pad_twice"] == 0
    once = np.pad(np.asarray(img), ((4, 4), (3, 3), (0, 0)), "reflect")
    twice = np.pad(np.asarray(img), ((2, 2), (2, 2), (0, 0)), "reflect")
    twice = np.pad(twice, ((2, 2), (1, 1), (0, 0)), "reflect")
    assert (once != twice).any()


@pytest.mark.parametrize(
    "crop, why",
    [
        (v1.RandomCrop(8, padding=1, fill=(1, 2)), "2 values for an RGB image"),
        (v1.RandomCrop(8, padding=1, fill=float("nan")), "not finite"),
        (v1.RandomCrop(8, padding=1, padding_mode="wrap"), "padding_mode='wrap'"),
        (v1.RandomCrop(8, padding=1, fill=np.int64(7)), "not a number or tuple"),
    ],
)
def test_a_fill_the_core_cannot_say_is_refused_with_its_reason(crop, why):
    compiled = compile_transform(v1.Compose([v1.Resize((40, 40)), crop]))
    assert compiled.rest[0] is crop and why in compiled.reason
