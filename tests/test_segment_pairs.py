"""torchvision's segmentation reference without ``--use-v2`` through
ringloader.DataLoader, the DataLoader line alone changed: an unwrapped
VOCSegmentation given the reference's presets built from its own pair
transforms (``reference_pairs``: RandomResize, RandomHorizontalFlip,
RandomCrop padding the mask with 255, PILToTensor, ToDtype, Normalize on
PIL pairs). Read natively (no FallbackWarning): eval batches equal torch's
DataLoader's (images within 1 LSB after Normalize, int64 masks identical);
train items equal Pillow's and torchvision's ops run in the preset's order
with the sample's plan (``_core.plan_window``), the mask resized by
Pillow's NEAREST (``_core.plan_maps(pil=True)``, checked against Pillow on
its own); the resize draws both ends of min_size..max_size. Objects that
do otherwise, however named, fall back saying why, and the probes that
find out leave the global generators as they were."""

from __future__ import annotations

import random

import numpy as np
import PIL.Image
import pytest
import torch
from torchvision import datasets
from torchvision.transforms import functional as F

import ringloader
from ringloader import _core
from ringloader.transforms import compile_transform

import reference_pairs as R
from detection_data import write_voc
from test_dropin import fused
from test_segment_frontdoor import LSB, items, padded_collate, planned_items

SEED = 5
BASE, CROP = 32, 24


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return write_voc(tmp_path_factory.mktemp("voc"), 14, seed=SEED)


def dataset(root, transforms):
    return datasets.VOCSegmentation(root, "2012", "train", transforms=transforms)


def same_image(ours, ref):
    assert type(ours) is type(ref) is torch.Tensor
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert (ours - ref).abs().max().item() <= LSB


def same_mask(ours, ref):
    assert type(ours) is type(ref) is torch.Tensor
    assert ours.dtype == ref.dtype == torch.int64 and torch.equal(ours, ref)


def same_batches(ds, collate):
    """ringloader.DataLoader's batches of ``ds`` (read natively) equal
    torch's DataLoader's, item by item or padded and stacked; returns the
    mask values seen (items)."""
    ours = list(fused(ds, batch_size=4, collate_fn=collate))
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=collate))
    assert len(ours) == len(theirs) == 4
    seen = set()
    for got, want in zip(ours, theirs):
        if collate is padded_collate:
            same_image(got[0], want[0])
            same_mask(got[1], want[1])
            continue
        for (image, mask), (ref_image, ref_mask) in zip(got, want):
            assert mask.shape == image.shape[1:]  # (h, w): no channel
            same_image(image, ref_image)
            same_mask(mask, ref_mask)
            seen.update(mask.unique().tolist())
    return seen


@pytest.mark.parametrize("collate", [items, padded_collate])
def test_eval_preset_batches_equal_torchs(voc, collate):
    same_batches(dataset(voc, R.eval_preset(BASE)), collate)


def expected(raw_image, raw_mask, spec, epoch, key):
    """The preset's order with the sample's plan, on the PIL pair as the
    reference runs it: Pillow's resize to the drawn size (bilinear, the
    mask NEAREST), the flip, the padding at the bottom and right (the mask
    with 255), the window (on the flipped pair at the mirror of the offset
    the core drew on the unflipped one: the same uniform draw), then the
    conversions."""
    w, h = raw_image.size
    p = _core.plan_window(spec, w, h, SEED, epoch, key)
    image = raw_image.resize((p["rw"], p["rh"]), PIL.Image.BILINEAR)
    mask = raw_mask.resize((p["rw"], p["rh"]), PIL.Image.NEAREST)
    if p["flip"]:
        image, mask = F.hflip(image), F.hflip(mask)
    grow = [0, 0, max(CROP - p["rw"], 0), max(CROP - p["rh"], 0)]
    if min(p["rw"], p["rh"]) < CROP:
        image, mask = F.pad(image, grow, fill=0), F.pad(mask, grow, fill=255)
    wx = image.size[0] - CROP - p["wx"] if p["flip"] else p["wx"]
    image = F.crop(image, p["wy"], wx, CROP, CROP)
    mask = F.crop(mask, p["wy"], wx, CROP, CROP)
    image = F.convert_image_dtype(F.pil_to_tensor(image), torch.float)
    mask = torch.as_tensor(np.array(mask), dtype=torch.int64)
    return F.normalize(image, R.MEAN, R.STD), mask, p


def test_train_items_follow_the_plan(voc):
    ds = dataset(voc, R.train_preset(BASE, CROP))
    raw = dataset(voc, None)
    seen = {"flipped": 0, "padded": 0, "cropped": 0}
    for spec, epoch, i, image, mask in planned_items(ds, 3, SEED):
        assert image.shape == (3, CROP, CROP) and mask.shape == (CROP, CROP)
        want_image, want_mask, p = expected(*raw[i], spec, epoch, i)
        same_mask(mask, want_mask)
        same_image(image, want_image)
        seen["flipped"] += p["flip"]
        seen["padded"] += min(p["rw"], p["rh"]) < CROP
        seen["cropped"] += min(p["rw"], p["rh"]) > CROP
    assert all(seen.values()), seen


def test_the_resize_draws_both_ends_of_its_range(voc):
    """random.randint(min_size, max_size) includes max_size (v2's
    RandomResize leaves it out): each of 3 sizes a third of 6,000 draws."""
    lo = 20
    preset = R.Preset([R.RandomResize(lo, lo + 2), R.PILToTensor()])
    loader = fused(dataset(voc, preset), batch_size=1, collate_fn=items, seed=SEED)
    spec = loader._plans[0].compiled.spec
    sides = [
        min(_core.plan_window(spec, 40, 30, SEED, 0, k)[s] for s in ("vw", "vh"))
        for k in range(6000)
    ]
    counts = np.bincount(np.array(sides) - lo, minlength=3)
    assert len(counts) == 3
    # a third each: 2,000 +- 4.5 standard deviations (36.5)
    assert np.all(np.abs(counts - 2000) < 165), counts


@pytest.mark.parametrize("seed", range(4))
def test_pillow_nearest_maps_equal_pillows_resize(seed):
    """plan_maps(pil=True) on a resize alone: mask[rows][:, cols] is
    Pillow's NEAREST resize, up and down, odd ratios included; pil=False
    stays torch's nearest."""
    from torchvision.transforms import v2

    gen = np.random.default_rng(seed)
    for _ in range(25):
        h, w = (int(v) for v in gen.integers(2, 300, 2))
        side = int(gen.integers(2, 700))
        spec = compile_transform(
            v2.Compose([v2.Resize(side), v2.PILToTensor()]), varying=True
        ).spec
        mask = gen.integers(0, 256, (h, w), dtype=np.uint8)
        rows, cols = (
            np.frombuffer(m, np.int32)
            for m in _core.plan_maps(spec, w, h, SEED, 0, 0, pil=True)
        )
        size = (len(cols), len(rows))
        want = np.array(PIL.Image.fromarray(mask).resize(size, PIL.Image.NEAREST))
        assert np.array_equal(mask[rows][:, cols], want), (h, w, side)
        rows, cols = (
            np.frombuffer(m, np.int32) for m in _core.plan_maps(spec, w, h, SEED, 0, 0)
        )
        tensor = torch.from_numpy(mask)[None]
        theirs = v2.functional.resize(tensor, [len(rows), len(cols)], interpolation=0)
        assert np.array_equal(mask[rows][:, cols], theirs[0].numpy()), (h, w, side)


def _flip_upside_down(self, image, target):
    if random.random() >= self.flip_prob:
        return image, target
    return F.vflip(image), F.vflip(target)


def _pad_masks_with_zero(self, image, target):
    image, target = R._grow(image, self.size, 0), R._grow(target, self.size, 0)
    box = R.v1.RandomCrop.get_params(image, (self.size, self.size))
    return F.crop(image, *box), F.crop(target, *box)


def _run_backwards(self, image, target):
    for step in reversed(self.transforms):
        image, target = step(image, target)
    return image, target


def _skip_the_first(self, image, target):
    for step in self.transforms[1:]:
        image, target = step(image, target)
    return image, target


# Impostors: the reference's class names, doing something else.
FlipsUpsideDown = type(
    "RandomHorizontalFlip", (R.RandomHorizontalFlip,), {"__call__": _flip_upside_down}
)
PadsMasksWithZero = type(
    "RandomCrop", (R.RandomCrop,), {"__call__": _pad_masks_with_zero}
)
Reversed = type("Compose", (R.Compose,), {"__call__": _run_backwards})
SkipsOne = type("Compose", (R.Compose,), {"__call__": _skip_the_first})


def _normalize_bytes(self, image, target):
    return R.F.normalize(image.float() / 255, self.mean, self.std), target


def _draw_below_the_top(self, image, target):
    side = random.randint(self.min_size, self.max_size - 1)
    nearest = R.InterpolationMode.NEAREST
    return R.F.resize(image, side), R.F.resize(target, side, interpolation=nearest)


def _flip_more_rarely(self, image, target):
    if random.random() >= 0.8 * self.flip_prob:
        return image, target
    return R.F.hflip(image), R.F.hflip(target)


def _shrink_nearest(self, image, target):
    side = random.randint(self.min_size, self.max_size)
    nearest = R.InterpolationMode.NEAREST
    shrinks = min(R.F.get_image_size(image)) > side
    how = nearest if shrinks else R.InterpolationMode.BILINEAR
    return R.F.resize(image, side, interpolation=how), R.F.resize(
        target, side, interpolation=nearest
    )


# Flips at 0.8 p: seen on the draws nearest p only.
FlipsRarely = type(
    "RandomHorizontalFlip", (R.RandomHorizontalFlip,), {"__call__": _flip_more_rarely}
)
# Shrinks nearest: seen on the large probe only.
ShrinksNearest = type("RandomResize", (R.RandomResize,), {"__call__": _shrink_nearest})
# Runs under torch's DataLoader (it takes the uint8 image), which the
# reference's Normalize does not: its model raises on the probe.
NormalizesBytes = type("Normalize", (R.Normalize,), {"__call__": _normalize_bytes})
# Never draws max_size: seen on a draw at the range's top alone.
SkipsTheTop = type("RandomResize", (R.RandomResize,), {"__call__": _draw_below_the_top})


class ConvertImageDtype(R.ToDtype):
    """The older reference's class: ToDtype(dtype, scale=True) by another
    name, with no scale attribute."""

    def __init__(self, dtype):
        super().__init__(dtype, scale=True)
        del self.scale

    def __call__(self, image, target):
        return R.F.convert_image_dtype(image, self.dtype), target


class Jitter:
    def __call__(self, image, target):
        return image, target


def _with(*steps, compose=R.Compose):
    preset = R.Preset([])
    preset.transforms = compose(list(steps))
    return preset


TAIL = [R.PILToTensor(), R.ToDtype(torch.float, scale=True), R.Normalize(R.MEAN, R.STD)]


@pytest.mark.parametrize(
    "preset, why, runs",
    [
        (_with(FlipsUpsideDown(0.5), *TAIL), "RandomHorizontalFlip does not do", 1),
        (_with(PadsMasksWithZero(CROP), *TAIL), "RandomCrop does not do what", 1),
        (
            _with(R.RandomHorizontalFlip(1), *TAIL, compose=SkipsOne),
            "called whole, they do not give what their steps give",
            1,
        ),
        (
            _with(R.RandomResize(20, 40), *TAIL, compose=Reversed),
            "transforms raised TypeError on a probe pair",
            0,
        ),
        (_with(Jitter(), *TAIL), "Jitter is not one of the segmentation reference", 1),
        (_with(R.RandomResize(20, 40)), "no PILToTensor", 1),
        (R.eval_preset(BASE, backend="tensor"), "RandomResize raised ValueError", 0),
        (
            _with(R.RandomResize(20, 40), *TAIL[:1], R.RandomResize(20, 40)),
            "both as a PIL image and as a tensor",
            0,
        ),
        (None, "no transforms gives PIL images", 1),
        (
            _with(R.PILToTensor(), NormalizesBytes(R.MEAN, R.STD)),
            "Normalize does not",
            1,
        ),
        (_with(SkipsTheTop(20, 60), *TAIL), "RandomResize does not do what", 1),
        (_with(FlipsRarely(0.5), *TAIL), "RandomHorizontalFlip does not do", 1),
        (_with(ShrinksNearest(40, 60), *TAIL), "RandomResize does not do what", 1),
        (
            _with(
                ShrinksNearest(260, 1040),
                R.RandomHorizontalFlip(0.5),
                R.RandomCrop(480),
                *TAIL,
            ),
            "RandomResize does not do what",
            0,  # the reference's sizes: too slow to run here
        ),
    ],
)
def test_other_transforms_fall_back_saying_why(voc, preset, why, runs):
    ds = dataset(voc, preset)
    before = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state()
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(ds, batch_size=2, collate_fn=items)
    assert random.getstate() == before[0]
    assert np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])
    if runs:  # torch's DataLoader runs them (the others raise there too)
        assert len(list(loader)) == 7


def test_numpy_sizes_and_the_older_conversion_are_read_natively(voc):
    resize = R.RandomResize(np.int64(20), np.int64(30))
    fused(dataset(voc, _with(resize, R.RandomCrop(np.int64(24)), *TAIL)), batch_size=2)
    older = [
        R.PILToTensor(),
        ConvertImageDtype(torch.float),
        R.Normalize(R.MEAN, R.STD),
    ]
    same_batches(dataset(voc, _with(*older)), items)


def test_the_probes_reseed_no_gpu(voc, monkeypatch):
    """torch.manual_seed would reseed every GPU (queued where CUDA is not
    started), which the probes could not restore."""
    calls = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: calls.append(seed))
    fused(dataset(voc, R.train_preset(BASE, CROP)), batch_size=2, collate_fn=items)
    assert calls == []


def test_masks_of_a_kind_not_read_natively_fall_back_at_once(tmp_path):
    """A 1-bit PNG mask (what saving a bool array makes) is read by torch's
    DataLoader; ringloader falls back when the loader is made, naming it."""
    root = write_voc(tmp_path, 3, seed=SEED)
    ds = dataset(root, R.eval_preset(BASE))
    first = ds.masks[0]
    PIL.Image.open(first).convert("L").point(lambda v: v > 10).convert("1").save(first)
    with pytest.warns(ringloader.FallbackWarning, match="palette or 8-bit greyscale"):
        loader = ringloader.DataLoader(ds, batch_size=3, collate_fn=items)
    ((_, mask), *_), *_ = list(loader)
    assert mask.dtype == torch.int64 and set(mask.unique().tolist()) <= {0, 1}


def test_masks_that_are_not_pngs_fall_back(tmp_path):
    """A BMP named .png: torch's DataLoader reads it through Pillow."""
    root = write_voc(tmp_path, 2, seed=SEED)
    ds = dataset(root, R.eval_preset(BASE))
    for path in ds.masks:
        PIL.Image.open(path).save(path, format="BMP")
    with pytest.warns(ringloader.FallbackWarning, match="the mask is not a PNG"):
        loader = ringloader.DataLoader(ds, batch_size=2, collate_fn=items)
    assert len(list(loader)) == 1


def test_a_damaged_first_mask_is_left_to_its_batch(tmp_path):
    """Only a kind of mask PNG falls back; a first mask that cannot be read
    at all is that sample's error, skipped under on_error="skip"."""
    root = write_voc(tmp_path, 4, seed=SEED)
    ds = dataset(root, R.eval_preset(BASE))
    with open(ds.masks[0], "r+b") as f:
        f.truncate(60)
    with pytest.warns(ringloader.DataWarning, match="mask cannot be read"):
        batches = list(fused(ds, batch_size=4, collate_fn=items, on_error="skip"))
    assert sum(len(b) for b in batches) == 3


def test_the_probes_leave_the_global_generators_as_they_were(voc):
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    want = random.random(), np.random.random(), torch.rand(1)
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    fused(dataset(voc, R.train_preset(BASE, CROP)), batch_size=2, collate_fn=items)
    assert (random.random(), np.random.random(), torch.rand(1)) == want


def test_a_damaged_mask_is_an_error_naming_the_file_or_skipped(voc, tmp_path):
    root = write_voc(tmp_path, 4, seed=SEED)
    ds = dataset(root, R.eval_preset(BASE))
    with open(ds.masks[2], "wb") as f:
        f.write(b"not a png")
    with pytest.raises(ValueError, match=ds.masks[2].replace("\\", "\\\\")):
        list(fused(ds, batch_size=2, collate_fn=items))
    with pytest.warns(ringloader.DataWarning, match="mask cannot be read"):
        batches = list(fused(ds, batch_size=2, collate_fn=items, on_error="skip"))
    assert sum(len(b) for b in batches) == 3
