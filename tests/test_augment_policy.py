"""TrivialAugmentWide, RandAugment and AutoAugment in C against torchvision.

Pixels: the C op's drawn parameters (``_core.augment_draw``) name the
sub-ops and magnitudes; torchvision's own ``_apply_image_or_video_transform``
(transforms.v2, on a uint8 tensor) applies the very same ones. A single
geometric sub-op is within the warp's tolerance (warps.py) of torchvision as
it runs here, and on x86-64 bit-exact against torchvision with the
plain-order grid (``warps.exact_reference``); a single colour sub-op is
within 1 LSB; a chain of two sub-ops (RandAugment, AutoAugment) at least
40 dB PSNR against that reference, since a 1 LSB difference before a
solarize threshold or an equalize histogram may grow.

Distributions: 20,000 draws of the C op against 20,000 of torchvision's
forward (its sub-op calls recorded), chi-square per drawn quantity,
p > 0.01, with fixed seeds so that the test is deterministic.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from ringloader import _core
from ringloader.adapt import torchvision_ops

import warps
from draws import same_categories
from images import KINDS, jpeg_bytes, psnr

KIND_NAMES = torchvision_ops.POLICY_KINDS
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
SEED = 11
SIZES = [(224, 224), (37, 53), (1, 1), (2, 3), (7, 1)]


@pytest.fixture(autouse=True)
def kernels():
    """The warps round as torch's grid sampler does here (warps.py)."""
    with warps.aligned():
        yield


def _image(kind: str, h: int, w: int, seed: int) -> np.ndarray:
    data, hh, ww = _core.decode(jpeg_bytes(kind, h, w, seed=seed))
    return np.frombuffer(data, np.uint8).reshape(hh, ww, 3)


def _images():
    out = []
    for i, kind in enumerate(KINDS):
        out.append((kind, _image(kind, 224, 224, i)))
    for i, (h, w) in enumerate(SIZES[1:]):
        out.append((f"s420-{h}x{w}", _image("s420", h, w, 50 + i)))
    for content in ("lines", "screen"):
        data, h, w = _core.decode(jpeg_bytes("baseline", 96, 80, 3, content))
        out.append((content, np.frombuffer(data, np.uint8).reshape(h, w, 3)))
    return out


IMAGES = _images()


def _run(img: np.ndarray, op, key: int) -> tuple[np.ndarray, list[float]]:
    h, w, _ = img.shape
    params = _core.augment_draw([op], h, w, SEED, 0, key)[0]
    out = _core.augment(img.tobytes(), h, w, [op], SEED, 0, key)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3), params


def _reference(t, img: np.ndarray, subops: list[tuple[str, float]], exact=False):
    """torchvision's sub-ops on img: (the result, the warps they made);
    exact: with warps.exact_reference."""
    x = torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous()
    pinned = warps.exact_reference() if exact else contextlib.nullcontext()
    with pinned, warps.recording() as made:
        for name, magnitude in subops:
            x = t._apply_image_or_video_transform(
                x, name, magnitude, interpolation=t.interpolation, fill=t._fill
            )
    return x.permute(1, 2, 0).numpy(), made


def _single(t, img: np.ndarray, ours: np.ndarray, subop, what: str) -> None:
    """One sub-op: a warp within its tolerance of torchvision as it runs
    and bit-exact against the exact reference on x86-64; a colour op as
    _check says."""
    name = subop[0]
    ref, made = _reference(t, img, [subop])
    if name in GEOMETRIC and made:
        warps.check_warp(img, ours, ref, made[-1], f"{what}: {name}")
        if not warps.X86:
            return
        ref, _ = _reference(t, img, [subop], exact=True)
    _check(name, ours, ref, what)


def _table_value(t, name: str, bins: int, h: int, w: int, b: int) -> float:
    return float(type(t)._AUGMENTATION_SPACE[name][0](bins, h, w)[b])


def _check(name: str, ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    diff = np.abs(ours.astype(int) - ref.astype(int)).max()
    if name in GEOMETRIC or name in ("Identity", "Posterize", "Invert"):
        assert diff == 0, f"{what}: {name} differs by up to {diff}"
    else:
        assert diff <= 1, f"{what}: {name} differs by up to {diff} LSB"


POLICY_SETUPS = {
    "nearest": dict(),
    "bilinear-fill": dict(
        interpolation=v2.InterpolationMode.BILINEAR, fill=[30, 60, 90]
    ),
}


@pytest.mark.parametrize("setup", list(POLICY_SETUPS))
def test_trivial_augment_equals_torchvision(setup):
    t = v2.TrivialAugmentWide(**POLICY_SETUPS[setup])
    seen = set()
    for n, (label, img) in enumerate(IMAGES):
        h, w, _ = img.shape
        op = torchvision_ops.op_of(t, h, w)
        for key in range(n * 40, n * 40 + 40):
            ours, p = _run(img, op, key)
            kind, magnitude, b, sign = int(p[0]), p[1], int(p[2]), p[3]
            name = KIND_NAMES[kind]
            seen.add(name)
            ref_m = 0.0
            if name in torchvision_ops._MAG_OPS:
                ref_m = _table_value(t, name, 31, h, w, b)
                if name not in ("Posterize", "Solarize"):
                    ref_m *= sign
                scale = 255.0 if name == "Solarize" else 1.0
                assert magnitude == scale * ref_m
            _single(t, img, ours, (name, ref_m), f"{label} key {key}")
    assert seen == set(KIND_NAMES[:14])


def _pairs(t, params: list[float], n: int, h: int, w: int, bins: int, bin_of):
    """(name, torchvision magnitude) of the C op's drawn sub-ops."""
    out = []
    for i in range(n):
        kind, magnitude = int(params[2 * i]), params[2 * i + 1]
        if kind < 0:
            continue
        name = KIND_NAMES[kind]
        ref_m = 0.0
        if name in torchvision_ops._MAG_OPS:
            ref_m = _table_value(t, name, bins, h, w, bin_of(i, params))
            if name not in ("Posterize", "Solarize") and magnitude < 0:
                ref_m = -ref_m
            scale = 255.0 if name == "Solarize" else 1.0
            assert abs(magnitude) == abs(scale * ref_m)
        out.append((name, ref_m))
    return out


def _chain_check(t, op_args, n, bins, bin_of):
    worst = np.inf
    for k, (label, img) in enumerate(IMAGES):
        h, w, _ = img.shape
        op = torchvision_ops.op_of(t, h, w)
        for key in range(k * 25, k * 25 + 25):
            ours, p = _run(img, op, key)
            subops = _pairs(t, p, n, h, w, bins, bin_of)
            if len(subops) == 1:
                _single(t, img, ours, subops[0], f"{label} key {key}")
            ref, _ = _reference(t, img, subops, exact=True)
            q = psnr(ours, ref)
            assert q >= 40, f"{label} key {key}: {subops} at {q:.1f} dB"
            worst = min(worst, q)
    return worst


def test_rand_augment_equals_torchvision():
    t = v2.RandAugment(num_ops=2, magnitude=9)
    _chain_check(t, None, 2, 31, lambda i, p: 9)


@pytest.mark.parametrize("policy", ["IMAGENET", "CIFAR10", "SVHN"])
def test_auto_augment_equals_torchvision(policy):
    t = v2.AutoAugment(v2.AutoAugmentPolicy[policy])

    def bin_of(i, p):
        return t._policies[int(p[4])][i][2]

    _chain_check(t, None, 2, 10, bin_of)


# ---- distributions ----

N_DRAWS = 20_000


def _recorded(t, n: int, h: int = 32, w: int = 32) -> list[list[tuple[str, float]]]:
    """The sub-ops torchvision's forward applies in n calls."""
    calls: list[tuple[str, float]] = []

    def record(image, transform_id, magnitude, interpolation, fill):
        calls.append((transform_id, magnitude))
        return image

    t._apply_image_or_video_transform = record
    torch.manual_seed(SEED)
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    out = []
    for _ in range(n):
        calls.clear()
        t(img)
        out.append(list(calls))
    return out


def _ours(t, n: int, h: int = 32, w: int = 32) -> list[list[float]]:
    op = torchvision_ops.op_of(t, h, w)
    return [_core.augment_draw([op], h, w, SEED, 0, key)[0] for key in range(n)]


def _label(name: str, m: float) -> tuple[str, float]:
    return name, round(m, 4)


def test_trivial_augment_distribution():
    t = v2.TrivialAugmentWide()
    theirs = [_label(*c[0]) for c in _recorded(t, N_DRAWS)]
    ours = []
    for p in _ours(v2.TrivialAugmentWide(), N_DRAWS):
        name = KIND_NAMES[int(p[0])]
        m = p[1] / 255.0 if name == "Solarize" else p[1]
        ours.append(_label(name, m))
    same_categories([n for n, _ in ours], [n for n, _ in theirs], "sub-op")
    same_categories(ours, theirs, "sub-op and signed magnitude")


def test_rand_augment_distribution():
    t = v2.RandAugment(num_ops=2, magnitude=9)
    theirs = _recorded(t, N_DRAWS)
    ours = _ours(v2.RandAugment(num_ops=2, magnitude=9), N_DRAWS)
    for i in range(2):
        a = []
        for p in ours:
            name = KIND_NAMES[int(p[2 * i])]
            m = p[2 * i + 1] / 255.0 if name == "Solarize" else p[2 * i + 1]
            a.append(_label(name, m))
        b = [_label(*c[i]) for c in theirs]
        same_categories(a, b, f"sub-op {i} and signed magnitude")


@pytest.mark.sweep
@pytest.mark.parametrize("policy", ["IMAGENET", "CIFAR10", "SVHN"])
def test_auto_augment_distribution(policy):
    t = v2.AutoAugment(v2.AutoAugmentPolicy[policy])
    theirs = [tuple(_label(*c) for c in calls) for calls in _recorded(t, N_DRAWS)]
    ours = []
    for p in _ours(v2.AutoAugment(v2.AutoAugmentPolicy[policy]), N_DRAWS):
        calls = []
        for i in range(2):
            kind = int(p[2 * i])
            if kind >= 0:
                name = KIND_NAMES[kind]
                m = p[2 * i + 1] / 255.0 if name == "Solarize" else p[2 * i + 1]
                calls.append(_label(name, m))
        ours.append(tuple(calls))
    # the applied sub-ops (what a policy and its probabilities decide), and
    # each sub-op with its signed magnitude
    same_categories(
        [tuple(n for n, _ in c) for c in ours],
        [tuple(n for n, _ in c) for c in theirs],
        "applied sub-ops",
    )
    same_categories(
        [c for cs in ours for c in cs],
        [c for cs in theirs for c in cs],
        "signed magnitudes",
    )
