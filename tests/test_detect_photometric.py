"""v2's RandomPhotometricDistort as a source op (csrc/augment/photometric.c):
it runs on the whole decoded image before the geometry, as torchvision runs
it first in the detection reference's ssd preset.

The op alone: given the parameters it draws (_core.augment_draw), its pixels
equal torchvision's RandomPhotometricDistort.transform with those
parameters on decoded JPEG and PNG files, for contrast before and after
and with and without the channel permutation, on the AVX2 and the portable
loops, within test_augment_color's tolerance for colour ops (0 LSB; 1 LSB
above LARGE pixels, where contrast's float32 mean may round otherwise);
its draws follow torchvision's make_params (KS and chi-square).

Through pipelines: ToImage, RandomPhotometricDistort, Resize, CenterCrop on
a classification Loader, and RandomPhotometricDistort, RandomIoUCrop,
RandomHorizontalFlip over a wrapped CocoDetection through the detection
front door (no FallbackWarning): each image equals torchvision's ops on the
decoded file (the photometric distort on the whole image, then the crop and
flip the plan drew) within the tolerance, boxes, labels and image_id as
torchvision's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, SequentialSampler, Subset
from torchvision import datasets as tvd
from torchvision import tv_tensors
from torchvision.transforms import v2

import ringloader
from ringloader import _core
from ringloader.errors import UnsupportedTransform
from ringloader.transforms import compile_transform

import rounding
from detection_data import coco_json
from images import jpeg_bytes, png_bytes, write_folder
from test_augment_color import LARGE, simd  # noqa: F401 (a fixture)
from test_detect_frontdoor import Preset, collate_fn, same_target, wrapped_coco
from test_detect_ioucrop import KEYS, TAIL, annotated, plan_rows, reference
from test_dropin import fused

stats = pytest.importorskip("scipy.stats")

SEED = 11
DEFAULT = [0.875, 1.125, 0.5, 1.5, 0.5, 1.5, -0.05, 0.05, 0.5]
WIDE = [0.5, 1.5, 0.2, 1.8, 0.2, 1.8, -0.3, 0.3, 0.7]


def op_args(t):
    """photometric_distort's arguments for transform t."""
    out = []
    for key in ("brightness", "contrast", "saturation", "hue"):
        out += list(getattr(t, key))
    return out + [float(t.p)]


def tv_params(p):
    """torchvision's make_params dict from our drawn parameters."""
    f = [None if math.isnan(x) else x for x in p[:4]]
    perm = torch.tensor([int(c) for c in p[6:9]]) if p[5] else None
    return dict(
        brightness_factor=f[0],
        contrast_factor=f[1],
        saturation_factor=f[2],
        hue_factor=f[3],
        contrast_before=bool(p[4]),
        channel_permutation=perm,
    )


def distorted(t, chw, p):
    """torchvision's transform of the uint8 CHW tensor with params p."""
    with rounding.reference():
        return t.transform(chw.clone(), tv_params(p))


def bound(h, w):
    return 1 if h * w > LARGE else 0


def ours(args, hwc, key):
    h, w, _ = hwc.shape
    out = _core.augment(
        hwc.tobytes(), h, w, [("photometric_distort", args)], SEED, 0, key
    )
    return np.frombuffer(out, np.uint8).reshape(h, w, 3)


def decode(data):
    rgb, h, w = _core.decode(data)
    return np.frombuffer(rgb, np.uint8).reshape(h, w, 3)


FILES = {
    "jpeg": lambda h, w: jpeg_bytes("s420", h, w, 5, "photo"),
    "png": lambda h, w: png_bytes(h, w, 5),
}


@pytest.mark.parametrize("size", [(37, 53), (300, 260)], ids=["small", "large"])
@pytest.mark.parametrize("kind", list(FILES))
@pytest.mark.parametrize("args", [DEFAULT, WIDE], ids=["default", "wide"])
def test_the_op_is_torchvisions(simd, args, kind, size):  # noqa: F811
    t = v2.RandomPhotometricDistort(
        brightness=args[0:2],
        contrast=args[2:4],
        saturation=args[4:6],
        hue=args[6:8],
        p=args[8],
    )
    hwc = decode(FILES[kind](*size))
    h, w, _ = hwc.shape
    chw = torch.from_numpy(hwc.copy()).permute(2, 0, 1)
    seen = set()
    worst = 0
    for key in range(40):
        p = _core.augment_draw([("photometric_distort", args)], h, w, SEED, 0, key)[0]
        want = distorted(t, chw, p).permute(1, 2, 0).numpy()
        worst = max(worst, int(np.abs(ours(args, hwc, key).astype(int) - want).max()))
        seen.add((bool(p[4]), not math.isnan(p[1]), bool(p[5])))
    assert worst <= bound(h, w), worst
    # contrast before and after, with and without the permutation
    assert {(b, True, m) for b in (True, False) for m in (True, False)} <= seen


def test_the_draws_follow_torchvision():
    """20,000 draws against torchvision's make_params: each factor's gate
    (chi-square) and value (KS), contrast's place, the permutation's gate
    and which permutation (chi-square)."""
    n = 20000
    t = v2.RandomPhotometricDistort(p=0.6)
    ops = [("photometric_distort", op_args(t))]
    draws = [_core.augment_draw(ops, 8, 8, 1, 0, k)[0] for k in range(n)]
    torch.manual_seed(0)
    image = torch.zeros(3, 2, 2, dtype=torch.uint8)
    theirs = [t.make_params([image]) for _ in range(n)]

    def gates(a, b):
        return stats.chi2_contingency([[a, n - a], [b, n - b]]).pvalue

    names = ("brightness_factor", "contrast_factor", "saturation_factor", "hue_factor")
    for i, key in enumerate(names):
        a = [d[i] for d in draws if not math.isnan(d[i])]
        b = [p[key] for p in theirs if p[key] is not None]
        assert gates(len(a), len(b)) > 1e-3, key
        assert stats.ks_2samp(a, b).pvalue > 1e-3, key
    before = sum(int(d[4]) for d in draws)
    assert gates(before, sum(p["contrast_before"] for p in theirs)) > 1e-3
    perms = [tuple(int(c) for c in d[6:9]) for d in draws if d[5]]
    ref = [
        tuple(p["channel_permutation"].tolist())
        for p in theirs
        if p["channel_permutation"] is not None
    ]
    assert gates(len(perms), len(ref)) > 1e-3
    kinds = sorted(set(perms) | set(ref))
    table = [[perms.count(k) for k in kinds], [ref.count(k) for k in kinds]]
    assert len(kinds) == 6 and stats.chi2_contingency(table).pvalue > 1e-3


def test_the_op_before_resize_and_crop_on_a_loader(tmp_path):
    """ToImage, RandomPhotometricDistort, Resize, CenterCrop: each sample is
    torchvision's distort of the whole decoded file, then its resize and
    crop of the tensor (Pillow's resize within 1 LSB: _compiler's
    _tensor_geometry), within the op's tolerance and that LSB."""
    root = write_folder(str(tmp_path), n_per_class=3, classes=2, seed=4)
    distort = v2.RandomPhotometricDistort(p=0.7)
    geometry = [v2.Resize(64), v2.CenterCrop(56)]
    tf = v2.Compose([v2.ToImage(), distort] + geometry)
    ops = compile_transform(tf).spec["ops"]
    assert [name for name, _ in ops] == ["photometric_distort"]
    folder = tvd.ImageFolder(root)
    loader = ringloader.Loader(folder, batch_size=3, transform=tf, seed=SEED)
    with loader:
        got = torch.cat([images for images, _ in loader])
    for key, (path, _) in enumerate(folder.samples):
        with open(path, "rb") as f:
            hwc = decode(f.read())
        h, w, _ = hwc.shape
        p = _core.augment_draw(ops, h, w, SEED, 0, key)[0]
        want = distorted(distort, torch.from_numpy(hwc.copy()).permute(2, 0, 1), p)
        want = v2.Compose(geometry)(want)
        diff = (got[key].int() - want.int()).abs().max().item()
        assert diff <= bound(h, w) + 1, f"sample {key}: {diff} LSB"


def ssd_head():
    """The ssd preset's pixel head but its zoom-out."""
    return [
        v2.ToImage(),
        v2.RandomPhotometricDistort(p=0.7),
        v2.RandomIoUCrop(),
        v2.RandomHorizontalFlip(p=0.5),
    ]


@pytest.fixture(scope="module")
def detection(tmp_path_factory):
    """The dataset with the head and the tail, and the same unaugmented, under
    one Subset; images of 40 .. 120 pixels a side."""
    root = tmp_path_factory.mktemp("photometric")
    rng = np.random.default_rng(SEED)
    sizes = [
        (int(rng.integers(40, 120)), int(rng.integers(40, 120))) for _ in range(30)
    ]
    data = coco_json(30, SEED, sizes=sizes)
    ds = wrapped_coco(root / "a", data, Preset(ssd_head() + TAIL), KEYS, lambda d: None)
    ref = wrapped_coco(root / "b", data, v2.ToImage(), KEYS, lambda d: None)
    ids = annotated(ds)
    return Subset(ds, ids), Subset(ref, ids)


def decoded_item(ref, k):
    """Item k of the unaugmented Subset, its image decoded by ringloader (the
    pixels the loader reads, so that only the ops differ)."""
    image, target = ref[k]
    inner = ref.dataset
    path = (
        inner.root
        + "/"
        + inner.coco.loadImgs(inner.ids[ref.indices[k]])[0]["file_name"]
    )
    with open(path, "rb") as f:
        hwc = decode(f.read())
    chw = torch.from_numpy(hwc.copy()).permute(2, 0, 1)
    assert chw.shape == image.shape
    return tv_tensors.Image(chw), target


@pytest.mark.parametrize("epoch", [0, 1])
def test_photometric_iou_crop_flip_runs_natively(detection, epoch):
    ds, ref = detection
    sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
    loader = fused(ds, batch_sampler=sampler, collate_fn=collate_fn, seed=SEED)
    spec = loader._plans[0].compiled.spec
    assert spec["iou_crop"] == 1 and spec["ops"][0][0] == "photometric_distort"
    distort = ds.dataset.transforms.transforms.transforms[1]
    for _ in range(epoch + 1):
        items = [it for images, ts in loader for it in zip(images, ts)]
    assert len(items) == len(ds)
    seen = {"crop": set(), "before": set(), "permute": set()}
    for k, (image, target) in enumerate(items):
        want_image, want = decoded_item(ref, k)
        h, w = want_image.shape[-2:]
        drawn = _core.augment_draw(spec["ops"], h, w, SEED, epoch, k)[0]
        want_image = tv_tensors.wrap(
            distorted(distort, want_image, drawn), like=want_image
        )
        p = _core.plan_window(spec, w, h, SEED, epoch, k, 0, plan_rows(want["boxes"]))
        want_image, want = reference(want_image, want, p)
        for step in TAIL:
            want_image, want = step(want_image, want)
        seen["crop"].add(bool(p["iou_crop"]))
        seen["before"].add(bool(drawn[4]))
        seen["permute"].add(bool(drawn[5]))
        assert image.shape == want_image.shape
        # the op's tolerance (0 LSB: under LARGE pixels), and the float
        # conversion's rounding
        assert (image - want_image).abs().max().item() <= bound(h, w) / 255 + 1e-6
        same_target(target, want)
    assert all(v == {True, False} for v in seen.values()), seen


def test_a_source_op_comes_first_and_in_no_group():
    pd = ("photometric_distort", DEFAULT)
    with pytest.raises(ValueError, match="must come first"):
        _core.augment_draw([("invert", [0.5]), pd], 8, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="a source op"):
        _core.augment_draw([pd, ("random_apply", [1, 0.5])], 8, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="hue"):
        _core.augment_draw(
            [("photometric_distort", DEFAULT[:6] + [0, 0.7, 0.5])], 8, 8, 0, 0, 0
        )
    assert len(_core.augment_draw([pd, pd, ("invert", [0.5])], 8, 8, 0, 0, 0)) == 3


def test_the_compiler_fuses_it_on_a_tensor_before_the_geometry():
    after = v2.Compose(
        [v2.ToImage(), v2.Resize(32), v2.CenterCrop(32), v2.RandomPhotometricDistort()]
    )
    assert "before any geometry" in compile_transform(after).reason
    floats = v2.Compose(
        [
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.RandomPhotometricDistort(),
        ]
    )
    with pytest.raises(UnsupportedTransform, match="right after ToImage"):
        compile_transform(floats, varying=True)
    pil = v2.Compose([v2.RandomPhotometricDistort(), v2.Resize(32), v2.CenterCrop(32)])
    with pytest.raises(UnsupportedTransform, match="RandomPhotometricDistort"):
        compile_transform(pil)


def test_the_ssd_preset_on_the_pil_backend_falls_back_saying_what_to_do(tmp_path):
    """The reference's ssd preset with its default backend ("pil") distorts
    the PIL image: the reason is that step's and the advice one that fits
    (before, "resize and crop to one size first", for a preset that crops)."""
    from collections import defaultdict

    mean = (123.0, 117.0, 104.0)
    pil_head = [
        v2.RandomPhotometricDistort(),
        v2.RandomZoomOut(fill=defaultdict(lambda: mean, {tv_tensors.Mask: 0})),
        v2.RandomIoUCrop(),
        v2.RandomHorizontalFlip(),
        v2.ToImage(),
    ]
    data = coco_json(4, SEED)
    ds = wrapped_coco(tmp_path, data, Preset(pil_head + TAIL), KEYS, lambda d: None)
    with pytest.warns(ringloader.FallbackWarning) as seen:
        loader = ringloader.DataLoader(ds, batch_size=2, collate_fn=collate_fn)
    assert type(loader) is torch.utils.data.DataLoader
    (text,) = [str(w.message) for w in seen]
    assert "RandomPhotometricDistort is fused on a uint8 tensor image" in text
    assert "put ToImage (or PILToTensor) before it" in text
    assert "one size" not in text and "no crop" not in text
