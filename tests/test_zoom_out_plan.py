"""v2's RandomZoomOut fused in the plan (core/plan_iou.c): each sample's
canvas is drawn from its plan stream first (rl_draw_zoom_out), the image
placed at the drawn offset and the rest filled, then a RandomIoUCrop after
it draws on that canvas from the sample's boxes moved by the offset, then
the flips. The canvases and the crops on them are held to torchvision's
own make_params (20,000 a side: chi-square for categories, two-sample KS
for numbers, fixed seeds); the pixels of a Loader's samples to
torchvision's pad, crop and flip (PNG exactly, JPEG within the crop
decode's 1 LSB); ``_core.plan_boxes`` / ``plan_keypoints`` /
``plan_maps`` to torchvision's transforms with the plan's parameters."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from draws import same_categories
from PIL import Image

from ringloader import _core
from ringloader.errors import UnsupportedTransform
from ringloader.transforms import compile_transform

from images import write_png_jpeg
from test_boxes import max_diff
from test_detect_draws import same_numbers, zoom_draws
from test_iou_crop_plan import box_sets, boxes_table, iou_params, load, max_iou

v2 = pytest.importorskip("torchvision.transforms.v2")
F = pytest.importorskip("torchvision.transforms.v2.functional")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")

N = 20_000
SEED = 1234
TORCH_SEED = 3
FILL = (123, 117, 104)
SETTINGS = [
    ("defaults", (480, 640), {}),
    ("narrow", (37, 53), dict(side_range=(1.0, 1.5), p=0.3)),
]


def spec_of(*steps):
    return compile_transform(v2.Compose(list(steps)), varying=True).spec


def canvas_of(p, size):
    """(left, top, canvas w, canvas h) of a plan (the image where the
    zoom-out was not applied)."""
    if p["zoom_out"]:
        return p["zoom_canvas"]
    return (0, 0, size[1], size[0])


def torch_canvases(kw, size):
    """N of torchvision's RandomZoomOut draws on an image of size (h, w),
    through its p gate: the padding (left, top, right, bottom) or None."""
    seen, applied = zoom_draws(size, kw, seed=TORCH_SEED)
    params = iter(seen)
    return [next(params)["padding"] if a else None for a in applied]


@pytest.mark.parametrize("name,size,kw", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_plan_canvases_distributed_as_torchvisions(name, size, kw):
    """The plan's canvases over N keys against N of torchvision's: the p
    gate, the canvas's sides and the image's offset; each applied plan
    puts the whole image 1:1 at its offset of the canvas."""
    spec = spec_of(v2.RandomZoomOut(**kw))
    assert spec["zoom_out"] == 1 and spec["varying"] == 1
    h, w = size
    ours = []
    for i in range(N):
        p = _core.plan_window(spec, w, h, SEED, 0, i)
        left, top, cw, ch = canvas_of(p, size)
        assert (p["vx"], p["vy"], p["vw"], p["vh"]) == (left, top, w, h)
        assert (p["x"], p["y"], p["w"], p["h"]) == (0, 0, w, h)
        ours.append((left, top, cw - w - left, ch - h - top) if p["zoom_out"] else None)
    want = torch_canvases(kw, size)
    same_categories(
        [o is None for o in ours], [o is None for o in want], f"{name}: applied"
    )
    a = [o for o in ours if o]
    b = [o for o in want if o]
    for k, what in enumerate(["left", "top", "right", "bottom"]):
        same_numbers([x[k] for x in a], [x[k] for x in b], f"{name}: {what}")
    same_numbers(
        [x[0] + x[2] for x in a], [x[0] + x[2] for x in b], f"{name}: canvas width"
    )
    same_numbers(
        [x[1] + x[3] for x in a], [x[1] + x[3] for x in b], f"{name}: canvas height"
    )


def test_plan_canvas_is_the_draw_of_the_plan_stream():
    """The plan draws rl_draw_zoom_out first from its view's plan stream:
    the canvas of the draw's binding for the same key."""
    spec = spec_of(v2.RandomZoomOut(), v2.RandomHorizontalFlip())
    for i in range(500):
        p = _core.plan_window(spec, 70, 50, SEED, 0, i)
        d = _core.detect_draw_zoom_out((50, 70), seed=SEED, epoch=0, index=i)
        assert p["zoom_out"] == d["applied"]
        if d["applied"]:
            left, top = d["padding"][:2]
            ch, cw = d["canvas"]
            assert p["zoom_canvas"] == (left, top, cw, ch)
            assert (p["vw"], p["vh"]) == (70, 50)


def torch_zoom_iou(sets, size, kw, n=N):
    """torchvision's RandomZoomOut then RandomIoUCrop make_params on the
    padded image and boxes: (canvas, crop (left, top, h, w) or None)."""
    torch.manual_seed(TORCH_SEED)
    zoom, iou = v2.RandomZoomOut(**kw), v2.RandomIoUCrop()
    img = tv_tensors.Image(torch.zeros(1, *size, dtype=torch.uint8))
    out = []
    for i in range(n):
        bb = tv_tensors.BoundingBoxes(
            torch.from_numpy(sets[i % len(sets)]), format="XYXY", canvas_size=size
        )
        im = img
        if torch.rand(1) < zoom.p:
            pad = zoom.make_params([im, bb])
            im, bb = zoom.transform(im, pad), zoom.transform(bb, pad)
        q = iou.make_params([im, bb])
        crop = (q["left"], q["top"], q["height"], q["width"]) if q else None
        out.append((tuple(im.shape[-2:]), crop))
    return out


@pytest.mark.sweep
def test_iou_crops_on_the_canvas_distributed_as_torchvisions():
    """RandomZoomOut -> RandomIoUCrop: the plan's crops over N keys against
    N of torchvision's on the padded image and boxes (whether it crops,
    the crop's offsets and sides); every crop lies in its canvas and
    reaches its option with the boxes moved by the zoom-out's offset,
    which the unmoved boxes often do not."""
    size = (96, 128)
    sets = box_sets(16, size, seed=2)
    spec = spec_of(v2.RandomZoomOut(), v2.RandomIoUCrop())
    h, w = size
    ours, unmoved_fails, in_fill = [], 0, 0
    # A quarter of N: each of the two draws is compared over N on its own
    # (the canvases above, the IoU crop's in test_iou_crop_plan.py); this
    # is their composition, whose torchvision side costs the most.
    for i in range(N // 4):
        boxes = sets[i % 16]
        p = _core.plan_window(spec, w, h, SEED, 0, i, 0, boxes)
        left, top, cw, ch = canvas_of(p, size)
        if not p["iou_crop"]:
            assert p["iou_option"] >= 1.0 and (p["vw"], p["vh"]) == (w, h)
            ours.append(((ch, cw), None))
            continue
        x, y, bw, bh = p["iou_box"]
        assert 0 <= x and x + bw <= cw and 0 <= y and y + bh <= ch
        moved = boxes + [left, top, left, top]
        assert max_iou(moved, (x, y, bh, bw)) >= p["iou_option"]
        inside = (boxes[:, 0] + boxes[:, 2]) / 2
        unmoved_fails += not ((x < inside) & (inside < x + bw)).any()
        in_fill += x < left or y < top or x + bw > left + w or y + bh > top + h
        ours.append(((ch, cw), (x, y, bh, bw)))
    want = torch_zoom_iou(sets, size, {}, N // 4)
    same_categories(
        [c is None for _, c in ours], [c is None for _, c in want], "no crop"
    )
    a = [c for _, c in ours if c]
    b = [c for _, c in want if c]
    for k, what in enumerate(["left", "top", "height", "width"]):
        same_numbers([c[k] for c in a], [c[k] for c in b], what)
    same_numbers([c[0] for c, _ in ours], [c[0] for c, _ in want], "canvas height")
    assert unmoved_fails > 25 and in_fill > 250, (unmoved_fails, in_fill)


def test_same_key_same_canvas_and_epochs_differ():
    spec = spec_of(v2.RandomZoomOut(), v2.RandomIoUCrop())
    sets = box_sets(4, (60, 90), seed=8)

    def plans(epoch):
        return [
            _core.plan_window(spec, 90, 60, SEED, epoch, k, 0, sets[k % 4])
            for k in range(64)
        ]

    assert plans(0) == plans(0)
    assert plans(0) != plans(1)


# ---- targets ----


def zoom_iou_reference(value, p, boxes_xyxy, size):
    """torchvision's RandomZoomOut.transform, RandomIoUCrop.transform and
    horizontal_flip of one tv_tensor with the plan's parameters
    (``boxes_xyxy``: the sample's boxes, for the crop's centre test)."""
    h, w = size
    if p["zoom_out"]:
        left, top, cw, ch = p["zoom_canvas"]
        pad = dict(padding=[left, top, cw - w - left, ch - h - top])
        value = v2.RandomZoomOut(fill={tv_tensors.Mask: 0, "others": FILL}).transform(
            value, pad
        )
        boxes_xyxy = boxes_xyxy + [left, top, left, top]
        boxes_xyxy = F.clamp_bounding_boxes(
            tv_tensors.BoundingBoxes(
                torch.from_numpy(boxes_xyxy), format="XYXY", canvas_size=(ch, cw)
            )
        ).numpy()
    if p["iou_crop"]:
        params = iou_params(boxes_xyxy, *p["iou_box"])
        value = v2.RandomIoUCrop().transform(value, params)
    if p["flip"]:
        value = F.horizontal_flip(value)
    return value


CHAINS = {
    "zoom": lambda: [v2.RandomZoomOut(fill=FILL), v2.RandomHorizontalFlip()],
    "zoom+iou": lambda: [
        v2.RandomZoomOut(fill=FILL),
        v2.RandomIoUCrop(),
        v2.RandomHorizontalFlip(),
    ],
}


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("fmt", ["XYXY", "XYWH", "CXCYWH"])
def test_boxes_follow_torchvisions_transforms(chain, fmt):
    """plan_boxes against torchvision's RandomZoomOut (boxes moved and
    clamped to the canvas), RandomIoUCrop (clamped to the crop, the boxes
    whose centre it leaves out zeroed) and flip with the plan's
    parameters, within 1e-6 px in every format; keypoints likewise."""
    spec = spec_of(*CHAINS[chain]())
    rng = np.random.default_rng(5)
    seen = {"zoom": 0, "crop": 0, "flip": 0}
    for key in range(300):
        h, w = (int(v) for v in rng.integers(20, 200, size=2))
        xyxy = box_sets(1, (h, w), seed=key)[0]
        # one box past the image: clamped by the zoom-out's pad
        xyxy = np.concatenate([xyxy, [[-0.3 * w, 0.1 * h, 0.5 * w, 1.2 * h]]])
        boxes = F.convert_bounding_box_format(
            torch.from_numpy(xyxy), old_format="XYXY", new_format=fmt
        ).numpy()
        p = _core.plan_window(spec, w, h, SEED, 0, key, 0, xyxy)
        out, size = _core.plan_boxes(spec, w, h, SEED, 0, key, 0, boxes, fmt, xyxy)
        got = np.frombuffer(out, dtype=np.float64).reshape(-1, 4)
        bb = tv_tensors.BoundingBoxes(
            torch.from_numpy(boxes), format=fmt, canvas_size=(h, w)
        )
        want = zoom_iou_reference(bb, p, xyxy, (h, w))
        assert size == tuple(want.canvas_size), (key, p)
        assert max_diff(got, want.numpy()) <= 1e-6, (key, p)
        points = xyxy[:, :2].copy()
        kp_out, kp_size = _core.plan_keypoints(
            spec, w, h, SEED, 0, key, 0, points, xyxy
        )
        kp = tv_tensors.KeyPoints(torch.from_numpy(points), canvas_size=(h, w))
        kp_want = zoom_iou_reference(kp, p, xyxy, (h, w))
        kp_got = np.frombuffer(kp_out, dtype=np.float64).reshape(-1, 2)
        assert kp_size == size and max_diff(kp_got, kp_want.numpy()) <= 1e-6
        seen["zoom"] += p["zoom_out"]
        seen["crop"] += p["iou_crop"]
        seen["flip"] += p["flip"]
    assert seen["zoom"] > 100 and seen["flip"] > 100, seen
    assert seen["crop"] > 100 or chain == "zoom", seen


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_masks_follow_torchvisions_transforms(chain):
    """A mask sampled through plan_maps (padding: the Mask fill, 0) is
    torchvision's transforms of a tv_tensors.Mask with the plan's
    parameters, exactly."""
    spec = spec_of(*CHAINS[chain]())
    rng = np.random.default_rng(9)
    for key in range(80):
        h, w = (int(v) for v in rng.integers(10, 80, size=2))
        xyxy = box_sets(1, (h, w), seed=key)[0]
        mask = rng.integers(1, 255, size=(h, w), dtype=np.uint8)
        p = _core.plan_window(spec, w, h, SEED, 0, key, 0, xyxy)
        rows, cols = _core.plan_maps(spec, w, h, SEED, 0, key, 0, xyxy)
        r = np.frombuffer(rows, dtype=np.int32)
        c = np.frombuffer(cols, dtype=np.int32)
        got = np.where(
            (r[:, None] >= 0) & (c[None, :] >= 0), mask[r[:, None], c[None, :]], 0
        )
        want = zoom_iou_reference(
            tv_tensors.Mask(torch.from_numpy(mask)), p, xyxy, (h, w)
        )
        assert np.array_equal(got, want.numpy()), (key, p)


# ---- pixels through a Loader ----

SIZES = [(60, 80), (90, 70), (45, 120), (128, 96), (77, 51), (100, 100), (33, 64)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_png_jpeg(tmp_path_factory.mktemp("zoomout"), SIZES)


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_pixels_are_torchvisions(files, chain):
    """Each sample is torchvision's pad of its decoded image with the
    fill (R, G, B each its own), its crop where one was drawn (also
    reaching into the fill) and its flip, at the plan's parameters: PNG
    exactly, JPEG within the crop decode's 1 LSB."""
    transform = v2.Compose(CHAINS[chain]() + [v2.PILToTensor()])
    spec = compile_transform(transform, varying=True).spec
    assert (spec["fill_r"], spec["fill_g"], spec["fill_b"]) == FILL
    sets, table = boxes_table(files)
    seen = {"zoom": 0, "crop": 0, "flip": 0}
    for epoch, images in enumerate(load(files, table, transform, epochs=3)):
        for key, (path, im) in enumerate(zip(files, images)):
            pil = Image.open(path).convert("RGB")
            size = (pil.height, pil.width)
            p = _core.plan_window(
                spec, pil.width, pil.height, SEED, epoch, key, 0, sets[key]
            )
            want = zoom_iou_reference(v2.PILToTensor()(pil), p, sets[key], size)
            assert im.shape == want.shape, (path, p)
            diff = (im.int() - want.int()).abs().max().item()
            assert diff <= (0 if path.endswith(".png") else 1), (path, diff)
            seen["zoom"] += p["zoom_out"]
            seen["crop"] += p["iou_crop"]
            seen["flip"] += p["flip"]
    assert seen["zoom"] > 3 and seen["flip"] > 3, seen
    assert seen["crop"] > 3 or chain == "zoom", seen


def test_resume_gives_the_same_canvases(files):
    """Two epochs of one loader differ; a new loader's first epoch is the
    first's again (a canvas is a function of seed, epoch and key)."""
    _, table = boxes_table(files)
    transform = v2.Compose(CHAINS["zoom+iou"]() + [v2.PILToTensor()])
    first, second = load(files, table, transform, epochs=2)
    (again,) = load(files, table, transform)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert [im.shape for im in first] != [im.shape for im in second]


# ---- what is refused ----


def test_compiler_maps_the_options_and_refuses_one_size():
    fill = {tv_tensors.Mask: 0, "others": [1.0, 2.0, 3.0]}
    spec = spec_of(
        v2.ToImage(),
        v2.RandomZoomOut(fill=fill, side_range=(1.5, 2.5), p=0.25),
        v2.RandomIoUCrop(),
        v2.RandomHorizontalFlip(),
    )
    assert spec["zoom_side"] == (1.5, 2.5) and spec["zoom_p"] == 0.25
    assert (spec["fill_r"], spec["fill_g"], spec["fill_b"]) == (1, 2, 3)
    assert spec["iou_crop"] == 1 and spec["flip_p"] == 0.5
    with pytest.raises(UnsupportedTransform, match="size of its canvas"):
        compile_transform(v2.RandomZoomOut())
    with pytest.raises(UnsupportedTransform, match="side_range"):
        compile_transform(
            v2.RandomZoomOut(side_range=(1.0, float("inf"))), varying=True
        )
    with pytest.raises(UnsupportedTransform, match="varying sizes"):
        compile_transform(v2.Compose([v2.Resize(30), v2.RandomZoomOut()]), varying=True)
    with pytest.raises(UnsupportedTransform, match="varying sizes"):
        compile_transform(
            v2.Compose([v2.RandomIoUCrop(), v2.RandomZoomOut()]), varying=True
        )


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(zoom_side=(0.5, 2.0)), "RandomZoomOut: side_range"),
        (dict(zoom_side=(3.0, 2.0)), "RandomZoomOut: side_range"),
        (dict(zoom_p=1.5), "RandomZoomOut: p must"),
        (dict(zoom_out=2), "RandomZoomOut: zoom_out"),
        (dict(resize_short=20), "RandomZoomOut: zoom_out"),
        (dict(varying=0, out_h=8, out_w=8), "RandomZoomOut: zoom_out"),
    ],
)
def test_the_core_check_names_the_option(change, match):
    spec = spec_of(v2.RandomZoomOut())
    with pytest.raises(ValueError, match=match):
        _core.plan_window(dict(spec, **change), 40, 30, 1, 0, 0)


def test_a_canvas_past_the_largest_side_is_that_samples_error():
    spec = spec_of(v2.RandomZoomOut(side_range=(4.0, 4.0), p=1.0))
    with pytest.raises(ValueError, match="canvas: a side past 65535"):
        _core.plan_window(spec, 20000, 10, 1, 0, 0)
