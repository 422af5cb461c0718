"""What "the same bytes as torchvision" means for the affine warps
(rotation, affine, the geometric sub-ops of the policies and AugMix), and
the tolerance that holds on every CPU.

torchvision's warp is float32 throughout: a sampling grid, theta times the
pixel centres, then ATen's grid sampler. Two parts of it round differently
from one machine to the next:

- the grid's product goes through torch's bmm, i.e. the BLAS (MKL in the
  x86 wheels), which picks its kernels by CPU: MKL's AVX-512 path, taken on
  Intel CPUs with AVX-512 only, fuses y * R10 into a multiply-add with
  x * R00; its AVX2 and generic paths (AMD CPUs, Intel AVX2 CPUs) round
  every operation. ATEN_CPU_CAPABILITY does not change this. (Measured with
  MKL 2024.2 made to take its Intel paths on an AMD CPU: 2,024,905 of
  11,377,444 grid values differ from the plain product by an ulp, and all of
  them equal the fused one.)
- ATen's grid sampler fuses the unnormalisation and the bilinear sum at its
  AVX2 and AVX512 capabilities, not at its default one; the warp follows
  the capability through the SIMD level (`align_kernels`).

Exact: with the grid's product in the plain order (`pinned_grid`, which
redoes torchvision's _affine_grid with elementwise float32 operations) and
on x86-64 (where ATen's two roundings are known and followed), the warp
gives torchvision's bytes, on any CPU. Against torchvision as it runs
(whatever its BLAS does, and on other architectures), `check_warp` states
the tolerance: every float32 evaluation of the warp lies within a bound of
the exact (float64) one, so a pixel may differ only where the exact result
lies within that bound of a rounding point, and then only as the other side
of it would: for nearest, the neighbouring source pixel (or the fill)
across a half-pixel boundary of the source coordinate; for bilinear, one
LSB across a .5 of the value. `check_warp` checks ours and torchvision's
against the exact warp, pixel by pixel.
"""

from __future__ import annotations

import contextlib
import platform
from dataclasses import dataclass

import numpy as np
import torch
from torchvision.transforms.v2.functional import _geometry

from ringloader import _core

U = 2.0**-24  # float32's unit roundoff
X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def exact_reference():
    """The context for a reference that must give ringloader's bytes: the
    plain-order grid on x86-64, torchvision as it is elsewhere."""
    return pinned_grid() if X86 else contextlib.nullcontext()


def fused_torch() -> bool:
    """Whether torch runs the grid sampler built with FMA."""
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def align_kernels() -> tuple[str, bool]:
    """Sets the warp's SIMD level to the rounding torch's grid sampler uses
    here (fused at its AVX2 level, plain below): (the level before, whether
    the two now round alike, which only x86-64 can say)."""
    before = _core.resample_simd()
    want = "avx2" if fused_torch() else "sse2"
    return before, X86 and _core.resample_simd(want) == want


@contextlib.contextmanager
def aligned():
    """align_kernels for the duration; yields whether the warp and torch's
    grid sampler now round alike."""
    before, ok = align_kernels()
    try:
        yield ok
    finally:
        _core.resample_simd(before)


def plain_grid(theta: torch.Tensor, w: int, h: int, ow: int, oh: int):
    """torchvision's _affine_grid with the product in the plain float32
    order ((x * R00 + y * R10) + R20), each operation rounded."""
    r = theta[0].T / torch.tensor([0.5 * w, 0.5 * h], dtype=theta.dtype)
    x = torch.linspace((1.0 - ow) * 0.5, (ow - 1.0) * 0.5, steps=ow)
    y = torch.linspace((1.0 - oh) * 0.5, (oh - 1.0) * 0.5, steps=oh)
    x, y = x.to(theta.dtype).view(1, ow, 1), y.to(theta.dtype).view(oh, 1, 1)
    grid = (x * r[0] + y * r[1]) + r[2]
    return grid.unsqueeze(0)


def plain_perspective_grid(coeffs, ow: int, oh: int, dtype, device=None):
    """torchvision's _perspective_grid with its two products in the plain
    float32 order ((x * R00 + y * R10) + R20 over (x * c6 + y * c7) + 1),
    each operation rounded."""
    t = torch.tensor([coeffs[0:3], coeffs[3:6]], dtype=dtype)
    r = t.T / torch.tensor([0.5 * ow, 0.5 * oh], dtype=dtype)
    c6, c7 = (torch.tensor(c, dtype=dtype) for c in coeffs[6:8])
    x = torch.linspace(0.5, ow - 0.5, steps=ow, dtype=dtype).view(1, ow, 1)
    y = torch.linspace(0.5, oh - 0.5, steps=oh, dtype=dtype).view(oh, 1, 1)
    num = (x * r[0] + y * r[1]) + r[2]
    den = (x * c6 + y * c7) + 1.0
    return (num / den - 1.0).unsqueeze(0)


@contextlib.contextmanager
def pinned_grid():
    """torchvision's warps, with the grids' products in the plain order."""
    original = _geometry._affine_grid, _geometry._perspective_grid
    _geometry._affine_grid = plain_grid
    _geometry._perspective_grid = plain_perspective_grid
    try:
        yield
    finally:
        _geometry._affine_grid, _geometry._perspective_grid = original


@dataclass
class Warp:
    """One warp torchvision made: its theta (the inverse matrix) or, for a
    perspective, its 8 coefficients (theta None), sizes, mode and fill."""

    theta: np.ndarray | None
    w: int
    h: int
    mode: str = ""
    fill: list[float] | None = None
    coeffs: np.ndarray | None = None


@contextlib.contextmanager
def recording():
    """Records each warp torchvision's v2 kernels make (rotate's quarter
    turns by rot90 make none) into the yielded list."""
    warps: list[Warp] = []
    grid, apply = _geometry._affine_grid, _geometry._apply_grid_transform
    persp = _geometry._perspective_grid

    def record_grid(theta, w, h, ow, oh):
        warps.append(Warp(theta.detach().clone()[0].numpy(), w, h))
        return grid(theta, w, h, ow, oh)

    def record_perspective(coeffs, ow, oh, dtype, device):
        warps.append(Warp(None, ow, oh, coeffs=np.array(coeffs, np.float64)))
        return persp(coeffs, ow=ow, oh=oh, dtype=dtype, device=device)

    def record_apply(img, g, mode, fill):
        if fill is not None:
            fill = [
                float(v) for v in (fill if isinstance(fill, list | tuple) else [fill])
            ]
            fill = fill * 3 if len(fill) == 1 else fill
        warps[-1].mode, warps[-1].fill = mode, fill
        return apply(img, g, mode, fill)

    _geometry._affine_grid = record_grid
    _geometry._perspective_grid = record_perspective
    _geometry._apply_grid_transform = record_apply
    try:
        yield warps
    finally:
        _geometry._affine_grid, _geometry._apply_grid_transform = grid, apply
        _geometry._perspective_grid = persp


def torch_grid_is_plain(sizes=((224, 224), (53, 37), (300, 7)), n: int = 20) -> bool:
    """Whether torchvision's grid here is the plain-order product (MKL's
    generic or AVX2 path), on random thetas: a fused product differs in
    about a fifth of the values."""
    rng = np.random.default_rng(0)
    for w, h in sizes:
        for _ in range(n):
            theta = torch.from_numpy(rng.uniform(-2, 2, (1, 2, 3)).astype(np.float32))
            want = plain_grid(theta, w, h, w, h)
            if not torch.equal(_geometry._affine_grid(theta.clone(), w, h, w, h), want):
                return False
    return True


def exact_coords(warp: Warp) -> tuple[np.ndarray, ...]:
    """(ix, iy, ex, ey): the source coordinate of every output pixel,
    exactly (float64, from the float32 R every implementation divides out
    alike), and bounds on how far any float32 evaluation of it lies off."""
    if warp.coeffs is not None:
        return _exact_perspective(warp)
    w, h = warp.w, warp.h
    t = warp.theta.astype(np.float32)
    half = np.array([0.5 * w, 0.5 * h], np.float32)
    r = (t.T / half).astype(np.float64)  # 3 x 2, rounded as torch does
    x = (np.arange(w) - 0.5 * (w - 1)).reshape(1, w)
    y = (np.arange(h) - 0.5 * (h - 1)).reshape(h, 1)
    out = []
    for c, s in ((0, 0.5 * w), (1, 0.5 * h)):
        a, b, k = x * r[0, c], y * r[1, c], r[2, c]
        g = (a + b) + k
        i = (g + 1.0) * s - 0.5
        # the product and sum, any order, fused or not: two products and
        # two sums, each rounding by at most U of what it rounds; then g + 1,
        # times s and minus 0.5 (fused or not): 1.05 covers second order
        eg = U * (3.0 * (np.abs(a) + np.abs(b) + abs(k)))
        ei = s * (eg + 2.0 * U * (np.abs(g) + 1.0)) + U * (np.abs(i) + 1.0)
        out.append((i, 1.05 * ei))
    (ix, ex), (iy, ey) = out
    return ix, iy, ex, ey


def _exact_perspective(warp: Warp) -> tuple[np.ndarray, ...]:
    """exact_coords for a perspective grid: the quotient of the two
    products, each bounded as the affine grid's, then less 1."""
    w, h = warp.w, warp.h
    t = warp.coeffs.astype(np.float32)
    half = np.array([0.5 * w, 0.5 * h], np.float32)
    r = (t[:6].reshape(2, 3).T / half).astype(np.float64)
    c6, c7 = float(t[6]), float(t[7])
    x = (np.arange(w) + 0.5).reshape(1, w)
    y = (np.arange(h) + 0.5).reshape(h, 1)
    den = (x * c6 + y * c7) + 1.0
    eden = U * 3.0 * (np.abs(x * c6) + np.abs(y * c7) + 1.0)
    out = []
    for c, s in ((0, 0.5 * w), (1, 0.5 * h)):
        a, b, k = x * r[0, c], y * r[1, c], r[2, c]
        num = (a + b) + k
        enum = U * 3.0 * (np.abs(a) + np.abs(b) + abs(k))
        q = num / den
        # a quotient of two values each off by its bound, itself rounded
        eq = (enum + np.abs(q) * eden) / np.maximum(np.abs(den) - eden, 1e-300)
        eq = eq + U * np.abs(q)
        g = q - 1.0
        eg = eq + U * np.abs(g)
        i = (g + 1.0) * s - 0.5
        ei = s * (eg + 2.0 * U * (np.abs(g) + 1.0)) + U * (np.abs(i) + 1.0)
        # the interval held to [-8, size + 8]: far outside (a denominator
        # near 0), every tap is outside alike
        size = w if c == 0 else h
        with np.errstate(invalid="ignore"):
            lo = np.clip(np.nan_to_num(i - 1.05 * ei, nan=-8.0), -8.0, size + 8.0)
            hi = np.clip(np.nan_to_num(i + 1.05 * ei, nan=size + 8.0), -8.0, size + 8.0)
        out.append(((lo + hi) / 2, (hi - lo) / 2))
    (ix, ex), (iy, ey) = out
    return ix, iy, ex, ey


def _taps(src: np.ndarray, fill, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """src at integer coordinates (any shape), fill (or 0) outside: float64,
    the channels last."""
    h, w = src.shape[:2]
    inside = (xs >= 0) & (xs < w) & (ys >= 0) & (ys < h)
    v = src[np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)].astype(np.float64)
    outside = np.array(fill if fill is not None else [0.0, 0.0, 0.0], np.float64)
    return np.where(inside[..., None], v, outside)


@dataclass
class Verdict:
    pixels: int  # compared
    ambiguous: int  # whose exact result lies within the bound of a rounding
    differ: int  # where ours and torchvision's differ


def check_warp(src, ours, theirs, warp: Warp, what: str = "") -> Verdict:
    """Asserts the tolerance: ours and torchvision's equal the exact warp at
    every pixel where it is unambiguous, and where it is not, each is one of
    the two results either side of the rounding point. Returns the counts."""
    ix, iy, ex, ey = exact_coords(warp)
    if warp.mode == "nearest":
        fill = None if warp.fill is None else np.round(warp.fill)  # half to even
        # (any coordinate outside is the fill: each end held at -1 or the size)
        h, w = src.shape[:2]
        lo_x, hi_x = (
            np.clip(np.rint(v), -1, w).astype(int) for v in (ix - ex, ix + ex)
        )
        lo_y, hi_y = (
            np.clip(np.rint(v), -1, h).astype(int) for v in (iy - ey, iy + ey)
        )
        assert (hi_x - lo_x <= 1).all() and (hi_y - lo_y <= 1).all()
        ambiguous = (lo_x != hi_x) | (lo_y != hi_y)
        cands = [_taps(src, fill, xs, ys) for xs in (lo_x, hi_x) for ys in (lo_y, hi_y)]
        for name, img in (("ours", ours), ("torchvision's", theirs)):
            ok = np.zeros(ambiguous.shape, bool)
            for c in cands:
                ok |= (img == c).all(axis=-1)
            bad = ~ok
            assert not bad.any(), (
                f"{what}: {name} picks a pixel no neighbour has at "
                f"{np.argwhere(bad)[:3].tolist()}"
            )
            assert (img == cands[0]).all(axis=-1)[~ambiguous].all(), what
    else:
        # torchvision samples the image (zero outside) and, with a fill,
        # a plane of ones (m), then blends (v - fill) * m + fill
        x0, y0 = np.floor(ix).astype(int), np.floor(iy).astype(int)
        fx, fy = (ix - x0)[..., None], (iy - y0)[..., None]

        def lerp(tap):
            nw, ne = tap(x0, y0), tap(x0 + 1, y0)
            sw, se = tap(x0, y0 + 1), tap(x0 + 1, y0 + 1)
            return (1 - fy) * ((1 - fx) * nw + fx * ne) + fy * ((1 - fx) * sw + fx * se)

        def value(xs, ys):
            return _taps(src, None, xs, ys)

        def inside(xs, ys):
            return _taps(np.ones_like(src), None, xs, ys)

        v = lerp(value)
        if warp.fill is not None:
            f = np.array(warp.fill, np.float64)
            m = lerp(inside)
            v = (v - f) * m + f
        # how far the value can move, per unit of coordinate: by the largest
        # step between the taps of the cells a coordinate within its bound
        # can fall in (two either way near a cell's side), plus, with a fill
        # and a tap outside, 255 for the ones plane's step; float32 weights,
        # products, sums and the blend round it by at most 255 * 32 U
        near = (np.minimum(fx, 1 - fx) <= ex[..., None]) | (
            np.minimum(fy, 1 - fy) <= ey[..., None]
        )
        near = near[..., 0]

        def span_of(xs, ys, reach):
            vals = np.stack([value(xs + dx, ys + dy) for dx in reach for dy in reach])
            span = np.ptp(vals, axis=0)
            if warp.fill is not None:
                ins = [inside(xs + dx, ys + dy) for dx in reach for dy in reach]
                span = span + 255.0 * (np.stack(ins).min(axis=0) == 0)
            return span

        span = span_of(x0, y0, (0, 1))
        span[near] = span_of(x0[near], y0[near], (-1, 0, 1, 2))
        bound = span * (ex + ey)[..., None] + 255.0 * 32 * U
        lo, hi = np.floor(v - bound + 0.5), np.floor(v + bound + 0.5)
        ambiguous = (lo != hi).any(axis=-1)
        for name, img in (("ours", ours), ("torchvision's", theirs)):
            bad = ((img < lo) | (img > hi)).any(axis=-1)
            assert not bad.any(), (
                f"{what}: {name} is off the exact bilinear warp at "
                f"{np.argwhere(bad)[:3].tolist()}: {img[bad][:3].tolist()} "
                f"against {v[bad][:3].tolist()}"
            )
    differ = (ours != theirs).any(axis=-1)
    assert not (differ & ~ambiguous).any(), what
    return Verdict(int(differ.size), int(ambiguous.sum()), int(differ.sum()))
