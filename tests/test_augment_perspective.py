"""The "perspective" op (v2.RandomPerspective) against torchvision: the
pixels of transforms.v2.functional.perspective on uint8 tensors with the
very corners the op drew (decoded JPEGs, noise, odd and small sizes, both
interpolations, no fill, one fill, three), and the draws (the p draw, the
four corners) with make_params's distributions.

Pixels, as for the affine warps (see warps.py): every pixel within
`warps.check_warp`'s tolerance of the exact float64 warp against
torchvision as it runs here, and, on x86-64 with torchvision's grid
products in the plain float32 order (`warps.pinned_grid`), the same bytes,
at the SIMD level that rounds as torch's grid sampler does here (and at
torch's default capability, in a child process)."""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest

import ringloader
from ringloader import _core
from ringloader.adapt import torchvision_ops

from images import CONTENTS, KINDS
from subproc import run_python

torch = pytest.importorskip("torch")
tvf = pytest.importorskip("torchvision.transforms.v2.functional")
v2 = pytest.importorskip("torchvision.transforms.v2")
stats = pytest.importorskip("scipy.stats")

import warps  # noqa: E402  (needs torchvision)

# the affine warps' helpers: decoded JPEGs, the interpolation modes, and
# the fixture that puts the warp on torch's rounding (EXACT)
from test_augment_geometry import EXACT, MODES, SHARE, decoded, kernels  # noqa: E402

__all__ = ["kernels"]  # the autouse fixture, shared

NAN = float("nan")
SEED = 4321
# the share of ambiguous pixels a sweep of uniform noise may have (its
# steps between neighbours are largest; the quotient widens the bound over
# the affine grid's)
NOISE_SHARE = 0.10


def perspective_op(distortion=0.5, p=1.0, interp=1, fill=(0.0, 0.0, 0.0)):
    fill = [NAN] * 3 if fill is None else [float(v) for v in fill]
    return ("perspective", [distortion, p, float(interp), *fill])


def corners(params) -> list[list[int]]:
    """The end points the op drew: top-left, top-right, bottom-right,
    bottom-left."""
    e = [int(v) for v in params[1:9]]
    return [e[0:2], e[2:4], e[4:6], e[6:8]]


def run(img: np.ndarray, op, key: int):
    h, w = img.shape[:2]
    params = _core.augment_draw([op], h, w, SEED, 0, key)[0]
    out = _core.augment(img.tobytes(), h, w, [op], SEED, 0, key)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3), params


def reference(img: np.ndarray, op, params) -> np.ndarray:
    """torchvision's perspective with the op's arguments and drawn corners
    (startpoints the image's corners, as make_params gives them)."""
    a = op[1]
    h, w = img.shape[:2]
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    fill = None if math.isnan(a[3]) else list(a[3:6])
    t = torch.from_numpy(img.copy()).permute(2, 0, 1)
    out = tvf.perspective(t, start, corners(params), MODES[int(a[2])], fill=fill)
    return out.permute(1, 2, 0).numpy()


def differing(got: np.ndarray, want: np.ndarray) -> int:
    return int((got != want).any(axis=-1).sum())


def sweep(images, cases: int, interp: int, seed: int, share: float = SHARE):
    """Random ops on every image against torchvision: (pixels compared,
    ambiguous, differing from torchvision as it runs, cases differing
    from the plain-order grid's bytes where EXACT)."""
    rng = random.Random(seed)
    pixels = ambiguous = differ = 0
    bad = []
    for img in images:
        for _ in range(cases):
            fill = rng.choice(
                [None, (0.0, 0.0, 0.0), (255.0, 255.0, 255.0), (12.0, 200.0, 97.0)]
            )
            op = perspective_op(
                rng.choice([0.1, 0.5, 0.9, rng.random()]), 1.0, interp, fill
            )
            got, params = run(img, op, rng.randrange(1 << 30))
            assert params[0] < 1.0
            with warps.recording() as made:
                ref = reference(img, op, params)
            assert len(made) == 1 and made[0].coeffs is not None
            v = warps.check_warp(img, got, ref, made[0], f"{op} {corners(params)}")
            pixels, ambiguous, differ = (
                pixels + v.pixels,
                ambiguous + v.ambiguous,
                differ + v.differ,
            )
            if EXACT["on"]:
                with warps.pinned_grid():
                    ref = reference(img, op, params)
                n = differing(got, ref)
                if n:
                    bad.append((op, corners(params), img.shape, n))
    print(f"{differ} of {pixels} pixels differ, {ambiguous} ambiguous")
    assert ambiguous <= share * pixels, (ambiguous, pixels)
    assert not bad, f"{len(bad)} cases differ: {bad[:3]}"
    return pixels


def noise(sizes, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


# ---- pixels ----


@pytest.mark.parametrize("interp", [0, 1], ids=["nearest", "bilinear"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_on_every_kind(kind, interp):
    contents = list(CONTENTS)
    images = [
        decoded(kind, h, w, seed, contents[seed % len(contents)])
        for seed, (h, w) in enumerate([(37, 53), (224, 224), (61, 40)])
    ]
    assert sweep(images, 6, interp, list(KINDS).index(kind) * 2 + interp) > 0


@pytest.mark.parametrize("interp", [0, 1], ids=["nearest", "bilinear"])
def test_on_noise_and_odd_sizes(interp):
    sizes = [(8, 8), (5, 97), (97, 5), (33, 2 * 33 + 1), (128, 96), (300, 7)]
    assert sweep(noise(sizes, interp), 10, interp, 10 + interp, NOISE_SHARE) > 0


def test_plain_rounding_matches_torch_default():
    """torch's default CPU kernels (no FMA) against the warp at the plain C
    level, in a child so that ATEN_CPU_CAPABILITY takes effect."""
    code = (
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import test_augment_perspective as t\n"
        "from ringloader import _core\n"
        "import torch\n"
        "assert torch.backends.cpu.get_cpu_capability() == 'DEFAULT'\n"
        "assert _core.resample_simd() == 'c'\n"
        "t.EXACT['on'] = t.warps.align_kernels()[1]\n"
        "assert t.EXACT['on'] or not t.warps.X86\n"
        "img = t.decoded('progressive', 96, 128, 11, 'photo')\n"
        "tiny = t.noise([(3, 4), (7, 3), (37, 53)], 5)\n"
        "for interp in (0, 1):\n"
        "    t.sweep([img] + tiny, 10, interp, 40 + interp, t.NOISE_SHARE)\n"
    )
    package_dir = os.path.dirname(os.path.dirname(ringloader.__file__))
    env = {"ATEN_CPU_CAPABILITY": "default", "RINGLOADER_SIMD": "c"}
    proc = run_python(code, package_dir, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_transform_object_gives_the_ops_pixels():
    """v2.RandomPerspective's own transform with the coefficients its
    make_params computes from the drawn corners, through the adapter."""
    img = decoded("baseline", 64, 80, 3, "photo")
    h, w = img.shape[:2]
    t = v2.RandomPerspective(0.6, p=1.0, fill=[10, 20, 30])
    op = torchvision_ops.op_of(t, h, w)
    assert op[0] == "perspective"
    from torchvision.transforms.functional import _get_perspective_coeffs

    for key in range(4):
        got, params = run(img, op, key)
        start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
        coeffs = _get_perspective_coeffs(start, corners(params))
        image = torch.from_numpy(img.copy()).permute(2, 0, 1)
        with warps.pinned_grid():
            want = t.transform(image, {"coefficients": coeffs})
        want = want.permute(1, 2, 0).numpy()
        if EXACT["on"]:
            assert differing(got, want) == 0
        else:
            assert np.abs(got.astype(int) - want).max() <= 1


def test_p_leaves_the_image_alone():
    img = noise([(20, 30)], 0)[0]
    op = perspective_op(0.5, 0.5, 1)
    ran = set()
    for key in range(40):
        got, params = run(img, op, key)
        applied = params[0] < 0.5
        ran.add(applied)
        if not applied:
            assert np.array_equal(got, img) and params[1:9] == [0.0] * 8
    assert ran == {True, False}


def singular(w: int, h: int, end) -> bool:
    """Whether _get_perspective_coeffs's 8 x 8 system for these corners is
    singular: its determinant, exactly (Python's integers, Bareiss)."""
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    m = []
    for (ex, ey), (sx, sy) in zip(end, start):
        m.append([ex, ey, 1, 0, 0, 0, -sx * ex, -sx * ey])
        m.append([0, 0, 0, ex, ey, 1, -sy * ex, -sy * ey])
    prev = 1
    for k in range(7):
        if m[k][k] == 0:
            swap = next((r for r in range(k + 1, 8) if m[r][k] != 0), None)
            if swap is None:
                return True
            m[k], m[swap] = m[swap], m[k]
        for i in range(k + 1, 8):
            for j in range(k + 1, 8):
                m[i][j] = (m[i][j] * m[k][k] - m[i][k] * m[k][j]) // prev
        prev = m[k][k]
    return m[7][7] == 0


@pytest.mark.parametrize("h, w", [(3, 3), (4, 3), (2, 5)])
def test_singular_corners_raise(h, w):
    """Small images with distortion 1 can draw corners for which
    _get_perspective_coeffs's system is singular: torchvision's lstsq
    raises, or returns coefficients made of its rounding errors. The op
    raises, naming the corners, for exactly the draws whose system is
    singular, every draw torchvision refuses among them."""
    img = noise([(h, w)], 1)[0]
    op = perspective_op(1.0, 1.0, 0)
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    raised = 0
    for key in range(300):
        params = _core.augment_draw([op], h, w, SEED, 0, key)[0]
        end = corners(params)
        try:
            tvf.perspective(torch.zeros(3, h, w, dtype=torch.uint8), start, end)
            refused = False
        except RuntimeError:
            refused = True
        if singular(w, h, end):
            with pytest.raises(OSError, match=f"no perspective maps the {w} x {h}"):
                run(img, op, key)
            raised += 1
        else:
            assert not refused, end
            run(img, op, key)
    assert 0 < raised < 300


@pytest.mark.parametrize(
    "op, words",
    [
        (perspective_op(distortion=1.5), "distortion_scale"),
        (perspective_op(distortion=NAN), "distortion_scale"),
        (perspective_op(p=-0.1), "p must"),
        (perspective_op(interp=2), "interpolation"),
        (perspective_op(fill=(1.0, 2.0, NAN)), "fill"),
        (perspective_op(fill=(1.0, 2.0, 256.0)), "fill"),
        (("perspective", [0.5] * 5), "6 arguments"),
    ],
)
def test_check_refuses(op, words):
    with pytest.raises(ValueError, match=words) as e:
        _core.augment_draw([op], 8, 8, 0, 0, 0)
    assert "perspective" in str(e.value)


# ---- distributions ----

N = 20_000


def theirs(t, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(applied, corners of the applied draws) over N of torchvision's
    forwards on an h x w image, recorded at make_params."""
    import torchvision.transforms.v2._geometry as G

    corners_drawn: list = []
    original = G._get_perspective_coeffs

    def record(start, end):
        corners_drawn.append([v for pt in end for v in pt])
        return original(start, end)

    applied = []
    torch.manual_seed(0)
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    G._get_perspective_coeffs = record
    t.transform = lambda inpt, params: inpt
    try:
        for _ in range(N):
            before = len(corners_drawn)
            t(img)
            applied.append(len(corners_drawn) > before)
    finally:
        G._get_perspective_coeffs = original
    return np.array(applied), np.array(corners_drawn)


def ours(op, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    drawn = np.array([_core.augment_draw([op], h, w, SEED, 0, k)[0] for k in range(N)])
    applied = drawn[:, 0] < op[1][1]
    return applied, drawn[applied, 1:9]


@pytest.mark.sweep
@pytest.mark.parametrize(
    "distortion, p, h, w",
    [(0.5, 0.5, 48, 64), (0.9, 0.7, 31, 20), (0.2, 1.0, 120, 90), (1.0, 0.3, 9, 6)],
)
def test_draws_follow_make_params(distortion, p, h, w):
    t = v2.RandomPerspective(distortion, p=p)
    op = torchvision_ops.op_of(t, h, w)
    mine_applied, mine = ours(op, h, w)
    their_applied, their = theirs(t, h, w)
    # how often it applies: the same binomial (always, for p = 1)
    table = [[a.sum(), len(a) - a.sum()] for a in (mine_applied, their_applied)]
    if p == 1.0:
        assert mine_applied.all() and their_applied.all()
    else:
        assert stats.chi2_contingency(np.array(table)).pvalue > 0.01, table
    # each corner coordinate over its integers, nothing outside them
    for col in range(8):
        values = np.union1d(np.unique(mine[:, col]), np.unique(their[:, col]))
        assert set(np.unique(mine[:, col])) == set(np.unique(their[:, col])), col
        if len(values) == 1:
            continue
        table = [[np.sum(x[:, col] == v) for v in values] for x in (mine, their)]
        p_value = stats.chi2_contingency(np.array(table)).pvalue
        assert p_value > 0.01, (col, p_value)
    # the coordinates drawn independently: the top-left corner's pairs
    pairs = [tuple(r) for r in mine[:, :2].astype(int)] + [
        tuple(r) for r in their[:, :2].astype(int)
    ]
    cats = sorted(set(pairs))
    if len(cats) > 1:
        n = len(mine)
        table = [[pairs[:n].count(c) for c in cats], [pairs[n:].count(c) for c in cats]]
        assert stats.chi2_contingency(np.array(table)).pvalue > 0.01
