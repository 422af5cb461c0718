"""RandomCrop (after a Resize or alone, with zero padding and
pad_if_needed) and RandomVerticalFlip, v1 and v2: each sample equals
torchvision's RandomCrop given the window ringloader draws
(``_core.plan_window``), within the README's tolerances (1 LSB where no
DCT scale applies, 35 dB where one does; other fills and padding modes:
test_crop_pad.py); a fill the core cannot say is said and runs in Python; an image smaller than the window is
that sample's DecodeError, as torchvision raises; the flips' draws have
their probability."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import stats
from torchvision import datasets as tvd
from torchvision import transforms as v1
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core
from ringloader.transforms import compile_transform

from images import psnr, write_folder

SEED = 11


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_folder(str(tmp_path_factory.mktemp("crop")), n_per_class=4)


def load(root, tf, **kw):
    with ringloader.Loader(
        tvd.ImageFolder(root), batch_size=6, transform=tf, seed=SEED, **kw
    ) as ld:
        return torch.cat([x for x, _ in ld])


def padding_of(spec, nh, nw):
    """torchvision's padding (left, top, right, bottom) of an nh x nw image
    for RandomCrop's spec fields, pad_if_needed included."""
    pl, pt, pr, pb = (
        spec[k] for k in ("pad_left", "pad_top", "pad_right", "pad_bottom")
    )
    oh, ow = spec["out_h"], spec["out_w"]
    if spec["pad_if_needed"] and nh + pt + pb < oh:
        d = oh - (nh + pt + pb)
        pt, pb = pt + d, pb + d
    if spec["pad_if_needed"] and nw + pl + pr < ow:
        d = ow - (nw + pl + pr)
        pl, pr = pl + d, pr + d
    return pl, pt, pr, pb


def reference(path, spec, key, resize):
    """torchvision's Resize, pad and crop at the window ringloader drew,
    then its flips; with the DCT scale the sample was decoded at."""
    img = F.pil_to_tensor(Image.open(path).convert("RGB"))
    h, w = img.shape[-2:]
    p = _core.plan_window(spec, w, h, SEED, 0, key)
    if resize is not None:
        img = F.resize(img, resize, antialias=True)
    nh, nw = img.shape[-2:]
    pl, pt, pr, pb = padding_of(spec, nh, nw)
    oh, ow = spec["out_h"], spec["out_w"]
    # Undo the flips' mirroring of the output rectangle, then map the part
    # inside the image back to the window's offset in the padded image.
    vx = ow - p["vx"] - p["vw"] if p["flip"] else p["vx"]
    vy = oh - p["vy"] - p["vh"] if p["vflip"] else p["vy"]
    left = round(p["x"] * nw / w) - vx + pl if p["vw"] else None
    top = round(p["y"] * nh / h) - vy + pt if p["vh"] else None
    padded = F.pad(img, [pl, pt, pr, pb], fill=0)
    assert left is not None and top is not None  # windows here meet the image
    out = F.crop(padded, top, left, oh, ow)
    if p["flip"]:
        out = F.horizontal_flip(out)
    if p["vflip"]:
        out = F.vertical_flip(out)
    return out, _core.dct_scale(spec, w, h, SEED, 0, key)


CASES = {
    "resize+crop v1": (
        64,
        lambda m: m.Compose([m.Resize(64), m.RandomCrop(48), m.RandomHorizontalFlip()]),
    ),
    "resize+crop+vflip v2": (
        (80, 72),
        lambda m: m.Compose(
            [
                m.Resize((80, 72)),
                m.RandomCrop(56, padding=4),
                m.RandomHorizontalFlip(),
                m.RandomVerticalFlip(),
            ]
        ),
    ),
    "crop alone padded": (
        None,
        lambda m: m.Compose([m.RandomCrop(96, padding=(3, 5)), m.RandomVerticalFlip()]),
    ),
    "pad_if_needed": (
        None,
        lambda m: m.Compose([m.RandomCrop((260, 200), pad_if_needed=True)]),
    ),
}


@pytest.mark.parametrize("module", [v1, v2], ids=["v1", "v2"])
@pytest.mark.parametrize("case", list(CASES))
def test_random_crop_equals_torchvision_given_the_window(root, case, module):
    resize, make = CASES[case]
    tf = module.Compose(make(module).transforms + [module.PILToTensor()])
    compiled = compile_transform(tf)
    assert compiled.rest == [], compiled.reason
    spec = compiled.spec
    got = load(root, tf)
    exact = 0
    for key, (path, _) in enumerate(tvd.ImageFolder(root).samples):
        ref, scale = reference(path, spec, key, resize)
        if scale == 8:
            exact += 1
            diff = (got[key].int() - ref.int()).abs().max().item()
            assert diff <= 1, f"sample {key}: {diff} LSB"
        else:
            assert psnr(got[key].numpy(), ref.numpy()) >= 35, key
    assert exact > 0


def test_v1_and_v2_padding_mean_the_same():
    a = compile_transform(v1.Compose([v1.RandomCrop(40, padding=(1, 2, 3, 4))]))
    b = compile_transform(v2.Compose([v2.RandomCrop(40, padding=(1, 2, 3, 4))]))
    assert a.spec == b.spec
    pads = [a.spec[k] for k in ("pad_left", "pad_top", "pad_right", "pad_bottom")]
    assert pads == [1, 2, 3, 4]
    c = compile_transform(ringloader.transforms.RandomCrop(40, padding=(1, 2)))
    assert [c.spec[k] for k in ("pad_left", "pad_top", "pad_right", "pad_bottom")] == [
        1,
        2,
        1,
        2,
    ]


@pytest.mark.parametrize(
    "crop, why",
    [
        # (torchvision's v1 hands Pillow the int 7 itself: red (7, 0, 0).)
        (v1.RandomCrop(32, padding=4, fill=np.int64(7)), "not a number or tuple"),
    ],
)
def test_other_padding_is_said_and_runs_in_python(root, crop, why):
    tf = v2.Compose([v2.Resize((48, 40)), crop, v2.PILToTensor()])
    compiled = compile_transform(tf)
    assert type(compiled.rest[0]) is type(crop) and why in compiled.reason
    with pytest.warns(ringloader.FallbackWarning, match="RandomCrop"):
        got = load(root, tf)
    assert got.shape[-2:] == (32, 32)
    with pytest.raises(ringloader.transforms.UnsupportedTransform, match=why):
        compile_transform(v2.Compose([crop]))


def test_a_window_larger_than_the_image_is_the_samples_error(root):
    tf = v2.Compose([v2.RandomCrop(600), v2.PILToTensor()])
    with pytest.raises(ringloader.DecodeError, match="RandomCrop.*larger") as e:
        load(root, tf)
    assert e.value.path.endswith(".jpg")
    with pytest.raises(ValueError, match="larger"):
        tv = v2.RandomCrop(600)
        tv(Image.new("RGB", (200, 300)))


def test_a_plan_that_fails_says_why_naming_the_size():
    """rl_plan_make's messages, word for word: a sample's (the window larger
    than the image) and those of a plan that no loader can ask for (a size
    or a view out of range), which name the size given."""
    spec = compile_transform(v2.Compose([v2.RandomCrop((60, 50))])).spec
    with pytest.raises(ValueError) as e:
        _core.plan_window(spec, 40, 30, SEED, 0, 0)
    assert str(e.value) == (
        "RandomCrop(60, 50) is larger than the 40x30 image after its resize and padding"
    )
    for width, height, view in ((0, 30, 0), (40, -1, 0), (40, 30, 64)):
        with pytest.raises(ValueError) as e:
            _core.plan_window(spec, width, height, SEED, 0, 0, view)
        assert str(e.value) == f"invalid transform for a {width}x{height} image"
    assert _core.plan_window(spec, 50, 60, SEED, 0, 0, 63)["w"] == 50


def test_flip_draws_have_their_probability():
    spec = compile_transform(
        v2.Compose(
            [
                v2.RandomResizedCrop(32),
                v2.RandomHorizontalFlip(0.3),
                v2.RandomVerticalFlip(0.6),
            ]
        )
    ).spec
    n = 20000
    plans = [_core.plan_window(spec, 300, 200, SEED, 0, k) for k in range(n)]
    h = sum(p["flip"] for p in plans)
    v = sum(p["vflip"] for p in plans)
    assert stats.binomtest(h, n, 0.3).pvalue > 0.01
    assert stats.binomtest(v, n, 0.6).pvalue > 0.01
    both = sum(p["flip"] and p["vflip"] for p in plans)
    assert stats.binomtest(both, n, 0.18).pvalue > 0.01  # independent
    # Without a vertical flip the draws are those made before it existed.
    plain = dict(spec, vflip_p=0.0)
    for k in range(50):
        assert _core.plan(plain, 300, 200, SEED, 0, k) == _core.plan(
            spec, 300, 200, SEED, 0, k
        )


def test_vertical_flip_is_fused_after_pixel_ops_only():
    ok = compile_transform(
        v2.Compose(
            [v2.RandomResizedCrop(32), v2.ColorJitter(0.3), v2.RandomVerticalFlip()]
        )
    )
    assert ok.rest == [] and ok.spec["vflip_p"] == 0.5
    no = compile_transform(
        v2.Compose(
            [v2.RandomResizedCrop(32), v2.RandomRotation(10), v2.RandomVerticalFlip()]
        )
    )
    assert "put the flip first" in no.reason
