"""Boxes and keypoints through a sample's plan (csrc/targets/plan_geom.c,
``_core.plan_boxes`` / ``plan_keypoints``): for every transform the
compiler fuses (torchvision v2's and v1's Resize, CenterCrop, RandomCrop
with each padding mode, RandomResizedCrop and flips; timm's
ResizeKeepRatio with its random scale and aspect, CenterCropOrPad,
RandomCropOrPad and TrimBorder), built from the real objects by
``compile_transform``, on random image sizes: the boxes (XYXY, XYWH,
CXCYWH) and keypoints equal torchvision.transforms.v2.functional applied
to tv_tensors with the parameters the plan drew (``_core.plan_window``):
within 1e-6 px of float64 and 1e-3 px times the resize's magnification of
float32, on the plan's output canvas.

The reference is the pixels' chain: a window pads as its image is padded
(torchvision's CenterCrop pads the image (out - n) // 2 before it; its
center_crop of boxes would shift them by -round((n - out) / 2), a pixel
more where out - n is 3 modulo 4: test_center_crop_boxes_follow_pixels),
every padding mode moves boxes as constant padding does (torchvision
refuses boxes under the other modes), and a window that is the whole
canvas is no step (Resize((h, w)) alone, v2's RandomCrop without a crop:
boxes outside the image stay unclamped)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as v1
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from ringloader import _core
from ringloader.transforms import compile_transform

from test_boxes import FORMATS, float32_close, in_format, max_diff, random_xyxy

timm_tf = pytest.importorskip("timm.data.transforms")
CenterCropOrPad = timm_tf.CenterCropOrPad
RandomCropOrPad = timm_tf.RandomCropOrPad
ResizeKeepRatio = timm_tf.ResizeKeepRatio
TrimBorder = timm_tf.TrimBorder

SEED = 29
PAD_MODES = ["constant", "edge", "reflect", "symmetric"]


def _size(rng, lo=8, hi=90):
    return int(rng.integers(lo, hi))


def _flips(rng, lib):
    """Flips with p 0.5 (or none), as the compiler fuses them last."""
    out = []
    if rng.random() < 0.7:
        out.append(lib.RandomHorizontalFlip())
    if rng.random() < 0.5:
        out.append(lib.RandomVerticalFlip())
    return out


def _resize_first(rng, lib):
    return [lib.Resize(_size(rng, 8, 120))] if rng.random() < 0.6 else []


def _scale_ratio(rng):
    lo = float(rng.uniform(0.05, 0.9))
    r = float(rng.uniform(0.3, 1.0))
    return (lo, float(rng.uniform(lo, 1.0))), (r, float(rng.uniform(1.0, 3.0)))


def v2_resize_center(rng):
    return [v2.Resize(_size(rng)), v2.CenterCrop((_size(rng), _size(rng)))]


def v2_resize_hw(rng):
    return [v2.Resize((_size(rng), _size(rng)))]


def v2_center_alone(rng):
    return [v2.CenterCrop((_size(rng, 1, 200), _size(rng, 1, 200)))]


def v2_resized_crop(rng):
    scale, ratio = _scale_ratio(rng)
    return [v2.RandomResizedCrop((_size(rng), _size(rng)), scale=scale, ratio=ratio)]


def v2_random_crop(rng):
    pad = [int(v) for v in rng.integers(0, 12, size=4)]
    mode = PAD_MODES[int(rng.integers(4))]
    crop = v2.RandomCrop(
        (_size(rng), _size(rng)),
        padding=pad,
        pad_if_needed=True,
        padding_mode=mode,
        fill=0,
    )
    return _resize_first(rng, v2) + [crop]


def v1_random_crop(rng):
    pad = [int(v) for v in rng.integers(0, 12, size=2)]
    mode = PAD_MODES[int(rng.integers(4))]
    crop = v1.RandomCrop(
        (_size(rng), _size(rng)), padding=pad, pad_if_needed=True, padding_mode=mode
    )
    return _resize_first(rng, v1) + [crop]


def v1_resize_center(rng):
    return [v1.Resize(_size(rng)), v1.CenterCrop(_size(rng))]


def v1_resized_crop(rng):
    scale, ratio = _scale_ratio(rng)
    return [v1.RandomResizedCrop(_size(rng), scale=scale, ratio=ratio)]


def _keep(rng, random):
    kw = {}
    if random:
        kw = dict(
            random_scale_prob=0.7,
            random_scale_range=(0.6, 1.4),
            random_scale_area=bool(rng.random() < 0.5),
            random_aspect_prob=0.7,
            random_aspect_range=(0.7, 1.4),
        )
    size = (_size(rng), _size(rng))
    return ResizeKeepRatio(size, longest=float(rng.uniform(0, 1)), **kw)


def timm_center_or_pad(rng):
    mode = PAD_MODES[int(rng.integers(4))]  # constant: a CenterCrop step
    crop = CenterCropOrPad((_size(rng), _size(rng)), padding_mode=mode)
    return [_keep(rng, rng.random() < 0.7), crop]


def timm_random_or_pad(rng):
    mode = PAD_MODES[int(rng.integers(4))]
    crop = RandomCropOrPad((_size(rng), _size(rng)), padding_mode=mode)
    return [_keep(rng, rng.random() < 0.7), crop]


def timm_trim(rng):
    rest = [v2.Resize(_size(rng)), v2.CenterCrop(_size(rng))]
    if rng.random() < 0.4:
        scale, ratio = _scale_ratio(rng)
        rest = [v2.RandomResizedCrop(_size(rng), scale=scale, ratio=ratio)]
    return [TrimBorder(int(rng.integers(1, 6)))] + rest


CASES = {
    "v2_resize_center": (v2_resize_center, v2),
    "v2_resize_hw": (v2_resize_hw, v2),
    "v2_center_alone": (v2_center_alone, v2),
    "v2_resized_crop": (v2_resized_crop, v2),
    "v2_random_crop": (v2_random_crop, v2),
    "v1_random_crop": (v1_random_crop, v1),
    "v1_resize_center": (v1_resize_center, v1),
    "v1_resized_crop": (v1_resized_crop, v1),
    "timm_center_or_pad": (timm_center_or_pad, v2),
    "timm_random_or_pad": (timm_random_or_pad, v2),
    "timm_trim": (timm_trim, v2),
}


NEVER_PADS = {"v2_resize_hw", "v2_resized_crop", "v1_resized_crop"}


def compiled_spec(rng, case):
    make, lib = CASES[case]
    tf = lib.Compose(make(rng) + _flips(rng, lib))
    compiled = compile_transform(tf)
    assert not compiled.rest, compiled.reason  # fused whole
    return compiled.spec


# ---- the reference: torchvision v2's functional, the plan's parameters ----


def _crop_unless_whole(t, top, left, oh, ow):
    if tuple(F.get_size(t)) == (oh, ow):
        assert top == left == 0
        return t
    return F.crop(t, top, left, oh, ow)


def _resized_size(spec, p, h, w):
    """The (height, width) the spec's resize gives an h x w image, by
    torchvision's and timm's own arithmetic; a random ResizeKeepRatio's:
    the size the plan drew (``rh``, ``rw``: see draws), which
    test_timm_crop_modes checks against timm's draws."""
    if spec.get("resize_short"):
        return None  # F.resize computes the long side itself
    if spec.get("keep_ratio"):
        if spec.get("keep_scale_p") or spec.get("keep_aspect_p"):
            return p["rh"], p["rw"]
        img = Image.new("RGB", (w, h))
        target = (spec["resize_h"], spec["resize_w"])
        return tuple(ResizeKeepRatio.get_params(img, target, spec["keep_longest"]))
    if spec.get("resize_h"):
        return spec["resize_h"], spec["resize_w"]
    return h, w


def _resize(spec, p, t):
    h, w = t.canvas_size
    size = _resized_size(spec, p, h, w)
    resizes = spec.get("resize_short") or spec.get("resize_h") or spec.get("keep_ratio")
    if not resizes:
        return t
    t = F.resize(t, [spec["resize_short"]] if size is None else list(size))
    if spec["kind"] == "resize_random_crop":
        assert tuple(t.canvas_size) == (p["rh"], p["rw"])
    return t


def _center_crop(t, oh, ow):
    """torchvision's CenterCrop as it makes the image: the padding of an
    axis shorter than the crop, (d // 2, (d + 1) // 2), then the crop at
    the rounded centre."""
    nh, nw = t.canvas_size
    dh, dw = max(oh - nh, 0), max(ow - nw, 0)
    if dh or dw:
        t = F.pad(t, [dw // 2, dh // 2, (dw + 1) // 2, (dh + 1) // 2])
    nh, nw = t.canvas_size
    return _crop_unless_whole(
        t, int(round((nh - oh) / 2.0)), int(round((nw - ow) / 2.0)), oh, ow
    )


def _random_crop(spec, p, t):
    """v2's RandomCrop itself, its window moved to the plan's (its padding
    mode constant: v2 refuses boxes under the others)."""
    pads = [spec[f"pad_{k}"] for k in ("left", "top", "right", "bottom")]
    rc = v2.RandomCrop(
        (spec["out_h"], spec["out_w"]),
        padding=pads,
        pad_if_needed=bool(spec["pad_if_needed"]),
    )
    params = rc.make_params([t])
    params["top"] = p["wy"] + params["padding"][1]
    params["left"] = p["wx"] + params["padding"][0]
    return rc.transform(t, params)


def _crop_or_pad(t, top, left, oh, ow, pad_with=F.pad):
    """timm's crop_or_pad: pad where the window passes an edge (with
    ``pad_with(t, ltrb)``), crop."""
    nh, nw = F.get_size(t)
    right, bottom = left + ow, top + oh
    pad = [
        max(-left + min(0, right), 0),
        max(-top + min(0, bottom), 0),
        max(right - max(nw, left), 0),
        max(bottom - max(nh, top), 0),
    ]
    if any(pad):
        t = pad_with(t, pad)
    return _crop_unless_whole(t, max(top, 0), max(left, 0), oh, ow)


def reference(spec, p, t):
    """t (BoundingBoxes or KeyPoints on the source canvas) through the
    pixels' chain with the plan's parameters."""
    oh, ow = spec["out_h"], spec["out_w"]
    trim = spec.get("trim", 0)
    if trim:
        h, w = t.canvas_size
        t = F.crop(t, trim, trim, h - 2 * trim, w - 2 * trim)  # TrimBorder's
    if spec["kind"] == "random_crop":
        box = (int(p["y"]), int(p["x"]), int(p["h"]), int(p["w"]))
        assert box == (p["y"], p["x"], p["h"], p["w"])
        t = F.resized_crop(t, *box, [oh, ow])
    else:
        t = _resize(spec, p, t)
        window = spec.get("window", 0)
        if spec["kind"] == "resize_crop":
            t = _center_crop(t, oh, ow)
        elif window == 0:
            t = _random_crop(spec, p, t)
        elif window == 1:
            t = _center_crop(t, oh, ow)  # timm's center_crop_or_pad: the same
        else:
            t = _crop_or_pad(t, p["wy"], p["wx"], oh, ow)
    if p["flip"]:
        t = F.horizontal_flip(t)
    if p["vflip"]:
        t = F.vertical_flip(t)
    return t


def growth(spec, p, h, w):
    """How much the chain magnifies (1 where it does not): torchvision's
    float32 rounding grows with it."""
    trim = spec.get("trim", 0)
    h, w = h - 2 * trim, w - 2 * trim
    if spec["kind"] == "random_crop":
        return max(1.0, spec["out_h"] / p["h"], spec["out_w"] / p["w"])
    return (
        max(1.0, p["rh"] / h, p["rw"] / w)
        if p["rh"]
        else max(1.0, spec["out_h"] / p["h"], spec["out_w"] / p["w"])
    )


# ---- the tests ----


def draws(case, n, spec_of=None):
    """n planned samples of random transforms of the case (``spec_of(rng,
    case)``'s, compiled_spec by default) on random sizes: (spec, width,
    height, index, view, plan_window, rng)."""
    rng = np.random.default_rng(sum(map(ord, case)) * 7919 + n)
    out = []
    while len(out) < n:
        spec = (spec_of or compiled_spec)(rng, case)
        for _ in range(4):
            w, h = (int(v) for v in rng.integers(12, 400, size=2))
            index, view = int(rng.integers(1 << 40)), int(rng.integers(0, 3))
            try:
                p = _core.plan_window(spec, w, h, SEED, 0, index, view)
            except ValueError:
                continue  # a RandomCrop larger than the padded image: raised
            if spec["kind"] == "resize_crop" and spec.get("keep_ratio"):
                # A centre crop's plan keeps no resized size; the same
                # draws under a crop-or-pad window report it.
                twin = dict(spec, kind="resize_random_crop", window=1, pad_mode=1)
                q = _core.plan_window(twin, w, h, SEED, 0, index, view)
                p = dict(p, rh=q["rh"], rw=q["rw"])
            out.append((spec, w, h, index, view, p, rng))
    return out[:n]


def tv(values, fmt, h, w, dtype):
    data = torch.from_numpy(values).to(dtype)
    if fmt is None:
        return tv_tensors.KeyPoints(data, canvas_size=(h, w))
    return tv_tensors.BoundingBoxes(data, format=fmt, canvas_size=(h, w))


@pytest.mark.parametrize("case", list(CASES))
def test_boxes_follow_the_plan(case):
    worst64 = worst32 = 0.0
    total = 0
    for spec, w, h, index, view, p, rng in draws(case, 250):
        fmt = FORMATS[total % 3]
        boxes = in_format(random_xyxy(rng, 12, h, w), fmt)
        out, size = _core.plan_boxes(spec, w, h, SEED, 0, index, view, boxes, fmt)
        got = np.frombuffer(out, dtype=np.float64).reshape(-1, 4)
        assert size == (spec["out_h"], spec["out_w"]), (spec, w, h)
        want = {}
        for dtype in (torch.float64, torch.float32):
            t = reference(spec, p, tv(boxes, fmt, h, w, dtype))
            assert tuple(t.canvas_size) == size, (spec, w, h, p)
            want[dtype] = t.as_subclass(torch.Tensor).double().numpy()
        worst64 = max(worst64, max_diff(got, want[torch.float64]))
        worst32 = max(
            worst32, max_diff(got, want[torch.float32]) / growth(spec, p, h, w)
        )
        assert worst64 < 1e-6, (spec, w, h, p, worst64)
        assert worst32 < 1e-3, (spec, w, h, p, worst32)
        total += 1
    assert total == 250


@pytest.mark.parametrize("case", list(CASES))
def test_int64_boxes_follow_the_plan(case):
    """``whole``: boxes of an integer dtype, as torchvision keeps them
    (each resize's float32 product truncated), exactly."""
    resized = 0
    for spec, w, h, index, view, p, rng in draws(case, 120):
        boxes = np.floor(random_xyxy(rng, 12, h, w))
        out, size = _core.plan_boxes(
            spec, w, h, SEED, 0, index, view, boxes, "XYXY", whole=True
        )
        got = np.frombuffer(out, dtype=np.float64).reshape(-1, 4)
        t = reference(spec, p, tv(boxes, "XYXY", h, w, torch.int64))
        assert tuple(t.canvas_size) == size
        assert t.dtype == torch.int64
        assert np.array_equal(got, t.as_subclass(torch.Tensor).double().numpy())
        resized += size != (h, w)
    assert resized > 20 or case == "v2_center_alone"


@pytest.mark.parametrize("case", list(CASES))
def test_float32_boxes_and_keypoints_are_torchvisions_exactly(case):
    """``single``: float32 values rounded as torchvision's float32 tensor
    is after every step, so XYXY and XYWH boxes and keypoints equal its
    values exactly (CXCYWH within the float32 tolerance above: its
    conversions round in another order), boxes on the image's edges
    included: a right edge flipped after a resize is 0 there (-0.0), which
    SanitizeBoundingBoxes keeps (test_right_edge_flipped_after_a_resize_is_kept)."""
    for spec, w, h, index, view, p, rng in draws(case, 120):
        xyxy = random_xyxy(rng, 12, h, w)
        xyxy[:4, 2], xyxy[4:8, 0], xyxy[8:, 3] = w, 0, h
        for fmt in FORMATS:
            boxes = in_format(xyxy, fmt).astype(np.float32).astype(np.float64)
            out, size = _core.plan_boxes(
                spec, w, h, SEED, 0, index, view, boxes, fmt, single=True
            )
            got = np.frombuffer(out, dtype=np.float64).reshape(-1, 4)
            t = reference(spec, p, tv(boxes, fmt, h, w, torch.float32))
            want = t.as_subclass(torch.Tensor).double().numpy()
            if fmt == "CXCYWH":
                assert max_diff(got, want) < 1e-3 * growth(spec, p, h, w)
            else:
                assert np.array_equal(got, want), (fmt, spec, w, h, p)
        pts = rng.uniform(-0.3, 1.3, (20, 2)) * (w, h)
        pts = pts.astype(np.float32).astype(np.float64)
        out, _ = _core.plan_keypoints(
            spec, w, h, SEED, 0, index, view, pts, single=True
        )
        t = reference(spec, p, tv(pts, None, h, w, torch.float32))
        want = t.as_subclass(torch.Tensor).double().numpy()
        assert np.array_equal(np.frombuffer(out).reshape(-1, 2), want)


def test_right_edge_flipped_after_a_resize_is_kept():
    """A box on the right edge, resized (multiscale) then flipped: x1 is
    what torchvision's float32 gives (mostly 0, which SanitizeBoundingBoxes
    keeps), and so is the sanitizer's choice. (Mapped in float64 then
    converted, x1 was about -1e-5 for 85 of these 200 image sizes where
    torchvision's is 0, and the front door dropped the box.)"""
    spec = compile_transform(
        v2.Compose([v2.Resize(480), v2.RandomHorizontalFlip(p=1.0)]), varying=True
    ).spec
    sanitize = v2.SanitizeBoundingBoxes(labels_getter=None)
    rng = np.random.default_rng(1)
    kept = 0
    for w in range(100, 700, 3):
        h = int(rng.integers(100, 700))
        boxes = np.array([[5.0, 5.0, float(w), 50.0], [0.0, 3.0, 20.5, 40.25]])
        out, size = _core.plan_boxes(spec, w, h, 1, 0, 0, 0, boxes, "XYXY", single=True)
        got = tv_tensors.BoundingBoxes(
            torch.from_numpy(np.frombuffer(out).reshape(-1, 4).copy()).float(),
            format="XYXY",
            canvas_size=size,
        )
        t = tv(boxes, "XYXY", h, w, torch.float32)
        want = F.horizontal_flip(F.resize(t, [480]))
        assert torch.equal(
            got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor)
        )
        kept += len(sanitize(got))
        assert len(sanitize(got)) == len(sanitize(want)), w
    assert kept > 370  # torchvision keeps 379 of the 400


def test_whole_and_single_exclude_each_other():
    spec = compile_transform(v2.RandomHorizontalFlip(), varying=True).spec
    box = np.array([[1.0, 2.0, 3.0, 4.0]])
    with pytest.raises(ValueError, match="exclude each other"):
        _core.plan_boxes(
            spec, 8, 8, SEED, 0, 0, 0, box, "XYXY", whole=True, single=True
        )


@pytest.mark.parametrize("case", list(CASES))
def test_keypoints_follow_the_plan(case):
    on_canvas = 0
    for spec, w, h, index, view, p, rng in draws(case, 150):
        pts = np.stack(
            [rng.uniform(-0.3 * w, 1.3 * w, 20), rng.uniform(-0.3 * h, 1.3 * h, 20)],
            axis=1,
        )
        out, size = _core.plan_keypoints(spec, w, h, SEED, 0, index, view, pts)
        got = np.frombuffer(out, dtype=np.float64).reshape(-1, 2)
        assert size == (spec["out_h"], spec["out_w"])
        want = {}
        for dtype in (torch.float64, torch.float32):
            t = reference(spec, p, tv(pts, None, h, w, dtype))
            assert tuple(t.canvas_size) == size
            want[dtype] = t.as_subclass(torch.Tensor).double().numpy()
        assert max_diff(got, want[torch.float64]) < 1e-6, (spec, w, h, p)
        tol = 1e-3 * growth(spec, p, h, w)
        close, count = float32_close(got, want[torch.float32], size, tol)
        assert close, (spec, w, h, p)
        on_canvas += count
    assert on_canvas > 300


def test_every_branch_is_drawn():
    """The draws above pad, crop inside, flip and not, for each case that
    can (RandomResizedCrop's box and Resize((h, w)) never pad)."""
    for case in CASES:
        padded = inside = flips = vflips = 0
        for spec, *_, p, _rng in draws(case, 250):
            oh, ow = spec["out_h"], spec["out_w"]
            if spec["kind"] == "random_crop":
                pads = False
            elif spec["kind"] == "resize_crop":
                pads = p["vw"] < ow or p["vh"] < oh
            else:
                pads = min(p["wx"], p["wy"]) < 0
                pads |= p["wx"] + ow > p["rw"] or p["wy"] + oh > p["rh"]
            padded += pads
            inside += not pads
            flips += p["flip"]
            vflips += p["vflip"]
        assert inside > 20 and flips > 20 and vflips > 20, case
        assert padded > 20 or case in NEVER_PADS, case


def test_center_crop_boxes_follow_pixels():
    """A box drawn into an image lands where v2's CenterCrop puts the
    image's pixels, also where the crop pads: (out - n) // 2 before the
    image, where torchvision's center_crop of boxes would move them by
    -round((n - out) / 2) (one more pixel when out - n is 3 modulo 4)."""
    rng = np.random.default_rng(5)
    odd = 0
    for _ in range(400):
        h, w = (int(v) for v in rng.integers(1, 40, size=2))
        oh, ow = (int(v) for v in rng.integers(1, 60, size=2))
        x0, x1 = sorted(int(v) for v in rng.integers(0, w + 1, size=2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, h + 1, size=2))
        img = torch.zeros(1, h, w, dtype=torch.uint8)
        img[0, y0:y1, x0:x1] = 1
        out = v2.CenterCrop((oh, ow))(tv_tensors.Image(img))[0]
        ys, xs = torch.nonzero(out, as_tuple=True)
        if len(xs) == 0:
            continue  # the box was cropped away
        want = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        spec = compile_transform(v2.CenterCrop((oh, ow))).spec
        box = np.array([[x0, y0, x1, y1]], dtype=np.float64)
        got, size = _core.plan_boxes(spec, w, h, SEED, 0, 0, 0, box, "XYXY")
        assert size == (oh, ow)
        assert list(np.frombuffer(got)) == [float(v) for v in want], (h, w, oh, ow)
        odd += (oh - h) % 4 == 3 or (ow - w) % 4 == 3
    assert odd > 30


def test_bad_input_is_a_clear_error():
    spec = compile_transform(v2.CenterCrop(10)).spec
    boxes = np.zeros((2, 4))
    with pytest.raises(ValueError, match="box format"):
        _core.plan_boxes(spec, 20, 20, SEED, 0, 0, 0, boxes, "XY")
    with pytest.raises(ValueError, match="float64"):
        _core.plan_boxes(spec, 20, 20, SEED, 0, 0, 0, boxes.astype(np.float32), "XYXY")
    with pytest.raises(ValueError, match=r"\(N, 2\)"):
        _core.plan_keypoints(spec, 20, 20, SEED, 0, 0, 0, np.zeros(3))
    with pytest.raises(ValueError, match="invalid transform"):
        _core.plan_boxes(spec, 0, 20, SEED, 0, 0, 0, boxes, "XYXY")
    crop = compile_transform(v2.RandomCrop(30)).spec
    with pytest.raises(ValueError, match="larger than the 20x20 image"):
        _core.plan_boxes(crop, 20, 20, SEED, 0, 0, 0, boxes, "XYXY")
    out, size = _core.plan_boxes(spec, 20, 20, SEED, 0, 0, 0, np.zeros((0, 4)), "XYXY")
    assert out == b"" and size == (10, 10)
