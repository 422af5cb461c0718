"""AugMix in C against torchvision.

Pixels: the C op's drawn parameters (``_core.augment_draw``) give the two
Beta weights, the chains' Dirichlet weights and each chain's sub-ops and
magnitude bins; the reference applies torchvision's own
``_apply_image_or_video_transform`` (transforms.v2 kernels, on a uint8
tensor) chain by chain with those sub-ops, at the magnitudes of the
object's own tables, and mixes the chains with the arithmetic of
torchvision's forward (float32 products and sums, truncated to uint8). The
mix is then bit-exact wherever every sub-op is: at up to 65,793 pixels,
each sub-op kernel is (tests/test_augment_color.py and
test_augment_geometry.py: the warps on x86-64, against torchvision with its
grid product in the plain float32 order, which the reference here uses), so
AugMix must give identical bytes (elsewhere 40 dB PSNR); above it a
Contrast sub-op may be 1 LSB off (torch's float32 mean), which a later
sub-op of the chain can grow, so such a sample must keep 40 dB PSNR. The
reference itself is checked against torchvision's forward run with the
very same draws. The v1 class, whose tables the op takes as they are,
follows v2's kernels like every v1 class here; against v1's own kernels
it keeps 40 dB.

Distributions: 20,000 draws of the C op against 20,000 calls of
torchvision's forward (its sub-op calls, chain depths and
``_sample_dirichlet`` outputs recorded): chi-square on depths and on
sub-ops with their signed magnitudes, Kolmogorov-Smirnov on the weights,
p > 0.01, with fixed seeds so that the test is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from torchvision import datasets as tvd
from torchvision import transforms as T
from torchvision.transforms import autoaugment as v1_autoaugment
from torchvision.transforms import v2

import ringloader
from ringloader import _core
from ringloader.adapt import torchvision_ops
from ringloader.transforms import compile_transform

import warps
from draws import same_categories
from images import KINDS, jpeg_bytes, psnr, write_folder

SEED = 7
SLOT = torchvision_ops._AUGMIX_MAX_KINDS  # sub-op codes: 1 + kind + SLOT * bin
LARGE = 65793  # pixels above which Contrast may be 1 LSB off
NEAREST = v2.InterpolationMode.NEAREST


@pytest.fixture(autouse=True)
def kernels():
    """The warps round as torch's grid sampler does on this machine (fused
    multiply-adds at its AVX2 and AVX512 levels, plain below), and the
    reference's warps make their grid in the plain float32 order on x86-64
    (warps.py: MKL's AVX-512 path, on Intel CPUs, rounds it otherwise)."""
    with warps.aligned(), warps.exact_reference():
        yield


def _same(ours: np.ndarray, ref: np.ndarray) -> int:
    """The largest difference (LSB); asserted 0 on x86-64, where the
    reference's rounding is known, else the mix keeps 40 dB."""
    diff = int(np.abs(ours.astype(int) - ref.astype(int)).max())
    if not warps.X86:
        assert psnr(ours, ref) >= 40
        return 0
    return diff


# ---- images ----


def _image(kind: str, h: int, w: int, seed: int, content: str = "photo"):
    data, hh, ww = _core.decode(jpeg_bytes(kind, h, w, seed, content))
    return np.frombuffer(data, np.uint8).reshape(hh, ww, 3)


def _images():
    out = [(kind, _image(kind, 224, 224, i)) for i, kind in enumerate(KINDS)]
    for i, (h, w) in enumerate([(37, 53), (1, 1), (2, 3), (7, 1)]):
        out.append((f"s420-{h}x{w}", _image("s420", h, w, 50 + i)))
    for content in ("lines", "screen"):
        out.append((content, _image("baseline", 96, 80, 3, content)))
    return out


IMAGES = _images()


# ---- the C op's draws, in torchvision's terms ----


def _space(t) -> list[str]:
    """The sub-ops of t's augmentation space, in the order it draws them."""
    if torchvision_ops._is_v2(t):
        space = t._AUGMENTATION_SPACE if t.all_ops else t._PARTIAL_AUGMENTATION_SPACE
        return list(space)
    return list(t._augmentation_space(t._PARAMETER_MAX, (8, 8)))


def _table(t, name: str, h: int, w: int):
    """The magnitudes t's forward indexes for sub-op name (None: none)."""
    if torchvision_ops._is_v2(t):
        entry = t._AUGMENTATION_SPACE[name]
        return entry[0](t._PARAMETER_MAX, h, w), entry[1]
    values, signed = t._augmentation_space(t._PARAMETER_MAX, (h, w))[name]
    return (values if values.ndim > 0 else None), signed


def _slots(t) -> int:
    return t.chain_depth if t.chain_depth > 0 else 3


def _decode(t, op, params: list[float], h: int, w: int):
    """(m0, m1, d, chains): the Beta pair, the chains' Dirichlet weights and
    each chain's (name, magnitude) as torchvision's forward passes them to
    its sub-op (signed; v2's Solarize as a fraction of 255). Checks the op's
    magnitude table against the object's own."""
    width, slots, names = t.mixture_width, _slots(t), _space(t)
    args = op[1]
    chains = []
    for c in range(width):
        codes = params[2 + width + c * slots : 2 + width + (c + 1) * slots]
        depth = sum(1 for v in codes if v != 0)
        assert all(v != 0 for v in codes[:depth]), codes
        if t.chain_depth > 0:
            assert depth == t.chain_depth
        else:
            assert 1 <= depth <= 3
        subs = []
        for code in codes[:depth]:
            k, b = (int(abs(code)) - 1) % SLOT, (int(abs(code)) - 1) // SLOT
            name = names[k]
            values, signed = _table(t, name, h, w)
            magnitude = 0.0
            if values is not None:
                assert b < t.severity
                magnitude = float(values[b])
                scale = (
                    255.0 if torchvision_ops._is_v2(t) and name == "Solarize" else 1.0
                )
                assert args[9 + k * 13 + 3 + b] == scale * magnitude
            else:
                assert b == 0
            if code < 0:
                assert signed, name
                magnitude *= -1
            subs.append((name, magnitude))
        chains.append(subs)
    return params[0], params[1], list(params[2 : 2 + width]), chains


def _draw(t, op, h: int, w: int, key: int):
    params = _core.augment_draw([op], h, w, SEED, 0, key)[0]
    return _decode(t, op, params, h, w)


def _ours(img: np.ndarray, op, key: int) -> np.ndarray:
    h, w, _ = img.shape
    out = _core.augment(img.tobytes(), h, w, [op], SEED, 0, key)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3)


# ---- the reference ----


def _v2_kernels(t):
    """The object whose _apply_image_or_video_transform runs the sub-ops:
    t itself, or for a v1 class a v2 AugMix with its interpolation and
    fill (ringloader follows v2's kernels for both)."""
    return (
        t
        if torchvision_ops._is_v2(t)
        else v2.AugMix(interpolation=t.interpolation, fill=t.fill)
    )


def _sub_op(t, x: torch.Tensor, name: str, magnitude: float) -> torch.Tensor:
    if not torchvision_ops._is_v2(t) and name == "Solarize":
        # the v1 table holds thresholds in pixel values
        return v2.functional.solarize(x, threshold=magnitude)
    k = _v2_kernels(t)
    # the class's method: tests may patch the instance's
    return type(k)._apply_image_or_video_transform(
        k, x, name, magnitude, interpolation=k.interpolation, fill=k._fill
    )


def _mix(batch, m0: float, m1: float, d: list[float], augs) -> torch.Tensor:
    """torchvision's forward's mix: float32 throughout, then .to(uint8)."""
    m = torch.tensor([[m0, m1]], dtype=torch.float32)
    weights = torch.tensor([d], dtype=torch.float32) * m[:, 1].reshape([1, -1])
    dims = [1, 1, 1, 1]
    mix = m[:, 0].reshape(dims) * batch
    for i, aug in enumerate(augs):
        mix.add_(weights[:, i].reshape(dims) * aug)
    return mix.to(torch.uint8)


def _reference(t, img: np.ndarray, draw) -> np.ndarray:
    m0, m1, d, chains = draw
    batch = torch.from_numpy(img.copy()).permute(2, 0, 1).unsqueeze(0).contiguous()
    augs = []
    for subs in chains:
        aug = batch
        for name, magnitude in subs:
            aug = _sub_op(t, aug, name, magnitude)
        augs.append(aug)
    return _mix(batch, m0, m1, d, augs)[0].permute(1, 2, 0).numpy()


def _forward_with(t, img: np.ndarray, draw, monkeypatch, apply=None) -> np.ndarray:
    """torchvision's own forward on img, made to take the C op's draws: its
    _sample_dirichlet returns our weights, its depth draws our depths, and
    each sub-op call runs ours in its place (through apply(image, name,
    magnitude), by default the v2 kernels)."""
    m0, m1, d, chains = draw
    dirichlets = [torch.tensor([[m0, m1]]), torch.tensor([d])]
    depths = [len(c) for c in chains]
    flat = [s for c in chains for s in c]
    randint = torch.randint

    def fake_randint(*args, **kw):
        if kw.get("low") == 1 and kw.get("high") == 4:
            return torch.tensor([depths.pop(0)])
        return randint(*args, **kw)

    def sub_op(image, *_args, **_kw):
        name, magnitude = flat.pop(0)
        return (apply or (lambda x, n, m: _sub_op(t, x, n, m)))(image, name, magnitude)

    with monkeypatch.context() as mp:
        mp.setattr(t, "_sample_dirichlet", lambda p: dirichlets.pop(0))
        mp.setattr(torch, "randint", fake_randint)
        if torchvision_ops._is_v2(t):
            mp.setattr(t, "_apply_image_or_video_transform", sub_op)
        else:
            mp.setattr(v1_autoaugment, "_apply_op", sub_op)
        out = t(torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous())
    assert not flat and not dirichlets
    return out.permute(1, 2, 0).numpy()


# ---- pixels ----

CONFIGS = {
    "v2-default": lambda: v2.AugMix(),
    "v2-nearest-fill-partial-depth2": lambda: v2.AugMix(
        severity=10,
        chain_depth=2,
        all_ops=False,
        interpolation=NEAREST,
        fill=[30, 60, 90],
    ),
    "v2-bilinear-fill-width1-depth1": lambda: v2.AugMix(
        severity=10, mixture_width=1, chain_depth=1, alpha=0.5, fill=128
    ),
    "v2-width2-depth6": lambda: v2.AugMix(severity=7, mixture_width=2, chain_depth=6),
    "v1-default": lambda: T.AugMix(),
    "v1-partial-nearest-fill": lambda: T.AugMix(
        severity=6,
        mixture_width=4,
        chain_depth=2,
        all_ops=False,
        interpolation=T.InterpolationMode.NEAREST,
        fill=[10, 20, 30],
    ),
}
KEYS = 8


@pytest.mark.parametrize("config", list(CONFIGS))
def test_augmix_equals_torchvision_with_the_drawn_parameters(config):
    t = CONFIGS[config]()
    seen, depths, cases = set(), set(), 0
    for n, (label, img) in enumerate(IMAGES):
        h, w, _ = img.shape
        op = torchvision_ops.op_of(t, h, w)
        for key in range(n * KEYS, (n + 1) * KEYS):
            draw = _draw(t, op, h, w, key)
            ours, ref = _ours(img, op, key), _reference(t, img, draw)
            diff = _same(ours, ref)
            assert diff == 0, f"{label} key {key}: {diff} LSB, {draw}"
            seen |= {name for c in draw[3] for name, _ in c}
            depths |= {len(c) for c in draw[3]}
            cases += 1
    assert seen == set(_space(t)), seen
    assert depths == ({t.chain_depth} if t.chain_depth > 0 else {1, 2, 3})
    assert cases == len(IMAGES) * KEYS


def test_augmix_large_image_within_tolerance():
    """Above 65,793 pixels a Contrast sub-op may be 1 LSB off; without one
    the mix stays identical."""
    t = v2.AugMix()
    img = _image("s444", 300, 260, 9)
    op = torchvision_ops.op_of(t, 300, 260)
    worst, with_contrast = np.inf, 0
    for key in range(24):
        draw = _draw(t, op, 300, 260, key)
        ours, ref = _ours(img, op, key), _reference(t, img, draw)
        if any(name == "Contrast" for c in draw[3] for name, _ in c):
            with_contrast += 1
            q = psnr(ours, ref)
            assert q >= 40, f"key {key}: {q:.1f} dB, {draw}"
            worst = min(worst, q)
        else:
            assert _same(ours, ref) == 0, f"key {key}: {draw}"
    assert with_contrast > 0
    print(f"{with_contrast} samples with Contrast: worst {worst:.1f} dB")


@pytest.mark.parametrize("config", ["v2-default", "v2-nearest-fill-partial-depth2"])
def test_reference_is_torchvisions_forward(config, monkeypatch):
    """The reference's mix is torchvision's forward's, to the bit."""
    t = CONFIGS[config]()
    for n, (label, img) in enumerate(IMAGES[::3]):
        h, w, _ = img.shape
        op = torchvision_ops.op_of(t, h, w)
        for key in range(n * 4, n * 4 + 4):
            draw = _draw(t, op, h, w, key)
            ref = _reference(t, img, draw)
            fwd = _forward_with(t, img, draw, monkeypatch)
            assert np.array_equal(ref, fwd), f"{label} key {key}"
            assert _same(_ours(img, op, key), fwd) == 0, f"{label} key {key}"


@pytest.mark.parametrize("config", ["v1-default", "v1-partial-nearest-fill"])
def test_v1_class_against_its_own_kernels(config, monkeypatch):
    """The v1 class's forward with v1's own sub-op kernels (which differ a
    little from v2's that ringloader follows) and the same draws."""
    t = CONFIGS[config]()
    own = v1_autoaugment._apply_op
    fill = None if t.fill is None else [float(f) for f in t.fill]

    def apply(x, name, magnitude):
        return own(x, name, magnitude, interpolation=t.interpolation, fill=fill)

    worst = np.inf
    for n, (label, img) in enumerate(IMAGES):
        h, w, _ = img.shape
        op = torchvision_ops.op_of(t, h, w)
        for key in range(n * 4, n * 4 + 4):
            draw = _draw(t, op, h, w, key)
            ref = _forward_with(t, img, draw, monkeypatch, apply)
            q = psnr(_ours(img, op, key), ref)
            assert q >= 40, f"{label} key {key}: {q:.1f} dB, {draw}"
            worst = min(worst, q)
    print(f"{config} against v1's kernels: worst {worst:.1f} dB")


def test_mixture_width_zero_is_the_scaled_image():
    t = v2.AugMix(mixture_width=0)
    label, img = IMAGES[0]
    op = torchvision_ops.op_of(t, 224, 224)
    for key in range(5):
        draw = _draw(t, op, 224, 224, key)
        assert draw[3] == []
        assert _same(_ours(img, op, key), _reference(t, img, draw)) == 0


@pytest.mark.parametrize(
    "t,why",
    [
        (v2.AugMix(mixture_width=4), "mixture_width=4"),
        (v2.AugMix(mixture_width=7, chain_depth=2), "mixture_width=7"),
        (v2.AugMix(chain_depth=10), "chain_depth=10"),
        (v2.AugMix(alpha=0.0), "alpha"),
        (v2.AugMix(interpolation=v2.InterpolationMode.BICUBIC), "bicubic"),
    ],
)
def test_unfusable_augmix_settings_say_why(t, why):
    with pytest.raises(torchvision_ops.NotFused, match=why):
        torchvision_ops.op_of(t, 32, 32)


def test_v1_and_v2_augmix_map_to_the_same_op():
    for kw in ({}, dict(severity=10, all_ops=False, chain_depth=2, fill=[1, 2, 3])):
        one, two = (
            torchvision_ops.op_of(T.AugMix(**kw), 48, 40),
            torchvision_ops.op_of(v2.AugMix(**kw), 48, 40),
        )
        assert one[0] == two[0] == "augmix"
        assert np.allclose(one[1], two[1], equal_nan=True), (one, two)


# ---- distributions ----

N_DRAWS = 20_000
H = W = 32


def _recorded(t, n: int):
    """n calls of torchvision's forward on an H x W image: per call, the
    (m0, m1) and d its _sample_dirichlet returned and each chain's sub-op
    calls (name, magnitude)."""
    out = []
    state: dict = {}
    sample = t._sample_dirichlet
    randint = torch.randint

    def dirichlet(p):
        v = sample(p)
        state["weights"].append(v[0].tolist())
        return v

    def depth_draw(*args, **kw):
        v = randint(*args, **kw)
        if kw.get("low") == 1 and kw.get("high") == 4:
            state["chains"].append([])
        return v

    def sub_op(image, name, magnitude, *args, **kw):
        if t.chain_depth > 0 and (
            not state["chains"] or len(state["chains"][-1]) == t.chain_depth
        ):
            state["chains"].append([])
        state["chains"][-1].append((name, magnitude))
        return image

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(t, "_sample_dirichlet", dirichlet)
        mp.setattr(torch, "randint", depth_draw)
        if torchvision_ops._is_v2(t):
            mp.setattr(t, "_apply_image_or_video_transform", sub_op)
        else:
            mp.setattr(v1_autoaugment, "_apply_op", sub_op)
        torch.manual_seed(SEED)
        img = torch.zeros(3, H, W, dtype=torch.uint8)
        for _ in range(n):
            state["weights"], state["chains"] = [], []
            t(img)
            (m0, m1), d = state["weights"]
            out.append((m0, m1, d, state["chains"]))
    finally:
        mp.undo()
    return out


def _drawn(t, n: int):
    op = torchvision_ops.op_of(t, H, W)
    return [_draw(t, op, H, W, key) for key in range(n)]


def _ks(a: list, b: list, what: str) -> float:
    p = stats.ks_2samp(a, b).pvalue
    assert p > 0.01, f"{what}: p = {p:.4g}"
    return p


DIST_CONFIGS = {
    "v2-default": lambda: v2.AugMix(),
    "v2-partial-depth2-alpha0.3": lambda: v2.AugMix(
        severity=10, mixture_width=2, chain_depth=2, alpha=0.3, all_ops=False
    ),
    "v1-severity5-alpha2.5": lambda: T.AugMix(severity=5, alpha=2.5),
}


@pytest.mark.sweep
@pytest.mark.parametrize("config", list(DIST_CONFIGS))
def test_augmix_distribution(config):
    t = DIST_CONFIGS[config]()
    theirs = _recorded(t, N_DRAWS)
    ours = _drawn(DIST_CONFIGS[config](), N_DRAWS)
    ps = {}

    def label(name, m):
        return name, round(m, 4)

    # the weights: Beta(alpha, alpha) for the original, and each chain's
    # Dirichlet share, alone and times m1
    ps["m0"] = _ks([o[0] for o in ours], [o[0] for o in theirs], "m0")
    width = t.mixture_width
    for i in sorted({0, width - 1}):
        ps[f"d{i}"] = _ks([o[2][i] for o in ours], [o[2][i] for o in theirs], f"d{i}")
        ps[f"w{i}"] = _ks(
            [o[2][i] * o[1] for o in ours], [o[2][i] * o[1] for o in theirs], f"w{i}"
        )
    # the chains' depths, and every sub-op with its signed magnitude
    ps["depth"] = same_categories(
        [len(c) for o in ours for c in o[3]],
        [len(c) for o in theirs for c in o[3]],
        "depth",
    )
    ps["sub-op"] = same_categories(
        [label(*s) for o in ours for c in o[3] for s in c],
        [label(*s) for o in theirs for c in o[3] for s in c],
        "sub-op and signed magnitude",
    )
    ps["first"] = same_categories(
        [label(*o[3][0][0]) for o in ours],
        [label(*o[3][0][0]) for o in theirs],
        "chain 0's first sub-op",
    )
    print(config, {k: round(v, 3) for k, v in ps.items()})


# ---- the loader ----


def test_augmix_in_the_loader(tmp_path):
    """RandomResizedCrop + AugMix compile entirely, and each sample of the
    loader is AugMix of the loader's sample without it, with its draws."""
    root = write_folder(str(tmp_path), n_per_class=3)
    crop = v2.RandomResizedCrop(64)
    tf = v2.Compose([crop, v2.AugMix(), v2.ToImage()])
    compiled = compile_transform(tf)
    assert compiled.rest == [], compiled.reason

    def first_epoch(transform):
        loader = ringloader.Loader(
            tvd.ImageFolder(root), batch_size=4, transform=transform, seed=SEED
        )
        with loader:
            batches = [images for images, _ in loader]
        assert all(
            b.dtype == torch.uint8 and b.shape[1:] == (3, 64, 64) for b in batches
        )
        return torch.cat(batches)

    ours = first_epoch(tf)
    plain = first_epoch(v2.Compose([crop, v2.ToImage()]))
    assert len(ours) == 9
    t = v2.AugMix()
    (op,) = compiled.spec["ops"]
    for key in range(len(plain)):
        draw = _draw(t, op, 64, 64, key)
        ref = _reference(t, plain[key].permute(1, 2, 0).numpy(), draw)
        assert _same(ours[key].permute(1, 2, 0).numpy(), ref) == 0, key
