"""The Pillow-exact affine warp (csrc/augment/pil_warp.c) of timm's geometric
ops, at every SIMD level, against Pillow's Image.transform as timm calls it.

The warp has a portable C kernel and an AVX2 one (the channels as lanes),
an interior path reading the image's rows and an edge path copying clamped
taps, and skips the arithmetic of a direction whose offset is 0: each must
give Pillow's bytes. The cases reach every one of them: images down to
1x1 and 2x2 (no interior at all for bicubic's 4x4 window), odd sizes,
noise (where any difference shows), angles beyond a quarter turn and
beyond a full one, shears over 1, translations by whole, half and
fractional pixels and ones that move the image fully out (all fill), and
fill colours at both ends of the range. Identical bytes are asserted on
x86-64, where Pillow's double arithmetic rounds each step as ours does;
elsewhere (a compiler may fuse Pillow's multiply-adds) within 1 LSB or 40
dB, as test_timm_ops.py states for these ops.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest
from PIL import Image

from ringloader import _core
from ringloader.adapt import timm_ops

from images import jpeg_bytes, psnr
from rlbench.randaugment import FILL, M9_WARPS

aa = pytest.importorskip("timm.data.auto_augment")

EXACT = platform.machine().lower() in ("x86_64", "amd64")
LEVELS = ["c", "sse2", "avx2"]
FILLS = [(124, 116, 104), (0, 0, 0), (255, 255, 255), (7, 250, 128)]
SIZES = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 3), (4, 4), (5, 4), (2, 7), (7, 2)]
SIZES += [(37, 53), (64, 64), (61, 97)]

CASES = [
    ("rotate", v)
    for v in (-27.3, 1e-9, 12.7, 45.0, 89.9, 90.0, 135.5, 225.3, 270.0, 359.99)
] + [("rotate", -720.5)]
CASES += [("shear_x", v) for v in (-3.5, -0.3, 0.0, 0.27, 1.7)]
CASES += [("shear_y", v) for v in (-1.2, -0.27, 0.3, 2.5)]
CASES += [("translate_x_abs", v) for v in (-0.25, 0.5, 1.0, -2.75, 33.4, 1e6, -1e6)]
CASES += [("translate_y_abs", v) for v in (0.75, -1.0, 2.5, -40.1, 1e6)]
CASES += [("translate_x_rel", v) for v in (0.405, -1.0)]
CASES += [("translate_y_rel", v) for v in (-0.405, 1.0)]


def _images() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    out = []
    for h, w in SIZES:
        out.append((f"noise-{h}x{w}", rng.integers(0, 256, (h, w, 3), np.uint8)))
    for i, (h, w) in enumerate([(37, 53), (61, 97)]):
        data, hh, ww = _core.decode(jpeg_bytes("s420", h, w, seed=60 + i))
        out.append((f"jpeg-{h}x{w}", np.frombuffer(data, np.uint8).reshape(hh, ww, 3)))
    return out


IMAGES = _images()


@pytest.fixture
def levels():
    """The SIMD levels this machine runs (each capped in turn); the best
    level is restored afterwards."""
    best = _core.resample_simd("avx2")  # capping at the top restores the best
    yield [lv for lv in LEVELS if LEVELS.index(lv) <= LEVELS.index(best)]
    _core.resample_simd("avx2")


def _ours(a: np.ndarray, func: str, arg: float, resample: int, fill) -> np.ndarray:
    h, w, _ = a.shape
    ops = [timm_ops.timm_op(func, arg, resample, fill)]
    return np.frombuffer(_core.augment(a.tobytes(), h, w, ops, 0, 0, 0), np.uint8)


def _pillow(a: np.ndarray, func: str, arg: float, resample: int, fill) -> np.ndarray:
    im = getattr(aa, func)(Image.fromarray(a), arg, resample=resample, fillcolor=fill)
    return np.asarray(im).reshape(-1)


def _check_levels(a: np.ndarray, func: str, arg: float, fill, levels, name: str):
    """Our op at each level against Pillow's, both filters: identical bytes
    on x86-64, else within 1 LSB or 40 dB."""
    for resample in (2, 3):
        ref = _pillow(a, func, arg, resample, fill)
        for level in levels:
            _core.resample_simd(level)
            ours = _ours(a, func, arg, resample, fill)
            _core.resample_simd("avx2")
            where = f"{func}({arg}, resample={resample}) on {name} at {level}"
            d = np.abs(ours.astype(int) - ref.astype(int))
            if EXACT:
                assert d.max() == 0, (
                    f"{where}: {d.max()} LSB at {(d > 0).sum()} of {d.size}"
                )
            else:
                assert d.max() <= 1 or psnr(ours, ref) >= 40, where


@pytest.mark.parametrize("func,arg", CASES, ids=[f"{f}-{v}" for f, v in CASES])
def test_warp_gives_pillows_bytes_at_every_simd_level(func, arg, levels):
    for i, (name, a) in enumerate(IMAGES):
        _check_levels(a, func, arg, FILLS[i % len(FILLS)], levels, name)


def test_a_translation_out_of_the_image_is_all_fill(levels):
    """Every centre falls outside: every pixel is the fill colour, for
    both filters and at every level (the fill path alone)."""
    _, a = IMAGES[-1]
    for level in levels:
        _core.resample_simd(level)
        for resample in (2, 3):
            for arg in (a.shape[1] + 0.5, -a.shape[1] - 0.01):
                ours = _ours(a, "translate_x_abs", arg, resample, (9, 8, 7))
                assert (ours.reshape(-1, 3) == (9, 8, 7)).all(), (level, arg)
    _core.resample_simd("avx2")


def test_the_224_crop_of_the_train_recipe_at_every_level(levels):
    """The size the train recipe warps, on a photo-like JPEG: the interior
    paths over many pixels, every level, both filters, RandAugment's
    magnitude-9 arguments."""
    data, h, w = _core.decode(jpeg_bytes("s420", 224, 224, seed=3))
    a = np.frombuffer(data, np.uint8).reshape(h, w, 3)
    for func, arg in M9_WARPS:  # what benchmarks/bench_pil_warp.py times
        _check_levels(a, func, arg, FILL, levels, "a 224x224 JPEG")
