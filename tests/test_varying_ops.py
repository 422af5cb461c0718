"""Augment ops on images of varying sizes: a transform without a crop
(Resize(shorter side), RandomShortestSize, flips) followed by colour ops,
RandomAffine, RandomRotation, groups or RandomErasing after Normalize runs
them in the C chain, each sample drawing and applying on its own output
size, as torchvision draws on each image (was refused: "fused only
whole", and ringloader.DataLoader fell back to torch's).

Each sample of the loader over real JPEG files equals torchvision's
transforms applied, with the parameters ``_core.augment_draw`` reports for
that sample's size, to the loader's sample without the ops (the same
plan: its resize and flip): ColorJitter within 1 LSB (as
tests/test_augment_pipeline.py), the warps after it moving those pixels
(nearest), RandomErasing's box exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ringloader
from ringloader import _core
from ringloader.errors import UnsupportedTransform
from ringloader.transforms import compile_transform

from images import jpeg_bytes
from test_dropin import fused

tv = pytest.importorskip("torchvision.transforms")
v2 = pytest.importorskip("torchvision.transforms.v2")
F = v2.functional

SEED = 11
SIZES = [(30, 40), (50, 20), (64, 64), (17, 33), (120, 90), (41, 77), (260, 300)]
SIZES += [(33, 35), (70, 21), (48, 48), (25, 60), (90, 140)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("varying_ops")
    paths = []
    for i, (h, w) in enumerate(SIZES):
        p = d / f"{i:02d}.jpg"
        p.write_bytes(jpeg_bytes("baseline", h, w, seed=i))
        paths.append(str(p))
    return paths


def collate(batch):
    return tuple(zip(*batch))


def loaded(paths, transform):
    """Every sample of one epoch through ringloader.DataLoader with a list
    collate (it must not fall back), in order, and the fused spec."""
    ds = ringloader.FileList(paths, list(range(len(paths))), transform=transform)
    loader = fused(ds, batch_size=5, collate_fn=collate, seed=SEED, num_workers=2)
    images = [im for batch, _ in loader for im in batch]
    return images, loader._plans[0].compiled.spec


def jitter(image, d):
    """ColorJitter's adjustments in the drawn order and factors."""
    fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
    for fn_id in d[:4]:
        factor = d[4 + int(fn_id)]
        if not math.isnan(factor):
            image = fns[int(fn_id)](image, factor)
    return image


def warp(t, image, d):
    if isinstance(t, (v2.RandomAffine, tv.RandomAffine)):
        return F.affine(
            image,
            angle=d[0],
            translate=[int(d[1]), int(d[2])],
            scale=d[3],
            shear=[d[4], d[5]],
            fill=t.fill if isinstance(t.fill, (int, float)) else None,
        )
    return F.rotate(
        image, d[0], fill=t.fill if isinstance(t.fill, (int, float)) else None
    )


HEADS = {
    "shortest-flip": lambda: [
        v2.RandomShortestSize([40, 56, 72]),
        v2.RandomHorizontalFlip(),
    ],
    "shorter-v1": lambda: [tv.Resize(48), tv.RandomHorizontalFlip()],
}


@pytest.mark.parametrize(
    "head, ops",
    [
        ("shortest-flip", lambda: [v2.ColorJitter(0.4, 0.4, 0.4, 0.1)]),
        (
            "shortest-flip",
            lambda: [
                v2.ColorJitter(0.3, 0.3, 0.3),
                v2.RandomAffine(25, translate=(0.2, 0.1), scale=(0.8, 1.2), shear=6),
            ],
        ),
        (
            "shorter-v1",
            lambda: [tv.ColorJitter(0.4, 0.2), tv.RandomRotation(30, fill=7)],
        ),
    ],
    ids=["jitter", "jitter-affine", "v1-jitter-rotation"],
)
def test_each_sample_equals_torchvision_on_its_own_size(files, head, ops):
    head, ops = HEADS[head](), ops()
    to_tensor = (
        [v2.PILToTensor()] if isinstance(head[0], v2.Transform) else [tv.PILToTensor()]
    )
    compose = v2.Compose if isinstance(head[0], v2.Transform) else tv.Compose
    plain, _ = loaded(files, compose(head + to_tensor))
    ours, spec = loaded(files, compose(head + ops + to_tensor))
    assert spec["varying"] == 1 and len(spec["ops"]) == len(ops)
    sizes = set()
    for k, (a, b) in enumerate(zip(plain, ours)):
        assert a.shape == b.shape
        h, w = a.shape[-2:]
        sizes.add((h, w))
        drawn = _core.augment_draw(spec["ops"], h, w, SEED, 0, k)
        want = a
        for t, d in zip(ops, drawn):
            want = jitter(want, d) if "Jitter" in type(t).__name__ else warp(t, want, d)
        diff = (b.int() - want.int()).abs().max().item()
        assert diff <= 1, f"sample {k} ({h}x{w}): {diff} LSB"
    assert len(sizes) > 5


def test_the_warps_translate_by_each_samples_own_size(files):
    """RandomAffine's translate is a fraction of the image: drawn on each
    sample's size, the largest shifts reach that fraction of it."""
    t = v2.Compose([v2.Resize(40), v2.RandomAffine(0, translate=(0.5, 0.5))])
    ops = compile_transform(t, varying=True).spec["ops"]
    for h, w in [(40, 200), (300, 40)]:
        shifts = np.array(
            [_core.augment_draw(ops, h, w, SEED, 0, k)[0][1:3] for k in range(400)]
        )
        assert (
            np.abs(shifts[:, 0]).max() > 0.4 * w
            and np.abs(shifts[:, 0]).max() <= 0.5 * w
        )
        assert (
            np.abs(shifts[:, 1]).max() > 0.4 * h
            and np.abs(shifts[:, 1]).max() <= 0.5 * h
        )


def test_erasing_after_normalize_erases_a_box_of_each_samples_size(files):
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    base = [
        v2.RandomShortestSize([36, 52]),
        v2.RandomHorizontalFlip(),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean, std),
    ]
    plain, _ = loaded(files, v2.Compose(base))
    erased, spec = loaded(files, v2.Compose(base + [v2.RandomErasing(0.8, value=0)]))
    applied = 0
    for k, (a, b) in enumerate(zip(plain, erased)):
        h, w = a.shape[-2:]
        p = _core.augment_draw(spec["ops"], h, w, SEED, 0, k)[0]
        mask = torch.zeros(h, w, dtype=torch.bool)
        if p[0]:
            i, j, eh, ew = (int(v) for v in p[1:5])
            assert i + eh <= h and j + ew <= w
            mask[i : i + eh, j : j + ew] = True
            applied += 1
            assert bool((b[:, mask] == 0).all())
        assert torch.equal(a[:, ~mask], b[:, ~mask]), f"sample {k}"
    assert 0 < applied < len(plain)


@pytest.mark.parametrize(
    "ops, why",
    [
        # a policy's magnitudes are pixels of one size (RandAugment's translate)
        (v2.RandAugment(), "depend on the image size"),
        (v2.RandomAffine(10), "after RandomAffine"),
    ],
    ids=["policy", "resize-after-ops"],
)
def test_what_still_needs_one_size_says_why(ops, why):
    steps = (
        [v2.Resize(40), ops] if why != "after RandomAffine" else [ops, v2.Resize(40)]
    )
    with pytest.raises(UnsupportedTransform, match=why):
        compile_transform(v2.Compose(steps), varying=True)
