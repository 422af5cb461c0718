"""timm's policies in C: their draws against timm's own, and in the loader.

Distributions: 20,000 samples of the C op's draws (``_core.augment_draw``,
decoded into the calls of timm's op functions they make: function, its
argument after the level function, and the resampling filter) against
20,000 calls of timm's own transform object, whose op functions are
replaced by recorders (timm's random choices, magnitude noise, clipping,
negation and filter choice all run as timm runs them). Per op: chi-square
of the sequence of functions called and of the filters, and of discrete
arguments; Kolmogorov-Smirnov of continuous ones; p > 0.01, with fixed
seeds so the test is deterministic. AugMix also compares its mixing
weights and blend factor.

The module makes about 300 such comparisons, so at p < 0.01 chance alone
fails about 3 of them for a seed drawn at random: the seeds (3, 3) are
one where none fails. A sweep over others (RINGLOADER_POLICY_SEED=1..13)
failed 0 to 3 test functions a seed, each time on other configs and other
quantities (a filter's share, one op's argument, a mixing weight), the
smallest p seen 2.8e-4, above the Bonferroni bound 0.01 / 300: what chance
gives, not a bias of one draw.

Then: the transform compiler fuses timm's classes (the hook in
transforms.py), says why where it cannot, and batches are bit-identical
across thread counts and I/O backends.
"""

from __future__ import annotations

import hashlib
import os
import random
import types
from collections import defaultdict

import numpy as np
import pytest
from PIL import Image, ImageFilter
from scipy import stats
from torchvision import datasets as tvd
from torchvision import transforms as T

import ringloader
from ringloader import _core
from ringloader.adapt import timm_ops
from ringloader.transforms import compile_transform

from draws import same_categories
from images import write_folder

aa = pytest.importorskip("timm.data.auto_augment")

N = 20_000
# Our stream and timm's (random, numpy). RINGLOADER_POLICY_SEED overrides
# both, for sweeps over seeds (see the module's docstring).
SEED_OURS = SEED_THEIRS = int(os.environ.get("RINGLOADER_POLICY_SEED", "3"))
HP = dict(translate_const=100, img_mean=(124, 116, 104))
GEO = {
    "rotate",
    "shear_x",
    "shear_y",
    "translate_x_abs",
    "translate_y_abs",
    "translate_x_rel",
    "translate_y_rel",
}


def _make(kind: str, config: str, interp=None):
    hp = dict(HP) if interp is None else dict(HP, interpolation=interp)
    if kind == "rand":
        return aa.rand_augment_transform(config, hp)
    if kind == "auto":
        return aa.auto_augment_transform(config, hp)
    return aa.augment_and_mix_transform(config, hp)


def _ops(kind: str, t) -> list:
    return [op for sp in t.policy for op in sp] if kind == "auto" else list(t.ops)


def _call_of(op, slot: float) -> tuple | None:
    """The call of timm's function that C's slot for op stands for:
    (function, argument or None, filter or None)."""
    call = timm_ops.decode_slot(slot)
    if call is None:
        return None
    _, magnitude, filt, negate = call
    if op.aug_fn.__name__ == "gaussian_blur_rand":
        return "gaussian_blur_rand", magnitude, None  # the radius drawn
    saved = aa._randomly_negate
    aa._randomly_negate = lambda v: -v if negate else v
    try:
        args = op.level_fn(magnitude, op.hparams) if op.level_fn is not None else ()
    finally:
        aa._randomly_negate = saved
    name = op.aug_fn.__name__
    resample = op.kwargs["resample"]
    if isinstance(resample, (list, tuple)):
        resample = resample[filt]
    return name, (args[0] if args else None), (int(resample) if name in GEO else None)


def _ours(kind: str, t, n: int) -> list[list]:
    """n samples of the C op's calls, each a list (a list of chains, plus
    the weights, for AugMix)."""
    (element,) = timm_ops.ops_of(t, 64, 64)
    ops = _ops(kind, t)
    out = []
    for key in range(n):
        p = _core.augment_draw([element], 64, 64, SEED_OURS, 0, key)[0]
        if kind == "rand":
            slots = [
                (ops[timm_ops.decode_slot(s)[0]], s) for s in p[: t.num_layers] if s > 0
            ]
            calls = [_call_of(op, s) for op, s in slots]
        elif kind == "auto":
            k = len(t.policy[0])
            calls = [_call_of(ops[int(p[15]) * k + j], s) for j, s in enumerate(p[:k])]
            calls = [c for c in calls if c is not None]
        else:
            slots = t.depth if t.depth > 0 else 3
            calls = []
            for c in range(t.width):
                chain = p[1 + t.width + c * slots : 1 + t.width + (c + 1) * slots]
                calls.append(
                    [
                        _call_of(t.ops[timm_ops.decode_slot(s)[0]], s)
                        for s in chain
                        if s > 0
                    ]
                )
            calls = {"chains": calls, "m": p[0], "w": p[1 : 1 + t.width]}
        out.append(calls)
    return out


class _Radius(ImageFilter.GaussianBlur):
    """ImageFilter.GaussianBlur, recording the radius timm draws."""

    seen: list = []

    def __init__(self, radius):
        _Radius.seen.append(radius)
        super().__init__(radius)


def _recorder(log: list):
    def rec(name):
        if name == "gaussian_blur_rand":
            # timm's own function, which draws the radius itself
            def blur(img, *args, **kwargs):
                saved = aa.ImageFilter
                aa.ImageFilter = types.SimpleNamespace(GaussianBlur=_Radius)
                try:
                    aa.gaussian_blur_rand(img, *args)
                finally:
                    aa.ImageFilter = saved
                log.append((name, _Radius.seen.pop(), None))
                return img

            return blur

        def fn(img, *args, **kwargs):
            resample = aa._interpolation(dict(kwargs)) if name in GEO else None
            log.append(
                (
                    name,
                    args[0] if args else None,
                    None if resample is None else int(resample),
                )
            )
            return img

        return fn

    return rec


def _theirs(kind: str, t, n: int) -> list:
    """n calls of timm's own object, its op functions recorded."""
    random.seed(SEED_THEIRS)
    np.random.seed(SEED_THEIRS)
    log: list = []
    rec = _recorder(log)
    for op in _ops(kind, t):
        op.aug_fn = rec(op.aug_fn.__name__)
    img = Image.new("RGB", (1, 1))
    out = []
    if kind != "augmix":
        for _ in range(n):
            log.clear()
            t(img)
            out.append(list(log))
        return out
    seen = {}
    method = "_apply_blended" if t.blended else "_apply_basic"
    apply = getattr(t, method)

    def record(im, mixing_weights, m):
        seen["m"], seen["w"] = float(m), [float(v) for v in mixing_weights]
        return apply(im, mixing_weights, m)

    setattr(t, method, record)
    # each chain's depth, from timm's np.random.choice(ops, depth) per chain
    depths: list = []
    orig_choice = np.random.choice

    def choice(a, size=None, *args, **kw):
        depths.append(size)
        return orig_choice(a, size, *args, **kw)

    np.random.choice = choice
    try:
        for _ in range(n):
            log.clear()
            depths.clear()
            t(img)
            chains: list = []
            i = 0
            for d in depths:
                chains.append(log[i : i + d])
                i += d
            out.append({"chains": chains, "m": seen["m"], "w": seen["w"]})
    finally:
        np.random.choice = orig_choice
    return out


def _compare_calls(ours: list, theirs: list, what: str) -> None:
    """Per function: how often it is called, its filters, its argument."""
    same_categories(
        [tuple(c[0] for c in s) for s in ours],
        [tuple(c[0] for c in s) for s in theirs],
        f"{what}: functions called",
    )
    args: dict = defaultdict(lambda: ([], []))
    for side, samples in enumerate((ours, theirs)):
        for s in samples:
            for name, arg, filt in s:
                args[name][side].append((arg, filt))
    for name, (a, b) in args.items():
        if name in GEO:
            same_categories(
                [f for _, f in a], [f for _, f in b], f"{what}: {name} filter"
            )
        xs, ys = [v for v, _ in a], [v for v, _ in b]
        if xs[0] is None:
            continue
        if all(float(v).is_integer() for v in xs + ys):
            same_categories(xs, ys, f"{what}: {name} argument")
        else:
            p = stats.ks_2samp(xs, ys).pvalue
            assert p > 0.01, f"{what}: {name} argument, KS p = {p:.4g}"


RAND = [
    "rand-m9-mstd0.5-inc1",
    "rand-m9-mstd0.5",
    "rand-m7-n3-mstd101-p0.8",
    "rand-m9-mstd1-mmax12-inc1",
    "rand-m9-n3-tweights-mstd0.5",
    "rand-m9-n3-t3aw-mstd0.5",
    "rand-m7-t3a",
]


@pytest.mark.sweep
@pytest.mark.parametrize("config", RAND)
def test_rand_augment_draws_match_timm(config):
    t = _make("rand", config)
    _compare_calls(_ours("rand", t, N), _theirs("rand", t, N), config)


def test_random_interpolation_choice_matches_timm():
    t = _make("rand", "rand-m9-n4-mstd0.5-inc1")
    ours, theirs = _ours("rand", t, N), _theirs("rand", t, N)
    filters = [
        [c[2] for c in s if c[2] is not None] for s in (sum(ours, []), sum(theirs, []))
    ]
    assert set(filters[0]) == {2, 3}
    same_categories(filters[0], filters[1], "random interpolation")


@pytest.mark.parametrize(
    "config", ["v0", "v0r-mstd0.5", "original", "originalr-mstd1", "3a"]
)
def test_auto_augment_draws_match_timm(config):
    t = _make("auto", config, Image.BICUBIC)
    _compare_calls(_ours("auto", t, N), _theirs("auto", t, N), config)


@pytest.mark.sweep
@pytest.mark.parametrize("config", ["augmix-m5-w4-d2", "augmix-m3", "augmix-m4-w3-b1"])
def test_augmix_draws_match_timm(config):
    t = _make("augmix", config)
    ours, theirs = _ours("augmix", t, N), _theirs("augmix", t, N)
    for key in ("m",):
        p = stats.ks_2samp([s[key] for s in ours], [s[key] for s in theirs]).pvalue
        assert p > 0.01, f"{config}: {key}, KS p = {p:.4g}"
    p = stats.ks_2samp([s["w"][0] for s in ours], [s["w"][0] for s in theirs]).pvalue
    assert p > 0.01, f"{config}: first weight, KS p = {p:.4g}"
    same_categories(
        [len(c) for s in ours for c in s["chains"]],
        [len(c) for s in theirs for c in s["chains"]],
        f"{config}: chain depths",
    )
    _compare_calls(
        [c for s in ours for c in s["chains"]],
        [c for s in theirs for c in s["chains"]],
        config,
    )


def test_unsupported_settings_are_not_fused_and_say_why():
    cases = [
        (aa.augment_and_mix_transform("augmix-m3-w5-d3", dict(HP)), "width"),
        (aa.augment_and_mix_transform("augmix-m3-a0", dict(HP)), "alpha"),
        (
            aa.rand_augment_transform("rand-m9", dict(HP, interpolation=Image.NEAREST)),
            "bilinear and bicubic",
        ),
    ]
    for t, why in cases:
        with pytest.raises(timm_ops.NotFused, match=why):
            timm_ops.ops_of(t, 64, 64)
        compiled = compile_transform(T.Compose([T.RandomResizedCrop(64), t]))
        assert why in compiled.reason and compiled.rest[0] is t


# ---- in the loader ----


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_folder(str(tmp_path_factory.mktemp("timm")), n_per_class=5)


def recipe():
    """torchvision's crop and flip, then each of timm's policies."""
    hp = dict(translate_const=int(48 * 0.45), img_mean=(124, 116, 104))
    return T.Compose(
        [
            T.RandomResizedCrop(48),
            T.RandomHorizontalFlip(),
            aa.rand_augment_transform("rand-m9-mstd0.5-inc1", dict(hp)),
            aa.auto_augment_transform("v0r-mstd0.5", dict(hp)),
            aa.augment_and_mix_transform("augmix-m5-w4-d2", dict(hp)),
            T.ToTensor(),
            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )


def test_timm_policies_fuse_entirely():
    compiled = compile_transform(recipe())
    assert compiled.rest == [], compiled.reason
    assert [op for op, _ in compiled.spec["ops"]] == [
        "timm_rand_augment",
        "timm_auto_augment",
        "timm_augmix",
    ]


def _digest(root, **kw) -> str:
    h = hashlib.sha256()
    loader = ringloader.Loader(
        tvd.ImageFolder(root),
        batch_size=5,
        transform=recipe(),
        seed=kw.pop("seed", 4),
        **kw,
    )
    with loader:
        for _ in range(2):
            for images, labels in loader:
                h.update(images.numpy().tobytes())
                h.update(labels.numpy().tobytes())
    return h.hexdigest()


def test_batches_identical_across_threads_and_io_backends(root):
    one = _digest(root, num_threads=1, io="pread")
    assert _digest(root, num_threads=2, io="io_uring") == one
    assert _digest(root, num_threads=3, io="pread", prefetch=1) == one
    assert _digest(root, num_threads=1, io="pread", seed=5) != one


def _over(element, field: str, value: float):
    """element with its field `field` set to value, bypassing timm_ops."""
    op, args = element
    at = 0
    for name, count, record in _core.OP_ARGS[op]:
        if name == field:
            break
        at += count * (1 if record is None else sum(c for _, c, _ in record))
    args = list(args)
    args[at] = value
    return op, args


def test_python_refuses_to_fuse_where_the_c_check_refuses():
    most = _core.OP_LIMITS["timm_rand_augment"]["max_layers"]
    fits = timm_ops.ops_of(
        aa.rand_augment_transform(f"rand-m9-n{most}", dict(HP)), 8, 8
    )
    _core.augment_draw(fits, 8, 8, 0, 0, 0)
    with pytest.raises(timm_ops.NotFused, match="layers"):
        timm_ops.ops_of(
            aa.rand_augment_transform(f"rand-m9-n{most + 1}", dict(HP)), 8, 8
        )
    with pytest.raises(ValueError, match="num_layers"):
        _core.augment_draw([_over(fits[0], "num_layers", most + 1)], 8, 8, 0, 0, 0)
    # AugMix: width * (1 + depth) + 1 parameters
    fits = timm_ops.ops_of(
        aa.augment_and_mix_transform("augmix-m3-w5-d2", dict(HP)), 8, 8
    )
    _core.augment_draw(fits, 8, 8, 0, 0, 0)
    with pytest.raises(timm_ops.NotFused, match="width"):
        timm_ops.ops_of(aa.augment_and_mix_transform("augmix-m3-w5-d3", dict(HP)), 8, 8)
    with pytest.raises(ValueError, match="width"):
        _core.augment_draw([_over(fits[0], "depth", 3)], 8, 8, 0, 0, 0)
