"""torchvision's Resize(size, max_size=M) (v1 and v2) and v2's
Resize(None, max_size=M) fused (core/plan.c's shorter_side_size, the
spec's ``resize_max``): the output size is torchvision's own rule
(``_compute_resized_output_size``) on many sizes; the pixels are
torchvision's within 1 LSB (the bilinear bound of the fidelity and
varying-size tests), alone (images of varying sizes) and followed by a
crop; boxes follow the plan (``_core.plan_boxes``) as torchvision's
functional moves them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import ringloader
from ringloader import _core
from ringloader.errors import UnsupportedTransform
from ringloader.transforms import compile_transform

from images import psnr, write_png_jpeg
from test_boxes import max_diff, random_xyxy

tv = pytest.importorskip("torchvision.transforms")
v2 = pytest.importorskip("torchvision.transforms.v2")
F = pytest.importorskip("torchvision.transforms.v2.functional")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
_geometry = pytest.importorskip("torchvision.transforms.v2.functional._geometry")

SEED = 11
# (h, w): portrait, landscape, square and extreme aspects, where max_size
# bites and where it does not
SIZES = [(30, 40), (50, 20), (64, 64), (17, 33), (120, 90), (41, 77), (9, 13)]
SIZES += [(260, 300), (70, 21), (25, 60), (200, 31)]


def torchvision_size(h, w, size, max_size):
    """torchvision's own (h, w) for the resize."""
    return tuple(
        _geometry._compute_resized_output_size(
            (h, w),
            None if size is None else [size],
            max_size=max_size,
        )
    )


def planned_size(transform, w, h, key=0):
    spec = compile_transform(transform, varying=True).spec
    p = _core.plan_window(spec, w, h, SEED, 0, key)
    return p["vh"], p["vw"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_png_jpeg(tmp_path_factory.mktemp("shortest"), SIZES)


def close_to(transform, varying, key, path, im, want):
    """torchvision's pixels within the project's bounds: 1 LSB without
    DCT scaling (bilinear, as Pillow), >= 35 dB with it."""
    spec = compile_transform(transform, varying=varying).spec
    h, w = Image.open(path).size[::-1]
    assert im.shape == want.shape, path
    if _core.dct_scale(spec, w, h, SEED, 0, key) == 8:
        diff = (im.int() - want.int()).abs().max().item()
        assert diff <= 1, (path, diff)
    else:
        assert psnr(im.numpy(), want.numpy()) >= 35.0, path


def planned_boxes(spec, seed, n=200):
    """n random sizes' boxes through the spec's plan of key 0..n-1:
    (plan, mapped boxes, output size, the input as tv_tensors)."""
    rng = np.random.default_rng(seed)
    for key in range(n):
        w, h = (int(v) for v in rng.integers(12, 400, size=2))
        boxes = random_xyxy(rng, 8, h, w)
        p = _core.plan_window(spec, w, h, SEED, 0, key)
        out, size = _core.plan_boxes(spec, w, h, SEED, 0, key, 0, boxes, "XYXY")
        got = np.frombuffer(out, dtype=np.float64).reshape(-1, 4)
        t = tv_tensors.BoundingBoxes(
            torch.from_numpy(boxes), format="XYXY", canvas_size=(h, w)
        )
        yield p, got, size, t


def check_cropped(files, cropped):
    """A resize drawn per sample, then RandomCrop(20): torchvision's pixels
    at the plan's resized size and window."""
    spec = compile_transform(cropped).spec
    assert spec["kind"] == "resize_random_crop" and spec["out_h"] == 20
    images = load(files, cropped, varying=False)
    assert len(images) == len(files)
    for key, (path, im) in enumerate(zip(files, images)):
        pil = Image.open(path).convert("RGB")
        p = _core.plan_window(spec, pil.width, pil.height, SEED, 0, key)
        resized = F.resize(pil, [p["rh"], p["rw"]])
        want = v2.PILToTensor()(F.crop(resized, p["wy"], p["wx"], 20, 20))
        close_to(cropped, False, key, path, im, want)
    return spec


def planned_images(files, transform, spec, varying=True):
    """Each file through transform by a Loader, with its plan: (key,
    path, the PIL image, the loaded tensor, the plan)."""
    images = load(files, transform, varying=varying)
    assert len(images) == len(files)
    for key, (path, im) in enumerate(zip(files, images)):
        pil = Image.open(path).convert("RGB")
        p = _core.plan_window(spec, pil.width, pil.height, SEED, 0, key)
        yield key, path, pil, im, p


def load(paths, transform, varying=True, **kw):
    ds = ringloader.FileList(paths, list(range(len(paths))), transform=transform)
    with ringloader.Loader(ds, seed=SEED, batch_size=4, num_threads=2, **kw) as ld:
        batches = list(ld)
    if varying:
        return [im for images, _ in batches for im in images]
    return [im for images, _ in batches for im in images.unbind(0)]


# ---- the output size rule ----


def test_size_rule_is_torchvisions_on_many_sizes():
    rng = np.random.default_rng(3)
    checked = bitten = 0
    for _ in range(1500):
        h, w = (int(v) for v in rng.integers(1, 3000, size=2))
        if rng.random() < 0.3:  # extreme aspects
            h = int(rng.integers(1, 12))
        size = int(rng.integers(1, 900))
        max_size = size + int(rng.integers(1, 1500))
        want = torchvision_size(h, w, size, max_size)
        if min(want) < 1 or max(want) > _core.MAX_SIDE:
            continue  # torchvision fails on it too / past the core's side
        cls = v2.Resize if checked % 2 else tv.Resize
        got = planned_size(cls(size, max_size=max_size), w, h)
        assert got == want, (h, w, size, max_size)
        bitten += max(want) == max_size
        checked += 1
    assert checked > 1000 and bitten > 200


def test_size_none_resizes_the_longer_side():
    rng = np.random.default_rng(4)
    for _ in range(500):
        h, w = (int(v) for v in rng.integers(1, 2000, size=2))
        max_size = int(rng.integers(1, 1200))
        want = torchvision_size(h, w, None, max_size)
        if min(want) < 1:
            continue
        assert planned_size(v2.Resize(None, max_size=max_size), w, h) == want


def test_max_size_not_past_size_is_refused():
    spec = {"kind": "resize_crop", "resize_short": 30, "resize_max": 30, "varying": 1}
    with pytest.raises(ValueError, match="resize_max"):
        _core.plan_window(spec, 40, 40, SEED, 0, 0)
    with pytest.raises(UnsupportedTransform, match="varying sizes; add a crop"):
        compile_transform(tv.Compose([tv.Resize(24, max_size=30), tv.PILToTensor()]))


# ---- the pixels ----


SHORT_V1 = tv.Compose([tv.Resize(24, max_size=30), tv.PILToTensor()])
SHORT_V2 = v2.Compose([v2.Resize(24, max_size=30), v2.PILToTensor()])
LONG_V2 = v2.Compose([v2.Resize(None, max_size=40), v2.PILToTensor()])


@pytest.mark.parametrize("transform", [SHORT_V1, SHORT_V2, LONG_V2])
def test_pixels_alone_are_torchvisions(files, transform):
    images = load(files, transform)
    assert len(images) == len(files)
    for key, (path, im) in enumerate(zip(files, images)):
        want = transform(Image.open(path).convert("RGB"))
        close_to(transform, True, key, path, im, want)


def test_pixels_with_a_crop_are_torchvisions(files):
    transform = tv.Compose(
        [tv.Resize(24, max_size=30), tv.CenterCrop(20), tv.PILToTensor()]
    )
    images = load(files, transform, varying=False)
    assert len(images) == len(files)
    for key, (path, im) in enumerate(zip(files, images)):
        want = transform(Image.open(path).convert("RGB"))
        assert want.shape == (3, 20, 20)
        close_to(transform, False, key, path, im, want)


# ---- boxes ----


@pytest.mark.parametrize("crop", [None, 12])
def test_boxes_follow_torchvisions_resize(crop):
    """The crop inside the resized image (where it pads, torchvision's
    boxes and pixels differ: test_plan_boxes)."""
    rng = np.random.default_rng(5)
    steps = [v2.Resize(24, max_size=30)] + ([v2.CenterCrop(crop)] if crop else [])
    spec = compile_transform(v2.Compose(steps), varying=crop is None).spec
    checked = 0
    for _ in range(200):
        w = int(rng.integers(12, 400))
        h = int(w * rng.uniform(0.4, 2.5)) + 1
        boxes = random_xyxy(rng, 8, h, w)
        out, size = _core.plan_boxes(spec, w, h, SEED, 0, 0, 0, boxes, "XYXY")
        got = np.frombuffer(out, dtype=np.float64).reshape(-1, 4)
        t = tv_tensors.BoundingBoxes(
            torch.from_numpy(boxes), format="XYXY", canvas_size=(h, w)
        )
        t = F.resize(t, [24], max_size=30)
        if crop:
            t = F.center_crop(t, [crop, crop])
        assert size == tuple(t.canvas_size), (w, h)
        want = t.as_subclass(torch.Tensor).double().numpy()
        assert max_diff(got, want) < 1e-6, (w, h)
        checked += 1
    assert checked == 200


# ---- v2's RandomResize: the shorter side drawn per sample ----


RANDOM_RESIZE = v2.Compose([v2.RandomResize(20, 26), v2.PILToTensor()])


def test_random_resize_draw_is_uniform_and_the_size_rule_holds():
    spec = compile_transform(RANDOM_RESIZE, varying=True).spec
    assert spec["resize_short"] == 20 and spec["resize_short_hi"] == 26
    counts = dict.fromkeys(range(20, 26), 0)
    n = 6000
    for key in range(n):
        w, h = (50, 40) if key % 2 else (33, 91)
        p = _core.plan_window(spec, w, h, SEED, 0, key)
        s = min(p["vh"], p["vw"])
        assert (p["vh"], p["vw"]) == torchvision_size(h, w, s, None)
        counts[s] += 1
    # each of 6 sizes 1000 times expected (sd 29): 6 sd either side
    assert len(counts) == 6, counts
    assert all(820 <= c <= 1180 for c in counts.values()), counts


def test_random_resize_same_key_same_size_and_epochs_differ():
    spec = compile_transform(RANDOM_RESIZE, varying=True).spec

    def sizes(epoch):
        return [
            _core.plan_window(spec, 64, 48, SEED, epoch, k)["vh"] for k in range(64)
        ]

    assert sizes(0) == sizes(0)
    assert sizes(0) != sizes(1)


def test_random_resize_pixels_alone_and_cropped(files):
    spec = compile_transform(RANDOM_RESIZE, varying=True).spec
    images = load(files, RANDOM_RESIZE)
    assert len(images) == len(files)
    for key, (path, im) in enumerate(zip(files, images)):
        pil = Image.open(path).convert("RGB")
        p = _core.plan_window(spec, pil.width, pil.height, SEED, 0, key)
        s = min(p["vh"], p["vw"])
        want = v2.PILToTensor()(F.resize(pil, [s]))
        close_to(RANDOM_RESIZE, True, key, path, im, want)
    cropped = v2.Compose([v2.RandomResize(24, 40), v2.RandomCrop(20), v2.PILToTensor()])
    assert check_cropped(files, cropped)["resize_short_hi"] == 40


def test_random_resize_boxes_follow_the_drawn_size():
    spec = compile_transform(RANDOM_RESIZE, varying=True).spec
    for p, got, size, t in planned_boxes(spec, 6):
        t = F.resize(t, [min(p["vh"], p["vw"])])
        assert size == tuple(t.canvas_size) == (p["vh"], p["vw"])
        assert max_diff(got, t.as_subclass(torch.Tensor).double().numpy()) < 1e-6


def test_random_resize_alone_needs_a_varying_caller():
    with pytest.raises(UnsupportedTransform, match="RandomResize alone"):
        compile_transform(RANDOM_RESIZE)


# ---- v2's RandomShortestSize: a size drawn from a list, its own rule ----


MULTISCALE = [480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800]
SHORTEST = v2.Compose(
    [
        v2.RandomShortestSize([16, 20, 24, 28], max_size=40),
        v2.RandomHorizontalFlip(),
        v2.PILToTensor(),
    ]
)


def shortest_size_of(h, w, min_size, max_size):
    """torchvision's own size for one min_size (its make_params)."""
    t = v2.RandomShortestSize([min_size], max_size)
    canvas = tv_tensors.BoundingBoxes(
        torch.zeros(0, 4), format="XYXY", canvas_size=(h, w)
    )
    return tuple(t.make_params([canvas])["size"])


def test_random_shortest_size_rule_is_torchvisions():
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(800):
        h, w = (int(v) for v in rng.integers(1, 3000, size=2))
        m = int(rng.integers(1, 1000))
        max_size = None if checked % 3 == 0 else int(rng.integers(1, 2000))
        want = shortest_size_of(h, w, m, max_size)
        if min(want) < 1 or max(want) > _core.MAX_SIDE:
            continue
        spec = compile_transform(
            v2.RandomShortestSize([m], max_size), varying=True
        ).spec
        p = _core.plan_window(spec, w, h, SEED, 0, checked)
        assert (p["vh"], p["vw"]) == want, (h, w, m, max_size)
        checked += 1
    assert checked > 600


def test_random_shortest_size_draw_is_uniform_over_the_list():
    t = v2.Compose([v2.RandomShortestSize(MULTISCALE, 1333), v2.PILToTensor()])
    spec = compile_transform(t, varying=True).spec
    assert spec["short_sizes"] == MULTISCALE and spec["resize_max"] == 1333
    counts = dict.fromkeys(MULTISCALE, 0)
    for key in range(11000):
        p = _core.plan_window(spec, 640, 480, SEED, 0, key)
        counts[p["vh"]] += 1  # 480 rows: the shorter side, max_size unbound
    # 1000 expected each (sd 30): 5 sd either side
    assert len(counts) == len(MULTISCALE), counts
    assert all(850 <= c <= 1150 for c in counts.values()), counts
    again = [_core.plan_window(spec, 640, 480, SEED, 0, k)["vh"] for k in range(64)]
    other = [_core.plan_window(spec, 640, 480, SEED, 1, k)["vh"] for k in range(64)]
    first = [_core.plan_window(spec, 640, 480, SEED, 0, k)["vh"] for k in range(64)]
    assert again == first and other != first


def test_random_shortest_size_pixels_and_boxes(files):
    spec = compile_transform(SHORTEST, varying=True).spec
    flips = set()
    for key, path, pil, im, p in planned_images(files, SHORTEST, spec):
        want = F.resize(pil, [p["vh"], p["vw"]])
        want = v2.PILToTensor()(F.horizontal_flip(want) if p["flip"] else want)
        flips.add(p["flip"])
        close_to(SHORTEST, True, key, path, im, want)
    assert flips == {True, False}
    for p, got, size, t in planned_boxes(spec, 8):
        t = F.resize(t, [p["vh"], p["vw"]])
        t = F.horizontal_flip(t) if p["flip"] else t
        assert size == tuple(t.canvas_size) == (p["vh"], p["vw"])
        assert max_diff(got, t.as_subclass(torch.Tensor).double().numpy()) < 1e-6


def test_random_shortest_size_with_a_crop_has_one_size(files):
    cropped = v2.Compose(
        [v2.RandomShortestSize([24, 32], 200), v2.RandomCrop(20), v2.PILToTensor()]
    )
    assert check_cropped(files, cropped)["short_sizes"] == [24, 32]


@pytest.mark.parametrize(
    "fields, why",
    [
        (dict(short_sizes=[0, 20]), "short_sizes must hold"),
        (dict(short_sizes=list(range(1, 40))), "at most 32 sizes"),
        (dict(short_sizes=[20], resize_short=10), "short_sizes must hold"),
        (dict(resize_short=20, resize_short_hi=20), "resize_short_hi"),
        (dict(resize_short=20, resize_short_hi=30, resize_max=40), "resize_short_hi"),
    ],
)
def test_bad_fields_are_refused_by_name(fields, why):
    spec = dict(kind="resize_crop", varying=1, **fields)
    with pytest.raises(ValueError, match=why):
        _core.plan_window(spec, 40, 40, SEED, 0, 0)


def test_an_image_max_size_leaves_no_row_is_that_samples_error():
    spec = compile_transform(v2.Resize(None, max_size=10), varying=True).spec
    with pytest.raises(ValueError, match=r"max_size 10\) leaves the 100x1 image"):
        _core.plan_window(spec, 100, 1, SEED, 0, 0)


# ---- geometry after ToImage (torchvision's detection presets) ----


@pytest.mark.parametrize("crop", [False, "bilinear", "bicubic"])
def test_geometry_after_to_image_is_torchvisions_tensor_path(files, crop):
    """A resize, crop and flip after ToImage run on a uint8 tensor in
    torchvision (its antialiased resize, bilinear or bicubic); fused, the
    pixels are within the same bounds of it."""
    mode = v2.InterpolationMode.BICUBIC if crop == "bicubic" else None
    geometry = (
        [
            v2.RandomResizedCrop(
                20,
                scale=(0.3, 1.0),
                interpolation=mode or v2.InterpolationMode.BILINEAR,
            )
        ]
        if crop
        else [v2.RandomShortestSize([16, 24, 28], 40)]
    )
    tf = v2.Compose([v2.ToImage()] + geometry + [v2.RandomHorizontalFlip()])
    spec = compile_transform(tf, varying=True).spec
    images = load(files, tf, varying=not crop)
    assert len(images) == len(files)
    for key, (path, im) in enumerate(zip(files, images)):
        pil = Image.open(path).convert("RGB")
        p = _core.plan_window(spec, pil.width, pil.height, SEED, 0, key)
        x = v2.ToImage()(pil)
        if crop:
            box = [int(p[k]) for k in ("y", "x", "h", "w")]
            kw = {"interpolation": mode} if mode else {}
            want = F.resized_crop(x, *box, [20, 20], antialias=True, **kw)
        else:
            want = F.resize(x, [p["vh"], p["vw"]], antialias=True)
        want = F.horizontal_flip(want) if p["flip"] else want
        close_to(tf, True, key, path, im, want.as_subclass(torch.Tensor))
