"""v2's RandomIoUCrop fused in the plan (core/plan_iou.c): each sample's
crop is drawn from its plan stream reading its own boxes (the pipeline's
boxes table, ``Sources.plan_boxes``), its pixels are that crop (a varying
output, a flip after it), and ``_core.plan_boxes`` maps its boxes through
the same crop as torchvision's transform does (clamped, the boxes whose
centre it leaves out zeroed). The crops are held to torchvision's own
make_params on the same boxes (20,000 a side: chi-square for categories,
two-sample KS for numbers, fixed seeds)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from draws import same_categories
from PIL import Image
from scipy import stats

import ringloader
from ringloader import _core
from ringloader.errors import UnsupportedTransform
from ringloader.transforms import compile_transform

from images import write_png_jpeg
from test_boxes import max_diff
from test_detect_draws import IOU_SETTINGS, box_iou, random_images

v2 = pytest.importorskip("torchvision.transforms.v2")
F = pytest.importorskip("torchvision.transforms.v2.functional")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")

N = 20_000
SEED = 1234
TORCH_SEED = 7  # torchvision's side
OPTIONS = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]
NARROW = next(s[3] for s in IOU_SETTINGS if s[0] == "narrow")


def spec_of(**kw):
    return compile_transform(v2.RandomIoUCrop(**kw), varying=True).spec


def box_sets(count, canvas, seed):
    """count arrays of 1..4 random XYXY boxes inside canvas (h, w)."""
    return random_images(count, canvas, (0.3, 0.95), seed)


def plan_of(spec, canvas, boxes, key, epoch=0):
    h, w = canvas
    return _core.plan_window(spec, w, h, SEED, epoch, key, 0, boxes)


def max_iou(boxes, crop):
    """The largest IoU with the crop (left, top, h, w) of the boxes whose
    centre it holds."""
    left, top, ch, cw = crop
    right, bottom = left + cw, top + ch
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    inside = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
    return float(np.max(box_iou(boxes[inside], (left, top, right, bottom))))


@pytest.mark.sweep
@pytest.mark.parametrize(
    "canvas,kw", [((480, 640), {}), ((301, 207), NARROW)], ids=["defaults", "narrow"]
)
def test_plan_crops_distributed_as_torchvisions(canvas, kw):
    """The plan's crops over N keys against N of torchvision's make_params
    on the same boxes: whether it crops, each side, the offsets, the scale
    and aspect, and which of the options the crop's best IoU passes."""
    sets = box_sets(16, canvas, seed=5)
    spec = spec_of(**kw)
    h, w = canvas
    ours, options = [], []
    for i in range(N):
        p = plan_of(spec, canvas, sets[i % 16], i)
        assert not p["iou_limited"] and p["iou_option"] in kw.get(
            "sampler_options", OPTIONS
        )
        if p["iou_crop"]:
            crop = (int(p["x"]), int(p["y"]), int(p["h"]), int(p["w"]))
            assert (p["vw"], p["vh"]) == (crop[3], crop[2])
            assert max_iou(sets[i % 16], crop) >= p["iou_option"]
            ours.append(crop)
            options.append(p["iou_option"])
        else:
            assert (p["x"], p["y"], p["vw"], p["vh"]) == (0, 0, w, h)
            assert p["iou_option"] >= 1.0
            ours.append(None)
    torch.manual_seed(TORCH_SEED)
    t = v2.RandomIoUCrop(**kw)
    img = tv_tensors.Image(torch.zeros(1, h, w, dtype=torch.uint8))
    bbs = [
        tv_tensors.BoundingBoxes(torch.from_numpy(b), format="XYXY", canvas_size=canvas)
        for b in sets
    ]
    want = []
    for i in range(N):
        q = t.make_params([img, bbs[i % 16]])
        want.append((q["left"], q["top"], q["height"], q["width"]) if q else None)

    same_categories([c is None for c in ours], [c is None for c in want], "no crop")
    a = [c for c in ours if c]
    b = [c for c in want if c]
    # (each side's scale is its side over the image's: height, width)
    for k, what in enumerate(["left", "top", "height", "width", "aspect"]):
        p = stats.ks_2samp(
            [c[k] if k < 4 else c[3] / c[2] for c in a],
            [c[k] if k < 4 else c[3] / c[2] for c in b],
        ).pvalue
        assert p > 0.01, (what, p)
    opts = sorted(kw.get("sampler_options", OPTIONS))

    def passed(c, i):
        return sum(o <= max_iou(sets[i % 16], c) for o in opts)

    same_categories(
        [passed(c, i) for i, c in enumerate(ours) if c],
        [passed(c, i) for i, c in enumerate(want) if c],
        "options passed",
    )
    # every option drawn at some key (the last one drawn: the one met)
    assert set(options) == {o for o in opts if o < 1.0}


def test_plan_crop_is_the_draw_of_the_plan_stream():
    """The plan draws with rl_draw_iou_crop from the start of its view's
    plan stream: the same crop, option and rounds as the draw's binding."""
    sets = box_sets(8, (120, 160), seed=3)
    spec = spec_of()
    for i in range(500):
        p = plan_of(spec, (120, 160), sets[i % 8], i)
        d = _core.detect_draw_iou_crop((120, 160), sets[i % 8].tolist(), SEED, 0, i)
        crop = (int(p["y"]), int(p["x"]), int(p["h"]), int(p["w"]))
        assert (crop if p["iou_crop"] else None) == d["crop"]
        assert (p["iou_option"], p["iou_rounds"]) == (d["option"], d["rounds"])


def test_same_key_same_crop_and_epochs_differ():
    sets = box_sets(4, (200, 300), seed=9)
    spec = spec_of()

    def crops(epoch):
        return [
            tuple(plan_of(spec, (200, 300), sets[k % 4], k, epoch)[f] for f in "xywh")
            for k in range(64)
        ]

    assert crops(0) == crops(0)
    assert crops(0) != crops(1)


def test_a_sample_without_boxes_is_left_whole():
    """No box: torchvision's loop ends only on an option >= 1.0 (no crop);
    without such an option it would never end, and the plan stops at
    RL_IOU_CROP_MAX_ROUNDS, uncropped, the image as it is."""
    none = np.zeros((0, 4))
    for k in range(50):
        p = plan_of(spec_of(), (40, 60), none, k)
        assert not p["iou_crop"] and not p["iou_limited"]
        assert (p["vw"], p["vh"]) == (60, 40)
    torch.manual_seed(0)
    t = v2.RandomIoUCrop()
    img = tv_tensors.Image(torch.zeros(1, 40, 60, dtype=torch.uint8))
    empty = tv_tensors.BoundingBoxes(
        torch.zeros(0, 4), format="XYXY", canvas_size=(40, 60)
    )
    assert all(t.make_params([img, empty]) == {} for _ in range(50))
    p = plan_of(spec_of(sampler_options=[0.5]), (40, 60), none, 0)
    assert p["iou_limited"] and not p["iou_crop"] and p["iou_rounds"] == 1000
    assert (p["vw"], p["vh"]) == (60, 40)


# ---- boxes ----


def iou_params(xyxy, x, y, w, h):
    """RandomIoUCrop.transform's parameters for the crop (x, y, w, h) of
    the XYXY boxes' canvas: the boxes whose centre lies strictly inside."""
    cx, cy = (xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2
    inside = (x < cx) & (cx < x + w) & (y < cy) & (cy < y + h)
    return dict(
        top=y, left=x, height=h, width=w, is_within_crop_area=torch.from_numpy(inside)
    )


@pytest.mark.parametrize("fmt", ["XYXY", "XYWH", "CXCYWH"])
@pytest.mark.parametrize("flip", [False, True])
def test_boxes_follow_torchvisions_transform(fmt, flip):
    """plan_boxes against torchvision's RandomIoUCrop.transform with the
    plan's crop (clamped to it, the boxes whose centre it leaves out
    zeroed), then its horizontal flip where the plan drew one."""
    transform = v2.Compose([v2.RandomIoUCrop(), v2.RandomHorizontalFlip(0.5)])
    spec = compile_transform(transform, varying=True).spec
    assert spec["iou_crop"] == 1 and spec["flip_p"] == 0.5
    rng = np.random.default_rng(21)
    t = v2.RandomIoUCrop()
    seen = {True: 0, False: 0}
    for key in range(300):
        h, w = (int(v) for v in rng.integers(20, 300, size=2))
        xyxy = box_sets(1, (h, w), seed=key)[0]
        xyxy = np.concatenate([xyxy, [[0.2 * w, 0.1 * h, 0.3 * w, 0.2 * h]]])
        boxes = F.convert_bounding_box_format(
            torch.from_numpy(xyxy), old_format="XYXY", new_format=fmt
        ).numpy()
        p = _core.plan_window(spec, w, h, SEED, 0, key, 0, xyxy)
        if p["flip"] != flip:
            continue
        out, size = _core.plan_boxes(spec, w, h, SEED, 0, key, 0, boxes, fmt, xyxy)
        got = np.frombuffer(out, dtype=np.float64).reshape(-1, 4)
        bb = tv_tensors.BoundingBoxes(
            torch.from_numpy(boxes), format=fmt, canvas_size=(h, w)
        )
        params = {}
        if p["iou_crop"]:
            params = iou_params(xyxy, *(int(p[k]) for k in "xywh"))
        want = t.transform(bb, params)
        if flip:
            want = F.horizontal_flip(want)
        assert size == tuple(want.canvas_size)
        assert max_diff(got, want.numpy()) <= 1e-6, (key, p)
        # the default plan boxes are the boxes given
        again, _ = _core.plan_boxes(spec, w, h, SEED, 0, key, 0, boxes, fmt)
        assert again == out
        seen[bool(p["iou_crop"])] += 1
    assert seen[True] > 20 and seen[False] > 5, seen


# ---- pixels through a Loader ----

SIZES = [(60, 80), (90, 70), (45, 120), (128, 96), (77, 51), (100, 100)]


class BoxedFiles(ringloader.FileList):
    """A FileList whose sources carry a boxes table."""

    def __init__(self, paths, table, **kw):
        super().__init__(paths, list(range(len(paths))), **kw)
        self.table = table

    def ringloader_sources(self):
        return dataclasses.replace(super().ringloader_sources(), plan_boxes=self.table)


def boxes_table(paths, seed=4):
    sets = []
    for k, path in enumerate(paths):
        h, w = Image.open(path).size[::-1]
        sets.append(
            box_sets(1, (h, w), seed=seed + k)[0] if k != 2 else np.zeros((0, 4))
        )
    offsets = np.cumsum([0] + [len(s) for s in sets]).astype(np.int64)
    return sets, (np.concatenate(sets), offsets)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_png_jpeg(tmp_path_factory.mktemp("ioucrop"), SIZES)


def load(paths, table, transform, epochs=1):
    ds = BoxedFiles(paths, table, transform=transform)
    out = []
    with ringloader.Loader(ds, seed=SEED, batch_size=4, num_threads=2) as ld:
        for _ in range(epochs):
            out.append([im for images, _ in ld for im in images])
    return out


@pytest.mark.parametrize("flip", [False, True])
def test_pixels_are_torchvisions_crop(files, flip):
    """Each sample is torchvision's crop of its decoded image at the plan's
    box (PNG exactly, JPEG within the crop decode's 1 LSB), flipped where
    the plan drew a flip; the third sample has no box and stays whole."""
    steps = [v2.RandomIoUCrop()] + ([v2.RandomHorizontalFlip()] if flip else [])
    transform = v2.Compose(steps + [v2.PILToTensor()])
    spec = compile_transform(transform, varying=True).spec
    sets, table = boxes_table(files)
    (images,) = load(files, table, transform)
    assert len(images) == len(files)
    flips = 0
    for key, (path, im) in enumerate(zip(files, images)):
        pil = Image.open(path).convert("RGB")
        p = _core.plan_window(spec, pil.width, pil.height, SEED, 0, key, 0, sets[key])
        want = v2.PILToTensor()(pil)
        if p["iou_crop"]:
            want = F.crop(want, int(p["y"]), int(p["x"]), int(p["h"]), int(p["w"]))
        else:
            assert key == 2 or p["iou_option"] >= 1.0
        if p["flip"]:
            want = F.horizontal_flip(want)
            flips += 1
        assert im.shape == want.shape, (path, p)
        diff = (im.int() - want.int()).abs().max().item()
        assert diff <= (0 if path.endswith(".png") else 1), (path, diff)
    assert flips == 0 if not flip else flips > 0


def test_resume_gives_the_same_crops(files):
    """Two epochs of one loader differ; a new loader's first epoch is the
    first's again (a crop is a function of seed, epoch, key and boxes)."""
    _, table = boxes_table(files)
    transform = v2.Compose([v2.RandomIoUCrop(), v2.PILToTensor()])
    first, second = load(files, table, transform, epochs=2)
    (again,) = load(files, table, transform)
    assert [im.shape for im in first] == [im.shape for im in again]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert [im.shape for im in first] != [im.shape for im in second]


def test_a_replacement_reads_its_own_boxes(files, tmp_path):
    """on_error="skip": a sample that fails is replaced by the next of its
    dataset, whose plan reads that sample's rows of the table (by its id),
    with the replacement's own key."""
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    paths = [str(bad)] + files[:3]
    sets, table = boxes_table(files[:3])
    sets = [np.array([[0.0, 0.0, 5.0, 5.0]])] + sets
    table = (np.concatenate(sets), np.cumsum([0] + [len(b) for b in sets]))
    # (option 0 alone: a crop is drawn wherever a box is)
    transform = v2.Compose([v2.RandomIoUCrop(sampler_options=[0.0]), v2.PILToTensor()])
    spec = compile_transform(transform, varying=True).spec
    ds = BoxedFiles(paths, table, transform=transform)
    with ringloader.Loader(ds, seed=SEED, batch_size=4, on_error="skip") as ld:
        with pytest.warns(ringloader.DataWarning, match="skipped"):
            (images, _), *_ = list(ld)
    key = (1 << _core.KEY_REPLACEMENT_BIT) | (1 << _core.KEY_ATTEMPT_SHIFT)
    pil = Image.open(paths[1]).convert("RGB")
    p = _core.plan_window(spec, pil.width, pil.height, SEED, 0, key, 0, sets[1])
    # (the failed sample's boxes would give another crop)
    other = _core.plan_window(spec, pil.width, pil.height, SEED, 0, key, 0, sets[0])
    assert tuple(p[k] for k in "xywh") != tuple(other[k] for k in "xywh")
    assert p["iou_crop"]
    want = F.crop(
        v2.PILToTensor()(pil), int(p["y"]), int(p["x"]), int(p["h"]), int(p["w"])
    )
    assert torch.equal(images[0], want)


# ---- what is refused ----


def test_no_table_is_refused(files):
    ds = ringloader.FileList(
        files, list(range(len(files))), transform=v2.RandomIoUCrop()
    )
    with pytest.raises(ValueError, match=r"boxes table \(plan_boxes\)"):
        with ringloader.Loader(ds, batch_size=2) as ld:
            next(iter(ld))


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda b, o: (b, o[::-1].copy()), "plan_boxes: offset"),
        (lambda b, o: (b, o[:-1].copy()), "plan_boxes offsets has"),
        (lambda b, o: (np.where(b == b.max(), np.nan, b), o), "NaN"),
        (lambda b, o: (b[:-1], o), "plan_boxes: offset"),
        (lambda b, o: (b.astype(np.float32), o), "plan_boxes boxes"),
        (lambda b, o: (b, o.astype(np.int32)), "plan_boxes offsets"),
    ],
)
def test_bad_tables_are_refused(files, change, match):
    _, (boxes, offsets) = boxes_table(files)
    table = change(boxes, offsets)
    ds = BoxedFiles(files, table, transform=v2.RandomIoUCrop())
    with pytest.raises((ValueError, TypeError), match=match):
        with ringloader.Loader(ds, batch_size=2) as ld:
            next(iter(ld))


def test_compiler_maps_the_options_and_refuses_one_size():
    spec = compile_transform(
        v2.Compose(
            [v2.ToImage(), v2.RandomIoUCrop(**NARROW), v2.RandomHorizontalFlip()]
        ),
        varying=True,
    ).spec
    assert spec["iou_scale"] == (0.5, 0.9) and spec["iou_aspect"] == (0.7, 1.6)
    assert spec["iou_options"] == [0.1, 0.3, 0.5] and spec["iou_trials"] == 10
    assert spec["varying"] == 1 and spec["flip_p"] == 0.5
    with pytest.raises(UnsupportedTransform, match="size of its crop"):
        compile_transform(v2.RandomIoUCrop())
    with pytest.raises(UnsupportedTransform, match="max_scale"):
        compile_transform(v2.RandomIoUCrop(max_scale=1.5), varying=True)
    with pytest.raises(UnsupportedTransform, match="varying sizes"):
        compile_transform(
            v2.Compose([v2.RandomIoUCrop(), v2.Resize((32, 32))]), varying=True
        )
    with pytest.raises(ValueError, match="max_scale"):
        _core.plan_window(dict(spec, iou_scale=(0.3, 1.5)), 40, 40, 1, 0, 0)
