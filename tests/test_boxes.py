"""Boxes and keypoints mapped in C (csrc/targets/boxes.c) through a sample's
geometry steps, against torchvision.transforms.v2.functional on
tv_tensors.BoundingBoxes and KeyPoints: flips, resize, crop (also past the
image's edges), center crop, resized crop, pad, affine, rotate and
perspective, each alone and chained, for thousands of random boxes in every
axis-aligned format; format conversion, clamping, and SanitizeBoundingBoxes'
keep mask (degenerate, outside, NaN and infinite boxes); the detection
recipes' ops with the parameters torchvision's transforms draw. The C side
computes in float64 with torchvision's one float32 rounding (a resize's
ratios): it must match torchvision's float64 result within 1e-6 px, and its
float32 result within 1e-3 px times the chain's magnification by resizes
(torchvision's float32 rounding grows with it; boxes; keypoints that land
on the canvas: those are never clamped, and float32 strays further for
points mapped far off it); the keep mask must be identical."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import _get_perspective_coeffs

from ringloader import _core

FORMATS = ["XYXY", "XYWH", "CXCYWH"]


def random_xyxy(rng, n, h, w):
    """Boxes with corners from 30% outside the canvas on each side, some
    tiny, some with an end before their start (degenerate)."""
    x = rng.uniform(-0.3 * w, 1.3 * w, size=(n, 2))
    y = rng.uniform(-0.3 * h, 1.3 * h, size=(n, 2))
    x.sort(axis=1)
    y.sort(axis=1)
    boxes = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1)
    flip = rng.random(n) < 0.05
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    tiny = rng.random(n) < 0.05
    boxes[tiny, 2] = boxes[tiny, 0] + rng.uniform(0, 1.5, size=tiny.sum())
    return boxes


def in_format(xyxy, fmt):
    t = torch.from_numpy(xyxy)
    return F.convert_bounding_box_format(t, old_format="XYXY", new_format=fmt).numpy()


def random_step(rng, h, w):
    """One op's parameters as torchvision's detection presets draw them,
    and the canvas after it."""
    kind = rng.choice(
        ["hflip", "vflip", "resize", "crop", "center_crop", "resized_crop"]
        + ["pad", "affine", "rotate", "perspective"]
    )
    if kind in ("hflip", "vflip"):
        return (kind,), (h, w)
    if kind == "resize":
        nh, nw = (int(v) for v in rng.integers(8, 900, size=2))
        return (kind, nh, nw), (nh, nw)
    if kind == "crop":
        ch, cw = (
            int(rng.integers(1, h + h // 2 + 2)),
            int(rng.integers(1, w + w // 2 + 2)),
        )
        top, left = int(rng.integers(-h // 3, h)), int(rng.integers(-w // 3, w))
        return (kind, top, left, ch, cw), (ch, cw)
    if kind == "center_crop":
        ch, cw = int(rng.integers(1, h + 3)), int(rng.integers(1, w + 3))
        return (kind, ch, cw), (ch, cw)
    if kind == "resized_crop":
        ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        nh, nw = (int(v) for v in rng.integers(8, 700, size=2))
        return (kind, top, left, ch, cw, nh, nw), (nh, nw)
    if kind == "pad":
        pads = [int(v) for v in rng.integers(0, 200, size=4)]
        return (kind, *pads), (h + pads[1] + pads[3], w + pads[0] + pads[2])
    center = (
        None
        if rng.random() < 0.5
        else (float(rng.uniform(0, w)), float(rng.uniform(0, h)))
    )
    if kind == "affine":
        angle = float(rng.uniform(-180, 180))
        tx, ty = float(rng.uniform(-0.2, 0.2) * w), float(rng.uniform(-0.2, 0.2) * h)
        scale = float(rng.uniform(0.5, 2.0))
        shx, shy = (float(v) for v in rng.uniform(-30, 30, size=2))
        return (kind, angle, tx, ty, scale, shx, shy, center), (h, w)
    if kind == "rotate":
        return (kind, float(rng.uniform(-180, 180)), center), (h, w)
    # RandomPerspective's draw: corners moved inward by up to half the size
    d = 0.5
    half_w, half_h = w // 2, h // 2
    bw, bh = int(d * half_w) + 1, int(d * half_h) + 1

    def r(lo, hi):
        return int(rng.integers(lo, hi))

    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    end = [
        [r(0, bw), r(0, bh)],
        [w - r(0, bw), r(0, bh)],
        [w - r(0, bw), h - r(0, bh)],
        [r(0, bw), h - r(0, bh)],
    ]
    coeffs = _get_perspective_coeffs(start, end)
    return ("perspective", tuple(float(c) for c in coeffs)), (h, w)


def tv_step(inpt, step):
    """The step applied by torchvision's functional API."""
    name, *a = step
    if name == "hflip":
        return F.horizontal_flip(inpt)
    if name == "vflip":
        return F.vertical_flip(inpt)
    if name == "resize":
        return F.resize(inpt, size=[a[0], a[1]])
    if name == "crop":
        return F.crop(inpt, top=a[0], left=a[1], height=a[2], width=a[3])
    if name == "center_crop":
        return F.center_crop(inpt, output_size=[a[0], a[1]])
    if name == "resized_crop":
        return F.resized_crop(inpt, a[0], a[1], a[2], a[3], size=[a[4], a[5]])
    if name == "pad":
        return F.pad(inpt, padding=list(a))
    if name == "affine":
        center = None if a[6] is None else list(a[6])
        return F.affine(
            inpt,
            angle=a[0],
            translate=[a[1], a[2]],
            scale=a[3],
            shear=[a[4], a[5]],
            center=center,
        )
    if name == "rotate":
        return F.rotate(inpt, angle=a[0], center=None if a[1] is None else list(a[1]))
    assert name == "perspective"
    return F.perspective(
        inpt, startpoints=None, endpoints=None, coefficients=list(a[0])
    )


def random_chain(rng, h, w, length):
    steps = []
    for _ in range(length):
        step, (h, w) = random_step(rng, h, w)
        steps.append(step)
    return steps, (h, w)


def growth(steps, h, w):
    """How much the chain's resizes magnify at most (1 if they never do):
    torchvision's float32 rounding grows with it."""
    g = 1.0
    for name, *a in steps:
        if name == "resize":
            g *= max(1.0, a[0] / h, a[1] / w)
            h, w = a[0], a[1]
        elif name == "resized_crop":
            g *= max(1.0, a[4] / a[2], a[5] / a[3])
            h, w = a[4], a[5]
        elif name in ("crop", "center_crop"):
            h, w = a[-2], a[-1]
        elif name == "pad":
            h, w = h + a[1] + a[3], w + a[0] + a[2]
    return g


def c_boxes(boxes, fmt, canvas, steps):
    out, size = _core.boxes_map(
        np.ascontiguousarray(boxes, dtype=np.float64), fmt, canvas, steps
    )
    return np.frombuffer(out, dtype=np.float64).reshape(-1, 4), size


def tv_boxes(boxes, fmt, canvas, steps, dtype):
    t = tv_tensors.BoundingBoxes(
        torch.from_numpy(boxes).to(dtype), format=fmt, canvas_size=canvas
    )
    for step in steps:
        t = tv_step(t, step)
    return t.as_subclass(torch.Tensor).double().numpy(), tuple(t.canvas_size)


def float32_close(got, want32, size, tol):
    """Within 1e-3 px of torchvision's float32 result for the keypoints that
    land on the output canvas (float32 itself strays further for points
    mapped far outside it: a perspective's horizon, a 100x resize of a
    point 1000 px off the crop)."""
    h, w = size
    on = (got[:, 0] >= 0) & (got[:, 0] <= w) & (got[:, 1] >= 0) & (got[:, 1] <= h)
    return bool(np.all(np.abs(got[on] - want32[on]) <= tol)), int(on.sum())


def max_diff(a, b):
    return float(np.max(np.abs(a - b))) if a.size else 0.0


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("length", [1, 3])
def test_boxes_match_torchvision(fmt, length):
    rng = np.random.default_rng(100 + FORMATS.index(fmt) * 10 + length)
    worst64 = worst32 = 0.0
    total = 0
    for _ in range(150):
        h, w = (int(v) for v in rng.integers(16, 1200, size=2))
        steps, size = random_chain(rng, h, w, length)
        boxes = in_format(random_xyxy(rng, 40, h, w), fmt)
        got, got_size = c_boxes(boxes, fmt, (h, w), steps)
        want64, size64 = tv_boxes(boxes, fmt, (h, w), steps, torch.float64)
        want32, _ = tv_boxes(boxes, fmt, (h, w), steps, torch.float32)
        assert got_size == size64 == size, steps
        worst64 = max(worst64, max_diff(got, want64))
        worst32 = max(worst32, max_diff(got, want32) / growth(steps, h, w))
        assert worst64 < 1e-6, (steps, worst64)
        assert worst32 < 1e-3, (steps, worst32)
        total += len(boxes)
    assert total == 6000


def test_each_step_kind_is_drawn():
    """The random chains above reach every kind of step."""
    rng = np.random.default_rng(0)
    kinds = {random_step(rng, 100, 100)[0][0] for _ in range(300)}
    assert kinds == {
        "hflip",
        "vflip",
        "resize",
        "crop",
        "center_crop",
        "resized_crop",
    } | {
        "pad",
        "affine",
        "rotate",
        "perspective",
    }


@pytest.mark.parametrize("length", [1, 3])
def test_keypoints_match_torchvision(length):
    rng = np.random.default_rng(7 + length)
    on_canvas = 0
    for _ in range(200):
        h, w = (int(v) for v in rng.integers(16, 1200, size=2))
        steps, size = random_chain(rng, h, w, length)
        pts = np.stack(
            [rng.uniform(-0.3 * w, 1.3 * w, 30), rng.uniform(-0.3 * h, 1.3 * h, 30)],
            axis=1,
        )
        out, got_size = _core.keypoints_map(pts, (h, w), steps)
        got = np.frombuffer(out, dtype=np.float64).reshape(-1, 2)
        want = {}
        for dtype in (torch.float64, torch.float32):
            t = tv_tensors.KeyPoints(
                torch.from_numpy(pts).to(dtype), canvas_size=(h, w)
            )
            for step in steps:
                t = tv_step(t, step)
            assert tuple(t.canvas_size) == got_size == size
            want[dtype] = t.as_subclass(torch.Tensor).double().numpy()
        assert max_diff(got, want[torch.float64]) < 1e-6, steps
        tol = 1e-3 * growth(steps, h, w)
        close, count = float32_close(got, want[torch.float32], size, tol)
        assert close, steps
        on_canvas += count
    assert on_canvas > 1000


@pytest.mark.parametrize("old", FORMATS)
@pytest.mark.parametrize("new", FORMATS)
def test_convert_matches_torchvision(old, new):
    rng = np.random.default_rng(3)
    boxes = in_format(random_xyxy(rng, 1000, 480, 640), old)
    got = np.frombuffer(_core.boxes_convert(boxes, old, new), dtype=np.float64).reshape(
        -1, 4
    )
    want = F.convert_bounding_box_format(
        torch.from_numpy(boxes), old_format=old, new_format=new
    ).numpy()
    assert max_diff(got, want) < 1e-9


@pytest.mark.parametrize("fmt", FORMATS)
def test_clamp_matches_torchvision(fmt):
    rng = np.random.default_rng(4)
    boxes = in_format(random_xyxy(rng, 2000, 480, 640), fmt)
    got = np.frombuffer(
        _core.boxes_clamp(boxes, fmt, (480, 640)), dtype=np.float64
    ).reshape(-1, 4)
    want = F.clamp_bounding_boxes(
        torch.from_numpy(boxes),
        format=fmt,
        canvas_size=(480, 640),
        clamping_mode="soft",
    )
    assert max_diff(got, want.numpy()) < 1e-9
    pts = rng.uniform(-200, 900, size=(2000, 2))
    got = np.frombuffer(
        _core.keypoints_clamp(pts, (480, 640)), dtype=np.float64
    ).reshape(-1, 2)
    want = F.clamp_keypoints(torch.from_numpy(pts), canvas_size=(480, 640))
    assert max_diff(got, want.numpy()) == 0.0


def odd_boxes(rng, n, h, w):
    """Boxes for the sanitizer: random, degenerate (zero or negative
    sides, sides and areas around the limits), on and past the canvas'
    edges, and NaN or infinite coordinates."""
    boxes = random_xyxy(rng, n, h, w)
    k = n // 8
    boxes[:k, 2] = boxes[:k, 0]  # zero width
    boxes[k : 2 * k, 2] = boxes[k : 2 * k, 0] + rng.choice([0.5, 1.0, 2.0, 3.0], size=k)
    boxes[2 * k : 3 * k] = [0, 0, w, h]
    boxes[3 * k : 4 * k, 0] = -1e-9
    specials = [np.nan, np.inf, -np.inf]
    rows = rng.integers(4 * k, n, size=k)
    cols = rng.integers(0, 4, size=k)
    boxes[rows, cols] = rng.choice(specials, size=k)
    return np.round(boxes * 2) / 2


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("limits", [(1.0, 1.0), (0.0, 0.0), (2.0, 10.0), (3.5, 0.5)])
def test_sanitize_mask_matches_torchvision(fmt, limits):
    rng = np.random.default_rng(5)
    min_size, min_area = limits
    boxes = in_format(odd_boxes(rng, 4000, 480, 640), fmt)
    keep = np.frombuffer(
        _core.boxes_sanitize(boxes, fmt, (480, 640), min_size, min_area), dtype=np.uint8
    )
    bb = tv_tensors.BoundingBoxes(
        torch.from_numpy(boxes), format=fmt, canvas_size=(480, 640)
    )
    _, want = F.sanitize_bounding_boxes(bb, min_size=min_size, min_area=min_area)
    assert keep.tolist() == want.numpy().astype(np.uint8).tolist()
    assert 0 < keep.sum() < len(keep)
    assert not keep[~np.isfinite(boxes).all(axis=1)].any()


def test_non_finite_boxes_follow_torchvision():
    """NaN and infinities go through the steps as torchvision carries them
    (clamp keeps a NaN, the hull of a corner that is NaN is NaN)."""
    rng = np.random.default_rng(6)
    boxes = odd_boxes(rng, 800, 300, 400)
    for _ in range(40):
        steps, _ = random_chain(rng, 300, 400, 2)
        got, _ = c_boxes(boxes, "XYXY", (300, 400), steps)
        want, _ = tv_boxes(boxes, "XYXY", (300, 400), steps, torch.float64)
        assert np.array_equal(np.isnan(got), np.isnan(want)), steps
        finite = np.isfinite(want)
        assert np.array_equal(np.isfinite(got), finite), steps
        assert max_diff(got[finite], want[finite]) < 1e-6
        inf = np.isinf(want)
        assert np.array_equal(got[inf], want[inf])


def test_flip_keeps_an_inverted_box_inverted():
    """torchvision's flip maps a box's ends (x1, x2) to (W - x2, W - x1): a
    box whose x2 < x1 stays so, where a hull would turn it the right way."""
    boxes = np.array([[50.0, 10.0, 20.0, 30.0]])
    got, _ = c_boxes(boxes, "XYXY", (100, 200), [("hflip",)])
    want, _ = tv_boxes(boxes, "XYXY", (100, 200), [("hflip",)], torch.float64)
    assert got.tolist() == want.tolist() == [[180.0, 10.0, 150.0, 30.0]]


def test_center_crop_rounds_half_to_even():
    """The anchor of a center crop is round((size - crop) / 2) with Python's
    rounding, half to even: 2.5 -> 2, 3.5 -> 4."""
    boxes = np.array([[10.0, 10.0, 20.0, 20.0]])
    for w in (15, 17):
        got, _ = c_boxes(boxes, "XYXY", (40, w), [("center_crop", 40, 10)])
        want, _ = tv_boxes(
            boxes, "XYXY", (40, w), [("center_crop", 40, 10)], torch.float64
        )
        assert got.tolist() == want.tolist()
        assert got[0, 0] == 10 - round((w - 10) / 2)


def test_empty_input():
    out, size = _core.boxes_map(
        np.zeros((0, 4)), "XYXY", (10, 20), [("hflip",), ("resize", 5, 5)]
    )
    assert out == b"" and size == (5, 5)
    assert _core.boxes_sanitize(np.zeros((0, 4)), "XYXY", (10, 20)) == b""


def test_bad_input_is_a_clear_error():
    boxes = np.zeros((3, 4))
    with pytest.raises(ValueError, match="float64 array of shape \\(N, 4\\)"):
        _core.boxes_map(np.zeros((3, 4), dtype=np.float32), "XYXY", (10, 10), [])
    with pytest.raises(ValueError, match="shape \\(N, 4\\)"):
        _core.boxes_map(np.zeros(6), "XYXY", (10, 10), [])
    with pytest.raises(ValueError, match="shape \\(N, 2\\)"):
        _core.keypoints_map(np.zeros(3), (10, 10), [])
    with pytest.raises(ValueError, match="'XYXY', 'XYWH' or 'CXCYWH'"):
        _core.boxes_map(boxes, "XYXYXYXY", (10, 10), [])
    with pytest.raises(ValueError, match="unknown geometry step 'shear'"):
        _core.boxes_map(boxes, "XYXY", (10, 10), [("shear", 1.0)])
    with pytest.raises(TypeError, match="resize"):
        _core.boxes_map(boxes, "XYXY", (10, 10), [("resize", 5)])
    with pytest.raises(ValueError, match="at least 1x1"):
        _core.boxes_map(boxes, "XYXY", (10, 10), [("crop", 0, 0, 0, 5)])
    with pytest.raises(ValueError, match="at least 1x1"):
        _core.boxes_map(boxes, "XYXY", (0, 10), [])
    with pytest.raises(ValueError, match="too many geometry steps"):
        _core.boxes_map(boxes, "XYXY", (10, 10), [("hflip",)] * 81)
    with pytest.raises(ValueError, match="positive scale"):
        _core.boxes_map(
            boxes, "XYXY", (10, 10), [("affine", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, None)]
        )
    # torchvision raises RuntimeError for a perspective it cannot invert
    singular = (1.0, 2.0, 0.0, 2.0, 4.0, 0.0, 0.0, 0.0)
    bb = tv_tensors.BoundingBoxes(
        torch.zeros(1, 4), format="XYXY", canvas_size=(10, 10)
    )
    with pytest.raises(RuntimeError, match="Denominator is zero"):
        F.perspective(bb, None, None, coefficients=list(singular))
    with pytest.raises(ValueError, match="cannot be inverted"):
        _core.boxes_map(boxes, "XYXY", (10, 10), [("perspective", singular)])
    with pytest.raises(ValueError, match="finite"):
        _core.boxes_map(boxes, "XYXY", (10, 10), [("perspective", (math.nan,) * 8)])


def test_detection_presets_match_torchvision():
    """The detection recipes' random ops (ssd: RandomZoomOut, RandomIoUCrop,
    RandomHorizontalFlip; multiscale: RandomShortestSize; lsj: ScaleJitter)
    with the parameters torchvision's own transforms draw, given to the C
    side as steps: RandomIoUCrop's crop zeroes the boxes whose centre falls
    outside it, the sanitizer then drops them, the same indices."""
    from torchvision.transforms import v2

    torch.manual_seed(0)
    rng = np.random.default_rng(8)
    zoom, iou = v2.RandomZoomOut(p=1.0), v2.RandomIoUCrop()
    shortest, jitter = (
        v2.RandomShortestSize([480, 640, 800], 1333),
        v2.ScaleJitter((1024, 1024)),
    )
    crops = 0
    for _ in range(200):
        h, w = (int(v) for v in rng.integers(64, 900, size=2))
        fmt = FORMATS[int(rng.integers(3))]
        xyxy = random_xyxy(rng, 20, h, w)
        xyxy[:, :2] = np.clip(xyxy[:, :2], 0, None)
        xyxy[:, 2:] = np.maximum(np.minimum(xyxy[:, 2:], [w, h]), xyxy[:, :2] + 2)
        boxes = in_format(xyxy, fmt)
        bb = tv_tensors.BoundingBoxes(
            torch.from_numpy(boxes), format=fmt, canvas_size=(h, w)
        )
        image = tv_tensors.Image(torch.zeros(3, h, w, dtype=torch.uint8))
        cur, canvas = boxes, (h, w)

        params = zoom.make_params([image, bb])
        bb = zoom.transform(bb, params)
        cur, canvas = c_boxes(cur, fmt, canvas, [("pad", *params["padding"])])

        params = iou.make_params([tv_tensors.Image(torch.zeros(3, *canvas)), bb])
        if params:
            bb = iou.transform(bb, params)
            p = params
            (out, canvas), mark = _core.boxes_iou_crop(
                cur, fmt, canvas, p["top"], p["left"], p["height"], p["width"]
            )
            cur = np.frombuffer(out, dtype=np.float64).reshape(-1, 4)
            assert list(mark) == p["is_within_crop_area"].numpy().astype(int).tolist()
            crops += 1

        other = shortest if rng.random() < 0.5 else jitter
        params = other.make_params([tv_tensors.Image(torch.zeros(3, *canvas)), bb])
        bb = other.transform(bb, params)
        steps = [("resize", *params["size"])] + (
            [("hflip",)] if rng.random() < 0.5 else []
        )
        if len(steps) == 2:
            bb = F.horizontal_flip(bb)
        cur, canvas = c_boxes(cur, fmt, canvas, steps)

        assert canvas == tuple(bb.canvas_size)
        assert max_diff(cur, bb.as_subclass(torch.Tensor).numpy()) < 1e-6
        keep = np.frombuffer(_core.boxes_sanitize(cur, fmt, canvas), dtype=np.uint8)
        _, want = F.sanitize_bounding_boxes(bb)
        diff = np.nonzero(keep != want.numpy())[0]
        assert not len(diff), (fmt, cur[diff], bb[diff].tolist())
    assert crops > 50
