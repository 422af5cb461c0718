"""The detection ops' random parameters drawn in C (targets/draws.h) against
torchvision.transforms.v2's own make_params: 20,000 draws a side, a
chi-square test for categories and a two-sample KS test for numbers (p >
0.01, fixed seeds, so the outcome is the same on every run), and the
invariants each draw must meet."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from draws import same_categories
from scipy import stats
from torchvision import tv_tensors
from torchvision.transforms import v2 as T

from ringloader import _core

N = 20_000
SEED = 1234


def same_numbers(a, b, what: str) -> float:
    """Two-sample KS test; asserts p > 0.01 and returns p."""
    p = stats.ks_2samp(np.asarray(a, float), np.asarray(b, float)).pvalue
    assert p > 0.01, f"{what}: p = {p:.4g}"
    return p


def ours(fn, canvas, n=N, **kw):
    return [fn(canvas, seed=SEED, epoch=0, index=i, **kw) for i in range(n)]


def image(canvas, channels=1):
    return tv_tensors.Image(torch.zeros(channels, *canvas, dtype=torch.uint8))


def f32(x):
    return np.float32(x)


def both(fn, cls, canvas, kw, channels=None):
    """Our N draws and torchvision's N make_params on one image (of
    `channels` channels, passed to ours when given)."""
    extra = {} if channels is None else {"channels": channels}
    got = ours(fn, canvas, **kw, **extra)
    torch.manual_seed(SEED)
    t = cls(**kw)
    img = image(canvas, channels or 1)
    return got, [t.make_params([img]) for _ in range(N)]


def cases(argnames, settings):
    """parametrize over settings, each named by its first item."""
    return pytest.mark.parametrize(argnames, settings, ids=[s[0] for s in settings])


# ---- RandomIoUCrop ----


def random_images(count, canvas, sides, seed):
    """count lists of 1..4 random XYXY boxes on canvas (height, width), their
    sides the fractions `sides` (lo, hi) of the canvas'."""
    rng = np.random.default_rng(seed)
    h, w = canvas
    out = []
    for _ in range(count):
        k = int(rng.integers(1, 5))
        bw = rng.uniform(*sides, k) * w
        bh = rng.uniform(*sides, k) * h
        x0 = rng.uniform(0, w - bw)
        y0 = rng.uniform(0, h - bh)
        out.append(np.stack([x0, y0, x0 + bw, y0 + bh], 1))
    return out


def box_iou(b, crop):
    left, top, right, bottom = crop
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    area_c = (right - left) * (bottom - top)
    w = np.clip(np.minimum(b[:, 2], right) - np.maximum(b[:, 0], left), 0, None)
    h = np.clip(np.minimum(b[:, 3], bottom) - np.maximum(b[:, 1], top), 0, None)
    return w * h / (area_b + area_c - w * h)


IOU_SETTINGS = [
    ("defaults", (480, 640), (0.3, 0.95), {}),
    (
        "narrow",
        (301, 207),
        (0.4, 0.9),
        dict(
            min_scale=0.5,
            max_scale=0.9,
            min_aspect_ratio=0.7,
            max_aspect_ratio=1.6,
            sampler_options=[0.1, 0.3, 0.5],
            trials=10,
        ),
    ),
    ("small", (37, 29), (0.1, 0.9), dict(sampler_options=[0.0, 0.3, 2.0], trials=5)),
]


@pytest.mark.sweep
@cases("name,canvas,sides,kw", IOU_SETTINGS)
def test_iou_crop_matches_torchvision(name, canvas, sides, kw):
    imgs = random_images(16, canvas, sides, seed=7)
    got = [
        _core.detect_draw_iou_crop(canvas, imgs[i % 16].tolist(), SEED, 0, i, **kw)
        for i in range(N)
    ]
    torch.manual_seed(SEED)
    t = T.RandomIoUCrop(**kw)
    img = image(canvas)
    bbs = [
        tv_tensors.BoundingBoxes(torch.from_numpy(b), format="XYXY", canvas_size=canvas)
        for b in imgs
    ]
    want = [t.make_params([img, bbs[i % 16]]) for i in range(N)]

    h, w = canvas
    opts = kw.get("sampler_options", [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0])
    lo, hi = kw.get("min_scale", 0.3), kw.get("max_scale", 1.0)
    ar_lo = kw.get("min_aspect_ratio", 0.5)
    ar_hi = kw.get("max_aspect_ratio", 2.0)
    for i, d in enumerate(got):
        assert d["option"] in opts and not d["limited"]
        assert d["rounds"] >= 1
        if d["crop"] is None:
            assert d["option"] >= 1.0
            continue
        top, left, ch, cw = d["crop"]
        assert d["option"] < 1.0
        assert int(w * f32(lo)) - 1 <= cw <= w * hi and 1 <= cw
        assert int(h * f32(lo)) - 1 <= ch <= h * hi and 1 <= ch
        assert ar_lo <= cw / ch <= ar_hi
        assert 0 <= left <= w - cw and 0 <= top <= h - ch
        b = imgs[i % 16]
        cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
        inside = (left < cx) & (cx < left + cw) & (top < cy) & (cy < top + ch)
        assert inside.any(), (i, d)
        crop = (left, top, left + cw, top + ch)
        assert box_iou(b[inside], crop).max() >= d["option"], (i, d)

    same_categories(
        [d["crop"] is None for d in got], [not p for p in want], f"{name}: cropped"
    )
    crops = [d["crop"] for d in got if d["crop"]]
    tv = [(p["top"], p["left"], p["height"], p["width"]) for p in want if p]
    for k, what in enumerate(["top", "left", "height", "width"]):
        same_numbers([c[k] for c in crops], [c[k] for c in tv], f"{name}: {what}")


def test_iou_crop_limit_without_boxes():
    """No box: torchvision would loop until it drew an option >= 1.0; with
    none in the list the draw stops at the documented limit, uncropped."""
    d = _core.detect_draw_iou_crop((64, 64), [], 1, 0, 0, sampler_options=[0.5])
    assert d == {"crop": None, "option": 0.5, "rounds": 1000, "limited": True}
    d = _core.detect_draw_iou_crop((64, 64), [], 1, 0, 0)
    assert d["crop"] is None and d["option"] >= 1.0 and not d["limited"]


# ---- RandomZoomOut ----


ZOOM_SETTINGS = [
    ("defaults", (480, 640), {}),
    ("narrow", (37, 53), dict(side_range=(1.0, 1.5), p=0.3)),
    ("always", (100, 7), dict(side_range=(2.0, 2.0), p=1.0)),
]


def zoom_draws(canvas, kw, seed=SEED, n=N):
    """n of torchvision's RandomZoomOut draws on an image of size canvas
    through its p gate: (the make_params seen, whether each applied)."""
    torch.manual_seed(seed)
    t = T.RandomZoomOut(**kw)
    seen = []
    make = t.make_params
    t.make_params = lambda flat: seen.append(make(flat)) or seen[-1]
    t.transform = lambda inpt, params: inpt
    img = image(canvas)
    applied = []
    for _ in range(n):
        before = len(seen)
        t(img)
        applied.append(len(seen) > before)
    return seen, applied


@cases("name,canvas,kw", ZOOM_SETTINGS)
def test_zoom_out_matches_torchvision(name, canvas, kw):
    got = ours(_core.detect_draw_zoom_out, canvas, **kw)
    seen, applied = zoom_draws(canvas, kw)

    h, w = canvas
    side = kw.get("side_range", (1.0, 4.0))
    for d in got:
        if not d["applied"]:
            assert d["padding"] is None
            continue
        r = f32(d["ratio"])
        assert side[0] <= r <= side[1]
        ch, cw = d["canvas"]
        assert (cw, ch) == (int(f32(w) * r), int(f32(h) * r))
        left, top, right, bottom = d["padding"]
        assert min(d["padding"]) >= 0
        assert left + w + right == cw and top + h + bottom == ch

    if kw.get("p", 0.5) < 1:
        same_categories([d["applied"] for d in got], applied, f"{name}: applied")
    else:
        assert all(d["applied"] for d in got) and all(applied)
    pads = [d["padding"] for d in got if d["applied"]]
    tv = [p["padding"] for p in seen]
    for k, what in enumerate(["left", "top", "right", "bottom"]):
        same_numbers([x[k] for x in pads], [x[k] for x in tv], f"{name}: {what}")
    same_numbers(
        [x[0] + x[2] for x in pads], [x[0] + x[2] for x in tv], f"{name}: width"
    )


# ---- ScaleJitter ----


JITTER_SETTINGS = [
    ("lsj", (480, 640), dict(target_size=(1024, 1024))),
    ("ssj", (333, 500), dict(target_size=(512, 768), scale_range=(0.8, 1.25))),
    ("tiny", (9, 700), dict(target_size=(64, 32), scale_range=(0.01, 0.3))),
]


@cases("name,canvas,kw", JITTER_SETTINGS)
def test_scale_jitter_matches_torchvision(name, canvas, kw):
    got, want = both(_core.detect_draw_scale_jitter, T.ScaleJitter, canvas, kw)
    want = [p["size"] for p in want]

    h, w = canvas
    lo, hi = kw.get("scale_range", (0.1, 2.0))
    base = min(kw["target_size"][1] / h, kw["target_size"][0] / w)
    for d in got:
        s = f32(d["scale"])
        assert f32(lo) <= s <= f32(hi)
        r = f32(base) * s
        assert d["size"] == (int(f32(h) * r), int(f32(w) * r))

    for k, what in enumerate(["height", "width"]):
        same_numbers(
            [d["size"][k] for d in got], [s[k] for s in want], f"{name}: {what}"
        )


# ---- RandomShortestSize ----


MULTISCALE = list(range(480, 801, 32))
SHORTEST_SETTINGS = [
    ("multiscale", (480, 640), dict(min_size=MULTISCALE, max_size=1333)),
    ("max binds", (300, 1200), dict(min_size=MULTISCALE, max_size=1333)),
    ("no max", (517, 211), dict(min_size=[100, 333, 999])),
    ("one size", (517, 211), dict(min_size=320, max_size=500)),
]


@cases("name,canvas,kw", SHORTEST_SETTINGS)
def test_shortest_size_matches_torchvision(name, canvas, kw):
    got, want = both(_core.detect_draw_shortest_size, T.RandomShortestSize, canvas, kw)
    want = [p["size"] for p in want]

    h, w = canvas
    sizes = kw["min_size"] if isinstance(kw["min_size"], list) else [kw["min_size"]]
    for d in got:
        assert d["min_size"] in sizes
        r = d["min_size"] / min(h, w)
        if kw.get("max_size") is not None:
            r = min(r, kw["max_size"] / max(h, w))
        assert d["size"] == (int(h * r), int(w * r))

    if len(sizes) > 1:
        same_categories([d["size"] for d in got], want, f"{name}: size")
    else:
        assert {d["size"] for d in got} == set(want)


# ---- FixedSizeCrop ----

FIXED_SETTINGS = [
    ("both sides", (1500, 1200), (1024, 1024)),
    ("crop and pad", (600, 1500), (1024, 1024)),
    ("pad only", (500, 333), (1024, 1024)),
    ("odd", (77, 91), (50, 13)),
]


def reference_fixed_crop(canvas, size):
    """The detection references' FixedSizeCrop as torchvision's scripts
    draw it: one float32 torch.rand(1), only when a side is larger."""
    (h, w), (sh, sw) = canvas, size
    nh, nw = min(h, sh), min(w, sw)
    crop = None
    if (nh, nw) != (h, w):
        r = torch.rand(1)
        crop = (int(max(h - sh, 0) * r), int(max(w - sw, 0) * r), nh, nw)
    return {"crop": crop, "padding": [0, 0, max(sw - nw, 0), max(sh - nh, 0)]}


@cases("name,canvas,size", FIXED_SETTINGS)
def test_fixed_size_crop_matches_reference(name, canvas, size):
    got = ours(_core.detect_draw_fixed_size_crop, canvas, size=size)
    torch.manual_seed(SEED)
    want = [reference_fixed_crop(canvas, size) for _ in range(N)]

    (h, w), (sh, sw) = canvas, size
    for d in got:
        _, _, pr, pb = d["padding"]
        if d["crop"] is None:
            assert h <= sh and w <= sw
            assert (h + pb, w + pr) == size
            continue
        top, left, ch, cw = d["crop"]
        assert (ch, cw) == (min(h, sh), min(w, sw))
        assert (ch + pb, cw + pr) == size
        assert 0 <= top <= h - ch and 0 <= left <= w - cw
        # one r for both offsets: r in [top / oh, (top + 1) / oh) and the
        # same for left must overlap
        oh, ow = max(h - sh, 0), max(w - sw, 0)
        lo = max(top / oh if oh else 0, left / ow if ow else 0)
        hi = min((top + 1) / oh if oh else 1, (left + 1) / ow if ow else 1)
        assert lo < hi + 1e-6, d

    assert [d["padding"] for d in got] == [p["padding"] for p in want]
    if want[0]["crop"] is None:
        assert all(d["crop"] is None for d in got)
        return
    for k, what in enumerate(["top", "left"]):
        same_numbers(
            [d["crop"][k] for d in got],
            [p["crop"][k] for p in want],
            f"{name}: {what}",
        )


# ---- RandomPhotometricDistort ----

KEYS = ["brightness_factor", "contrast_factor", "saturation_factor", "hue_factor"]
PHOTO_SETTINGS = [
    ("ssd", 3, {}),
    ("often", 3, dict(p=0.9, brightness=(0.2, 1.8), hue=(-0.5, 0.5))),
    ("grey", 1, dict(p=0.3, contrast=(0.0, 3.0), saturation=(1.0, 1.0))),
    ("rgba", 4, dict(p=0.6)),
]


def pattern(d):
    perm = d["channel_permutation"]
    return (
        tuple(d[k] is not None for k in KEYS),
        bool(d["contrast_before"]),
        None if perm is None else tuple(int(x) for x in perm),
    )


@pytest.mark.sweep
@cases("name,channels,kw", PHOTO_SETTINGS)
def test_photometric_matches_torchvision(name, channels, kw):
    got, want = both(
        _core.detect_draw_photometric,
        T.RandomPhotometricDistort,
        (1, 1),
        kw,
        channels,
    )

    ranges = [
        kw.get("brightness", (0.875, 1.125)),
        kw.get("contrast", (0.5, 1.5)),
        kw.get("saturation", (0.5, 1.5)),
        kw.get("hue", (-0.05, 0.05)),
    ]
    for d in got:
        for k, (lo, hi) in zip(KEYS, ranges):
            assert d[k] is None or f32(lo) <= d[k] <= f32(hi)
        perm = d["channel_permutation"]
        assert perm is None or sorted(perm) == list(range(channels))

    for j, what in enumerate(["applied", "contrast before", "permutation"]):
        same_categories(
            [pattern(d)[j] for d in got],
            [pattern(p)[j] for p in want],
            f"{name}: {what}",
        )
    for k, (lo, hi) in zip(KEYS, ranges):
        a = [d[k] for d in got if d[k] is not None]
        b = [p[k] for p in want if p[k] is not None]
        if lo < hi:
            same_numbers(a, b, f"{name}: {k}")
        else:
            assert set(a) == set(b) == {lo}


# ---- determinism and refusals ----

DRAWS = [
    (_core.detect_draw_iou_crop, dict(boxes=[[10.0, 10.0, 90.0, 70.0]])),
    (_core.detect_draw_zoom_out, {}),
    (_core.detect_draw_scale_jitter, dict(target_size=(1024, 1024))),
    (_core.detect_draw_shortest_size, dict(min_size=MULTISCALE, max_size=1333)),
    (_core.detect_draw_fixed_size_crop, dict(size=(50, 50))),
    (_core.detect_draw_photometric, {}),
]


@pytest.mark.parametrize("fn,kw", DRAWS, ids=[f[0].__name__ for f in DRAWS])
def test_same_key_same_draw(fn, kw):
    def draw(seed, epoch, index, view=0):
        return fn((100, 120), seed=seed, epoch=epoch, index=index, view=view, **kw)

    runs = [draw(5, 2, i) for i in range(200)]
    assert runs == [draw(5, 2, i) for i in range(200)]
    distinct = {repr(d) for d in runs}
    assert len(distinct) > 1
    # another seed, epoch or view draws otherwise
    for other in (
        [draw(6, 2, i) for i in range(200)],
        [draw(5, 3, i) for i in range(200)],
        [draw(5, 2, i, view=1) for i in range(200)],
    ):
        assert other != runs


BAD = [
    (_core.detect_draw_iou_crop, dict(boxes=[], sampler_options=[]), "sampler_options"),
    (
        _core.detect_draw_iou_crop,
        dict(boxes=[], min_scale=0.9, max_scale=0.3),
        "min_scale",
    ),
    (
        _core.detect_draw_iou_crop,
        dict(boxes=[], min_aspect_ratio=3.0),
        "min_aspect_ratio",
    ),
    (_core.detect_draw_iou_crop, dict(boxes=[], trials=0), "trials"),
    (_core.detect_draw_iou_crop, dict(boxes=[[1.0, 2.0, 3.0]]), "boxes"),
    (_core.detect_draw_zoom_out, dict(side_range=(0.5, 2.0)), "side_range"),
    (_core.detect_draw_zoom_out, dict(side_range=(3.0, 2.0)), "side_range"),
    (_core.detect_draw_zoom_out, dict(side_range=(1.0,)), "side_range"),
    (_core.detect_draw_zoom_out, dict(p=1.5), "p "),
    (_core.detect_draw_scale_jitter, dict(target_size=(0, 5)), "target_size"),
    (
        _core.detect_draw_scale_jitter,
        dict(target_size=(5, 5), scale_range=(2.0, 1.0)),
        "scale_range",
    ),
    (_core.detect_draw_scale_jitter, {}, "target_size"),
    (_core.detect_draw_shortest_size, dict(min_size=[]), "min_size"),
    (_core.detect_draw_shortest_size, dict(min_size=[100, 0]), "min_size"),
    (_core.detect_draw_shortest_size, dict(min_size=100, max_size=0), "max_size"),
    (_core.detect_draw_fixed_size_crop, dict(size=(0, 10)), "size"),
    (_core.detect_draw_photometric, dict(brightness=(1.2, 0.8)), "brightness"),
    (_core.detect_draw_photometric, dict(contrast=(-1.0, 0.8)), "contrast"),
    (_core.detect_draw_photometric, dict(saturation=(1.0, float("nan"))), "saturation"),
    (_core.detect_draw_photometric, dict(hue=(-0.6, 0.1)), "hue"),
    (_core.detect_draw_photometric, dict(p=-0.1), "p "),
    (_core.detect_draw_photometric, dict(channels=0), "channels"),
]


@pytest.mark.parametrize(
    "fn,kw,name", BAD, ids=[f"{b[0].__name__}-{b[2]}" for b in BAD]
)
def test_bad_options_name_the_option(fn, kw, name):
    with pytest.raises((ValueError, TypeError), match=name):
        fn((100, 120), seed=0, epoch=0, index=0, **kw)


def test_bad_canvas_and_view():
    with pytest.raises(ValueError, match="canvas"):
        _core.detect_draw_zoom_out((0, 10), seed=0, epoch=0, index=0)
    with pytest.raises(ValueError, match="view"):
        _core.detect_draw_zoom_out((10, 10), seed=0, epoch=0, index=0, view=64)
