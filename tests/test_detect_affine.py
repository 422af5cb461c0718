"""RandomAffine, RandomRotation and RandomPerspective in a detection composition (a v2
Compose on ``wrap_dataset_for_transforms_v2(CocoDetection(...))``), alone
or in RandomApply, RandomChoice and RandomOrder, after the reference's
resize and flip: read natively by ringloader.DataLoader (no
FallbackWarning), the boxes and masks following the warps the pixels went
through. Each item equals torchvision's v2 transforms applied to the
unaugmented wrapped item with the parameters the C core drew: the plan's
(``_core.plan_window``) and the augment chain's (``_core.augment_draw``),
the transform objects' own ``transform`` on the image, boxes and masks
(their fill for a Mask, nearest): the image within the resize's bound,
boxes within 1e-3 px (int64 boxes truncated as torchvision truncates
them), labels, image_id and masks identical, so SanitizeBoundingBoxes
drops the same boxes. A policy, which torchvision itself refuses on boxes,
still falls back, naming it.

Without a crop (Resize(shorter side), RandomShortestSize: each image its
own size) the warps and colour ops run in the C chain too, each sample
drawing on its own output size as torchvision draws on each image: boxes
and masks follow them as above (was a fallback: "fused only whole")."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, SequentialSampler, Subset
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.functional import _get_perspective_coeffs
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core

from test_detect_frontdoor import Preset, coco, collate_fn, dataset, same_target
from test_detect_geometry import KEYS, RESIZE_TOL, TAIL, _whole_boxes, each
from test_detect_frontdoor import wrapped_coco
from test_detect_ioucrop import annotated
from detection_data import coco_json
from test_dropin import fused
import warps as warp_grids

__all__ = ["coco"]  # the fixture, shared

SIZE = (36, 44)  # (h, w): the resize the warps follow
SEED = 7


def affine(**kw):
    return v2.RandomAffine(
        degrees=25, translate=(0.15, 0.1), scale=(0.7, 1.3), shear=(-8, 8, -4, 4), **kw
    )


def perspective(distortion, **kw):
    return v2.RandomPerspective(
        distortion, interpolation=v2.InterpolationMode.NEAREST, **kw
    )


def preset(*warps, flip=True):
    head = [v2.ToImage(), v2.Resize(SIZE, antialias=True)]
    head += [v2.RandomHorizontalFlip(p=0.5)] if flip else []
    return Preset(head + list(warps) + TAIL)


def run_chain(steps, image, target, drawn):
    """The head's warps, ColorJitter and groups on (image, target) in
    chain order (its elements: children before their group), with the C
    draws; returns
    the pair and the elements used."""
    at = 0

    def element(t):
        nonlocal at
        if isinstance(t, (v2.RandomApply, v2.RandomChoice, v2.RandomOrder)):
            kids = [element(c) for c in t.transforms]
            d = drawn[at]
            at += 1
            if isinstance(t, v2.RandomApply):
                order = list(range(len(kids))) if d[0] < t.p else []
            elif isinstance(t, v2.RandomChoice):
                order = [int(d[0])]
            else:
                order = [int(v) for v in d[: len(kids)]]
            return lambda pair: _in_order(pair, [kids[k] for k in order])
        d = drawn[at]
        at += 1
        if isinstance(t, v2.ColorJitter):  # the image alone
            return lambda pair: (t.transform(pair[0], jitter_params(d)), pair[1])
        if isinstance(t, v2.RandomAffine):
            params = dict(
                angle=d[0], translate=[d[1], d[2]], scale=d[3], shear=[d[4], d[5]]
            )
        elif isinstance(t, v2.RandomPerspective):
            if not d[0] < t.p:  # its p said no: make_params never ran
                return lambda pair: pair
            h, w = SIZE
            start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
            end = [[int(d[k]), int(d[k + 1])] for k in range(1, 9, 2)]
            params = dict(coefficients=_get_perspective_coeffs(start, end))
        else:
            params = dict(angle=d[0])
        return lambda pair: each(lambda x: t.transform(x, params), *pair)

    runs = [element(t) for t in steps]
    pair = (image, target)
    for run in runs:
        pair = run(pair)
    assert at == len(drawn)
    return pair


def _in_order(pair, runs):
    for run in runs:
        pair = run(pair)
    return pair


def check_items(ds, ref, warps, seed=SEED, tol=RESIZE_TOL, varying=False):
    """Every item of the loader over ds against torchvision's transforms on
    ref's with the C draws: (boxes SanitizeBoundingBoxes dropped, masks
    compared, the angles drawn). varying: no crop, each item the size of
    its plan (torchvision's resize to it), the chain drawn on that size."""
    sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
    loader = fused(ds, batch_sampler=sampler, collate_fn=collate_fn, seed=seed)
    spec = loader._plans[0].compiled.spec
    assert spec["ops"], "the warps run in the C chain"
    assert spec.get("varying", 0) == int(varying)
    position, dropped, masks, sizes = 0, 0, 0, set()
    for images, targets in loader:
        for image, target in zip(images, targets):
            want_image, want = ref[position]
            h, w = want_image.shape[-2:]
            p = _core.plan_window(spec, w, h, seed, 0, position)
            size = [p["vh"], p["vw"]] if varying else list(SIZE)
            sizes.add(tuple(size))
            want_image, want = each(
                lambda x, size=size: F.resize(x, size, antialias=True), want_image, want
            )
            if p["flip"]:
                want_image, want = each(F.horizontal_flip, want_image, want)
            drawn = _core.augment_draw(spec["ops"], *size, seed, 0, position)
            # the plain-order grid on x86-64, which the C warp computes
            # exactly (warps.py), so that masks compare bit for bit
            with warp_grids.exact_reference():
                want_image, want = run_chain(warps, want_image, want, drawn)
            before = len(want.get("boxes", ()))
            for step in TAIL:
                want_image, want = step(want_image, want)
            dropped += before - len(want.get("boxes", ()))
            masks += int("masks" in want and bool(want["masks"].any()))
            assert image.shape == want_image.shape
            assert (image - want_image).abs().max().item() <= tol
            same_target(target, want)
            position += 1
    assert position == len(ds)
    assert len(sizes) > 2 if varying else sizes == {SIZE}
    return dropped, masks


def pair(coco, transforms, keys=KEYS):
    return dataset(coco, transforms, keys), dataset(coco, v2.ToImage(), keys)


@pytest.mark.parametrize(
    "warp",
    [
        affine(),
        affine(fill=9),
        affine(fill={tv_tensors.Mask: 2, "others": [200, 10, 60]}),
        affine(center=[5.0, 30.0]),
        v2.RandomRotation(40),
        v2.RandomRotation((-180, 180), center=[10.0, 4.5], fill=5),
        v2.RandomRotation((180, 180)),  # rotate_image's exact half turn
        perspective(0.5, p=0.8),
        perspective(0.7, p=1.0, fill={tv_tensors.Mask: 3, "others": 120}),
    ],
    ids=[
        "affine",
        "fill",
        "fill-dict",
        "affine-center",
        "rotation",
        "rotation-center",
        "half-turn",
        "perspective",
        "perspective-fill",
    ],
)
def test_a_warp_after_resize_and_flip_moves_boxes_and_masks(coco, warp):
    dropped, masks = check_items(*pair(coco, preset(warp)), [warp])
    assert dropped > 0 and masks > 0  # the warp pushes boxes off the canvas


def test_warps_in_groups_follow_the_groups_picks(coco):
    rotate = v2.RandomRotation(30)
    steps = [
        v2.RandomApply([rotate], p=0.5),
        v2.RandomChoice([affine(), v2.RandomRotation(90, center=[0.0, 0.0])]),
        v2.RandomOrder([v2.RandomRotation(10), affine(center=[3.0, 3.0])]),
    ]
    ds, ref = pair(coco, preset(*steps))
    check_items(ds, ref, steps)
    loader = fused(ds, batch_size=4, collate_fn=collate_fn, seed=SEED)
    ops = loader._plans[0].compiled.spec["ops"]
    applied = [
        _core.augment_draw(ops, *SIZE, SEED, 0, k)[1][0] < 0.5 for k in range(len(ds))
    ]
    assert set(applied) == {True, False}  # RandomApply ran, and did not


def test_bilinear_rotation_without_the_flip(coco):
    warp = v2.RandomRotation(20, interpolation=v2.InterpolationMode.BILINEAR)
    # the warp's own rounding (1 LSB) over the resize's
    check_items(*pair(coco, preset(warp, flip=False)), [warp], tol=RESIZE_TOL + 1 / 255)


def test_bilinear_perspective_in_a_group(coco):
    steps = [v2.RandomChoice([v2.RandomPerspective(0.6, p=0.9), affine()])]
    ds, ref = pair(coco, preset(*steps, flip=False))
    check_items(ds, ref, steps, tol=RESIZE_TOL + 1 / 255)


def test_int64_boxes_are_truncated_as_torchvisions(tmp_path):
    data = coco_json(20, 3)
    warp = affine()
    ds = wrapped_coco(tmp_path / "a", data, preset(warp), KEYS, _whole_boxes)
    ref = wrapped_coco(tmp_path / "b", data, v2.ToImage(), KEYS, _whole_boxes)
    ids = annotated(ds)
    assert ref[ids[0]][1]["boxes"].dtype == torch.int64
    check_items(Subset(ds, ids), Subset(ref, ids), [warp])


def test_a_warp_reads_natively_not_through_torch(coco):
    ds = dataset(coco, preset(affine(), v2.RandomRotation(15)), KEYS)
    loader = fused(ds, batch_size=4, collate_fn=collate_fn)
    assert isinstance(loader, ringloader.Loader)
    assert [name for name, _ in loader._plans[0].compiled.spec["ops"]] == [
        "affine",
        "rotation",
    ]


@pytest.mark.parametrize(
    "step, why",
    [
        (v2.RandAugment(), "RandAugment is not followed"),
        (v2.RandomApply([v2.AutoAugment()]), "AutoAugment in a RandomApply"),
        (v2.RandomApply([v2.ElasticTransform()]), "ElasticTransform in a"),
        (
            v2.RandomChoice([affine(fill=1), v2.RandomRotation(5, fill=2)]),
            "fill masks with",
        ),
    ],
)
def test_steps_without_a_warp_fall_back_naming_them(coco, step, why):
    tf = preset(step)
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(
            dataset(coco, tf), batch_size=2, collate_fn=collate_fn
        )
    assert not isinstance(loader, ringloader.Loader)


def test_a_policy_in_the_chain_is_refused_by_the_targets_naming_it():
    """The C side too: a chain with an op that moves pixels without a warp
    is no geometry for the targets."""
    from ringloader.transforms import compile_transform

    tf = v2.Compose([v2.RandomResizedCrop(32), v2.RandAugment(), v2.ToImage()])
    spec = compile_transform(tf).spec
    boxes = np.array([[1.0, 2.0, 20.0, 30.0]])
    with pytest.raises(ValueError, match="rand_augment moves pixels"):
        _core.plan_boxes(spec, 40, 50, 1, 0, 3, 0, boxes, "XYXY")
    masks = np.zeros(32 * 32, np.uint8)
    with pytest.raises(ValueError, match="rand_augment moves pixels"):
        _core.plan_warp_masks(spec, 1, 0, 3, 0, masks, 1, 0)


# ---- images of varying sizes: each sample's ops drawn on its own size ----


def jitter_params(d):
    """ColorJitter's transform parameters from the C draws."""
    fs = [None if np.isnan(f) else f for f in d[4:8]]
    return dict(
        fn_idx=[int(i) for i in d[:4]],
        brightness_factor=fs[0],
        contrast_factor=fs[1],
        saturation_factor=fs[2],
        hue_factor=fs[3],
    )


@pytest.mark.parametrize(
    "resize, warp",
    [
        (v2.RandomShortestSize([36, 44, 52], max_size=120), affine()),
        (v2.Resize(40, antialias=True), v2.RandomRotation(35, fill=3)),
    ],
    ids=["shortest-affine", "shorter-rotation"],
)
def test_varying_sizes_warp_and_jitter_each_on_its_own_size(coco, resize, warp):
    # RandomShortestSize, the flip, RandomAffine or RandomRotation, then
    # ColorJitter (on the warped tensor, as the C chain's colour kernels)
    jitter = v2.ColorJitter(0.3, 0.3, 0.3, 0.05)
    tf = Preset([v2.ToImage(), resize, v2.RandomHorizontalFlip(), warp, jitter] + TAIL)
    ds, ref = pair(coco, tf)
    # the jitter's factors amplify the resize's 2 LSB
    dropped, masks = check_items(
        ds, ref, [warp, jitter], tol=4 / 255 + 1e-6, varying=True
    )
    assert dropped > 0 and masks > 0


def test_varying_sizes_groups_follow_their_picks(coco):
    steps = [
        v2.RandomApply([v2.RandomRotation(30)], p=0.5),
        v2.RandomChoice([affine(), v2.RandomRotation(90, center=[0.0, 0.0])]),
    ]
    tf = Preset([v2.ToImage(), v2.Resize(38), v2.RandomHorizontalFlip()] + steps + TAIL)
    check_items(*pair(coco, tf), steps, varying=True)


def test_varying_masks_are_warped_on_the_samples_own_size():
    """plan_warp_masks takes a varying sample's size, and needs it."""
    from ringloader.transforms import compile_transform

    tf = v2.Compose([v2.ToImage(), v2.Resize(30), v2.RandomRotation((90, 90))])
    spec = compile_transform(tf, varying=True).spec
    assert spec["varying"] == 1
    mask = np.zeros((30, 40), np.uint8)
    mask[2:5, 30:36] = 1  # a quarter turn about the centre of 40 x 30
    out = _core.plan_warp_masks(spec, 1, 0, 0, 0, mask.reshape(-1), 1, 0, size=(30, 40))
    want = F.rotate(torch.from_numpy(mask)[None], 90.0).numpy()[0]
    assert np.array_equal(np.frombuffer(out, np.uint8).reshape(30, 40), want)
    with pytest.raises(ValueError, match="size"):
        _core.plan_warp_masks(spec, 1, 0, 0, 0, mask.reshape(-1), 1, 0)
