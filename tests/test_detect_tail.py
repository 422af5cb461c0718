"""The detection reference's tail (ConvertBoundingBoxFormat(XYXY),
SanitizeBoundingBoxes, ToPureTensor) as ringloader runs it on its targets
(datasets.detection_tail.QuickTail): what the user's own steps give,
value for value and type for type, the boxes SanitizeBoundingBoxes drops
and its errors included; taken only for torchvision's own classes with
what it follows, and only where its probes agree with them."""

from __future__ import annotations

import zlib

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from ringloader.datasets.detection_tail import QuickTail

from test_detect_ioucrop import check_items, pair  # noqa: F401 - a fixture

XYXY = tv_tensors.BoundingBoxFormat.XYXY


def reference_tail(**sanitize):
    return [
        v2.ConvertBoundingBoxFormat(XYXY),
        v2.SanitizeBoundingBoxes(**sanitize),
        v2.ToPureTensor(),
    ]


TAILS = {
    "reference": reference_tail(),
    "no ToPureTensor": reference_tail()[:2],
    "min_size 2, min_area 6": reference_tail(min_size=2.0, min_area=6.0),
    "labels_getter None": reference_tail(labels_getter=None),
    "format as a string, twice sanitized": [
        v2.ConvertBoundingBoxFormat("xyxy"),
        v2.SanitizeBoundingBoxes(min_size=1.5),
        v2.SanitizeBoundingBoxes(),
        v2.ToPureTensor(),
    ],
    "sanitize alone": [v2.SanitizeBoundingBoxes()],
}


def random_target(g, dtype, labels_key="labels", masks=True, n=None):
    """A target as ringloader builds it, its boxes on and around every edge
    SanitizeBoundingBoxes draws (half-pixel steps: exact ties happen)."""
    height, width = (int(v) for v in torch.randint(4, 12, (2,), generator=g))
    n = int(torch.randint(0, 9, (1,), generator=g)) if n is None else n
    lo = torch.randint(-1, 2 * width, (n, 2), generator=g) / 2.0
    size = torch.randint(0, 14, (n, 2), generator=g) / 2.0
    boxes = torch.cat([lo, lo + size], 1).to(dtype)
    boxes[:, 1::2] = boxes[:, 1::2].clamp(max=height + 1)
    target = {"image_id": int(torch.randint(0, 99, (1,), generator=g))}
    mode = ("soft", "hard", None)[int(torch.randint(0, 3, (1,), generator=g))]
    target["boxes"] = tv_tensors.BoundingBoxes(
        boxes, format=XYXY, canvas_size=(height, width), clamping_mode=mode
    )
    if masks:
        target["masks"] = tv_tensors.Mask(
            torch.randint(0, 2, (n, height, width), dtype=torch.uint8, generator=g)
        )
    if labels_key:
        target[labels_key] = torch.randint(1, 91, (n,), generator=g)
    target["area"] = [float(v) for v in torch.rand(n, generator=g)]
    target["iscrowd"] = [0] * n
    target["score"] = torch.rand(n, generator=g)  # not a label: never dropped
    image = tv_tensors.Image(
        torch.randint(0, 256, (3, height, width), dtype=torch.uint8)
    )
    return image, target


def _same(a, b):
    """The test's own comparison: types, dtypes, shapes, values (NaN
    where NaN), the boxes' format, canvas and clamping mode, dict keys in
    order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        meta = ("format", "canvas_size", "clamping_mode")
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if any(getattr(a, m, None) != getattr(b, m, None) for m in meta):
            return False
        x, y = a.as_subclass(torch.Tensor), b.as_subclass(torch.Tensor)
        return bool(((x == y) | (x.isnan() & y.isnan())).all())
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def run_steps(steps, image, target):
    sample = (image, target)
    for step in steps:
        sample = step(*sample)
    return sample


@pytest.mark.parametrize("name", TAILS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_it_gives_what_the_users_steps_give(name, dtype):
    steps = TAILS[name]
    quick = QuickTail.of(steps)
    assert quick is not None
    g = torch.Generator().manual_seed(zlib.crc32(f"{name} {dtype}".encode()))
    dropped = kept = 0
    for k in range(300):
        key = ("labels", "Labels", "class_labels")[k % 3]
        image, target = random_target(g, dtype, labels_key=key, masks=k % 4 != 0)
        want = run_steps(steps, image, dict(target))
        got = quick(image, dict(target))
        assert _same(want, got), (name, k, target["boxes"])
        n, m = len(target["boxes"]), len(want[1]["boxes"])
        dropped += n - m
        kept += m
    assert dropped > 50 and kept > 50  # both sides of the edges drawn


def test_a_mask_of_another_count_passes_as_torchvisions():
    g = torch.Generator().manual_seed(3)
    image, target = random_target(g, torch.float32, n=5)
    rows = [[0, 0, 2, 2], [-1, 0, 2, 2], [1, 1, 3, 4], [2, 0, 4, 3], [0, 1, 3, 3]]
    target["boxes"] = tv_tensors.wrap(
        torch.tensor(rows, dtype=torch.float32), like=target["boxes"]
    )
    target["semantic"] = tv_tensors.Mask(torch.zeros(3, 4, 4, dtype=torch.uint8))
    steps = TAILS["reference"]
    want = run_steps(steps, image, dict(target))
    assert len(want[1]["boxes"]) == 4 and want[1]["semantic"].shape[0] == 3
    assert _same(want, QuickTail.of(steps)(image, dict(target)))


@pytest.mark.parametrize(
    "target, error",
    [
        ("no annotations", "Could not infer where the labels are"),
        ("no labels", "Could not infer where the labels are"),
        ("no boxes", "No bounding boxes were found"),
        ("labels of another count", "must match the number of labels"),
    ],
)
def test_torchvisions_errors_come_as_its_own(target, error):
    g = torch.Generator().manual_seed(5)
    image, full = random_target(g, torch.float32, n=4)
    target = {
        "no annotations": {"image_id": 3},  # the wrapper's target for one
        "no labels": {k: v for k, v in full.items() if k != "labels"},
        "no boxes": {k: v for k, v in full.items() if k != "boxes"},
        "labels of another count": dict(full, labels=torch.arange(3)),
    }[target]
    with pytest.raises(ValueError, match=error) as want:
        run_steps(TAILS["reference"], image, dict(target))
    with pytest.raises(ValueError) as got:
        QuickTail.of(TAILS["reference"])(image, dict(target))
    assert str(got.value) == str(want.value)


class OwnSanitize(v2.SanitizeBoundingBoxes):
    pass


@pytest.mark.parametrize(
    "steps",
    [
        [v2.ConvertBoundingBoxFormat("CXCYWH"), v2.SanitizeBoundingBoxes()],
        [v2.ClampBoundingBoxes(), v2.SanitizeBoundingBoxes()],
        [v2.SanitizeBoundingBoxes(labels_getter=lambda s: s[1]["labels"])],
        [OwnSanitize()],
        [v2.ToPureTensor(), v2.SanitizeBoundingBoxes()],
    ],
    ids=["cxcywh", "clamp", "own labels_getter", "subclass", "pure first"],
)
def test_other_tails_keep_the_users_steps(steps):
    assert QuickTail.of(steps) is None


def test_a_torchvision_that_sanitizes_otherwise_keeps_the_users_steps(monkeypatch):
    """The probes catch a rule that differs on an edge (here: a box exactly
    min_size wide dropped), as another torchvision's could."""
    from torchvision.transforms.v2 import functional as F

    real = F._misc._get_sanitize_bounding_boxes_mask

    def strict(boxes, format, canvas_size, min_size=1.0, min_area=1.0):
        valid = real(boxes, format, canvas_size, min_size, min_area)
        ws = boxes[:, 2] - boxes[:, 0]
        return valid & (ws > min_size)

    assert QuickTail.of(TAILS["reference"]) is not None
    monkeypatch.setattr(F._misc, "_get_sanitize_bounding_boxes_mask", strict)
    assert QuickTail.of(TAILS["reference"]) is None


def test_the_loader_runs_it_on_the_ssdlite_preset(pair):  # noqa: F811
    """test_detect_ioucrop's epoch, whose tail torchvision runs on each
    reference item, read natively with the quick tail in place: the boxes
    RandomIoUCrop zeroes dropped with their labels and masks."""
    from ringloader.datasets.detection_batch import detection_stand_in

    ds, ref = pair
    seen = check_items(ds, ref.__getitem__)
    assert detection_stand_in(ds.dataset)._quick is not None
    assert seen["dropped"] > 0


def test_infinite_and_huge_boxes_pass_as_torchvisions_without_a_warning():
    """NumPy would warn on inf - inf and on overflow where torch does not."""
    import warnings

    g = torch.Generator().manual_seed(9)
    image, target = random_target(g, torch.float32, n=4)
    rows = [
        [0.5, 0.0, 3e38, 3e38],
        [float("inf"), 0, float("inf"), 5],
        [0, 0, 2, 2],
        [-float("inf"), 0, 1, 1],
    ]
    target["boxes"] = tv_tensors.wrap(torch.tensor(rows), like=target["boxes"])
    steps = TAILS["reference"]
    quick = QuickTail.of(steps)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = run_steps(steps, image, dict(target))
        got = quick(image, dict(target))
    assert len(want[1]["boxes"]) == 1 and _same(want, got)


@pytest.mark.parametrize(
    "change",
    ["sizes", "labels_getter alone", "a getter of the user's own", "no getter"],
)
def test_settings_changed_after_the_start_are_followed(change):
    """As the step follows them: its sizes as they stand, its getter as it
    was built (torchvision parses ``labels_getter`` once, in __init__)."""
    from torchvision.transforms.v2._utils import _parse_labels_getter

    steps = reference_tail()
    quick = QuickTail.of(steps)
    sanitize = steps[1]
    if change == "sizes":
        sanitize.min_size, sanitize.min_area = 3.0, 10.0
    elif change == "labels_getter alone":
        sanitize.labels_getter = None  # not what the step calls
    elif change == "a getter of the user's own":
        sanitize._labels_getter = lambda sample: sample[1]["iscrowd_t"]
    else:
        sanitize._labels_getter = _parse_labels_getter(None)
    g = torch.Generator().manual_seed(12)
    drops = 0
    for _ in range(60):
        image, target = random_target(g, torch.float32)
        target["iscrowd_t"] = torch.zeros(len(target["boxes"]))
        want = run_steps(steps, image, dict(target))
        assert _same(want, quick(image, dict(target)))
        drops += len(target["boxes"]) - len(want[1]["boxes"])
    assert drops > 0


@pytest.mark.parametrize(
    "sizes",
    [
        dict(min_size=float("inf")),
        dict(min_area=10**400),
        dict(min_size=3e9, min_area=1e19),
    ],
    ids=["infinite min_size", "min_area past float", "sizes past 2**31"],
)
def test_sizes_out_of_range_start_and_give_torchvisions(sizes):
    steps = reference_tail(**sizes)
    quick = QuickTail.of(steps)  # never raises: the steps run where it cannot
    g = torch.Generator().manual_seed(2)
    for _ in range(20):
        image, target = random_target(g, torch.float64)
        try:
            want = run_steps(steps, image, dict(target))
        except Exception as e:  # noqa: BLE001 - torchvision's own, then ours too
            with pytest.raises(type(e)):
                (quick or QuickTail(steps))(image, dict(target))
            continue
        assert quick is None or _same(want, quick(image, dict(target)))


@pytest.mark.parametrize(
    "step",
    [
        v2.SanitizeBoundingBoxes(
            min_size=torch.tensor([2.5000001], dtype=torch.float64)
        ),
        v2.ConvertBoundingBoxFormat("xyxz"),  # the step's own error, when it runs
        # torch casts an int past 2**53 to float32 in one step, NumPy through float64
        v2.SanitizeBoundingBoxes(min_size=2**60 + 2**36 + 1),
    ],
    ids=["a tensor min_size", "an unknown format", "an int past 2**53"],
)
def test_settings_not_followed_keep_the_users_steps(step):
    assert QuickTail.of([step, v2.ToPureTensor()]) is None
