"""The geometric augmentation ops, "rotation" (RandomRotation) and "affine"
(RandomAffine), against torchvision.transforms.v2.functional's rotate and
affine on uint8 tensors with the very parameters the ops drew, on decoded
JPEGs of every kind and on odd and tiny sizes; and the draws follow
get_params's distributions.

Pixels (see warps.py for why): against torchvision as it runs here, every
pixel within the tolerance `warps.check_warp` states (nearest: the exact
source pixel, or its neighbour across a half-pixel boundary the exact
coordinate lies within float32's error bound of; bilinear: the exact value
rounded, or one LSB off where the exact value lies within its bound of a
.5); ours is checked against the exact float64 warp too. On x86-64 and with
torchvision's grid product in the plain float32 order (`warps.pinned_grid`),
the same bytes, at every ATen CPU capability: each test puts the warp's
SIMD level on torch's footing (`kernels`); the default capability is
checked in a child process with both forced down."""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field

import numpy as np
import pytest

import ringloader
from ringloader import _core

from images import CONTENTS, KINDS, jpeg_bytes
from subproc import run_python

torch = pytest.importorskip("torch")
tvf = pytest.importorskip("torchvision.transforms.v2.functional")
transforms = pytest.importorskip("torchvision.transforms")
stats = pytest.importorskip("scipy.stats")

import warps  # noqa: E402  (needs torchvision)

NAN = float("nan")
SEED = 1234
# the share of ambiguous pixels a sweep may have: decoded photos, and
# uniform noise (whose steps between neighbours are largest)
SHARE, NOISE_SHARE = 0.05, 0.05
MODES = [transforms.InterpolationMode.NEAREST, transforms.InterpolationMode.BILINEAR]
fused_torch = warps.fused_torch
EXACT = {"on": False}  # whether the warp rounds as torch's sampler here


@pytest.fixture(autouse=True)
def kernels():
    """Runs the warp in the rounding torch's grid sampler uses on this
    machine: fused at the AVX2 level, plain below it."""
    with warps.aligned() as ok:
        EXACT["on"] = ok
        yield


# ---- ops, their application, and torchvision's ----


def none3(v, n):
    return list(v) if v is not None else [NAN] * n


def rotation_op(degrees, interp=0, center=None, fill=None):
    lo, hi = (degrees, degrees) if np.isscalar(degrees) else degrees
    return ("rotation", [lo, hi, interp, *none3(center, 2), *none3(fill, 3)])


def affine_op(
    degrees=(0.0, 0.0),
    translate=None,
    scale=None,
    shear=None,
    interp=0,
    center=None,
    fill=None,
):
    """shear: None, (x_lo, x_hi) or (x_lo, x_hi, y_lo, y_hi)."""
    sh = list(shear or []) + [NAN] * (4 - len(shear or []))
    args = [*degrees, *none3(translate, 2), *none3(scale, 2), *sh, interp]
    return ("affine", args + none3(center, 2) + none3(fill, 3))


def run(img: np.ndarray, op, key: int = 0):
    """The op on img for sample key: (output, the params it drew)."""
    h, w = img.shape[:2]
    params = _core.augment_draw([op], h, w, SEED, 0, key)[0]
    out = _core.augment(img.tobytes(), h, w, [op], SEED, 0, key)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3), params


def reference(img: np.ndarray, op, params) -> np.ndarray:
    """torchvision's functional kernel with the op's arguments and params."""
    name, a = op
    t = torch.from_numpy(img.copy()).permute(2, 0, 1)
    fill_at, center_at, interp = (5, 3, a[2]) if name == "rotation" else (13, 11, a[10])
    fill = None if math.isnan(a[fill_at]) else list(a[fill_at : fill_at + 3])
    center = None if math.isnan(a[center_at]) else list(a[center_at : center_at + 2])
    mode = MODES[int(interp)]
    if name == "rotation":
        out = tvf.rotate(t, params[0], mode, center=center, fill=fill)
    else:
        out = tvf.affine(
            t,
            angle=params[0],
            translate=[int(params[1]), int(params[2])],
            scale=params[3],
            shear=[params[4], params[5]],
            interpolation=mode,
            fill=fill,
            center=center,
        )
    return out.permute(1, 2, 0).numpy()


def differing(got: np.ndarray, want: np.ndarray) -> tuple[int, int]:
    """(pixels that differ, largest difference of a channel)."""
    d = np.abs(got.astype(np.int16) - want.astype(np.int16))
    return int(d.any(axis=-1).sum()), int(d.max(initial=0))


@dataclass
class Tally:
    """A sweep's figures: the pixels compared; against torchvision as it
    runs here, those whose exact result is ambiguous (within the bound of a
    rounding point) and those that differ; the cases that differ from
    torchvision with the plain-order grid (checked only where EXACT)."""

    pixels: int = 0
    ambiguous: int = 0
    differ: int = 0
    bad: list = field(default_factory=list)


def compare(img: np.ndarray, op, got: np.ndarray, params, tally: Tally) -> None:
    """ours (got) against torchvision: within the tolerance, and where the
    warp rounds as torch's grid sampler, the bytes of torchvision with the
    plain-order grid."""
    with warps.recording() as made:
        ref = reference(img, op, params)
    what = f"{op} {params[:6]}"
    if made:
        v = warps.check_warp(img, got, ref, made[-1], what)
    else:  # a quarter turn by rot90: exact on any machine
        v = warps.Verdict(img.shape[0] * img.shape[1], 0, differing(got, ref)[0])
        assert v.differ == 0, what
    tally.pixels += v.pixels
    tally.ambiguous += v.ambiguous
    tally.differ += v.differ
    if EXACT["on"]:
        if made and not grid_is_plain():
            with warps.pinned_grid():
                ref = reference(img, op, params)
        n, worst = differing(got, ref)
        if n:
            tally.bad.append((op, params[:6], n, worst))


_PLAIN: dict[str, bool] = {}


def grid_is_plain() -> bool:
    """Whether torchvision's own grid is the plain-order one here (MKL's
    AVX2 and generic paths), looked up once."""
    if "v" not in _PLAIN:
        _PLAIN["v"] = warps.torch_grid_is_plain()
    return _PLAIN["v"]


def random_op(rng: random.Random, w: int, h: int, interp: int):
    """A rotation or affine op with random (degenerate or not) ranges,
    centre and fill: the parameter space the tests sweep."""
    center = None
    if rng.random() < 0.4:
        center = (rng.uniform(-0.5, 1.5) * w, rng.uniform(-0.5, 1.5) * h)
    fill = None
    if rng.random() < 0.6:
        fill = [float(rng.randint(0, 255)) for _ in range(3)]
        if rng.random() < 0.3:
            fill = [rng.uniform(0, 255) for _ in range(3)]
    if rng.random() < 0.35:
        a = rng.choice([rng.uniform(-400, 400), rng.choice([90, -90, 180, 45, 270])])
        return rotation_op((a, a + rng.choice([0, 0, 20])), interp, center, fill)
    s = rng.uniform(-45, 45)
    shear = rng.choice(
        [None, (-30.0, 30.0), (s, s), (-20.0, 20.0, -20.0, 20.0), (0.0, 0.0, s, s + 1)]
    )
    return affine_op(
        degrees=(-180.0, 180.0) if rng.random() < 0.5 else (0.0, 0.0),
        translate=rng.choice([None, (0.1, 0.3), (0.45, 0.0), (0.0, 0.25)]),
        scale=rng.choice([None, (0.5, 1.5), (1.0, 1.0), (1.3, 1.7)]),
        shear=shear,
        interp=interp,
        center=center,
        fill=fill,
    )


def sweep(images, cases: int, interp: int, seed: int) -> Tally:
    """Random ops on every image against torchvision (see compare)."""
    rng = random.Random(seed)
    tally = Tally()
    for img in images:
        h, w = img.shape[:2]
        for _ in range(cases):
            op = random_op(rng, w, h, interp)
            got, params = run(img, op, key=rng.randrange(1 << 30))
            compare(img, op, got, params, tally)
    return tally


def assert_sweep(t: Tally, share: float) -> None:
    """The sweep's exact cases where they apply, and the ambiguous pixels
    a bounded share of those compared."""
    print(f"{t.differ} of {t.pixels} pixels differ, {t.ambiguous} ambiguous")
    assert t.ambiguous <= share * t.pixels, (t.ambiguous, t.pixels)
    assert not t.bad, f"{len(t.bad)} cases differ (of {t.pixels} pixels): {t.bad[:3]}"


def decoded(kind: str, h: int, w: int, seed: int, content: str) -> np.ndarray:
    rgb, dh, dw = _core.decode(jpeg_bytes(kind, h, w, seed, content))
    return np.frombuffer(rgb, np.uint8).reshape(dh, dw, 3)


# ---- pixels ----


@pytest.mark.parametrize("interp", [0, 1], ids=["nearest", "bilinear"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_on_every_kind(kind, interp):
    contents = list(CONTENTS)
    images = [
        decoded(kind, h, w, seed, contents[seed % len(contents)])
        for seed, (h, w) in enumerate([(37, 53), (224, 224), (61, 40)])
    ]
    seed = list(KINDS).index(kind) * 2 + interp
    assert_sweep(sweep(images, 12, interp, seed), SHARE)


@pytest.mark.parametrize("interp", [0, 1], ids=["nearest", "bilinear"])
def test_on_tiny_and_odd_sizes(interp):
    rng = np.random.default_rng(5)
    sizes = [(1, 1), (2, 3), (3, 2), (1, 7), (7, 1), (2, 2), (5, 4), (53, 37)]
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    assert_sweep(sweep(images, 40, interp, 100 + interp), NOISE_SHARE)


@pytest.mark.parametrize("interp", [0, 1], ids=["nearest", "bilinear"])
def test_quarter_turns(interp):
    """rotate_image turns by 0, 180 and (square) 90 or 270 degrees with
    rot90 when the centre is the default: the op does too, and the general
    warp it uses with a centre given (and which RandAugment's Rotate gets)
    gives the same bytes."""
    rng = np.random.default_rng(6)
    for h, w in [(1, 1), (2, 2), (7, 7), (64, 64), (37, 53), (2, 3)]:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        for a in [0, 90, 180, 270, -90, 360, -180, 450, 720]:
            for fill in (None, [10.0, 20.0, 30.0]):
                want = reference(img, rotation_op(a, interp, None, fill), [float(a)])
                for center in (None, (w / 2, h / 2)):
                    got, _ = run(img, rotation_op(a, interp, center, fill))
                    assert differing(got, want) == (0, 0), (h, w, a, fill, center)


@pytest.mark.parametrize("interp", [0, 1], ids=["nearest", "bilinear"])
def test_policy_uses(interp):
    """ShearX/Y, TranslateX/Y and Rotate as torchvision's AutoAugment,
    RandAugment and TrivialAugmentWide call affine and rotate: magnitudes
    from their float32 bins, shear about the corner (center=[0, 0]),
    translations alone; fill None or a tuple."""
    img = decoded("baseline", 224, 224, 3, "photo")
    odd = decoded("s420", 37, 53, 4, "screen")
    shears = torch.linspace(0.0, 0.99, 31)
    angles = torch.linspace(0.0, 135.0, 31)
    tally = Tally()
    for fill in (None, [128.0, 64.0, 0.0]):
        for im in (img, odd):
            h, w = im.shape[:2]
            for b in (0, 7, 15, 30):
                for sign in (1, -1):
                    s = math.degrees(math.atan(sign * shears[b].item()))
                    a = sign * angles[b].item()
                    ops = [
                        affine_op(
                            shear=(s, s), interp=interp, center=(0, 0), fill=fill
                        ),
                        affine_op(
                            shear=(0.0, 0.0, s, s),
                            interp=interp,
                            center=(0, 0),
                            fill=fill,
                        ),
                        rotation_op(a, interp, None, fill),
                    ]
                    for op in ops:
                        got, params = run(im, op)
                        compare(im, op, got, params, tally)
            # translations: integer pixels drawn up to 45 % of the side
            for key in range(12):
                for tr in ((0.45, 0.0), (0.0, 0.45)):
                    op = affine_op(translate=tr, interp=interp, fill=fill)
                    got, params = run(im, op, key)
                    assert params[1:6] == [params[1], params[2], 1.0, 0.0, 0.0]
                    compare(im, op, got, params, tally)
    assert_sweep(tally, SHARE)


def test_fill_rounding():
    """A fractional fill: torchvision rounds it (half to even) with nearest
    and blends the unrounded value with bilinear."""
    img = np.full((9, 11, 3), 200, np.uint8)
    for fill in ([127.5, 0.5, 254.5], [3.25, 100.75, 64.5]):
        for interp in (0, 1):
            op = rotation_op(33.0, interp, None, fill)
            got, params = run(img, op)
            tally = Tally()
            compare(img, op, got, params, tally)
            assert_sweep(tally, 1.0)
            if interp == 0:
                corner = [round(v) for v in fill]  # Python rounds half to even
                assert list(got[0, 0]) == corner


def test_exactness_is_sensitive():
    """The other rounding of ATen's grid sampler (plain where torch fuses,
    or the reverse) moves some bilinear pixels by one: the exact
    comparisons above can fail, and the tolerance holds for it."""
    other = "sse2" if fused_torch() else "avx2"
    if not warps.X86 or _core.resample_simd(other) != other:
        pytest.skip("this machine runs only one of the two roundings")
    EXACT["on"] = True
    img = decoded("baseline", 224, 224, 9, "photo")
    tally = sweep([img], 20, 1, 7)
    assert tally.bad and max(b[3] for b in tally.bad) == 1
    assert 0 < tally.differ <= tally.ambiguous


def test_plain_rounding_matches_torch_default():
    """torch's default CPU kernels (no FMA) against the warp at the SSE2
    level, in a child so that ATEN_CPU_CAPABILITY takes effect: exact on
    x86-64 with the plain-order grid, the tolerance everywhere."""
    code = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import test_augment_geometry as t\n"
        "from ringloader import _core\n"
        "import torch\n"
        "assert torch.backends.cpu.get_cpu_capability() == 'DEFAULT'\n"
        "assert _core.resample_simd() in ('sse2', 'c')\n"
        "t.EXACT['on'] = t.warps.align_kernels()[1]\n"
        "assert t.EXACT['on'] or not t.warps.X86\n"
        "img = t.decoded('progressive', 224, 224, 11, 'texture')\n"
        "rng = t.np.random.default_rng(1)\n"
        "tiny = [rng.integers(0, 256, (h, w, 3), dtype=t.np.uint8)\n"
        "        for h, w in [(1, 1), (2, 3), (1, 7), (37, 53)]]\n"
        "for interp in (0, 1):\n"
        "    t.assert_sweep(t.sweep([img] + tiny, 15, interp, 40 + interp), t.SHARE)\n"
    )
    package_dir = os.path.dirname(os.path.dirname(ringloader.__file__))
    env = {"ATEN_CPU_CAPABILITY": "default", "RINGLOADER_SIMD": "sse2"}
    proc = run_python(code, package_dir, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- arguments ----


@pytest.mark.parametrize(
    "op, words",
    [
        (("rotation", [10, -10, 0, NAN, NAN, NAN, NAN, NAN]), "degrees"),
        (("rotation", [NAN, 10, 0, NAN, NAN, NAN, NAN, NAN]), "degrees"),
        (("rotation", [0, 10, 2, NAN, NAN, NAN, NAN, NAN]), "interpolation"),
        (("rotation", [0, 10, 0.5, NAN, NAN, NAN, NAN, NAN]), "interpolation"),
        (("rotation", [0, 10, 0, 3, NAN, NAN, NAN, NAN]), "center"),
        (("rotation", [0, 10, 0, NAN, NAN, 1, NAN, 3]), "fill"),
        (("rotation", [0, 10, 0, NAN, NAN, 1, 2, 256]), "fill"),
        (("rotation", [0, 10, 0, NAN, NAN, -1, 2, 3]), "fill"),
        (affine_op(degrees=(5.0, -5.0)), "degrees"),
        (affine_op(degrees=(0.0, 1e39)), "degrees"),
        (affine_op(translate=(0.1, 1.5)), "translate"),
        (affine_op(translate=(0.1, NAN)), "translate"),
        (affine_op(scale=(0.0, 1.0)), "scale"),
        (affine_op(scale=(1.2, 1.1)), "scale"),
        (affine_op(scale=(NAN, 1.1)), "scale"),
        (affine_op(shear=(10.0, 5.0)), "shear x"),
        (affine_op(shear=(0.0, 5.0, 5.0, 1.0)), "shear y"),
        (affine_op(shear=(NAN, NAN, 1.0, 2.0)), "shear y"),
        (affine_op(interp=3), "interpolation"),
        (affine_op(center=(1.0, math.inf)), "center"),
        (affine_op(fill=(1.0, 2.0, NAN)), "fill"),
        (("affine", [0.0] * 15), "16 arguments"),
        (("rotation", [0.0] * 9), "8 arguments"),
    ],
)
def test_check_refuses(op, words):
    with pytest.raises(ValueError, match=words) as e:
        _core.augment_draw([op], 8, 8, 0, 0, 0)
    assert op[0] in str(e.value)


def test_draws():
    """A pure function of (seed, epoch, key), inside the ranges, integer
    translations, and the identity's values where an argument is None."""
    rot = rotation_op((-30.0, 45.0))
    aff = affine_op((-10.0, 10.0), (0.1, 0.2), (0.8, 1.2), (-5.0, 5.0, 1.0, 2.0))
    bare = affine_op((3.0, 3.0))
    ops = [rot, aff, bare]
    first = _core.augment_draw(ops, 100, 224, SEED, 2, 77)
    assert first == _core.augment_draw(ops, 100, 224, SEED, 2, 77)
    assert first != _core.augment_draw(ops, 100, 224, SEED, 2, 78)
    assert first != _core.augment_draw(ops, 100, 224, SEED, 3, 77)
    for key in range(300):
        (r, a, b) = _core.augment_draw(ops, 100, 224, SEED, 0, key)
        assert -30.0 <= r[0] <= 45.0 and r[1:] == [0.0] * 15
        assert -10.0 <= a[0] <= 10.0
        assert a[1] == int(a[1]) and abs(a[1]) <= round(0.1 * 224)
        assert a[2] == int(a[2]) and abs(a[2]) <= round(0.2 * 100)
        assert 0.8 <= a[3] <= 1.2 and -5.0 <= a[4] <= 5.0 and 1.0 <= a[5] <= 2.0
        assert b[:6] == [3.0, 0.0, 0.0, 1.0, 0.0, 0.0]
        # float32 values, as torch's uniform_ on a float tensor gives
        assert all(np.float32(v) == v for v in r[:1] + a[:6])


# ---- distributions ----

N = 20_000


def ours(op, h, w):
    return np.array([_core.augment_draw([op], h, w, SEED, 0, k)[0] for k in range(N)])


def test_rotation_distribution():
    torch.manual_seed(0)
    theirs = [transforms.RandomRotation.get_params([-30.0, 45.0]) for _ in range(N)]
    mine = ours(rotation_op((-30.0, 45.0)), 64, 64)[:, 0]
    assert stats.ks_2samp(mine, theirs).pvalue > 0.01


def test_affine_distribution():
    h, w = 160, 224
    args = dict(degrees=[-25.0, 40.0], translate=[0.1, 0.2], scale_ranges=[0.7, 1.3])
    shears = [-10.0, 15.0, -5.0, 8.0]
    torch.manual_seed(0)
    theirs = []
    for _ in range(N):
        angle, (tx, ty), scale, (sx, sy) = transforms.RandomAffine.get_params(
            **args, shears=shears, img_size=[w, h]
        )
        theirs.append([angle, tx, ty, scale, sx, sy])
    theirs = np.array(theirs)
    op = affine_op((-25.0, 40.0), (0.1, 0.2), (0.7, 1.3), tuple(shears))
    mine = ours(op, h, w)[:, :6]
    for col in (0, 3, 4, 5):  # angle, scale, shear x and y
        p = stats.ks_2samp(mine[:, col], theirs[:, col]).pvalue
        assert p > 0.01, (col, p)
    for col, limit in ((1, round(0.1 * w)), (2, round(0.2 * h))):
        values = np.arange(-limit, limit + 1)
        table = [[np.sum(x[:, col] == v) for v in values] for x in (mine, theirs)]
        assert sum(map(sum, table)) == 2 * N  # nothing outside the range
        p = stats.chi2_contingency(np.array(table)).pvalue
        assert p > 0.01, (col, p)
