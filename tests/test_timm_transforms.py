"""timm's transforms (``timm.data.create_transform`` and its classes) fused
into the C pipeline, against timm's own on the same PIL images.

Bounds: the eval chains (every crop_mode, square and not) within 1 LSB of
timm's uint8 output without DCT scaling, on every JPEG kind and odd sizes;
RandomResizedCropAndInterpolation's random interpolation drawn bilinear or
bicubic as timm draws it (chi-square over 20,000 draws, p > 0.01) and, given
the box and filter ringloader drew, within 1 LSB; timm's RandomErasing's
draws (applied share, box count, sizes, places) as timm's own (chi-square
and KS over 20,000 draws), its noise standard normal."""

import io
import random

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
from timm.data import create_transform  # noqa: E402
from timm.data.random_erasing import RandomErasing  # noqa: E402
from timm.data.transforms import (  # noqa: E402
    MaybePILToTensor,
    RandomResizedCropAndInterpolation,
)
from torchvision.transforms import functional as F  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402

SEED = 11
N_DRAWS = 20_000


class Files:
    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


def load(path, n, transform):
    """Samples 0..n-1 of n copies of one file, as the loader gives them."""
    with ringloader.Loader(
        Files([path] * n), batch_size=n, seed=SEED, transform=transform
    ) as loader:
        images, _ = next(iter(loader))
    return images


def write(tmp_path, data):
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    return str(path)


# timm's eval chains: crop_mode center (square: torchvision's Resize; not
# square: timm's ResizeKeepRatio), squash and border (CenterCropOrPad with
# the mean as fill), bicubic and bilinear.
EVAL = [
    dict(input_size=(3, 64, 64), interpolation="bicubic", crop_pct=0.95),
    dict(input_size=(3, 64, 64), interpolation="bilinear", crop_pct=0.875),
    dict(input_size=(3, 64, 48), interpolation="bicubic", crop_pct=0.9),
    dict(input_size=(3, 57, 64), interpolation="bilinear", crop_mode="squash"),
    dict(input_size=(3, 64, 64), interpolation="bicubic", crop_mode="border"),
    dict(input_size=(3, 50, 64), interpolation="bilinear", crop_mode="border"),
]
SIZES = [(71, 83), (64, 64), (97, 61), (40, 120), (33, 35)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_eval_chains_match_timm(tmp_path, kind):
    ran = 0
    for size in SIZES:
        data = jpeg_bytes(kind, *size, seed=size[1], content="lines")
        img = Image.open(io.BytesIO(data)).convert("RGB")
        path = write(tmp_path, data)
        for kw in EVAL:
            # use_prefetcher: timm's uint8 output (MaybePILToTensor)
            tf = create_transform(is_training=False, use_prefetcher=True, **kw)
            compiled = compile_transform(tf)
            assert not compiled.rest, (kw, compiled.reason)
            if _core.dct_scale(compiled.spec, img.width, img.height, 0, 0, 0) != 8:
                continue
            ran += 1
            ref = tf(img).numpy().astype(int)
            ours = load(path, 1, tf)[0].numpy().astype(int)
            assert ours.shape == ref.shape, (kw, size)
            d = np.abs(ours - ref).max()
            assert d <= 1, (kind, size, kw, d)
    assert ran >= len(SIZES) * len(EVAL) // 2


def test_eval_normalised_output_matches_timm(tmp_path):
    """The default eval chain (MaybeToTensor, Normalize) in float: within
    1 LSB of the 8-bit value, in normalised units."""
    data = jpeg_bytes("baseline", 90, 77, seed=3)
    img = Image.open(io.BytesIO(data)).convert("RGB")
    tf = create_transform(64, is_training=False, interpolation="bicubic", crop_pct=0.95)
    compiled = compile_transform(tf)
    assert compiled.fused[-2:] == ["MaybeToTensor", "Normalize"] and not compiled.rest
    ours = load(write(tmp_path, data), 1, tf)[0]
    ref = tf(img)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    assert ours.dtype == torch.float32
    assert float(((ours - ref).abs() * std * 255).max()) <= 1.0 + 1e-4


def test_random_interpolation_draws_as_timm():
    tf = RandomResizedCropAndInterpolation(32, interpolation="random")
    spec = compile_transform([tf, MaybePILToTensor()]).spec
    assert spec["filter_random"] == 1
    ours = [
        _core.plan_window(spec, 300, 200, SEED, 0, i)["filter"] for i in range(N_DRAWS)
    ]
    rng = random.Random(SEED)
    theirs = [str(rng.choice(tf.interpolation).value) for _ in range(N_DRAWS)]
    same_categories(ours, theirs, "random interpolation")
    # a transform without the choice keeps its filter
    fixed = compile_transform(
        [RandomResizedCropAndInterpolation(32, interpolation="bicubic")]
    )
    assert {
        _core.plan_window(fixed.spec, 300, 200, SEED, 0, i)["filter"] for i in range(50)
    } == {"bicubic"}


@pytest.mark.parametrize("kind", ["baseline", "s420", "grayscale"])
def test_random_resized_crop_and_interpolation_pixels(tmp_path, kind):
    """Given the box, flip and filter ringloader drew, timm's resized_crop
    of the same PIL image is within 1 LSB."""
    data = jpeg_bytes(kind, 61, 77, seed=5, content="lines")
    img = Image.open(io.BytesIO(data)).convert("RGB")
    tf = create_transform(
        48,
        is_training=True,
        interpolation="random",
        use_prefetcher=True,
        color_jitter=None,
    )
    compiled = compile_transform(tf)
    assert compiled.fused[0] == "RandomResizedCropAndInterpolation"
    assert not compiled.rest, compiled.reason
    n = 24
    ours = load(write(tmp_path, data), n, tf).numpy().astype(int)
    seen = set()
    for i in range(n):
        plan = _core.plan_window(compiled.spec, img.width, img.height, SEED, 0, i)
        if _core.dct_scale(compiled.spec, img.width, img.height, SEED, 0, i) != 8:
            continue
        seen.add(plan["filter"])
        mode = InterpolationMode(plan["filter"])
        ref = F.resized_crop(
            img,
            int(plan["y"]),
            int(plan["x"]),
            int(plan["h"]),
            int(plan["w"]),
            [48, 48],
            mode,
        )
        ref = F.hflip(ref) if plan["flip"] else ref
        ref = np.asarray(ref).transpose(2, 0, 1).astype(int)
        assert np.abs(ours[i] - ref).max() <= 1, (i, plan)
    assert seen == {"bilinear", "bicubic"}


def erase_element(t, dtype="float32"):
    from ringloader.adapt import timm as timm_adapter

    return timm_adapter.erase_of(t, dtype)


class Recorder:
    """Stands for the image timm's RandomErasing._erase writes: records the
    (top, left, h, w) of each box it erases."""

    def __init__(self):
        self.boxes = []

    def __setitem__(self, key, value):
        _, ys, xs = key
        self.boxes.append((ys.start, xs.start, ys.stop - ys.start, xs.stop - xs.start))


def timm_draws(t, h, w, n):
    """The boxes of n calls of timm's own _erase on (3, h, w) images."""
    random.seed(SEED)
    out = []
    for _ in range(n):
        img = Recorder()
        t._erase(img, 3, h, w, torch.float32)
        out.append(img.boxes)
    return out


def our_draws(t, h, w, n):
    op = erase_element(t)
    out = []
    for key in range(n):
        p = _core.augment_draw([op], h, w, SEED, 0, key)[0]
        out.append(
            [tuple(int(v) for v in p[2 + 4 * b : 6 + 4 * b]) for b in range(int(p[0]))]
        )
    return out


def test_timm_erase_draws_as_timm():
    h, w = 40, 52
    t = RandomErasing(0.4, mode="const", device="cpu")
    ours, theirs = our_draws(t, h, w, N_DRAWS), timm_draws(t, h, w, N_DRAWS)
    same_categories([len(b) for b in ours], [len(b) for b in theirs], "erase applied")
    for k, what in enumerate(("top", "left", "height", "width")):
        a = [b[0][k] for b in ours if b]
        b = [b[0][k] for b in theirs if b]
        p = stats.ks_2samp(a, b).pvalue
        assert p > 0.01, f"{what}: p = {p:.4g}"


def test_timm_erase_count_as_timm():
    """max_count 3: the boxes placed (each of area over the count, some
    never fitting) and their sizes as timm's."""
    h, w = 30, 30
    t = RandomErasing(1.0, mode="const", max_count=3, max_area=0.6, device="cpu")
    ours, theirs = our_draws(t, h, w, N_DRAWS), timm_draws(t, h, w, N_DRAWS)
    same_categories([len(b) for b in ours], [len(b) for b in theirs], "boxes placed")
    a = [box[2] * box[3] for boxes in ours for box in boxes]
    b = [box[2] * box[3] for boxes in theirs for box in boxes]
    p = stats.ks_2samp(a, b).pvalue
    assert p > 0.01, f"box areas: p = {p:.4g}"


@pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
def test_timm_erase_values(tmp_path, mode):
    """In the loader, after Normalize: const erases to 0, rand one normal
    value a channel a box, pixel standard normal noise."""
    data = jpeg_bytes("baseline", 64, 64, seed=1)
    tf = create_transform(
        32,
        is_training=True,
        color_jitter=None,
        hflip=0,
        re_prob=1.0,
        re_mode=mode,
        scale=(1.0, 1.0),
        ratio=(1.0, 1.0),
    )
    compiled = compile_transform(tf)
    assert compiled.fused[-1] == "RandomErasing" and not compiled.rest
    plain = create_transform(
        32,
        is_training=True,
        color_jitter=None,
        hflip=0,
        scale=(1.0, 1.0),
        ratio=(1.0, 1.0),
    )
    path = write(tmp_path, data)
    erased, clean = load(path, 16, tf), load(path, 16, plain)
    changed = (erased != clean).any(1)  # (n, h, w)
    assert changed.any(2).any(1).all(), "every sample erased (p = 1)"
    values = erased.permute(0, 2, 3, 1)[changed]  # (pixels, 3)
    if mode == "const":
        assert values.abs().max() == 0
    elif mode == "rand":
        for i in range(16):
            v = erased[i].permute(1, 2, 0)[changed[i]]
            assert (v == v[0]).all()
    else:
        assert abs(float(values.mean())) < 0.05 and abs(float(values.std()) - 1) < 0.05
        assert stats.kstest(values[:2000, 0].numpy(), "norm").pvalue > 0.01


def test_timm_erase_not_fused_where_it_cannot_be():
    tf = RandomErasing(0.5, mode="pixel", max_count=9, device="cpu")
    compiled = compile_transform(
        [RandomResizedCropAndInterpolation(8), MaybePILToTensor(), tf]
    )
    assert compiled.rest == [tf] and "max_count=9" in compiled.reason


@pytest.mark.parametrize(
    "crop_mode, auto_augment",
    [("rrc", None), ("rkrc", "rand-m9-mstd0.5-inc1"), ("rkrr", "rand-m9-mstd0.5-inc1")],
)
def test_train_recipe_batches_do_not_depend_on_threads(
    tmp_path, crop_mode, auto_augment
):
    """timm's train recipe (random interpolation, ColorJitter or
    RandAugment, pixel erasing), with each train_crop_mode (rkrc/rkrr:
    ResizeKeepRatio's random scale and aspect, a crop-or-pad with reflected
    borders, test_timm_crop_modes.py): the same batches with 1 and 3 decode
    threads."""
    paths = []
    for i, size in enumerate([(70, 90), (120, 64), (64, 64), (99, 101), (3, 7)]):
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(jpeg_bytes("baseline", *size, seed=i))
        paths.append(str(path))
    tf = create_transform(
        32,
        is_training=True,
        train_crop_mode=crop_mode,
        auto_augment=auto_augment,
        interpolation="random",
        re_prob=0.5,
        re_mode="pixel",
    )
    assert not compile_transform(tf).rest
    out = []
    for threads in (1, 3):
        with ringloader.Loader(
            Files(paths * 4), batch_size=8, seed=SEED, transform=tf, num_threads=threads
        ) as loader:
            out.append(torch.cat([x for x, _ in loader]))
    assert torch.equal(out[0], out[1])


def test_timm_erase_count_limit_is_the_c_check():
    """Python refuses to fuse max_count exactly where the C check refuses."""
    most = _core.OP_LIMITS["timm_erase"]["max_count"]
    name, args = erase_element(RandomErasing(0.5, max_count=most, device="cpu"))
    _core.augment_draw([(name, args)], 8, 8, 0, 0, 0)
    at = 0
    for field, count, _ in _core.OP_ARGS["timm_erase"]:
        if field == "count":
            break
        at += count
    args[at + 1] = most + 1  # count's max
    with pytest.raises(ValueError, match="count"):
        _core.augment_draw([(name, args)], 8, 8, 0, 0, 0)
    with pytest.raises(ringloader._steps.NotFused):
        erase_element(RandomErasing(0.5, max_count=most + 1, device="cpu"))


def test_default_train_recipe_is_fused_whole():
    """timm's ImageNet recipe: the crop (random interpolation), the flip,
    timm's RandAugment (ringloader/adapt/timm_ops.py), the conversion and
    timm's RandomErasing all fused; nothing left to Python."""
    tf = create_transform(
        224,
        is_training=True,
        auto_augment="rand-m9-mstd0.5-inc1",
        interpolation="random",
        re_prob=0.25,
    )
    compiled = compile_transform(tf)
    assert compiled.rest == [], compiled.reason
    assert compiled.fused[:3] == [
        "RandomResizedCropAndInterpolation",
        "RandomHorizontalFlip",
        "RandAugment",
    ]
    assert compiled.fused[-1] == "RandomErasing"
    assert compiled.spec["filter_random"] == 1
    assert [op for op, _ in compiled.spec["ops"]][-1] == "timm_erase"
