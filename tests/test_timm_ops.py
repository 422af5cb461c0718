"""timm's augmentations in C against timm's own ops, on the same PIL image.

Each of timm's op functions (``timm.data.auto_augment``: ``rotate``,
``posterize``, ``color``, ...) with the same argument, resampling filter
and fill colour, run by the C op ``timm_op`` on the decoded image and by
timm on that image as a PIL image, on every JPEG kind the augment tests use
and odd and tiny sizes. Tolerances, per op (what was seen here, x86-64:
identical bytes for every op):

- integer ops (auto_contrast, equalize, invert, posterize, solarize,
  solarize_add): identical;
- enhance ops (color, contrast, brightness, sharpness, desaturate) and
  gaussian_blur: within 1 LSB (Pillow blends in float32, and computes the
  blur's box radius in float32: a compiler that fuses a multiply-add may
  move a value across a truncation);
- geometric ops (rotate, shear, translate, bilinear and bicubic): within
  1 LSB or at least 40 dB (a sample point on the image's edge may fall in
  or out with a fused multiply-add, taking the fill colour).

Then whole policies: the parameters the C op draws for a sample
(``_core.augment_draw``, decoded by ``timm_ops.decode_slot``) handed to
timm's own AugmentOps (their level functions, negation and filter forced
to the drawn ones), and AugMix's mix computed as timm computes it: at
least 40 dB or within 1 LSB.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from ringloader import _core
from ringloader.adapt import timm_ops

from images import KINDS, jpeg_bytes, psnr

aa = pytest.importorskip("timm.data.auto_augment")

FILL = (124, 116, 104)
SIZES = [(37, 53), (1, 1), (2, 3), (7, 1), (3, 3)]

INTEGER = {
    "auto_contrast": [0],
    "equalize": [0],
    "invert": [0],
    "posterize": [1, 2, 3, 4, 7, 8],
    "solarize": [0, 1, 100, 128, 255, 256],
    "solarize_add": [0, 30, 110, 128],
}
ENHANCE = {
    "color": [0.1, 0.55, 1.0, 1.7],
    "contrast": [0.1, 0.6, 1.9],
    "brightness": [0.1, 0.8, 1.9],
    "sharpness": [0.1, 0.5, 1.9],
    "desaturate": [0.0, 0.3, 1.0],
    "gaussian_blur": [0.0, 0.1, 0.5, 1.37, 2.0],
}
GEOMETRIC = {
    "rotate": [-27.3, 0.0, 12.7, 30.0, 90.0, 180.0, -90.0],
    "shear_x": [-0.3, 0.21],
    "shear_y": [-0.17, 0.3],
    "translate_x_abs": [-40.5, 33.0],
    "translate_y_abs": [25.25, -3.0],
    "translate_x_rel": [0.3, -0.45],
    "translate_y_rel": [-0.41, 0.1],
}
GEO = set(GEOMETRIC)


def _decoded(kind: str, h: int, w: int, seed: int, content: str = "photo"):
    data, hh, ww = _core.decode(jpeg_bytes(kind, h, w, seed=seed, content=content))
    return np.frombuffer(data, np.uint8).reshape(hh, ww, 3)


def _images():
    out = [(kind, _decoded(kind, 96, 80, i)) for i, kind in enumerate(KINDS)]
    out += [
        (f"s420-{h}x{w}", _decoded("s420", h, w, 40 + i))
        for i, (h, w) in enumerate(SIZES)
    ]
    out += [(c, _decoded("baseline", 64, 72, 3, c)) for c in ("lines", "screen")]
    return out


IMAGES = _images()


def _ours(a: np.ndarray, elements, seed=0, key=0) -> np.ndarray:
    h, w, _ = a.shape
    out = _core.augment(a.tobytes(), h, w, elements, seed, 0, key)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3)


def _timm_func(a: np.ndarray, func: str, arg: float, resample: int) -> np.ndarray:
    im = Image.fromarray(a)
    fn = getattr(aa, func)
    if func in ("auto_contrast", "equalize", "invert"):
        return np.asarray(fn(im))
    if func in GEO:
        return np.asarray(fn(im, arg, resample=resample, fillcolor=FILL))
    return np.asarray(fn(im, arg))


def _check(ours, ref, func, where):
    d = np.abs(ours.astype(int) - ref.astype(int))
    if func in INTEGER:
        assert d.max() == 0, f"{where}: {d.max()} LSB at {(d > 0).sum()} values"
    elif func in ENHANCE:
        assert d.max() <= 1, f"{where}: {d.max()} LSB"
    else:
        assert d.max() <= 1 or psnr(ours, ref) >= 40, (
            f"{where}: {psnr(ours, ref):.1f} dB"
        )


CASES = [
    (f, v)
    for table in (INTEGER, ENHANCE, GEOMETRIC)
    for f, vs in table.items()
    for v in vs
]


@pytest.mark.parametrize("func,arg", CASES, ids=[f"{f}-{v}" for f, v in CASES])
def test_each_op_equals_timms_own_op(func, arg):
    filters = (2, 3) if func in GEO else (3,)
    for name, a in IMAGES:
        for resample in filters:
            ours = _ours(a, [timm_ops.timm_op(func, arg, resample, FILL)])
            ref = _timm_func(a, func, arg, resample)
            _check(ours, ref, func, f"{func}({arg}, resample={resample}) on {name}")


def test_posterize_to_zero_bits_is_black_as_pillow_before_13_gave():
    """timm's RandAugment draws posterize to 0 bits; Pillow 13 refuses it
    (it checks bits), older Pillow gave a black image: so do we."""
    _, a = IMAGES[0]
    ours = _ours(a, [timm_ops.timm_op("posterize", 0)])
    assert not ours.any()


# ---- whole policies, with the drawn parameters ----


def _reference_call(t_ops, slot: float, im: Image.Image, monkeypatch) -> Image.Image:
    """timm's AugmentOp for one drawn slot, its magnitude, negation and
    filter forced to the drawn ones."""
    call = timm_ops.decode_slot(slot)
    if call is None:
        return im
    row, magnitude, filt, negate = call
    op = t_ops[row]
    monkeypatch.setattr(aa, "_randomly_negate", lambda v: -v if negate else v)
    args = op.level_fn(magnitude, op.hparams) if op.level_fn is not None else ()
    kwargs = dict(op.kwargs)
    resample = kwargs["resample"]
    kwargs["resample"] = (
        resample[filt] if isinstance(resample, (list, tuple)) else resample
    )
    if op.aug_fn is aa.gaussian_blur_rand:
        return aa.gaussian_blur(im, magnitude)  # the slot holds the radius
    if op.aug_fn is aa.posterize and args[0] <= 0:
        return Image.new("RGB", im.size)  # Pillow before 13
    return op.aug_fn(im, *args, **kwargs)


HP = dict(translate_const=30, img_mean=FILL)
POLICIES = [
    ("rand", "rand-m9-mstd0.5-inc1"),
    ("rand", "rand-m9-mstd0.5"),
    ("rand", "rand-m7-n3-mstd101-p0.8-mmax12"),
    ("rand", "rand-m9-n2-tweights-mstd0.5"),
    ("rand", "rand-m9-n3-t3aw-mstd0.5"),
    ("auto", "3a"),
    ("auto", "v0"),
    ("auto", "v0r-mstd0.5"),
    ("auto", "original"),
    ("auto", "originalr"),
]


def _make(kind: str, config: str, hp: dict):
    hp = dict(hp)
    if kind == "rand":
        return aa.rand_augment_transform(config, hp)
    if kind == "auto":
        return aa.auto_augment_transform(config, hp)
    return aa.augment_and_mix_transform(config, hp)


@pytest.mark.parametrize("interp", ["random", "bicubic"])
@pytest.mark.parametrize("kind,config", POLICIES, ids=[c for _, c in POLICIES])
def test_policy_equals_timm_with_the_drawn_parameters(
    kind, config, interp, monkeypatch
):
    hp = dict(HP) if interp == "random" else dict(HP, interpolation=Image.BICUBIC)
    t = _make(kind, config, hp)
    (element,) = timm_ops.ops_of(t, 96, 80)
    ops = [op for sp in t.policy for op in sp] if kind == "auto" else list(t.ops)
    for key, (name, a) in enumerate(IMAGES):
        h, w, _ = a.shape
        for rep in range(3):
            k = key * 10 + rep
            params = _core.augment_draw([element], h, w, 7, 0, k)[0]
            n = t.num_layers if kind == "rand" else len(t.policy[0])
            im = Image.fromarray(a)
            for slot in params[:n]:
                im = _reference_call(ops, slot, im, monkeypatch)
            ours, ref = _ours(a, [element], 7, k), np.asarray(im)
            d = np.abs(ours.astype(int) - ref.astype(int)).max()
            assert d <= 1 or psnr(ours, ref) >= 40, f"{config} sample {k} on {name}"


@pytest.mark.parametrize(
    "config",
    ["augmix-m5-w4-d2", "augmix-m3-mstd0.5", "augmix-m9-w2-a0.5", "augmix-m5-w3-d2-b1"],
)
def test_augmix_equals_timm_with_the_drawn_parameters(config, monkeypatch):
    t = aa.augment_and_mix_transform(config, dict(HP))
    (element,) = timm_ops.ops_of(t, 96, 80)
    slots = t.depth if t.depth > 0 else 3
    for key, (name, a) in enumerate(IMAGES):
        h, w, _ = a.shape
        p = _core.augment_draw([element], h, w, 9, 0, key)[0]
        m, weights = np.float32(p[0]), np.float32(p[1 : 1 + t.width])
        img = Image.fromarray(a)
        chains = []
        for c in range(t.width):
            aug = img
            for slot in p[1 + t.width + c * slots : 1 + t.width + (c + 1) * slots]:
                aug = _reference_call(t.ops, slot, aug, monkeypatch)
            chains.append(aug)
        if t.blended:
            # timm's AugMixAugment._apply_blended, the draws replaced by ours
            out = img
            for aug, wb in zip(chains, t._calc_blended_weights(weights, m)):
                out = Image.blend(out, aug, wb)
            ref = np.asarray(out)
        else:
            # timm's AugMixAugment._apply_basic, the draws replaced by ours
            mixed = np.zeros_like(img, dtype=np.float32)
            for aug, mw in zip(chains, weights):
                mixed += mw * np.asarray(aug, dtype=np.float32)
            np.clip(mixed, 0, 255.0, out=mixed)
            mixed_img = Image.fromarray(mixed.astype(np.uint8))
            ref = np.asarray(Image.blend(img, mixed_img, m))
        ours = _ours(a, [element], 9, key)
        d = np.abs(ours.astype(int) - ref.astype(int)).max()
        assert d <= 1 or psnr(ours, ref) >= 40, f"{config} on {name}: {d} LSB"
