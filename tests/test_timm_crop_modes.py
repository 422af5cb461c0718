"""timm's train_crop_mode "rkrc" and "rkrr" fused into the C pipeline:
ResizeKeepRatio with its random scale and aspect, then CenterCropOrPad or
RandomCropOrPad with reflected borders, on the resized image.

- Draws: the resized sizes ringloader plans (``_core.plan_window``'s rw,
  rh) against timm's own ``ResizeKeepRatio.get_params``, and rkrr's window
  offsets against ``RandomCropOrPad.get_params`` on timm's resized sizes,
  over 20,000 draws (Kolmogorov-Smirnov per quantity, chi-square on how
  often neither factor is drawn): p > 0.01. With the ranges pinned to one
  value, the sizes equal timm's exactly (its rounding) on many image sizes.
- Pixels: given the size, window, filter and flip ringloader drew, timm's
  own F.resize and CenterCropOrPad / crop_or_pad (numpy's reflect) on the
  PIL image Pillow decodes: within 1 LSB without DCT scaling (the README's
  tolerance for timm's resize: bicubic identical in every case seen,
  bilinear within 1 LSB), on every JPEG kind, odd and tiny sizes.
- The whole recipe (with RandAugment or AugMix, and RandomErasing) in C,
  without a FallbackWarning, through ringloader.DataLoader and
  ringloader.timm.create_loader (the same batches with 1 and 3 decode
  threads: test_timm_transforms.py's thread test, with each crop mode).
- The eval chain's crop_border_pixels (timm's TrimBorder, first): within
  1 LSB of timm's on every JPEG kind (never DCT-scaled); an image inside
  its border is that sample's DecodeError.
"""

import io
import random
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import stats

import ringloader
from ringloader import _core
from ringloader.transforms import compile_transform

from draws import same_categories
from images import KINDS, jpeg_bytes

timm_data = pytest.importorskip("timm.data")
from timm.data import create_dataset, create_transform  # noqa: E402
from timm.data.transforms import (  # noqa: E402
    CenterCropOrPad,
    MaybePILToTensor,
    RandomCropOrPad,
    ResizeKeepRatio,
)
from torchvision.transforms import (  # noqa: E402
    Compose,
    InterpolationMode,
    RandomHorizontalFlip,
)
from torchvision.transforms import functional as F  # noqa: E402

SEED = 13
N_DRAWS = 20_000
MODES = ["rkrc", "rkrr"]


class Files:
    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


def train(mode, size=48, **kw):
    """timm's train transform for a crop mode, uint8 out (use_prefetcher),
    without the ColorJitter, so the geometry alone is compared."""
    kw.setdefault("color_jitter", None)
    return create_transform(
        size, is_training=True, train_crop_mode=mode, use_prefetcher=True, **kw
    )


def fused(tf):
    compiled = compile_transform(tf)
    assert not compiled.rest, compiled.reason
    return compiled


def timm_sizes(t, w, h, n):
    """n of timm's own ResizeKeepRatio.get_params draws on a w x h image:
    [(h, w), ...]."""
    random.seed(SEED)
    img = Image.new("RGB", (w, h))
    args = (
        t.size,
        t.longest,
        t.random_scale_prob,
        t.random_scale_range,
        t.random_scale_area,
        t.random_aspect_prob,
        t.random_aspect_range,
    )
    return [tuple(t.get_params(img, *args)) for _ in range(n)]


def ks(a, b, what):
    p = stats.ks_2samp(a, b).pvalue
    assert p > 0.01, f"{what}: p = {p:.4g}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("w, h", [(300, 200), (180, 261)])
def test_keep_ratio_sizes_draw_as_timm(mode, w, h):
    tf = train(mode, 224)
    spec = fused(tf).spec
    plans = [_core.plan_window(spec, w, h, SEED, 0, i) for i in range(N_DRAWS)]
    ours = [(p["rh"], p["rw"]) for p in plans]
    theirs = timm_sizes(tf.transforms[0], w, h, N_DRAWS)
    for k, what in enumerate(("height", "width")):
        ks([s[k] for s in ours], [s[k] for s in theirs], what)
    ks([s[1] / s[0] for s in ours], [s[1] / s[0] for s in theirs], "aspect")
    # neither factor drawn (p = 0.25): the plain keep-ratio size
    base = tuple(
        ResizeKeepRatio(224).get_params(Image.new("RGB", (w, h)), (224, 224), 0)
    )
    same_categories([s == base for s in ours], [s == base for s in theirs], "plain")


def test_random_crop_or_pad_offsets_draw_as_timm():
    """rkrr: the window's top and left offsets (negative: padding before
    the image), as RandomCropOrPad.get_params draws them on timm's resized
    sizes."""
    tf = train("rkrr", 224)
    spec = fused(tf).spec
    assert _core.WINDOWS[spec["window"]] == "random_crop_or_pad"
    w, h = 300, 200
    plans = [_core.plan_window(spec, w, h, SEED, 0, i) for i in range(N_DRAWS)]
    sizes = timm_sizes(tf.transforms[0], w, h, N_DRAWS)
    theirs = [
        RandomCropOrPad.get_params(torch.zeros(1, 1, 1).expand(3, *s), (224, 224))
        for s in sizes
    ]
    ks([p["wy"] for p in plans], [t for t, _ in theirs], "top")
    ks([p["wx"] for p in plans], [x for _, x in theirs], "left")
    # padding seen (a side under 224) as often as timm pads
    same_categories(
        [p["wy"] < 0 for p in plans], [t < 0 for t, _ in theirs], "padded rows"
    )


def test_pinned_factors_round_as_timm():
    """Scale and aspect drawn with certainty from one-value ranges: the
    resized size equals timm's get_params (its x * f / ratio, rounded half
    to even) on 400 image sizes, with and without area scaling, any
    `longest`."""
    cases = [
        dict(random_scale_area=True, longest=0.0),
        dict(random_scale_area=False, longest=0.3),
        dict(random_scale_area=True, longest=1.0),
    ]
    rng = np.random.default_rng(1)
    for kw in cases:
        t = ResizeKeepRatio(
            (48, 40),
            random_scale_prob=1.0,
            random_scale_range=(0.87, 0.87),
            random_aspect_prob=1.0,
            random_aspect_range=(1.07, 1.07),
            **kw,
        )
        spec = fused([t, CenterCropOrPad((48, 40), padding_mode="edge")]).spec
        for w, h in rng.integers(1, 700, (400, 2)):
            w, h = int(w), int(h)
            want = timm_sizes(t, w, h, 1)[0]
            if min(want) == 0:
                continue  # timm's resize to 0 pixels raises
            p = _core.plan_window(spec, w, h, SEED, 0, 0)
            assert (p["rh"], p["rw"]) == want, (w, h, kw)


SIZES = [(71, 83), (64, 64), (97, 61), (40, 120), (33, 35), (5, 3), (1, 1), (2, 40)]


def reference(img, tf, plan, monkeypatch):
    """timm's own steps on the PIL image, with the size, window, filter and
    flip ringloader drew."""
    rkr, crop = tf.transforms[0], tf.transforms[1]
    mode = InterpolationMode(plan["filter"])
    out = F.resize(img, [plan["rh"], plan["rw"]], mode)  # ResizeKeepRatio's call
    if isinstance(crop, RandomCropOrPad):
        drawn = staticmethod(lambda img, size: (plan["wy"], plan["wx"]))
        monkeypatch.setattr(RandomCropOrPad, "get_params", drawn)
    out = crop(out)
    monkeypatch.undo()
    assert isinstance(rkr, ResizeKeepRatio)
    out = F.hflip(out) if plan["flip"] else out
    return np.asarray(out).transpose(2, 0, 1).astype(int)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_pixels_match_timm(tmp_path, monkeypatch, mode, kind):
    n = 12
    ran = padded = 0
    worst = {"bilinear": 0, "bicubic": 0}
    for interpolation in ("bicubic", "bilinear"):
        tf = train(mode, 48, interpolation=interpolation)
        spec = fused(tf).spec
        for k, (h, w) in enumerate(SIZES):
            data = jpeg_bytes(kind, h, w, seed=k, content="lines")
            img = Image.open(io.BytesIO(data)).convert("RGB")
            path = tmp_path / f"{k}.jpg"
            path.write_bytes(data)
            with ringloader.Loader(
                Files([str(path)] * n), batch_size=n, seed=SEED, transform=tf
            ) as loader:
                ours = next(iter(loader))[0].numpy().astype(int)
            for i in range(n):
                if _core.dct_scale(spec, w, h, SEED, 0, i) != 8:
                    continue
                plan = _core.plan_window(spec, w, h, SEED, 0, i)
                ref = reference(img, tf, plan, monkeypatch)
                d = int(np.abs(ours[i] - ref).max())
                worst[interpolation] = max(worst[interpolation], d)
                assert d <= 1, (mode, kind, (h, w), i, plan, d)
                ran += 1
                padded += plan["wx"] < 0 or plan["wy"] < 0
    assert ran >= len(SIZES) * n and padded > 0, (ran, padded)
    print(mode, kind, "worst LSB:", worst)


def test_a_center_crop_or_pad_after_any_resize_pads_the_resized_image(tmp_path):
    """CenterCropOrPad with each copying padding mode, after a plain
    ResizeKeepRatio wider than the window on one axis only, equals timm's
    (before, any padding but constant ran in Python)."""
    data = jpeg_bytes("baseline", 50, 90, seed=2, content="lines")
    img = Image.open(io.BytesIO(data)).convert("RGB")
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    for pad in ("edge", "reflect", "symmetric"):
        tf = Compose(
            [
                ResizeKeepRatio((40, 40), longest=1.0, interpolation="bicubic"),
                CenterCropOrPad((40, 36), padding_mode=pad),
                MaybePILToTensor(),
            ]
        )
        fused(tf)
        with ringloader.Loader(
            Files([str(path)]), batch_size=1, seed=SEED, transform=tf
        ) as loader:
            ours = next(iter(loader))[0][0].numpy().astype(int)
        ref = tf(img).numpy().astype(int)
        assert ours.shape == ref.shape == (3, 40, 36), pad
        assert np.abs(ours - ref).max() <= 1, pad


RECIPES = [
    dict(),
    dict(auto_augment="rand-m9-mstd0.5-inc1", interpolation="random", re_prob=0.25),
    dict(auto_augment="augmix-m5-w4-d2", re_prob=0.25, re_mode="pixel"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("recipe", RECIPES)
def test_whole_recipe_in_c(mode, recipe):
    tf = create_transform(224, is_training=True, train_crop_mode=mode, **recipe)
    compiled = fused(tf)
    assert compiled.fused[:2] == [
        "ResizeKeepRatio",
        "CenterCropOrPad" if mode == "rkrc" else "RandomCropOrPad",
    ]
    assert compiled.fused[-1] == ("RandomErasing" if recipe else "Normalize")


def make_folder(root):
    rng = np.random.default_rng(0)
    kinds = list(KINDS)
    for c in range(2):
        d = root / f"class_{c}"
        d.mkdir(parents=True)
        for i in range(4):
            h, w = (int(v) for v in rng.integers(40, 90, 2))
            (d / f"{i}.jpg").write_bytes(
                jpeg_bytes(kinds[(c * 4 + i) % 8], h, w, seed=i)
            )
    return str(root)


@pytest.mark.parametrize("mode", MODES)
def test_dataloader_and_create_loader_run_it_in_c(tmp_path, mode):
    """A timm dataset with the rkrc/rkrr recipe given to ringloader's
    DataLoader, and timm's create_loader(train_crop_mode=...) from
    ringloader.timm: no FallbackWarning, ringloader's loader, no Python
    tail; the batches normalised as timm's."""
    from ringloader.timm import create_loader

    root = make_folder(tmp_path / "train")
    ds = create_dataset("", root=root)
    ds.transform = create_transform(
        48, is_training=True, train_crop_mode=mode, auto_augment="rand-m9-mstd0.5-inc1"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = ringloader.DataLoader(ds, batch_size=4, num_workers=2)
        assert isinstance(loader, ringloader.Loader)
        assert all(not plan.tail for plan in loader._plans)
        x, y = next(iter(loader))
        assert x.shape == (4, 3, 48, 48) and x.dtype == torch.float32
        timm_loader = create_loader(
            create_dataset("", root=root),
            input_size=(3, 48, 48),
            batch_size=4,
            is_training=True,
            train_crop_mode=mode,
            re_prob=0.25,
            interpolation="random",
            device=torch.device("cpu"),
        )
        xs = [x for x, _ in timm_loader]
    assert type(timm_loader).__module__.startswith("ringloader")
    assert sum(len(x) for x in xs) == 8 and -3 < float(torch.cat(xs).mean()) < 3


# timm's eval chain with crop_border_pixels: TrimBorder first, then each
# crop_mode's geometry.
BORDER_EVAL = [
    dict(input_size=(3, 48, 48), interpolation="bicubic", crop_pct=0.95),
    dict(input_size=(3, 48, 40), interpolation="bilinear", crop_pct=0.9),
    dict(input_size=(3, 48, 48), interpolation="bilinear", crop_mode="squash"),
    dict(input_size=(3, 40, 48), interpolation="bicubic", crop_mode="border"),
]
BORDER_SIZES = [(71, 83), (97, 61), (40, 120), (9, 11), (230, 170)]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("border", [1, 4])
def test_crop_border_pixels_match_timm(tmp_path, kind, border):
    """transforms_imagenet_eval(crop_border_pixels=...): the image less its
    border, then the eval chain, within 1 LSB of timm's on the same PIL
    image (never DCT-scaled: the border is in whole pixels)."""
    for k, (h, w) in enumerate(BORDER_SIZES):
        data = jpeg_bytes(kind, h, w, seed=k, content="lines")
        img = Image.open(io.BytesIO(data)).convert("RGB")
        path = tmp_path / f"{k}.jpg"
        path.write_bytes(data)
        for kw in BORDER_EVAL:
            tf = create_transform(
                is_training=False, use_prefetcher=True, crop_border_pixels=border, **kw
            )
            spec = fused(tf).spec
            assert spec["trim"] == border
            assert _core.dct_scale(spec, w, h, SEED, 0, 0) == 8
            with ringloader.Loader(
                Files([str(path)]), batch_size=1, seed=SEED, transform=tf
            ) as loader:
                ours = next(iter(loader))[0][0].numpy().astype(int)
            ref = tf(img).numpy().astype(int)
            assert ours.shape == ref.shape, (kw, (h, w))
            d = int(np.abs(ours - ref).max())
            assert d <= 1, (kind, (h, w), kw, d)


def test_an_image_inside_its_border_is_that_samples_error(tmp_path):
    """An image no larger than twice the border: timm fails on it (an empty
    image); ringloader raises DecodeError naming the file, or skips it."""
    tf = create_transform(48, is_training=False, crop_border_pixels=5)
    good, small = tmp_path / "good.jpg", tmp_path / "small.jpg"
    good.write_bytes(jpeg_bytes("baseline", 60, 70))
    small.write_bytes(jpeg_bytes("baseline", 10, 70))
    with ringloader.Loader(
        Files([str(good), str(small)]), batch_size=2, transform=tf
    ) as loader:
        with pytest.raises(ringloader.DecodeError, match="small.jpg.*TrimBorder"):
            next(iter(loader))
    with ringloader.Loader(
        Files([str(good), str(small), str(good)]),
        batch_size=2,
        transform=tf,
        on_error="skip",
    ) as loader:
        with pytest.warns(ringloader.DataWarning):
            x, _ = next(iter(loader))
    assert x.shape == (2, 3, 48, 48)


def test_create_loader_with_crop_border_pixels_runs_in_c(tmp_path):
    from ringloader.timm import create_loader

    root = make_folder(tmp_path / "val")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        loader = create_loader(
            create_dataset("", root=root),
            input_size=(3, 48, 48),
            batch_size=4,
            is_training=False,
            crop_border_pixels=2,
            interpolation="bicubic",
            crop_pct=0.95,
            device=torch.device("cpu"),
        )
        xs = [x for x, _ in loader]
    assert type(loader).__module__.startswith("ringloader")
    assert sum(len(x) for x in xs) == 8


def test_an_image_resized_to_nothing_is_that_samples_error(tmp_path):
    """ResizeKeepRatio fitting the longer side (crop_mode="border") leaves a
    650 x 3 image 0 rows: timm's resize fails on it; ringloader raises
    DecodeError naming the file (it raised an internal error before)."""
    tf = create_transform((3, 48, 40), is_training=False, crop_mode="border")
    thin = tmp_path / "thin.jpg"
    thin.write_bytes(jpeg_bytes("baseline", 3, 650))
    with pytest.raises(ValueError):
        tf(Image.open(thin).convert("RGB"))  # timm's own resize refuses it
    with ringloader.Loader(Files([str(thin)]), batch_size=1, transform=tf) as loader:
        with pytest.raises(ringloader.DecodeError, match="thin.jpg.*ResizeKeepRatio"):
            next(iter(loader))


def test_a_trimmed_view_beside_another_gets_its_own_pixels(tmp_path):
    """MultiView: a view with crop_border_pixels beside an rkrr view of the
    same decode; the trimmed view equals what it gives alone (a trim turns
    the sample's DCT scaling off, so both decode alike)."""
    from ringloader.transforms import MultiView

    path = tmp_path / "x.jpg"
    path.write_bytes(jpeg_bytes("s420", 300, 410, seed=3, content="lines"))
    trimmed = create_transform(
        48, is_training=False, use_prefetcher=True, crop_border_pixels=7
    )
    views = MultiView(trimmed, train("rkrr", 40))
    with ringloader.Loader(
        Files([str(path)] * 3), batch_size=3, seed=SEED, transform=views
    ) as loader:
        (a, b), _ = next(iter(loader))
    with ringloader.Loader(
        Files([str(path)] * 3), batch_size=3, seed=SEED, transform=trimmed
    ) as loader:
        alone, _ = next(iter(loader))
    assert torch.equal(a, alone) and b.shape == (3, 3, 40, 40)
    ref = trimmed(Image.open(path).convert("RGB"))
    assert int((a[0].int() - ref.int()).abs().max()) <= 1


@pytest.mark.parametrize("pad", ["constant", "edge", "symmetric"])
def test_a_random_crop_or_pad_with_other_paddings_matches_timm(
    tmp_path, monkeypatch, pad
):
    """RandomCropOrPad with a constant fill or another of numpy's modes,
    after a ResizeKeepRatio fitting the longer side (one axis shorter than
    the window: padded on a random side), given the offsets drawn: within
    1 LSB of timm's, flips included."""
    data = jpeg_bytes("s422", 50, 90, seed=4, content="lines")
    img = Image.open(io.BytesIO(data)).convert("RGB")
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    crop = RandomCropOrPad((40, 36), fill=(5, 100, 200), padding_mode=pad)
    rkr = ResizeKeepRatio((40, 40), longest=1.0, interpolation="bilinear")
    tf = Compose([rkr, crop, RandomHorizontalFlip(), MaybePILToTensor()])
    spec = fused(tf).spec
    n = 16
    with ringloader.Loader(
        Files([str(path)] * n), batch_size=n, seed=SEED, transform=tf
    ) as loader:
        ours = next(iter(loader))[0].numpy().astype(int)
    offsets = set()
    for i in range(n):
        plan = _core.plan_window(spec, img.width, img.height, SEED, 0, i)
        offsets.add((plan["wy"], plan["wx"]))
        ref = reference(img, Compose([rkr, crop]), plan, monkeypatch)
        assert np.abs(ours[i] - ref).max() <= 1, (pad, i, plan)
    assert len(offsets) > 3 and any(y < 0 for y, _ in offsets)
