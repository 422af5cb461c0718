"""The colour augmentation ops (csrc/augment/color.c, color_hist.c) against
torchvision.transforms.v2 on uint8 tensors: given the parameters the op
draws (_core.augment_draw), each op's pixels equal those of torchvision's
transform (its .transform() with those parameters) within the tolerance of
TOLERANCE, on every JPEG kind, on photo-like, line, screen and texture
content, on odd, tiny and constant images, on both the AVX2 and the
portable loops; and the draws follow torchvision's distributions
(two-sample KS and chi-square tests against torchvision's own draws).

torch's add with alpha (contrast, saturation, grayscale, sharpness) rounds
once or twice by its kernels' level, ours by the SIMD level (rounding.py):
the reference is torchvision as it runs where the two round alike, else
torchvision with that add pinned to our rounding, so TOLERANCE holds at every
ATEN_CPU_CAPABILITY and SIMD level. test_the_two_roundings states how far
apart they are."""

import math

import numpy as np
import pytest

from ringloader import _core

import rounding
import warps
from images import CONTENTS, KINDS, jpeg_bytes, psnr

torch = pytest.importorskip("torch")
v2 = pytest.importorskip("torchvision.transforms.v2")
v1 = pytest.importorskip("torchvision.transforms")
stats = pytest.importorskip("scipy.stats")
F = v2.functional

NAN = float("nan")
SEED = 2024

# Max abs diff (LSB) each op may show against torchvision; 0 is bit-exact.
# contrast (and color_jitter, which runs it) takes the image's mean from
# torch's float32 sum, exact below 2^24 / 255 = 65793 pixels: above that
# 1 LSB (LARGE). gaussian_blur convolves separably where torch uses the 2-D
# kernel: a value within ~1e-5 of .5 can round the other way.
TOLERANCE = {
    "color_jitter": 0,
    "grayscale": 0,
    "gaussian_blur": 1,
    "autocontrast": 0,
    "equalize": 0,
    "invert": 0,
    "posterize": 0,
    "solarize": 0,
    "sharpness": 0,
}
LARGE = 65793
LARGE_TOLERANCE = {"color_jitter": 1}


def jitter_args(b=None, c=None, s=None, h=None):
    """color_jitter's 8 arguments from ColorJitter's (min, max) ranges."""
    out = []
    for r in (b, c, s, h):
        out += [NAN, NAN] if r is None else list(r)
    return out


# (name, args, the torchvision transform they stand for)
CASES = [
    (
        "color_jitter",
        jitter_args((0.6, 1.4), (0.6, 1.4), (0.6, 1.4)),
        v2.ColorJitter(0.4, 0.4, 0.4),
    ),
    (
        "color_jitter",
        jitter_args((0.2, 1.8), (0.2, 1.8), (0.2, 1.8), (-0.5, 0.5)),
        v2.ColorJitter(0.8, 0.8, 0.8, 0.5),
    ),
    ("color_jitter", jitter_args(h=(-0.1, 0.1)), v2.ColorJitter(hue=0.1)),
    ("color_jitter", jitter_args(c=(0.0, 3.0)), v2.ColorJitter(contrast=(0, 3))),
    (
        "color_jitter",
        jitter_args((0.0, 2.5), None, (0.0, 3.0)),
        v2.ColorJitter(brightness=(0, 2.5), saturation=(0, 3)),
    ),
    ("grayscale", [1.0], v2.Grayscale(3)),
    ("grayscale", [0.5], v2.RandomGrayscale(0.5)),
    ("gaussian_blur", [3, 3, 0.1, 2.0], v2.GaussianBlur(3, (0.1, 2.0))),
    ("gaussian_blur", [9, 5, 0.5, 3.0], v2.GaussianBlur((9, 5), (0.5, 3.0))),
    ("gaussian_blur", [23, 23, 0.1, 2.0], v2.GaussianBlur(23, (0.1, 2.0))),
    ("autocontrast", [0.7], v2.RandomAutocontrast(0.7)),
    ("equalize", [0.7], v2.RandomEqualize(0.7)),
    ("invert", [0.7], v2.RandomInvert(0.7)),
    ("posterize", [3, 0.7], v2.RandomPosterize(3, 0.7)),
    ("posterize", [0, 1.0], v2.RandomPosterize(0, 1.0)),
    ("posterize", [8, 1.0], v2.RandomPosterize(8, 1.0)),
    ("solarize", [128, 0.7], v2.RandomSolarize(128, 0.7)),
    ("solarize", [100.5, 1.0], v2.RandomSolarize(100.5, 1.0)),
    ("solarize", [-3.0, 1.0], v2.RandomSolarize(-3.0, 1.0)),
    ("sharpness", [2.0, 0.7], v2.RandomAdjustSharpness(2.0, 0.7)),
    ("sharpness", [0.0, 1.0], v2.RandomAdjustSharpness(0.0, 1.0)),
    ("sharpness", [7.5, 1.0], v2.RandomAdjustSharpness(7.5, 1.0)),
]
CASE_IDS = [f"{c[0]}{i}" for i, c in enumerate(CASES)]


def torchvision_apply(name, args, transform, params, chw):
    """torchvision's transform of chw (uint8 CHW tensor) given our params."""
    if name == "color_jitter":
        fs = [None if math.isnan(f) else f for f in params[4:8]]
        p = dict(
            fn_idx=[int(i) for i in params[:4]],
            brightness_factor=fs[0],
            contrast_factor=fs[1],
            saturation_factor=fs[2],
            hue_factor=fs[3],
        )
        return transform.transform(chw, p)
    if name == "gaussian_blur":
        return transform.transform(chw, dict(sigma=[params[0], params[0]]))
    if not params[0] < args[-1]:  # torchvision: torch.rand(1) >= p
        return chw
    return transform.transform(chw, dict(num_input_channels=3))


def ours(name, args, hwc, key):
    h, w, _ = hwc.shape
    out = _core.augment(hwc.tobytes(), h, w, [(name, args)], SEED, 0, key)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3)


def compare(name, args, transform, hwc, keys):
    """Worst abs diff and PSNR over the keys; the bound the op must meet."""
    h, w, _ = hwc.shape
    chw = torch.from_numpy(hwc.copy()).permute(2, 0, 1)
    worst, low = 0, math.inf
    for key in keys:
        params = _core.augment_draw([(name, args)], h, w, SEED, 0, key)[0]
        with rounding.reference():
            want = torchvision_apply(name, args, transform, params, chw.clone())
        want = want.permute(1, 2, 0).numpy()
        got = ours(name, args, hwc, key)
        worst = max(worst, int(np.abs(got.astype(int) - want).max()))
        low = min(low, psnr(got, want))
    bound = TOLERANCE[name]
    if h * w > LARGE:
        bound = max(bound, LARGE_TOLERANCE.get(name, 0))
    return worst, low, bound


def decoded(kind, h, w, content="photo", seed=0):
    rgb, dh, dw = _core.decode(jpeg_bytes(kind, h, w, seed, content))
    return np.frombuffer(rgb, np.uint8).reshape(dh, dw, 3)


@pytest.fixture(params=["avx2", "c"])
def simd(request):
    """Runs a test on the AVX2 loops (where the CPU has them) and on the
    portable ones."""
    before = _core.resample_simd()
    got = _core.resample_simd(request.param)
    if got != request.param and request.param == "avx2":
        _core.resample_simd(before)
        pytest.skip("no AVX2 here")
    yield got
    _core.resample_simd("avx2")
    _core.resample_simd(before)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_every_kind(simd, case, kind):
    name, args, transform = case
    img = decoded(kind, 37, 53, seed=3)
    worst, low, bound = compare(name, args, transform, img, range(6))
    assert worst <= bound, (name, args, kind, worst, low)


@pytest.mark.parametrize("content", list(CONTENTS))
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_contents(simd, case, content):
    name, args, transform = case
    img = decoded("s420", 96, 131, content, seed=5)
    worst, low, bound = compare(name, args, transform, img, range(4))
    assert worst <= bound, (name, args, content, worst, low)


# the ops whose bytes do not depend on the rounding of torch's add with alpha
ROUNDING_FREE = (
    "gaussian_blur",
    "autocontrast",
    "equalize",
    "invert",
    "posterize",
    "solarize",
)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_simd_levels_agree(case):
    """The AVX2 and the portable loops give the same bytes (gaussian_blur
    too, whose bound against torchvision is 1 LSB) where the op does not
    round an add with alpha; where it does, each level gives torchvision's
    bytes with the add pinned to the level's rounding."""
    name, args, transform = case
    img = decoded("s444", 61, 89, "texture", seed=11)
    chw = torch.from_numpy(img.copy()).permute(2, 0, 1)
    before = _core.resample_simd()
    try:
        got = {}
        for level in ("avx2", "c"):
            _core.resample_simd(level)
            got[level] = [ours(name, args, img, key) for key in range(4)]
            fused = rounding.ours_fused()
            _core.resample_simd("avx2")
            if name in ROUNDING_FREE:
                continue
            for key in range(4):
                params = _core.augment_draw([(name, args)], 61, 89, SEED, 0, key)[0]
                with rounding.pinned_rounding(fused):
                    want = torchvision_apply(name, args, transform, params, chw.clone())
                assert np.array_equal(got[level][key], want.permute(1, 2, 0).numpy())
    finally:
        _core.resample_simd(before)
    if name in ROUNDING_FREE:
        assert all(np.array_equal(a, b) for a, b in zip(got["avx2"], got["c"]))


JITTER_CASES = [c for c in CASES if c[0] == "color_jitter"]


@pytest.mark.parametrize("case", JITTER_CASES, ids=CASE_IDS[: len(JITTER_CASES)])
def test_large(case):
    """Above 65793 pixels the mean of contrast may round as torch's does
    not (here 614400 pixels, a sum of grays far above 2^24)."""
    name, args, transform = case
    img = decoded("baseline", 640, 960, "photo", seed=7)
    worst, low, bound = compare(name, args, transform, img, range(3))
    assert worst <= bound and (worst == 0 or low >= 50), (name, worst, low)


TINY = [(1, 1), (1, 7), (7, 1), (2, 3), (3, 2), (3, 3), (4, 9)]


def blur_reference(hwc, kx, ky, sigma):
    """gaussian_blur in float64 with torch's kernels, reflecting as often
    as needed (torch refuses when the image is not larger than the pad)."""

    def taps(k):
        lim = (k - 1) / (2 * math.sqrt(2))
        x = torch.linspace(-lim, lim, k, dtype=torch.float32).div(sigma)
        return torch.softmax(x.pow(2).neg(), 0).double().numpy()

    img = hwc.astype(np.float64)
    img = np.pad(img, ((ky // 2, ky // 2), (kx // 2, kx // 2), (0, 0)), "reflect")
    tx, ty = taps(kx), taps(ky)
    h, w = hwc.shape[:2]
    rows = sum(tx[j] * img[:, j : j + w] for j in range(kx))
    out = sum(ty[j] * rows[j : j + h] for j in range(ky))
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("size", TINY, ids=[f"{h}x{w}" for h, w in TINY])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_tiny(simd, case, size):
    name, args, transform = case
    rng = np.random.default_rng(size[0] * 10 + size[1])
    img = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    h, w = size
    if name == "gaussian_blur" and (args[0] // 2 >= w or args[1] // 2 >= h):
        for key in range(4):  # torch's reflect pad refuses: our reference
            sigma = _core.augment_draw([(name, args)], *size, SEED, 0, key)[0][0]
            want = blur_reference(img, int(args[0]), int(args[1]), sigma)
            got = ours(name, args, img, key)
            assert np.abs(got.astype(int) - want).max() <= 1
        return
    worst, low, bound = compare(name, args, transform, img, range(6))
    assert worst <= bound, (name, args, size, worst, low)


CONSTANT = {
    "all 0": (0, 0, 0),
    "all 255": (255, 255, 255),
    "grey": (77, 77, 77),
    "per channel": (10, 200, 255),
}


@pytest.mark.parametrize("value", list(CONSTANT))
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_constant(simd, case, value):
    """Constant images and channels: autocontrast and equalize leave them."""
    name, args, transform = case
    img = np.empty((19, 23, 3), np.uint8)
    img[:] = CONSTANT[value]
    worst, low, bound = compare(name, args, transform, img, range(4))
    assert worst <= bound, (name, args, value, worst, low)


def test_two_values():
    """A channel of two values, and one value but a single pixel: the
    equalize step edge cases."""
    img = np.zeros((16, 16, 3), np.uint8)
    img[:, :8, 0] = 9
    img[:, 8:, 0] = 250
    img[3, 3, 1] = 40
    img[:, :, 2] = np.arange(16, dtype=np.uint8)[None, :] * 16
    for name, args, t in CASES:
        if name in ("equalize", "autocontrast"):
            worst, _, bound = compare(name, args, t, img, range(6))
            assert worst <= bound


def cube():
    """All 2^24 colours as a 4096 x 4096 image."""
    v = np.arange(1 << 24, dtype=np.uint32)
    rgb = np.stack([v >> 16, (v >> 8) & 255, v & 255], -1).astype(np.uint8)
    return rgb.reshape(4096, 4096, 3)


@pytest.mark.parametrize(
    "name, args, fn",
    [
        ("color_jitter", jitter_args(h=(0.1, 0.1)), lambda t: F.adjust_hue(t, 0.1)),
        ("color_jitter", jitter_args(h=(-0.5, -0.5)), lambda t: F.adjust_hue(t, -0.5)),
        (
            "color_jitter",
            jitter_args(s=(0.7, 0.7)),
            lambda t: F.adjust_saturation(t, 0.7),
        ),
        (
            "color_jitter",
            jitter_args(s=(1.37, 1.37)),
            lambda t: F.adjust_saturation(t, 1.37),
        ),
        ("grayscale", [1.0], lambda t: F.rgb_to_grayscale(t, 3)),
    ],
    ids=["hue 0.1", "hue -0.5", "saturation 0.7", "saturation 1.37", "grayscale"],
)
def test_all_colours(simd, name, args, fn):
    """Hue, saturation and grayscale are per-pixel: exact on every colour."""
    img = cube()
    with rounding.reference():
        want = fn(torch.from_numpy(img).permute(2, 0, 1)).permute(1, 2, 0).numpy()
    got = ours(name, args, img, 0)
    assert np.array_equal(got, want)


def test_the_level_torch_runs_rounds_as_torch():
    """At the SIMD level that follows torch's kernels (AVX2 where torch runs
    its AVX2 or AVX512 ones, sse2 below: what both pick by the CPU), ours
    round torch's add with alpha as torch does, so give its bytes."""
    with warps.aligned() as ok:
        if not warps.X86:
            pytest.skip("torch's kernels' rounding is known on x86-64 only")
        assert ok
        assert rounding.ours_fused() == rounding.torch_fused(), (
            f"ours fused: {rounding.ours_fused()} at {_core.resample_simd()}, "
            f"torch's {torch.backends.cpu.get_cpu_capability()} kernels fused: "
            f"{rounding.torch_fused()}"
        )


def test_pinning_is_torchs_rounding():
    """The pinned add is torch's where torch rounds the same way (so the
    reference where ours and torch's do not agree is torchvision's own
    arithmetic), and the other pinning is not."""
    chw = torch.from_numpy(cube()).permute(2, 0, 1)
    photo = torch.from_numpy(decoded("s420", 96, 131, seed=5).copy()).permute(2, 0, 1)
    here = rounding.torch_fused()
    ops = [
        (chw, lambda t: F.rgb_to_grayscale(t, 3)),
        (chw, lambda t: F.adjust_saturation(t, 1.37)),
        (photo, lambda t: F.adjust_contrast(t, 2.3)),
        (photo, lambda t: F.adjust_sharpness(t, 2.7)),
    ]
    for img, fn in ops:
        with rounding.pinned_rounding(here):
            assert torch.equal(fn(img), fn(img))
    with rounding.pinned_rounding(not here):
        other = F.rgb_to_grayscale(chw, 3)
    assert not torch.equal(other, F.rgb_to_grayscale(chw, 3))


@pytest.mark.parametrize(
    "name, args, bound",
    [
        ("grayscale", [1.0], 1),
        ("color_jitter", jitter_args(s=(0.7, 0.7)), 1),
        ("color_jitter", jitter_args(s=(2.6, 2.6)), 2),  # 1 + floor(|1 - 2.6|)
        ("color_jitter", jitter_args(c=(0.2, 0.2)), 1),  # none differ here
    ],
)
def test_the_two_roundings(name, args, bound):
    """Where ours and torch's round the add with alpha differently, one op
    moves a byte by at most 1 (saturation 1 + floor(|1 - factor|): its gray,
    floored, moves by 1 and is weighed by 1 - factor); shown between our
    two levels on every colour, and on noise for contrast (what torch's two
    kernels do alike). Sharpness's blend, mid + d * (1 - factor), truncates
    apart only where the sum is near an integer below 1: not seen."""
    if name == "grayscale" or math.isnan(args[2]):
        img = cube()
    else:
        img = np.random.default_rng(1).integers(0, 256, (1024, 1024, 3), np.uint8)
    before = _core.resample_simd()
    try:
        got = {}
        for level in ("avx2", "c"):
            _core.resample_simd(level)
            got[rounding.ours_fused()] = ours(name, args, img, 0).astype(int)
            _core.resample_simd("avx2")
    finally:
        _core.resample_simd(before)
    if len(got) < 2:
        pytest.skip("one rounding here: the CPU has no AVX2 with FMA")
    diff = np.abs(got[True] - got[False])
    assert diff.max() <= bound, (diff.max(), np.count_nonzero(diff))
    assert diff.any() or name == "color_jitter" and not math.isnan(args[2])


def test_jitter_keys_differ():
    """The order and the factors change with the key, and a None component
    is neither drawn nor applied."""
    args = jitter_args((0.6, 1.4), None, (0.6, 1.4))
    draws = [
        _core.augment_draw([("color_jitter", args)], 8, 8, 1, 0, k)[0]
        for k in range(50)
    ]
    assert len({tuple(d[:4]) for d in draws}) > 10
    assert all(math.isnan(d[5]) and math.isnan(d[7]) for d in draws)
    assert all(0.6 <= d[4] < 1.4 and 0.6 <= d[6] < 1.4 for d in draws)
    assert all(sorted(d[:4]) == [0, 1, 2, 3] for d in draws)


BAD = [
    ("color_jitter", jitter_args((-0.1, 1.0)), "color_jitter"),
    ("color_jitter", jitter_args(c=(1.5, 1.0)), "contrast"),
    ("color_jitter", jitter_args(h=(-0.6, 0.1)), "hue"),
    ("color_jitter", [0.5, NAN, NAN, NAN, NAN, NAN, NAN, NAN], "brightness"),
    ("grayscale", [1.5], "grayscale"),
    ("gaussian_blur", [4, 3, 0.1, 2.0], "gaussian_blur"),
    ("gaussian_blur", [3, 0, 0.1, 2.0], "gaussian_blur"),
    ("gaussian_blur", [3, 3, 0.0, 2.0], "gaussian_blur"),
    ("gaussian_blur", [3, 3, 2.0, 1.0], "gaussian_blur"),
    ("autocontrast", [-0.1], "autocontrast"),
    ("equalize", [NAN], "equalize"),
    ("invert", [2], "invert"),
    ("posterize", [9, 0.5], "posterize"),
    ("posterize", [2.5, 0.5], "posterize"),
    ("posterize", [-1, 0.5], "posterize"),
    ("solarize", [256, 0.5], "solarize"),
    ("solarize", [128, 1.1], "solarize"),
    ("sharpness", [-1, 0.5], "sharpness"),
    ("sharpness", [1, -0.5], "sharpness"),
    ("color_jitter", [1.0], "color_jitter"),  # arity
]


@pytest.mark.parametrize("name, args, word", BAD)
def test_bad_args(name, args, word):
    with pytest.raises(ValueError, match=word):
        _core.augment_draw([(name, args)], 8, 8, 0, 0, 0)


# ---- the draws' distributions against torchvision's own draws ----

N = 20000


def our_draws(name, args):
    rows = [_core.augment_draw([(name, args)], 32, 32, SEED, 3, k)[0] for k in range(N)]
    return np.array(rows)


def assert_same(ours_, theirs, discrete=False):
    if discrete:
        cats = sorted(set(ours_) | set(theirs))
        table = [[list(x).count(c) for c in cats] for x in (ours_, theirs)]
        p = stats.chi2_contingency(table)[1]
    else:
        p = stats.ks_2samp(ours_, theirs).pvalue
    assert p > 0.01, p
    return p


JITTER_RANGES = [(0.6, 1.4), (0.2, 1.8), (0.0, 3.0), (-0.1, 0.1)]


def test_jitter_distribution():
    args = jitter_args(*JITTER_RANGES)
    mine = our_draws("color_jitter", args)
    torch.manual_seed(SEED)
    theirs = [v1.ColorJitter.get_params(*JITTER_RANGES) for _ in range(N)]
    perm = [tuple(int(i) for i in t[0]) for t in theirs]
    assert_same([tuple(int(i) for i in r[:4]) for r in mine], perm, discrete=True)
    for k in range(4):
        assert_same(mine[:, 4 + k], [t[1 + k] for t in theirs])
    # ... and the test can fail: a shifted range is told apart.
    with pytest.raises(AssertionError):
        assert_same(mine[:, 4] + 0.02, [t[1] for t in theirs])


def test_jitter_permutation_uniform():
    """All 24 orders come, equally often (chi-square goodness of fit)."""
    mine = our_draws("color_jitter", jitter_args((0.5, 1.5)))
    orders = [tuple(int(i) for i in r[:4]) for r in mine]
    counts = [orders.count(o) for o in sorted(set(orders))]
    assert len(counts) == 24
    assert stats.chisquare(counts).pvalue > 0.01


def test_blur_distribution():
    mine = our_draws("gaussian_blur", [23, 23, 0.1, 2.0])[:, 0]
    torch.manual_seed(SEED)
    theirs = [v1.GaussianBlur.get_params(0.1, 2.0) for _ in range(N)]
    assert_same(mine, theirs)


@pytest.mark.parametrize(
    "name, args",
    [
        ("grayscale", [0.1]),
        ("autocontrast", [0.5]),
        ("equalize", [0.5]),
        ("invert", [0.3]),
        ("posterize", [4, 0.5]),
        ("solarize", [128, 0.2]),
        ("sharpness", [2.0, 0.5]),
    ],
)
def test_applied_distribution(name, args):
    p = args[-1]
    mine = our_draws(name, args)[:, 0] < p
    torch.manual_seed(SEED)
    theirs = [bool(torch.rand(1) < p) for _ in range(N)]
    assert_same(list(mine), theirs, discrete=True)
