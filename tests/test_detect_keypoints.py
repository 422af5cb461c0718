"""COCO person keypoints through ringloader.datasets.CocoKeypoints: a
CocoDetection whose target is the one ``wrap_dataset_for_transforms_v2``
gives (boxes, labels, image_id, masks, the json's fields) with
``keypoints`` (a tv_tensors.KeyPoints (N, 17, 2)) and
``keypoints_visibility`` ((N, 17), COCO's v, some 0). ringloader.DataLoader
reads it natively (no FallbackWarning): with the eval preset every item
equals torch's DataLoader's over the same dataset object (images within
the JPEG decoders' 1 LSB, boxes and keypoints within 1e-3 px, the rest
identical); with random geometry (hflip, multiscale's RandomShortestSize,
ssd's RandomZoomOut and RandomIoUCrop, ssdlite's RandomIoUCrop) every item
equals the dataset's own transform objects run on its unaugmented item
with the draws the plan made (``_core.plan_window``: the same replay as
test_detect_geometry and test_detect_zoomout), its tail
(SanitizeBoundingBoxes with the keypoints among its labels or not,
ClampKeyPoints, SanitizeKeyPoints) run as torch's DataLoader runs it. A
bad annotation's keypoints raise a ValueError naming the annotation file,
the image and the annotation, from ringloader.DataLoader and from the
dataset's own ``__getitem__`` alike, and ``on_error="skip"`` reads the
next image in its place."""

from __future__ import annotations

import copy
import json
from functools import partial

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, SequentialSampler, Subset
from torchvision import datasets, tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core
from ringloader.datasets import CocoKeypoints
from ringloader.datasets.detection import detection_tables
from ringloader.datasets.detection import target as tables_target

from detection_data import coco_json, write_coco
from test_detect_frontdoor import JPEG_TOL, Preset, collate_fn, eval_preset
from test_dropin import fused
from test_iou_crop_plan import iou_params

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)

SEED = 17
K = 17
RESIZE_TOL = 2 / 255 + 1e-6  # the resize's 1 LSB over the decoders' 1 LSB
MEAN = (123.0, 117.0, 104.0)
# The steps whose draws the replay takes from the plan.
DRAWS = (
    v2.RandomShortestSize,
    v2.RandomZoomOut,
    v2.RandomIoUCrop,
    v2.RandomHorizontalFlip,
)


def add_keypoints(data, seed=SEED):
    """COCO's person keypoints on every annotation: 17 x, y, v triples, v
    0 (x = y = 0, as COCO writes them), 1 or 2, the points around the box
    (some outside the image), as JSON integers or not."""
    rng = np.random.default_rng(seed)
    for ann in data["annotations"]:
        x, y, w, h = ann["bbox"]
        kp = []
        for _ in range(K):
            v = int(rng.choice([0, 1, 2], p=[0.3, 0.2, 0.5]))
            if v == 0:
                kp += [0, 0, 0]
                continue
            px = x + rng.uniform(-0.2, 1.2) * w
            py = y + rng.uniform(-0.2, 1.2) * h
            if rng.random() < 0.3:
                kp += [int(px), int(py), v]
            else:
                kp += [round(float(px), 2), round(float(py), 2), v]
        ann["keypoints"] = kp
        ann["num_keypoints"] = sum(1 for v in kp[2::3] if v > 0)
    data["categories"] = [
        dict(c, keypoints=[f"p{i}" for i in range(K)], skeleton=[[1, 2]])
        for c in data["categories"]
    ]
    return data


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """(image root, annotation file) of 24 images, every fifth without
    annotations."""
    data = add_keypoints(coco_json(24, SEED))
    return write_coco(tmp_path_factory.mktemp("kp"), 24, seed=SEED, data=data)


def keypoints_dataset(coco, transforms, keys=None):
    root, ann = coco
    return CocoKeypoints(root, ann, transforms=transforms, target_keys=keys)


def annotated(ds):
    """ds under a Subset of its images with annotations (as the reference's
    train sets; RandomIoUCrop needs boxes)."""
    ids = [i for i, img in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=img)]
    return Subset(ds, ids)


def same_target(ours, ref, tol=1e-3):
    assert type(ours) is type(ref) and ours.keys() == ref.keys()
    for key, want in ref.items():
        got = ours[key]
        assert type(got) is type(want), key
        if isinstance(want, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert got.canvas_size == want.canvas_size, key
            if want.numel():
                diff = (got.double() - want.double()).abs().max().item()
                assert diff <= tol, (key, diff)
            if isinstance(want, tv_tensors.BoundingBoxes):
                assert got.format == want.format
        elif isinstance(want, torch.Tensor) and key in ("boxes", "keypoints"):
            assert got.dtype == want.dtype and got.shape == want.shape, key
            if want.numel():  # after ToPureTensor
                diff = (got.double() - want.double()).abs().max().item()
                assert diff <= tol, (key, diff)
        elif isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and torch.equal(got, want), key
        else:
            assert got == want, key


def same_image(ours, ref, tol=JPEG_TOL):
    assert type(ours) is type(ref)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert (ours - ref).abs().max().item() <= tol


def test_the_target_is_the_wrappers_with_keypoints(coco):
    """The plain dataset (what torch's DataLoader reads): every key the
    wrapper gives, as it gives it, and the json's keypoints and flags."""
    root, ann = coco
    ours = CocoKeypoints(root, ann, target_keys="all")
    theirs = datasets.wrap_dataset_for_transforms_v2(
        datasets.CocoDetection(root, ann), target_keys="all"
    )
    assert ours.num_keypoints == K
    seen_v = set()
    for i in range(len(ours)):
        image, target = ours[i]
        ref_image, ref = theirs[i]
        assert np.array_equal(np.asarray(image), np.asarray(ref_image))
        anns = ours.coco.loadAnns(ours.coco.getAnnIds(imgIds=ours.ids[i]))
        if not anns:
            assert target == ref == {"image_id": ours.ids[i]}
            continue
        points = target.pop("keypoints")
        flags = target.pop("keypoints_visibility")
        same_target(target, ref, tol=0)
        want = np.array([a["keypoints"] for a in anns], np.float64).reshape(-1, K, 3)
        assert isinstance(points, tv_tensors.KeyPoints)
        assert points.dtype == torch.float32 and points.shape == (len(anns), K, 2)
        assert points.canvas_size == (image.height, image.width)
        assert np.array_equal(points.numpy(), want[..., :2].astype(np.float32))
        assert flags.dtype == torch.int64
        assert np.array_equal(flags.numpy(), want[..., 2])
        seen_v |= set(flags.flatten().tolist())
    assert seen_v == {0, 1, 2}


def test_the_tables_keep_keypoints_as_arrays(coco):
    """The tables' keypoints: one float64 (m, 17, 2) array and one uint8
    (m, 17) array for all m annotations (no object per annotation), from
    which each image's target is the dataset's own; none kept where the
    target has no keypoints."""
    ds = keypoints_dataset(coco, None, "all")
    tables = detection_tables(ds)
    m = len(ds.coco.anns)
    assert tables.keypoints.dtype == np.float64 and tables.keypoints.shape == (m, K, 2)
    assert tables.visibility.dtype == np.uint8 and tables.visibility.shape == (m, K)
    arrays = tables.keypoints.nbytes + tables.visibility.nbytes
    assert tables.nbytes() >= arrays == m * K * 17
    for i in range(len(ds)):
        ours = tables_target(tables, i)
        _, ref = ds[i]
        same_target(ours, ref, tol=0)
    plain = keypoints_dataset(coco, None, ["boxes", "labels"])
    assert detection_tables(plain).keypoints.shape == (m, 0, 2)


@pytest.mark.parametrize("keys", [None, ["keypoints", "masks", "image_id", "area"]])
@pytest.mark.parametrize("kind", ["compose", "reference"])
def test_eval_preset_items_equal_torchs(coco, keys, kind):
    ds = keypoints_dataset(coco, eval_preset(kind), keys)
    sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
    kw = dict(batch_sampler=sampler, collate_fn=collate_fn, num_workers=2)
    ours = [it for images, ts in fused(ds, **kw) for it in zip(images, ts)]
    theirs = [
        it
        for images, ts in torch.utils.data.DataLoader(ds, **kw)
        for it in zip(images, ts)
    ]
    assert len(ours) == len(theirs) == len(ds)
    for (image, target), (ref_image, ref) in zip(ours, theirs):
        same_image(image, ref_image)
        same_target(target, ref)
    assert any("keypoints" in t for _, t in ours)


def by_points():
    """SanitizeBoundingBoxes dropping the keypoints and flags with their
    boxes (the keypoints among its labels)."""

    def labels(sample):
        t = sample[1]
        return t["labels"], t["keypoints"], t["keypoints_visibility"]

    return v2.SanitizeBoundingBoxes(labels_getter=labels)


def tail(name):
    pure = [v2.ToDtype(torch.float, scale=True)]
    if name == "sanitize":  # the keypoints left as they are (torchvision's default)
        pure += [v2.SanitizeBoundingBoxes()]
    elif name == "sanitize_points":
        pure += [by_points()]
    elif name == "clamp":
        # before the sanitizing, which gives its labels (the keypoints
        # here) as plain tensors
        pure += [v2.ClampKeyPoints(), v2.ClampBoundingBoxes(), by_points()]
    elif name == "sanitize_keypoints":

        def labels(sample):
            return sample[1]["keypoints_visibility"], sample[1]["labels"]

        pure += [
            v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
            v2.SanitizeKeyPoints(labels_getter=labels),
        ]
    return pure + [v2.ToPureTensor()]


def composition(name, end):
    """The reference's train presets' geometry (tv_tensor backend), then
    the tail ``end``."""
    head = [v2.ToImage()]
    if name == "hflip":
        head += [v2.RandomHorizontalFlip(p=0.5)]
    elif name == "multiscale":
        sizes = tuple(range(24, 57, 8))
        head += [v2.RandomShortestSize(min_size=sizes, max_size=90, antialias=True)]
        head += [v2.RandomHorizontalFlip(p=0.5)]
    elif name == "ssd":
        head += [v2.RandomZoomOut(fill={tv_tensors.Mask: 0, "others": list(MEAN)})]
        head += [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=0.5)]
    elif name == "ssdlite":
        head += [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(p=0.5)]
    return Preset(head + end)


def moved(fn, image, target):
    """fn on the image and on the target's boxes, masks and keypoints, as
    a v2 transform dispatches (labels and flags as they are)."""
    kinds = (tv_tensors.BoundingBoxes, tv_tensors.Mask, tv_tensors.KeyPoints)
    return fn(image), {
        k: fn(v) if isinstance(v, kinds) else v for k, v in target.items()
    }


def replay(steps, image, target, p):
    """The dataset's own step objects on its unaugmented (image, target)
    with the plan's draws ``p``; the steps that draw nothing as they are
    called."""
    for step in steps:
        params = None
        if isinstance(step, v2.RandomShortestSize):
            params = dict(size=[p["vh"], p["vw"]])
        elif isinstance(step, v2.RandomZoomOut) and p["zoom_out"]:
            h, w = image.shape[-2:]
            left, top, cw, ch = p["zoom_canvas"]
            params = dict(padding=[left, top, cw - w - left, ch - h - top])
        elif isinstance(step, v2.RandomIoUCrop) and p["iou_crop"]:
            boxes = target["boxes"].as_subclass(torch.Tensor).numpy()
            params = iou_params(boxes, *p["iou_box"])
        elif isinstance(step, v2.RandomHorizontalFlip) and p["flip"]:
            image, target = moved(F.horizontal_flip, image, target)
        elif not isinstance(step, (v2.ToImage, *DRAWS)):
            image, target = step(image, target)
        if params is not None:
            image, target = moved(partial(step.transform, params=params), image, target)
    return image, target


def unaugmented(ds, index):
    """Item ``index`` of the Subset ``ds`` before its transforms: the
    decoded image as ToImage makes it, the dataset's own target."""
    inner = ds.dataset
    image_id = inner.ids[ds.indices[index]]
    pil = inner._load_image(image_id)
    return F.to_image(pil), inner.target_of(image_id, pil, inner._load_target(image_id))


@pytest.mark.parametrize(
    "name,end",
    [
        ("hflip", "sanitize"),
        ("hflip", "clamp"),
        ("multiscale", "sanitize"),
        ("multiscale", "clamp"),
        ("ssd", "sanitize"),
        ("ssd", "sanitize_points"),
        ("ssd", "clamp"),
        ("ssd", "sanitize_keypoints"),
        ("ssdlite", "sanitize_points"),
    ],
)
def test_random_geometry_follows_the_plan(coco, name, end, epoch=0):
    ds = annotated(keypoints_dataset(coco, composition(name, tail(end))))
    steps = ds.dataset.transforms.transforms.transforms
    seed = SEED
    sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
    loader = fused(ds, batch_sampler=sampler, collate_fn=collate_fn, seed=seed)
    spec = loader._plans[0].compiled.spec
    items = [it for images, ts in loader for it in zip(images, ts)]
    assert len(items) == len(ds)
    seen = {"flip": set(), "zoom": set(), "crop": set(), "outside": 0, "fewer": 0}
    tol = RESIZE_TOL if name == "multiscale" else JPEG_TOL
    for k, (image, target) in enumerate(items):
        want_image, want = unaugmented(ds, k)
        h, w = want_image.shape[-2:]
        rows = None
        if spec.get("iou_crop"):
            rows = want["boxes"].as_subclass(torch.Tensor).double().numpy()
        p = _core.plan_window(spec, w, h, seed, epoch, k, 0, rows)
        seen["flip"].add(bool(p["flip"]))
        seen["zoom"].add(bool(p["zoom_out"]))
        seen["crop"].add(bool(p["iou_crop"]))
        before = len(want["keypoints"])
        want_image, want = replay(steps, want_image, want, p)
        same_image(image, want_image, tol)
        same_target(target, want)
        pts = want["keypoints"]
        ch, cw = want_image.shape[-2:]
        x, y = pts[..., 0], pts[..., 1]
        seen["outside"] += int(((x < 0) | (x >= cw) | (y < 0) | (y >= ch)).sum())
        seen["fewer"] += before - len(pts)
    assert seen["flip"] == {True, False}
    if name == "ssd":
        assert seen["zoom"] == {True, False} and seen["crop"] == {True, False}
    if end != "sanitize" and name in ("ssd", "ssdlite"):
        assert seen["fewer"] > 0  # groups dropped with their boxes or points
    if end == "clamp":
        assert seen["outside"] == 0
    elif end != "sanitize_keypoints":
        assert seen["outside"] > 0  # never clamped unless asked


def test_ssd_second_epoch_follows_its_plan(coco):
    """A second epoch draws again; its items follow that epoch's plan."""
    ds = annotated(keypoints_dataset(coco, composition("ssd", tail("sanitize_points"))))
    steps = ds.dataset.transforms.transforms.transforms
    loader = fused(ds, batch_size=4, collate_fn=collate_fn, seed=SEED)
    spec = loader._plans[0].compiled.spec
    for _ in range(2):
        items = [it for images, ts in loader for it in zip(images, ts)]
    for k, (image, target) in enumerate(items):
        want_image, want = unaugmented(ds, k)
        h, w = want_image.shape[-2:]
        rows = want["boxes"].as_subclass(torch.Tensor).double().numpy()
        p = _core.plan_window(spec, w, h, SEED, 1, k, 0, rows)
        want_image, want = replay(steps, want_image, want, p)
        same_image(image, want_image)
        same_target(target, want)


# Bad keypoints: (change to the annotation's list, words of the error).
def _not_triples(kp):
    return kp[:-1]


def _other_count(kp):
    return kp[:-3]


def _not_finite(kp):
    return kp[:4] + [float("nan")] + kp[5:]


def _visibility(kp):
    return kp[:-1] + [3]


def _not_numbers(kp):
    return kp[:-1] + ["2"]


BAD = {
    "not_triples": (_not_triples, "has 50 numbers, not x, y, v triples"),
    "other_count": (
        _other_count,
        "has 16 points where the file's other annotations have 17",
    ),
    "not_finite": (_not_finite, "has a number that is not finite"),
    "visibility": (_visibility, "has a visibility 3, not 0, 1 or 2"),
    "not_numbers": (_not_numbers, "is not a list of numbers"),
    "nested": (lambda kp: kp[:-1] + [[2]], "is not a list of numbers"),
    "not_a_list": (lambda kp: None, "keypoints NoneType is not a list"),
}


def broken(tmp_path, case, transforms=None):
    """A dataset of 10 images, one annotation's keypoints as ``case``
    changes them: (dataset, row of its image, its image id, annotation id)."""
    data = add_keypoints(coco_json(10, SEED))
    root, ann = write_coco(tmp_path, 10, seed=SEED, data=data)
    data = copy.deepcopy(data)
    target = sorted(data["annotations"], key=lambda a: a["image_id"])[3]
    target["keypoints"] = BAD[case][0](target["keypoints"])
    with open(ann, "w") as f:
        json.dump(data, f)
    transforms = eval_preset() if transforms is None else transforms
    ds = CocoKeypoints(root, ann, transforms=transforms)
    row = ds.ids.index(target["image_id"])
    return ds, row, target["image_id"], target["id"]


def batches(ds, **kw):
    sampler = BatchSampler(SequentialSampler(ds), 2, drop_last=False)
    return fused(ds, batch_sampler=sampler, collate_fn=collate_fn, **kw)


def read_as_getitem(loader, ds, replaced=None):
    """The loader's items, each ds[i] (or, for i in ``replaced``, the
    index read in its place)."""
    items = [it for images, ts in loader for it in zip(images, ts)]
    assert len(items) == len(ds)
    for i, (image, target) in enumerate(items):
        ref_image, ref = ds[(replaced or {}).get(i, i)]
        same_image(image, ref_image)
        same_target(target, ref)
    return items


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_keypoints_raise_naming_the_annotation(tmp_path, case):
    ds, row, image_id, ann_id = broken(tmp_path, case)
    name = ds.coco.imgs[image_id]["file_name"]
    words = f"{ds.ann_file}: image id {image_id} ({name}), annotation id {ann_id}: "
    with pytest.raises(ValueError) as plain:
        ds[row]
    assert str(plain.value) == words + str(plain.value).split(": ")[-1]
    assert BAD[case][1] in str(plain.value)
    with pytest.warns(ringloader.DataWarning, match="cannot be read"):
        loader = batches(ds)
    seen = []
    with pytest.raises(ValueError) as native:
        for _, targets in loader:
            seen += targets
    assert str(native.value) == str(plain.value)
    assert len(seen) == row - row % 2  # the batches before its own


@pytest.mark.parametrize("case", ["other_count", "not_finite"])
def test_skip_reads_the_next_image_in_its_place(tmp_path, case):
    ds, row, _, _ = broken(tmp_path, case)
    with pytest.warns(ringloader.DataWarning):
        loader = batches(ds, on_error="skip")
    read_as_getitem(loader, ds, {row: row + 1})


def test_target_keys_without_keypoints_do_not_read_them(tmp_path):
    """A target without keypoints neither checks nor keeps them: a bad list
    is no problem, the items are torch's."""
    ds, _, _, _ = broken(tmp_path, "not_triples")
    ds.target_keys = frozenset({"boxes", "labels", "image_id"})
    items = read_as_getitem(batches(ds), ds)
    assert not any("keypoints" in t for _, t in items)


def test_unknown_target_keys_are_refused(coco):
    with pytest.raises(ValueError, match=r"\['bones'\] are not among"):
        keypoints_dataset(coco, None, ["boxes", "bones"])


def test_transform_and_target_transform_fall_back_saying_why(coco):
    """Given ``transform`` (the image's alone) rather than ``transforms``,
    the dataset goes to torch's DataLoader with a FallbackWarning naming
    it, and reads as its ``__getitem__`` does."""
    root, ann = coco
    ds = CocoKeypoints(root, ann, transform=v2.Compose([v2.PILToTensor()]))
    with pytest.warns(
        ringloader.FallbackWarning,
        match="CocoKeypoints: its transforms is a StandardTransform",
    ):
        loader = ringloader.DataLoader(ds, batch_size=4, collate_fn=collate_fn)
    assert not isinstance(loader, ringloader.Loader)
    items = [it for images, ts in loader for it in zip(images, ts)]
    for i, (image, target) in enumerate(items):
        ref_image, ref = ds[i]
        assert torch.equal(image, ref_image)
        same_target(target, ref, tol=0)


@pytest.mark.parametrize(
    "warp",
    [
        v2.RandomAffine(25, translate=(0.15, 0.1), scale=(0.7, 1.3), shear=(-8, 8)),
        v2.RandomRotation((-40, 40), center=[10.0, 4.5]),
    ],
    ids=["affine", "rotation"],
)
def test_keypoints_follow_the_warps(coco, warp):
    """After a fixed resize and the flip, RandomAffine and RandomRotation
    move the keypoints (never clamped) as torchvision moves KeyPoints,
    with the parameters the C chain drew (``_core.augment_draw``)."""
    size = [36, 44]
    head = [v2.ToImage(), v2.Resize(size, antialias=True)]
    head += [v2.RandomHorizontalFlip(p=0.5), warp]
    ds = annotated(keypoints_dataset(coco, Preset(head + tail("sanitize"))))
    sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
    loader = fused(ds, batch_sampler=sampler, collate_fn=collate_fn, seed=SEED)
    spec = loader._plans[0].compiled.spec
    assert spec["ops"], "the warp runs in the C chain"
    items = [it for images, ts in loader for it in zip(images, ts)]
    assert len(items) == len(ds)
    moved_off = 0
    for k, (image, target) in enumerate(items):
        want_image, want = unaugmented(ds, k)
        h, w = want_image.shape[-2:]
        p = _core.plan_window(spec, w, h, SEED, 0, k, 0)
        pair = moved(partial(F.resize, size=size, antialias=True), want_image, want)
        if p["flip"]:
            pair = moved(F.horizontal_flip, *pair)
        d = _core.augment_draw(spec["ops"], *size, SEED, 0, k)[0]
        if isinstance(warp, v2.RandomAffine):
            params = dict(
                angle=d[0], translate=[d[1], d[2]], scale=d[3], shear=[d[4], d[5]]
            )
        else:
            params = dict(angle=d[0])
        want_image, want = moved(lambda x, q=params: warp.transform(x, q), *pair)
        for step in tail("sanitize"):
            want_image, want = step(want_image, want)
        same_image(image, want_image, RESIZE_TOL)
        same_target(target, want)
        x, y = want["keypoints"][..., 0], want["keypoints"][..., 1]
        moved_off += int(((x < 0) | (x >= size[1]) | (y < 0) | (y >= size[0])).sum())
    assert moved_off > 0  # some pushed off the canvas, and left there
