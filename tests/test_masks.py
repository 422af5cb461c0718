"""COCO segmentation masks (csrc/targets): polygons and RLEs rasterized and
sampled through per-axis index maps must be identical to pycocotools' full
mask (torchvision's path: frPyObjects, merge, decode) put through
torchvision's own geometry on a tv_tensors.Mask: nearest resize, crop, flips
and pads. Random polygons of every kind (convex, self-intersecting, tiny,
huge, on pixel edges, at .5, outside the image), RLEs from pycocotools'
encode, and each bad input's error."""

import math

import numpy as np
import pytest
import torch
from pycocotools import mask as coco_mask
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as F

from ringloader import _core

# pycocotools' own numpy 2 deprecation (np.array(..., copy=False) on its
# RLE objects), once a call: not about what is tested.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)

# --- the reference: pycocotools' mask, torchvision's geometry ---


def coco_polygons(polygons, h, w):
    """torchvision's conversion of a COCO polygon list (its CocoDetection
    wrapper): frPyObjects, merge, decode."""
    return coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(polygons, h, w)))


def nearest_rows(n_in, n_out):
    """The source index of each output index of torch's nearest
    interpolation: floor(dst * scale), the scale in float32 as torch
    computes it, clamped to the last index."""
    if n_in == n_out:
        return np.arange(n_out, dtype=np.int32)
    scale = np.float32(n_in) / np.float32(n_out)
    src = (np.arange(n_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(src, n_in - 1).astype(np.int32)


def take(index, at):
    """index[at], -1 where at is -1 or outside index."""
    ok = (at >= 0) & (at < len(index))
    return np.where(ok, index[np.clip(at, 0, len(index) - 1)], -1).astype(np.int32)


def random_geometry(rng, h, w, fill):
    """A random chain of torchvision ops, as (name, args) steps."""
    steps = []
    if rng.random() < 0.85:
        oh = int(rng.integers(1, 3 * h + 2))
        ow = int(rng.integers(1, 3 * w + 2))
        steps.append(("resize", (oh, ow)))
        h, w = oh, ow
    if rng.random() < 0.6:
        # out-of-bounds crops pad with 0, so only when the fill is 0; a
        # window wholly outside is left out (torchvision's crop then
        # returns pixels from inside)
        slack = 0 if fill else 3
        ch = int(rng.integers(1, h + slack + 1))
        cw = int(rng.integers(1, w + slack + 1))
        top = int(rng.integers(max(-slack, 1 - ch), min(h - ch + slack, h - 1) + 1))
        left = int(rng.integers(max(-slack, 1 - cw), min(w - cw + slack, w - 1) + 1))
        steps.append(("crop", (top, left, ch, cw)))
        h, w = ch, cw
    if rng.random() < 0.5:
        steps.append(("hflip", ()))
    if rng.random() < 0.3:
        steps.append(("vflip", ()))
    if rng.random() < 0.5:
        steps.append(("pad", tuple(int(v) for v in rng.integers(0, 4, size=4))))
    return steps


def torchvision_apply(full, steps, fill):
    return apply_steps(tv_tensors.Mask(torch.from_numpy(full)), steps, fill)


def apply_steps(mask, steps, fill):
    """torchvision's ops of a chain on a tv_tensors.Mask, as a numpy array."""
    for name, args in steps:
        if name == "resize":
            mask = F.resize(mask, list(args))
        elif name == "crop":
            mask = F.crop(mask, *args)
        elif name == "hflip":
            mask = F.horizontal_flip(mask)
        elif name == "vflip":
            mask = F.vertical_flip(mask)
        else:
            mask = F.pad(mask, list(args), fill=fill)
    return mask.numpy()


def index_maps(h, w, steps):
    """The per-axis index maps of a chain: output row/column -> source."""
    rows = np.arange(h, dtype=np.int32)
    cols = np.arange(w, dtype=np.int32)
    for name, args in steps:
        if name == "resize":
            rows = take(rows, nearest_rows(len(rows), args[0]))
            cols = take(cols, nearest_rows(len(cols), args[1]))
        elif name == "crop":
            top, left, ch, cw = args
            rows = take(rows, np.arange(top, top + ch))
            cols = take(cols, np.arange(left, left + cw))
        elif name == "hflip":
            cols = cols[::-1].copy()
        elif name == "vflip":
            rows = rows[::-1].copy()
        else:
            left, top, right, bottom = args
            rows = np.concatenate([[-1] * top, rows, [-1] * bottom]).astype(np.int32)
            cols = np.concatenate([[-1] * left, cols, [-1] * right]).astype(np.int32)
    return rows, cols


def sampled(raw, rows, cols):
    return np.frombuffer(raw, np.uint8).reshape(len(rows), len(cols))


def identity(h, w):
    return np.arange(h, dtype=np.int32), np.arange(w, dtype=np.int32)


# --- random polygons of every kind ---


def random_polygon(rng, h, w):
    kind = rng.choice(
        ["convex", "tangled", "tiny", "huge", "grid", "half", "outside", "far"]
    )
    k = int(rng.integers(3, 12))
    cx, cy = rng.uniform(-0.2 * w, 1.2 * w), rng.uniform(-0.2 * h, 1.2 * h)
    if kind == "convex":
        r = rng.uniform(0.5, max(h, w))
        a = np.sort(rng.uniform(0, 2 * math.pi, k))
        xy = np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], 1)
    elif kind == "tangled":  # vertices in random order: self-intersecting
        xy = np.stack([rng.uniform(-2, w + 2, k), rng.uniform(-2, h + 2, k)], 1)
    elif kind == "tiny":
        xy = np.stack([cx + rng.uniform(0, 1.5, k), cy + rng.uniform(0, 1.5, k)], 1)
    elif kind == "huge":
        xy = rng.uniform(-3 * max(h, w), 4 * max(h, w), (k, 2))
    elif kind == "grid":  # every edge on pixel boundaries
        xy = rng.integers(-1, max(h, w) + 2, (k, 2)).astype(float)
    elif kind == "half":  # at .5 (pixel centres), and at .1/.2/.3 steps
        xy = rng.integers(-1, max(h, w) + 2, (k, 2)) + rng.choice(
            [0.5, 0.1, 0.2, 0.3, 0.7], (k, 2)
        )
    elif kind == "outside":  # wholly or partly beyond an edge
        xy = np.stack([rng.uniform(w - 2, w + 9, k), rng.uniform(-9, h + 9, k)], 1)
        if rng.random() < 0.5:
            xy = xy[:, ::-1] * [w / max(h, 1), h / max(w, 1)] - [0, h]
    else:  # far outside, thousands of pixels
        xy = rng.uniform(-5000, 5000, (k, 2))
    return [float(v) for v in xy.reshape(-1)]


def random_case(rng):
    h = int(rng.integers(1, 48))
    w = int(rng.integers(1, 48))
    polygons = [random_polygon(rng, h, w) for _ in range(int(rng.integers(1, 7)))]
    return h, w, polygons


@pytest.mark.parametrize("block", range(4))
def test_polygons_full_size_identical(block):
    """The raster at full size (identity maps) is pycocotools', in 1000
    random annotations of 1-6 polygons each."""
    rng = np.random.default_rng(100 + block)
    for _ in range(250):
        h, w, polygons = random_case(rng)
        want = coco_polygons(polygons, h, w)
        rows, cols = identity(h, w)
        got = sampled(_core.mask_from_polygons(polygons, h, w, rows, cols), rows, cols)
        assert np.array_equal(got, want), (h, w, polygons)


@pytest.mark.parametrize("fill", [0, 255])
@pytest.mark.parametrize("block", range(3))
def test_polygons_through_torchvision_geometry(block, fill):
    """Sampled through the index maps of random resize, crop, flip and pad
    chains: identical to torchvision's ops on pycocotools' full mask."""
    rng = np.random.default_rng(200 + 10 * block + fill)
    for _ in range(200):
        h, w, polygons = random_case(rng)
        steps = random_geometry(rng, h, w, fill)
        want = torchvision_apply(coco_polygons(polygons, h, w), steps, fill)
        rows, cols = index_maps(h, w, steps)
        raw = _core.mask_from_polygons(polygons, h, w, rows, cols, fill=fill)
        got = sampled(raw, rows, cols)
        assert np.array_equal(got, want), (h, w, polygons, steps)


def test_detection_sizes():
    """A COCO-sized image resized as the detection recipes do (800 short
    side, 1333 long), and a large one resized down, with a flip."""
    rng = np.random.default_rng(7)
    for h, w, oh, ow in [
        (480, 640, 800, 1066),
        (427, 640, 800, 1199),
        (2000, 3000, 800, 1200),
    ]:
        for _ in range(3):
            polygons = [
                [float(v) for v in rng.uniform(0, 1, 16) * ([w, h] * 8)]
                for _ in range(3)
            ]
            steps = [("resize", (oh, ow)), ("hflip", ())]
            want = torchvision_apply(coco_polygons(polygons, h, w), steps, 0)
            rows, cols = index_maps(h, w, steps)
            got = sampled(
                _core.mask_from_polygons(polygons, h, w, rows, cols), rows, cols
            )
            assert np.array_equal(got, want)
            assert want.any()  # the case is not trivially empty


def test_far_outside_matches_pycocotools():
    """Vertices far outside the image (tens of thousands of pixels) are
    clipped as pycocotools clips them: a triangle covering the image, one
    crossing it, one wholly beside it."""
    h, w = 30, 40
    for polygons in (
        [[-1e5, -1e5, 1e5, -2e4, 3e4, 9e4]],
        [[-2e4, 10.3, 5e4, 20.5, 25.5, -3e4]],
        [[50.0, -2e4, 9e4, 3.0, 60.0, 4e4]],
        [[-1e4, 5.0, 20.0, 5.0, 20.0, 1e4]],
    ):
        rows, cols = identity(h, w)
        got = sampled(_core.mask_from_polygons(polygons, h, w, rows, cols), rows, cols)
        assert np.array_equal(got, coco_polygons(polygons, h, w)), polygons


def test_near_diagonal_edges_at_the_coordinate_bound():
    """Edges from the coordinate bound across the image whose slope is
    within one upsampled step of 1 (the steepest walks the scan conversion
    takes without walking them): identical to pycocotools' point-by-point
    walk."""
    b = 1048576.0 - 25  # offsets below stay within the bound
    rng = np.random.default_rng(9)
    h, w = 37, 53
    mixed = 0
    for _ in range(8):
        off = rng.uniform(-20, 20, 4)
        d = rng.choice([0.0, 0.2, -0.2, 0.4])
        polygons = [
            [-b + off[0], -b + d + off[1], b - off[2], b + off[3], -b, b - 3 * abs(d)],
            [b, -b + off[1], -b + d, b - off[0], 20.5, 10.0],
        ]
        rows, cols = identity(h, w)
        got = sampled(_core.mask_from_polygons(polygons, h, w, rows, cols), rows, cols)
        assert np.array_equal(got, coco_polygons(polygons, h, w)), polygons
        mixed += bool(got.any() and not got.all())
    assert mixed > 0  # edges do cross the image


def test_polygons_are_ored():
    """Two overlapping polygons give their union (not their XOR)."""
    a = [2.0, 2.0, 12.0, 2.0, 12.0, 12.0, 2.0, 12.0]
    b = [6.0, 6.0, 16.0, 6.0, 16.0, 16.0, 6.0, 16.0]
    rows, cols = identity(20, 20)
    both = sampled(_core.mask_from_polygons([a, b], 20, 20, rows, cols), rows, cols)
    one = sampled(_core.mask_from_polygons([a], 20, 20, rows, cols), rows, cols)
    two = sampled(_core.mask_from_polygons([b], 20, 20, rows, cols), rows, cols)
    assert np.array_equal(both, one | two)
    assert (one & two).any()
    assert np.array_equal(both, coco_polygons([a, b], 20, 20))


def test_numpy_polygons_accepted():
    poly = np.array([1.0, 1.0, 9.5, 2.0, 5.0, 8.5])
    rows, cols = identity(10, 10)
    got = sampled(_core.mask_from_polygons([poly], 10, 10, rows, cols), rows, cols)
    assert np.array_equal(got, coco_polygons([poly.tolist()], 10, 10))


# --- RLE ---


def uncompressed_counts(m):
    """COCO's counts list of a mask: run lengths in column-major order,
    zeros first."""
    flat = m.reshape(-1, order="F")
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(bounds).tolist()
    return counts if flat[0] == 0 else [0] + counts


def random_mask(rng, h, w):
    kind = rng.integers(0, 4)
    if kind == 0:
        return (rng.random((h, w)) < rng.random()).astype(np.uint8)
    if kind == 1:
        return np.ones((h, w), np.uint8)
    if kind == 2:
        return np.zeros((h, w), np.uint8)
    m = np.zeros((h, w), np.uint8)
    m[rng.integers(0, h) :, : rng.integers(0, w + 1)] = 1
    return m


def test_rle_round_trips():
    """pycocotools' encode, compressed (bytes and str) and uncompressed,
    decodes to the mask encoded, in 600 random masks up to 300 x 300."""
    rng = np.random.default_rng(3)
    for _ in range(600):
        h, w = (int(v) for v in rng.integers(1, 300, 2))
        m = random_mask(rng, h, w)
        rle = coco_mask.encode(np.asfortranarray(m))
        counts = uncompressed_counts(m)
        # the uncompressed form is what pycocotools reads as such
        assert np.array_equal(
            coco_mask.decode(
                coco_mask.frPyObjects({"size": [h, w], "counts": counts}, h, w)
            ),
            m,
        )
        rows, cols = identity(h, w)
        for c in (rle["counts"], rle["counts"].decode(), counts):
            raw = _core.mask_from_rle({"size": [h, w], "counts": c}, h, w, rows, cols)
            assert np.array_equal(sampled(raw, rows, cols), m)


def test_rle_large_counts():
    """Counts past 2^20 and differences of either sign in the string: a
    4000 x 3000 image almost all one run, with a block of ones."""
    h, w = 4000, 3000
    m = np.zeros((h, w), np.uint8)
    m[100:3900, 2000:2990] = 1
    m[5, 10] = 1
    rle = coco_mask.encode(np.asfortranarray(m))
    rows = np.arange(0, h, 7, dtype=np.int32)
    cols = np.arange(0, w, 3, dtype=np.int32)[::-1].copy()
    raw = _core.mask_from_rle(rle, h, w, rows, cols)
    assert np.array_equal(sampled(raw, rows, cols), m[np.ix_(rows, cols)])


@pytest.mark.parametrize("fill", [0, 255])
def test_rle_through_torchvision_geometry(fill):
    rng = np.random.default_rng(11 + fill)
    for _ in range(200):
        h, w = (int(v) for v in rng.integers(1, 60, 2))
        m = random_mask(rng, h, w)
        rle = coco_mask.encode(np.asfortranarray(m))
        steps = random_geometry(rng, h, w, fill)
        want = torchvision_apply(coco_mask.decode(rle), steps, fill)
        rows, cols = index_maps(h, w, steps)
        got = sampled(_core.mask_from_rle(rle, h, w, rows, cols, fill=fill), rows, cols)
        assert np.array_equal(got, want), steps


def test_polygon_rle_from_pycocotools():
    """A polygon's RLE as pycocotools stores it (compressed) reads back to
    the polygon's raster."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        h, w, polygons = random_case(rng)
        rle = coco_mask.merge(coco_mask.frPyObjects(polygons, h, w))
        rows, cols = identity(h, w)
        a = sampled(_core.mask_from_rle(rle, h, w, rows, cols), rows, cols)
        b = sampled(_core.mask_from_polygons(polygons, h, w, rows, cols), rows, cols)
        assert np.array_equal(a, b)


# --- bad input ---

ROWS, COLS = identity(10, 12)
SQUARE = [1.0, 1.0, 8.0, 1.0, 8.0, 8.0, 1.0, 8.0]


@pytest.mark.parametrize(
    "polygons, error, text",
    [
        (
            [[1.0, 1.0, 5.0, 5.0]],
            ValueError,
            "has 2 points: a polygon needs at least 3",
        ),
        ([SQUARE, [3.0, 4.0]], ValueError, "polygon 1: polygon has 1 point:"),
        ([[]], ValueError, "has 0 points"),
        ([[1.0, 1.0, 5.0, 5.0, 3.0]], ValueError, "polygon 0 has 5 numbers"),
        ([], ValueError, "polygons is empty"),
        ([[1.0, float("nan"), 5.0, 5.0, 3.0, 1.0]], ValueError, "point 0 has y = nan"),
        ([[1.0, 1.0, float("inf"), 5.0, 3.0, 1.0]], ValueError, "point 1 has x = inf"),
        (
            [[1.0, 1.0, 5.0, 5.0, 3.0, -float("inf")]],
            ValueError,
            "point 2 has y = -inf",
        ),
        ([[1.0, 1.0, 5.0, 5.0, 3.0e7, 1.0]], ValueError, "within +-1048576 pixels"),
        (
            [[1.0, 1.0, "a", 5.0, 3.0, 1.0]],
            TypeError,
            "polygon 0, number 2 is not a number",
        ),
        ([5], TypeError, "polygon 0 must be a sequence of numbers"),
        (7, TypeError, "polygons must be a list"),
    ],
)
def test_bad_polygons(polygons, error, text):
    with pytest.raises(error, match=text.replace("+", r"\+")):
        _core.mask_from_polygons(polygons, 10, 12, ROWS, COLS)


def test_coordinate_bound_is_inclusive():
    """A vertex at the documented bound is accepted and matches
    pycocotools."""
    polygons = [[-1048576.0, 2.0, 6.0, 2.0, 6.0, 1048576.0]]
    got = sampled(_core.mask_from_polygons(polygons, 10, 12, ROWS, COLS), ROWS, COLS)
    assert got.any()


def rle(counts, size=(10, 12)):
    return {"size": list(size), "counts": counts}


@pytest.mark.parametrize(
    "arg, error, text",
    [
        (rle([60, 50]), ValueError, "counts sum to 110 where height \\* width is 120"),
        (rle([60, 70]), ValueError, "count 1 is 70 where 60 pixels are left"),
        (rle([60, -5, 65]), ValueError, "count 1 is -5"),
        (rle([60, "x"]), TypeError, "RLE count 1 must be an int"),
        (rle([60, 2**64]), ValueError, "RLE count 1 is 18446744073709551616, beyond"),
        (
            rle([60, 60], size=(12, 10)),
            ValueError,
            r"RLE size \[12, 10\] does not match",
        ),
        ({"counts": [120]}, ValueError, "rle has no 'size'"),
        ({"size": [10, 12]}, ValueError, "rle has no 'counts'"),
        (rle([120], size=(10,)), ValueError, "RLE size must be \\[height, width\\]"),
        ([120], TypeError, "rle must be a dict"),
        (rle(b""), ValueError, "counts sum to 0"),
        (rle(b"1p"), ValueError, "byte 0x70 at offset 1"),
        (rle(b"1 "), ValueError, "byte 0x20 at offset 1"),
        (rle(b"1\x00"), ValueError, "byte 0x00 at offset 1"),
        (rle("1\u00e9"), ValueError, "must be ASCII"),
        (rle(b"1P"), ValueError, "ends inside the count that starts at byte 1"),
        (rle(b"PPPPPPP0"), ValueError, "has more than 7 digits"),
        (rle(b"@"), ValueError, "count 0 is -16"),  # '@': digit 16, the sign
        (rle(b"<2"), ValueError, "counts sum to 14"),
        (rle(b"<<3@"), ValueError, "count 3 is -4 where"),  # -16 + count 1 (12)
    ],
)
def test_bad_rle(arg, error, text):
    with pytest.raises(error, match=text):
        _core.mask_from_rle(arg, 10, 12, ROWS, COLS)


@pytest.mark.parametrize(
    "rows, cols, fill, error, text",
    [
        (np.array([0, 10], np.int32), COLS, 0, ValueError, "row map entry 1 is 10"),
        (np.array([-2], np.int32), COLS, 0, ValueError, "row map entry 0 is -2"),
        (ROWS, np.array([3, 12], np.int32), 0, ValueError, "column map entry 1 is 12"),
        (ROWS.astype(np.int64), COLS, 0, TypeError, "row_map must be a 1-d int32"),
        (ROWS, [0, 1], 0, TypeError, "col_map must be a C-contiguous int32"),
        (ROWS, np.arange(24, dtype=np.int32)[::2], 0, TypeError, "col_map must be a C"),
        (ROWS, COLS, 256, ValueError, "fill must be 0..255"),
        (np.zeros(70000, np.int32), COLS, 0, ValueError, "at most 65535 each"),
    ],
)
def test_bad_maps(rows, cols, fill, error, text):
    with pytest.raises(error, match=text):
        _core.mask_from_polygons([SQUARE], 10, 12, rows, cols, fill=fill)
    with pytest.raises(error, match=text):
        _core.mask_from_rle(rle([120]), 10, 12, rows, cols, fill=fill)


@pytest.mark.parametrize("h, w", [(0, 5), (5, 0), (-1, 5), (70000, 5)])
def test_bad_sizes(h, w):
    rows, cols = np.zeros(1, np.int32), np.zeros(1, np.int32)
    with pytest.raises(ValueError, match="each side must be 1..65535"):
        _core.mask_from_polygons([SQUARE], h, w, rows, cols)


def test_empty_output_and_fill_only():
    empty = np.zeros(0, np.int32)
    assert _core.mask_from_polygons([SQUARE], 10, 12, empty, COLS) == b""
    fill_rows = np.full(3, -1, np.int32)
    raw = _core.mask_from_polygons([SQUARE], 10, 12, fill_rows, COLS, fill=255)
    assert raw == b"\xff" * (3 * 12)
