"""Bicubic and nearest Resize and RandomResizedCrop against torchvision on
the same PIL image (torchvision calls Pillow's Image.resize on it).

The bounds tested: without DCT scaling, bicubic within 1 LSB (its weights
and sums are Pillow's own integers, so it is identical in every case seen)
and nearest identical, on every JPEG kind, odd and tiny sizes, upscaling
and downscaling, at every SIMD level; with DCT scaling, bicubic at >= 35 dB
PSNR (nearest is never DCT-scaled). RandomResizedCrop's draws are forced:
torchvision's resized_crop is given the box and flip ringloader drew."""

import io

import numpy as np
import pytest
from PIL import Image

import ringloader
from ringloader import _core
from ringloader import transforms as T

from images import CONTENTS, KINDS, jpeg_bytes, psnr

tv = pytest.importorskip("torchvision.transforms")
v2 = pytest.importorskip("torchvision.transforms.v2")
from torchvision.transforms import functional as F  # noqa: E402

IM = tv.InterpolationMode
MODES = {"bicubic": IM.BICUBIC, "nearest": IM.NEAREST}
BOUND = {"bicubic": 1, "nearest": 0}  # max |ours - torchvision|, no DCT scaling
SEED = 5
LEVELS = ["c", "sse2", "avx2"]


class Files:
    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


def load(path, n, transform):
    """Samples 0..n-1 of n copies of one file: key i draws crop i."""
    with ringloader.Loader(
        Files([path] * n), batch_size=n, seed=SEED, layout="NHWC", transform=transform
    ) as loader:
        images, _ = next(iter(loader))
    return images.numpy()


def write(tmp_path, data):
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    return str(path)


def rrc_spec(out, interp):
    return {
        "kind": "random_crop",
        "out_h": out[0],
        "out_w": out[1],
        "flip_p": 0.5,
        "filter": _core.INTERPOLATIONS.index(interp),
    }


def max_diff(a, b):
    return int(np.abs(a.astype(int) - b.astype(int)).max())


def check_resize(tmp_path, data, interp, cases, bound):
    """Each (Resize size, CenterCrop size or None) against torchvision,
    but those the decode would DCT-scale (a tiny output of a larger image),
    which the 35 dB test covers. Returns the largest difference."""
    img = Image.open(io.BytesIO(data)).convert("RGB")
    path = write(tmp_path, data)
    worst, ran = 0, 0
    for size, crop in cases:
        tf = [tv.Resize(size, interpolation=MODES[interp])]
        tf += [tv.CenterCrop(crop)] if crop else []
        spec = {"kind": "resize_crop", "filter": _core.INTERPOLATIONS.index(interp)}
        if isinstance(size, int):
            spec.update(resize_short=size, out_h=crop, out_w=crop)
        else:
            spec.update(resize_h=size[0], resize_w=size[1])
            spec.update(out_h=size[0], out_w=size[1])
        if _core.dct_scale(spec, img.width, img.height, 0, 0, 0) != 8:
            continue
        ran += 1
        ref = np.asarray(tv.Compose(tf)(img))
        ours = load(path, 1, tv.Compose(tf))[0]
        assert ours.shape == ref.shape, (size, crop)
        d = max_diff(ours, ref)
        assert d <= bound, (interp, img.size, size, crop, d)
        worst = max(worst, d)
    assert ran >= 3, f"only {ran} cases of {img.size} without DCT scaling"
    return worst


def check_rrc(tmp_path, data, interp, out, n, bound):
    img = Image.open(io.BytesIO(data)).convert("RGB")
    ours = load(
        write(tmp_path, data),
        n,
        tv.Compose(
            [
                tv.RandomResizedCrop(out, interpolation=MODES[interp]),
                tv.RandomHorizontalFlip(),
            ]
        ),
    )
    spec = rrc_spec(out, interp)
    ran = 0
    for i in range(n):
        top, left, h, w, flip = _core.plan(spec, img.width, img.height, SEED, 0, i)
        if _core.dct_scale(spec, img.width, img.height, SEED, 0, i) != 8:
            continue
        ran += 1
        ref = F.resized_crop(
            img, int(top), int(left), int(h), int(w), list(out), MODES[interp]
        )
        ref = np.asarray(F.hflip(ref) if flip else ref)
        d = max_diff(ours[i], ref)
        assert d <= bound, (interp, img.size, out, i, d)
    return ran


# (h, w) sizes: tiny, odd, and two that Resize((77, 333)) shrinks in height
# by more than twice the width's pixels (Pillow then resamples vertically
# first) or not.
SIZES = [(1, 1), (10, 10), (37, 53), (231, 250), (300, 400)]
RESIZES = [((77, 333), None), ((301, 45), None), (64, 48), (3, 3), (256, 224)]


@pytest.mark.parametrize("interp", list(MODES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_resize_matches_torchvision(tmp_path, kind, interp):
    for size in SIZES:
        data = jpeg_bytes(kind, *size, seed=size[1], content="lines")
        check_resize(tmp_path, data, interp, RESIZES, BOUND[interp])


@pytest.mark.parametrize("interp", list(MODES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_random_resized_crop_matches_torchvision(tmp_path, kind, interp):
    for size in [(1, 1), (10, 10), (37, 53), (211, 333)]:
        data = jpeg_bytes(kind, *size, seed=size[0], content="photo")
        ran = 0
        for out in [(224, 224), (64, 48), (5, 7)]:  # up and down
            ran += check_rrc(tmp_path, data, interp, out, 8, BOUND[interp])
        assert ran >= 16, f"{size}: {ran} of 24 crops without DCT scaling"


@pytest.fixture
def level(request):
    before = _core.resample_simd()
    got = _core.resample_simd(request.param)
    if got != request.param:
        _core.resample_simd(before)
        pytest.skip(f"this CPU or build has no {request.param}")
    yield got
    _core.resample_simd("avx2")
    _core.resample_simd(before)


@pytest.mark.parametrize("level", LEVELS, indirect=True)
@pytest.mark.parametrize("interp", list(MODES))
def test_every_simd_level_meets_the_bound(tmp_path, level, interp):
    for kind in ["s420", "cmyk", "progressive"]:
        data = jpeg_bytes(kind, 231, 250, seed=3, content="screen")
        check_resize(tmp_path, data, interp, RESIZES, BOUND[interp])
        assert check_rrc(tmp_path, data, interp, (97, 131), 6, BOUND[interp]) == 6


def test_bicubic_is_pillows_to_the_byte(tmp_path):
    """The bound above is 1 LSB; the arithmetic is Pillow's, so in fact
    every byte agrees. A kernel with a = -0.75 fails here, and so do the
    passes in the order of Pillow 12 (always horizontal first), by 21 LSB
    across the lines of Resize((77, 333))."""
    data = jpeg_bytes("s444", 300, 400, seed=11, content="lines")
    worst = check_resize(
        tmp_path, data, "bicubic", RESIZES + [((600, 401), None)], BOUND["bicubic"]
    )
    assert worst == 0


@pytest.mark.parametrize("content", list(CONTENTS))
@pytest.mark.parametrize(
    "kind, size, short, crop, m",
    [("s420", (1600, 2100), 256, 224, 4), ("s422", (600, 900), 100, 100, 4)],
)
def test_bicubic_with_dct_scaling_keeps_35_db(
    tmp_path, content, kind, size, short, crop, m
):
    """Boxes at least three times the output are decoded at 1/2 or 1/4,
    whose IDCT drops high frequencies: the tolerance is bilinear's, >= 35 dB
    (worst seen over 208 DCT-scaled samples of every kind and content:
    36.7 dB, a 4:2:2 line drawing, the second case here)."""
    data = jpeg_bytes(kind, *size, seed=size[0], content=content)
    img = Image.open(io.BytesIO(data)).convert("RGB")
    tf = tv.Compose([tv.Resize(short, interpolation=IM.BICUBIC), tv.CenterCrop(crop)])
    spec = {"kind": "resize_crop", "resize_short": short, "out_h": crop}
    spec.update(out_w=crop, filter=_core.INTERPOLATIONS.index("bicubic"))
    assert _core.dct_scale(spec, img.width, img.height, 0, 0, 0) == m
    ours = load(write(tmp_path, data), 1, tf)[0]
    db = psnr(ours, np.asarray(tf(img)))
    assert db >= 35.0, f"{content}: {db:.1f} dB"


def test_nearest_is_never_dct_scaled():
    spec = {"kind": "resize_crop", "resize_short": 64, "out_h": 64, "out_w": 64}
    assert _core.dct_scale(spec, 4000, 3000, 0, 0, 0) == 1
    spec["filter"] = _core.INTERPOLATIONS.index("nearest")
    assert _core.dct_scale(spec, 4000, 3000, 0, 0, 0) == 8


def filter_of(transform):
    return _core.INTERPOLATIONS[T.compile_transform(transform).spec["filter"]]


def test_every_way_of_naming_an_interpolation():
    assert _core.INTERPOLATIONS == ("bilinear", "bicubic", "nearest")
    for cls in (tv.Resize, v2.Resize):
        assert filter_of(cls((8, 8), interpolation=IM.BICUBIC)) == "bicubic"
        assert filter_of(cls((8, 8), interpolation=3)) == "bicubic"
        assert filter_of(cls((8, 8), interpolation=Image.Resampling.BICUBIC)) == (
            "bicubic"
        )
        assert filter_of(cls((8, 8), interpolation=0)) == "nearest"
        assert filter_of(cls((8, 8), interpolation=IM.NEAREST_EXACT)) == "nearest"
        assert filter_of(cls((8, 8))) == "bilinear"
    for cls in (tv.RandomResizedCrop, v2.RandomResizedCrop):
        assert filter_of(cls(8, interpolation=IM.NEAREST)) == "nearest"
        assert filter_of(cls(8, interpolation=IM.BICUBIC)) == "bicubic"
    assert filter_of(T.Resize((8, 8), interpolation="bicubic")) == "bicubic"
    assert filter_of(T.RandomResizedCrop(8, interpolation="nearest")) == "nearest"
    assert filter_of(T.CenterCrop(8)) == "bilinear"  # 1:1, the filter unused


@pytest.mark.parametrize(
    "mode", [IM.LANCZOS, IM.BOX, IM.HAMMING, 1, 4, 5], ids=lambda m: str(m)
)
def test_other_interpolations_say_why(mode):
    with pytest.raises(T.UnsupportedTransform, match="bilinear, bicubic and nearest"):
        T.compile_transform(tv.Resize((8, 8), interpolation=mode))
    with pytest.raises(T.UnsupportedTransform, match="interpolation="):
        T.compile_transform(T.Resize((8, 8), interpolation="lanczos"))


def test_nearest_exact_on_a_pil_image_is_nearest(tmp_path):
    """torchvision maps NEAREST_EXACT to Pillow's NEAREST for PIL images;
    v2 likewise. Checked on a 3x upscale and an odd downscale."""
    data = jpeg_bytes("s444", 37, 53, seed=2, content="lines")
    img = Image.open(io.BytesIO(data)).convert("RGB")
    path = write(tmp_path, data)
    for size in [(111, 159), (23, 31)]:
        t = v2.Resize(size, interpolation=IM.NEAREST_EXACT)
        ref = np.asarray(t(img))
        np.testing.assert_array_equal(ref, np.asarray(img.resize(size[::-1], 0)))
        np.testing.assert_array_equal(load(path, 1, t)[0], ref)


def test_the_pass_order_follows_the_pillow_installed(tmp_path, monkeypatch):
    """Pillow 12 and older always resample horizontally first: a spec made
    under such a Pillow says so, and its bytes are those of Pillow 13's
    two passes run in that order by hand."""
    import PIL

    tf = T.Resize((77, 333), interpolation="bicubic")
    assert T.compile_transform(tf).spec["passes"] == 0
    data = jpeg_bytes("s444", 231, 250, seed=3, content="lines")
    img = Image.open(io.BytesIO(data)).convert("RGB")
    bic = Image.Resampling.BICUBIC
    by_hand = np.asarray(img.resize((333, 231), bic).resize((333, 77), bic))
    assert max_diff(by_hand, np.asarray(img.resize((333, 77), bic))) > 10
    path = write(tmp_path, data)
    monkeypatch.setattr(PIL, "__version__", "12.1.0")
    assert T.compile_transform(tf).spec["passes"] == 1
    with ringloader.Loader(Files([path]), transform=tf, layout="NHWC") as loader:
        ours = next(iter(loader))[0][0].numpy()
    np.testing.assert_array_equal(ours, by_hand)
