"""torchvision's segmentation reference through ringloader.DataLoader with the
DataLoader line alone changed: a VOCSegmentation wrapped by
``wrap_dataset_for_transforms_v2`` with the reference's presets in v2
(backend "tv_tensor": ToImage first, or "tensor": PILToTensor), the train
preset's pad-if-smaller as v2.RandomCrop(pad_if_needed=True, fill={Mask:
255, "others": 0}). The pixels come from the C pipeline (no
FallbackWarning), each mask from its PNG through the sample's plan: eval
items equal torch's DataLoader's (images within 1 LSB after Normalize,
masks identical); train items equal torchvision's functional ops applied
with the plan's parameters (``_core.plan_window``) to the untransformed
item. Bad masks are errors naming the file."""

from __future__ import annotations

import os

import numpy as np
import PIL.Image
import pytest
import torch
from torchvision import datasets, tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core

from detection_data import write_voc
from test_dropin import fused

SEED = 11
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BASE, CROP = 32, 24
# 1 LSB of the 8-bit image after Normalize (JPEG decoders, the tensor
# resize against Pillow's: each within 1).
LSB = 1 / 255 / min(STD) + 1e-5


class Preset:
    """As the reference writes its presets: a class holding a v2 Compose,
    called on (image, target)."""

    def __init__(self, transforms):
        self.transforms = v2.Compose(transforms)

    def __call__(self, img, target):
        return self.transforms(img, target)


def _head(backend):
    return v2.ToImage() if backend == "tv_tensor" else v2.PILToTensor()


def eval_preset(backend):
    """SegmentationPresetEval(use_v2=True)."""
    return Preset(
        [
            _head(backend),
            v2.Resize((BASE, BASE)),
            v2.ToDtype(torch.float, scale=True),
            v2.Normalize(MEAN, STD),
            v2.ToPureTensor(),
        ]
    )


def train_preset(backend, p=0.5):
    """SegmentationPresetTrain(use_v2=True), its pad-if-smaller as v2's
    RandomCrop pads."""
    image = tv_tensors.Image if backend == "tv_tensor" else torch.Tensor
    return Preset(
        [
            _head(backend),
            v2.RandomResize(BASE // 2, BASE * 2),
            v2.RandomHorizontalFlip(p),
            v2.RandomCrop(
                CROP, pad_if_needed=True, fill={tv_tensors.Mask: 255, "others": 0}
            ),
            v2.ToDtype(
                {image: torch.float32, tv_tensors.Mask: torch.int64, "others": None},
                scale=True,
            ),
            v2.Normalize(MEAN, STD),
            v2.ToPureTensor(),
        ]
    )


def items(batch):
    return batch


def padded_collate(batch):
    """As the reference's collate: each batch padded to its largest item,
    images with 0 and masks with 255."""
    images, masks = zip(*batch)

    def pad(tensors, fill):
        size = tuple(max(s) for s in zip(*(t.shape for t in tensors)))
        out = tensors[0].new_full((len(tensors), *size), fill)
        for o, t in zip(out, tensors):
            o[tuple(slice(0, n) for n in t.shape)].copy_(t)
        return out

    return pad(images, 0), pad(masks, 255)


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return write_voc(tmp_path_factory.mktemp("voc"), 14, seed=SEED)


def dataset(root, transforms):
    ds = datasets.VOCSegmentation(root, "2012", "train", transforms=transforms)
    return datasets.wrap_dataset_for_transforms_v2(ds)


def same_image(ours, ref):
    assert type(ours) is type(ref)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert (ours - ref).abs().max().item() <= LSB


def same_mask(ours, ref):
    assert type(ours) is type(ref)
    assert ours.dtype == ref.dtype and torch.equal(ours, ref)


@pytest.mark.parametrize("collate", [None, padded_collate])
@pytest.mark.parametrize("backend", ["tv_tensor", "tensor"])
def test_eval_preset_batches_equal_torchs(voc, backend, collate):
    ds = dataset(voc, eval_preset(backend))
    kw = dict(batch_size=4, collate_fn=collate)
    ours = list(fused(ds, **kw))
    theirs = list(torch.utils.data.DataLoader(ds, **kw))
    assert len(ours) == len(theirs) == 4
    for (images, masks), (ref_images, ref_masks) in zip(ours, theirs):
        same_image(images, ref_images)
        same_mask(masks, ref_masks)
        assert masks.dtype == torch.uint8  # ToDtype(float) leaves masks


def expected(raw_image, raw_mask, spec, epoch, key, backend):
    """torchvision's functional ops with the sample's plan: resize to the
    drawn size, pad where smaller (masks with 255), crop the window, then
    the flip (the core flips the window it cropped: the same draw as
    cropping the flipped image at the mirrored offset), the conversions."""
    h, w = raw_mask.shape[-2:]
    p = _core.plan_window(spec, w, h, SEED, epoch, key)
    image = F.pil_to_tensor(raw_image)
    if backend == "tv_tensor":
        image = tv_tensors.Image(image)
    mask = raw_mask
    rh, rw = p["rh"], p["rw"]
    image = F.resize(image, [rh, rw], antialias=True)
    mask = F.resize(mask, [rh, rw])
    pl, pt = max(CROP - rw, 0), max(CROP - rh, 0)
    image = F.pad(image, [pl, pt, pl, pt], fill=0)
    mask = F.pad(mask, [pl, pt, pl, pt], fill=255)
    image = F.crop(image, p["wy"] + pt, p["wx"] + pl, CROP, CROP)
    mask = F.crop(mask, p["wy"] + pt, p["wx"] + pl, CROP, CROP)
    if p["flip"]:
        image, mask = F.horizontal_flip(image), F.horizontal_flip(mask)
    image = F.normalize(F.to_dtype(image, torch.float32, scale=True), MEAN, STD)
    mask = F.to_dtype(mask, torch.int64)
    return image.as_subclass(torch.Tensor), mask.as_subclass(torch.Tensor), p


def planned_items(ds, epochs, seed=SEED):
    """(spec, epoch, index, image, mask) for each item of ``epochs``
    epochs of ``ds`` read unshuffled (a sample's random key is its
    index), every sample in each."""
    for epoch in range(epochs):
        loader = fused(ds, batch_size=5, collate_fn=items, seed=seed)
        loader.set_epoch(epoch)
        spec = loader._plans[0].compiled.spec
        i = 0
        for batch in loader:
            for image, mask in batch:
                yield spec, epoch, i, image, mask
                i += 1
        assert i == len(ds)


@pytest.mark.parametrize("backend", ["tv_tensor", "tensor"])
def test_train_items_follow_the_plan(voc, backend):
    ds = dataset(voc, train_preset(backend))
    raw = dataset(voc, None)
    flips = padded = 0
    for spec, epoch, i, image, mask in planned_items(ds, 2):
        assert type(image) is torch.Tensor and type(mask) is torch.Tensor
        assert image.shape == (3, CROP, CROP) and mask.shape == (1, CROP, CROP)
        want_image, want_mask, p = expected(*raw[i], spec, epoch, i, backend)
        same_mask(mask, want_mask)
        same_image(image, want_image)
        flips += p["flip"]
        padded += bool((mask == 255).all(dim=-1).any())
    assert flips > 0 and padded > 0


def test_train_default_collate_stacks_as_torchs(voc):
    """A fixed-size train preset with default_collate: [images, masks]
    stacked, each the item the collate_fn would have been given."""
    ds = dataset(voc, train_preset("tv_tensor"))
    stacked = list(fused(ds, batch_size=4, seed=SEED))
    listed = list(fused(ds, batch_size=4, collate_fn=items, seed=SEED))
    padded = list(fused(ds, batch_size=4, collate_fn=padded_collate, seed=SEED))
    assert len(stacked) == len(listed) == len(padded) == 4
    for batch, each, (pimages, pmasks) in zip(stacked, listed, padded):
        assert type(batch) is list and len(batch) == 2
        images, masks = batch
        assert images.shape == (len(each), 3, CROP, CROP) and masks.dtype == torch.int64
        assert torch.equal(images, torch.stack([x for x, _ in each]))
        assert torch.equal(masks, torch.stack([m for _, m in each]))
        assert torch.equal(pimages, images) and torch.equal(pmasks, masks)


def _one_mask(root, k):
    voc = os.path.join(root, "VOCdevkit", "VOC2012", "SegmentationClass")
    return os.path.join(voc, sorted(os.listdir(voc))[k])


def test_a_damaged_mask_is_an_error_naming_the_file(tmp_path):
    root = write_voc(tmp_path, 6, seed=SEED)
    ds = dataset(root, train_preset("tv_tensor"))
    loader = fused(ds, batch_size=3, collate_fn=items)
    bad = _one_mask(root, 4)
    with open(bad, "r+b") as f:
        f.truncate(os.path.getsize(bad) // 2)
    with pytest.raises(ValueError, match=f"{bad}: the mask cannot be read"):
        list(loader)


def test_a_missing_mask_is_skipped_under_on_error_skip(tmp_path):
    root = write_voc(tmp_path, 6, seed=SEED)
    ds = dataset(root, eval_preset("tv_tensor"))
    loader = fused(ds, batch_size=3, on_error="skip")
    ref = list(torch.utils.data.DataLoader(ds))
    kept = [ref[k] for k in (0, 2, 3, 4, 5)]
    gone = _one_mask(root, 1)
    os.remove(gone)
    with pytest.warns(ringloader.DataWarning, match=f"mask cannot be read \\({gone}"):
        batches = list(loader)
    assert [len(images) for images, _ in batches] == [2, 3]
    for (images, masks), part in zip(batches, (kept[:2], kept[2:])):
        for image, mask, (ref_image, ref_mask) in zip(images, masks, part):
            same_image(image, ref_image[0])
            same_mask(mask, ref_mask[0])
    with pytest.raises(ValueError, match=f"{gone}: the mask cannot be read"):
        list(fused(ds, batch_size=3))


def test_a_mask_of_another_size_is_refused_naming_both(tmp_path):
    from PIL import Image

    root = write_voc(tmp_path, 4, seed=SEED)
    ds = dataset(root, eval_preset("tensor"))
    bad = _one_mask(root, 2)
    with Image.open(bad) as im:
        im.crop((0, 0, im.width + 1, im.height)).save(bad)
    image = ds.images[2]
    with pytest.raises(
        ValueError, match=f"{bad}: the mask is .* but its image {image}"
    ):
        list(fused(ds, batch_size=2, collate_fn=items))


class PadIfSmaller(v2.Transform):
    """A pad to the right and bottom, as the segmentation reference's."""

    def __init__(self, size, fill=0):
        super().__init__()
        self.size, self.fill = size, fill

    def transform(self, inpt, params):
        return inpt


@pytest.mark.parametrize(
    "extra, why",
    [
        (PadIfSmaller(CROP), r"PadIfSmaller\(24\) is fused only directly before"),
        (v2.RandomRotation(10), "RandomRotation is not followed on a segmentation"),
        (v2.RandomCrop(CROP, padding=2, padding_mode="edge"), "padding_mode='edge'"),
    ],
)
def test_other_steps_fall_back_saying_why(voc, extra, why):
    preset = Preset([v2.ToImage(), v2.Resize((BASE, BASE)), extra, v2.ToPureTensor()])
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(dataset(voc, preset), batch_size=2)
    assert not isinstance(loader, ringloader.Loader)


@pytest.mark.parametrize(
    "steps",
    [
        [v2.ToImage(), v2.ToPureTensor(), v2.Resize((16, 16))],
        [v2.ToPureTensor(), v2.Resize((16, 16)), v2.PILToTensor()],
        [v2.ToImage(), v2.Resize((32, 32)), v2.ToPureTensor(), v2.CenterCrop(16)],
    ],
    ids=["resize", "pil backend", "crop"],
)
def test_geometry_after_to_pure_tensor_falls_back_saying_why(voc, steps):
    """After ToPureTensor the mask, a plain tensor after the image, is left
    by v2's geometry, where the plan would move it: torch's DataLoader
    reads it, so its masks keep their own size."""
    ds = dataset(voc, Preset(steps))
    with pytest.warns(ringloader.FallbackWarning, match="after a ToPureTensor"):
        loader = ringloader.DataLoader(ds, batch_size=1, collate_fn=items)
    assert not isinstance(loader, ringloader.Loader)
    ((image, mask),) = next(iter(loader))
    assert image.shape[-2:] == (16, 16) and mask.shape[-2:] == ds[0][1].shape[-2:]
    assert mask.shape[-2:] != (16, 16)


@pytest.mark.parametrize(
    "tail", [[v2.ToDtype(torch.float32, scale=True)], [v2.ToPureTensor()]]
)
def test_conversions_that_leave_a_pil_image_fall_back_saying_why(voc, tail):
    """v2's ToDtype and ToPureTensor pass a PIL image by: torch's
    DataLoader gives PIL images, which the fused path would not."""
    ds = dataset(voc, Preset([v2.Resize((16, 16)), *tail]))
    with pytest.warns(ringloader.FallbackWarning, match="still a PIL image"):
        loader = ringloader.DataLoader(ds, batch_size=1, collate_fn=items)
    ((image, _),) = next(iter(loader))
    assert isinstance(image, PIL.Image.Image)


def test_an_unwrapped_voc_segmentation_without_transforms_falls_back(voc):
    """Its PIL pairs (the reference's own transforms: test_segment_pairs)."""
    ds = datasets.VOCSegmentation(voc, "2012", "train")
    with pytest.warns(ringloader.FallbackWarning, match="no transforms gives PIL"):
        ringloader.DataLoader(ds, batch_size=2, collate_fn=items)


@pytest.mark.parametrize(
    "head, kind", [(v2.ToImage(), "image"), (v2.PILToTensor(), "tensor")]
)
def test_a_fill_and_dtype_per_type_take_the_images_entry(head, kind):
    from ringloader.transforms import compile_transform

    fill = {tv_tensors.Image: 5, torch.Tensor: 7, tv_tensors.Mask: 255, "others": 1}
    dtypes = {tv_tensors.Image: torch.float16, torch.Tensor: torch.float32}
    steps = [
        head,
        v2.Resize((20, 20)),
        v2.RandomCrop(24, pad_if_needed=True, fill=fill),
        v2.ToDtype({**dtypes, "others": None}, scale=True),
    ]
    compiled = compile_transform(v2.Compose(steps))
    assert compiled.rest == [] and compiled.fused[0] == type(head).__name__
    want = {"image": (5, "float16"), "tensor": (7, "float32")}[kind]
    assert (compiled.spec["fill_r"], compiled.dtype) == want
    # No entry for the image: torchvision leaves it uint8, Normalize refuses.
    other = {tv_tensors.Image: torch.float32} if kind == "tensor" else {}
    steps[-1] = v2.ToDtype({**other, tv_tensors.Mask: torch.int64, "others": None})
    steps.append(v2.Normalize(MEAN, STD))
    compiled = compile_transform(v2.Compose(steps))
    assert (
        compiled.dtype == "uint8"
        and compiled.reason == "Normalize is not fused at this point"
    )


def test_a_replaced_image_and_its_mask_share_its_plan(tmp_path):
    """on_error="skip": the core puts the next image in place of one that
    does not decode, drawing its flip from a key of its own; its mask is
    sampled through that same plan (flipped exactly when its pixels are)."""
    root = write_voc(tmp_path, 18, seed=SEED)
    jpg = os.path.join(root, "VOCdevkit", "VOC2012", "JPEGImages")
    for name in sorted(os.listdir(jpg))[::3]:
        with open(os.path.join(jpg, name), "wb") as f:
            f.write(b"\xff\xd8 not a JPEG")
    head = [v2.ToImage(), v2.Resize((BASE, BASE))]
    tail = [v2.ToDtype(torch.float, scale=True), v2.ToPureTensor()]
    ds = dataset(root, Preset(head + [v2.RandomHorizontalFlip()] + tail))
    ref = dataset(root, Preset(head + tail))
    kw = dict(batch_size=3, on_error="skip", collate_fn=items, seed=4)
    with pytest.warns(ringloader.DataWarning, match="skipped"):
        got = [item for b in fused(ds, **kw) for item in b]
    assert len(got) == len(ds) == 18
    flips = []
    for k, (image, mask) in enumerate(got):
        want_image, want_mask = ref[k if k % 3 else k + 1]  # the next image
        flip = F.horizontal_flip(want_image)
        flipped = bool((image - flip).abs().max() < (image - want_image).abs().max())
        if flipped:
            want_image, want_mask = flip, F.horizontal_flip(want_mask)
        assert (image - want_image).abs().max().item() <= 1 / 255 + 1e-6
        same_mask(mask, want_mask)
        flips.append(flipped)
    assert set(flips) == {True, False}


def test_a_concat_dataset_falls_back_and_another_layout_is_refused(voc):
    ds = dataset(voc, eval_preset("tv_tensor"))
    same = torch.utils.data.ConcatDataset([ds, ds])
    ours = list(fused(same, batch_size=4))
    theirs = list(torch.utils.data.DataLoader(same, batch_size=4))
    assert len(ours) == len(theirs) == 7
    for (images, masks), (ref_images, ref_masks) in zip(ours, theirs):
        same_image(images, ref_images)
        same_mask(masks, ref_masks)
    two = torch.utils.data.ConcatDataset([ds, dataset(voc, eval_preset("tensor"))])
    with pytest.warns(ringloader.FallbackWarning, match="a ConcatDataset of seg"):
        loader = ringloader.DataLoader(two, batch_size=2)
    assert not isinstance(loader, ringloader.Loader)
    with pytest.raises(ValueError, match="layout"):
        ringloader.DataLoader(ds, batch_size=2, layout="NHWC")


class OwnToDtype(v2.ToDtype):
    pass


def _mask_dtype(dtype, kind=v2.ToDtype, pure=True):
    steps = [
        v2.ToImage(),
        kind({tv_tensors.Image: torch.float32, tv_tensors.Mask: dtype, "others": None}),
        v2.Normalize(MEAN, STD),
    ]
    return steps + [v2.ToPureTensor()] if pure else steps


@pytest.mark.parametrize(
    "steps, taken",
    [
        (_mask_dtype(torch.int64), (np.int64, torch.Tensor)),  # the train preset's
        (_mask_dtype(torch.int64, pure=False), (np.int64, tv_tensors.Mask)),
        (_mask_dtype(torch.float16), (np.float16, torch.Tensor)),
        # one dtype converts images alone: the mask stays uint8
        (
            [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)],
            (np.uint8, tv_tensors.Mask),
        ),
        (_mask_dtype(torch.bfloat16), None),  # no NumPy dtype: the steps run
        (_mask_dtype(torch.int64, kind=OwnToDtype), None),  # a subclass may do anything
    ],
    ids=["int64", "int64 Mask", "float16", "images alone", "bfloat16", "subclass"],
)
def test_mask_conversions_are_taken_at_once_where_they_only_convert(steps, taken):
    from ringloader.datasets.segmentation_batch import _mask_as

    assert _mask_as(steps) == taken


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.float16])
def test_masks_converted_at_once_equal_the_steps(voc, dtype, monkeypatch):
    """The same epoch with each mask converted at once and through the
    user's steps: the same masks, dtypes and types."""
    from ringloader.datasets import segmentation_batch

    def epoch():
        preset = train_preset("tv_tensor")
        preset.transforms.transforms[-3] = v2.ToDtype(
            {tv_tensors.Image: torch.float32, tv_tensors.Mask: dtype, "others": None},
            scale=True,
        )
        ds = dataset(voc, preset)
        loader = fused(ds, batch_size=5, collate_fn=items, seed=SEED)
        return [m for b in loader for _, m in b]

    assert segmentation_batch._mask_as(_mask_dtype(dtype)) is not None
    quick = epoch()
    monkeypatch.setattr(segmentation_batch, "_mask_as", lambda steps: None)
    steps = epoch()
    assert len(quick) == len(steps) == 14
    for a, b in zip(quick, steps):
        same_mask(a, b)
        assert a.dtype == dtype


def _convert(*tail):
    return Preset([v2.ToImage(), v2.Resize((BASE, BASE)), *tail])


F32 = {tv_tensors.Image: torch.float32, "others": None}
CONVERSIONS = {
    # after ToPureTensor the mask, a plain tensor after the image, is left
    "pure first": _convert(
        v2.ToPureTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ),
    "normalize after pure": _convert(
        v2.ToDtype(torch.float32, scale=True),
        v2.ToPureTensor(),
        v2.Normalize(MEAN, STD),
    ),
    "int8 masks": _convert(
        v2.ToDtype({**F32, tv_tensors.Mask: torch.int8}, scale=True),
        v2.Normalize(MEAN, STD),
        v2.ToPureTensor(),
    ),
    # on an Image, PILToTensor does nothing: the image stays an Image
    "PILToTensor after ToImage": _convert(
        v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)
    ),
    "Mask kept": _convert(
        v2.ToDtype({**F32, tv_tensors.Mask: torch.int64}, scale=True),
        v2.Normalize(MEAN, STD),
    ),
}


@pytest.mark.parametrize("name", CONVERSIONS)
def test_conversions_give_torchs_masks(voc, name):
    """Each conversion tail read natively equals torch's DataLoader on the
    same dataset: masks as the pair's Compose leaves them."""
    ds = dataset(voc, CONVERSIONS[name])
    kw = dict(batch_size=4, collate_fn=items)
    ours = [it for b in fused(ds, **kw) for it in b]
    theirs = [it for b in torch.utils.data.DataLoader(ds, **kw) for it in b]
    assert len(ours) == len(theirs) == 14
    for (image, mask), (ref_image, ref_mask) in zip(ours, theirs):
        same_image(image, ref_image)
        same_mask(mask, ref_mask)


def test_a_torchvision_that_changes_mask_values_keeps_the_steps(voc, monkeypatch):
    """The probe's value check: a ToDtype that, unlike torchvision's, adds
    to the masks it converts is not taken at once; the steps run."""
    from ringloader.datasets import segmentation_batch

    real = v2.ToDtype.transform

    def shifted(self, inpt, params):
        out = real(self, inpt, params)
        return out + 1 if isinstance(inpt, tv_tensors.Mask) else out

    monkeypatch.setattr(v2.ToDtype, "transform", shifted)
    assert segmentation_batch._mask_as(_mask_dtype(torch.int64)) is None
    ds = dataset(voc, CONVERSIONS["Mask kept"])
    kw = dict(batch_size=4, collate_fn=items)
    ours = [m for b in fused(ds, **kw) for _, m in b]
    theirs = [m for b in torch.utils.data.DataLoader(ds, **kw) for _, m in b]
    for a, b in zip(ours, theirs):
        same_mask(a, b)
    assert all(int(m.min()) >= 1 for m in ours)  # the shift is there


def test_a_conversion_changed_after_the_start_is_followed(voc):
    """The conversions are read as each batch is: a ToDtype's Mask entry
    changed in place between epochs, as torch's DataLoader follows it."""
    preset = _convert(
        v2.ToDtype({**F32, tv_tensors.Mask: torch.int64}, scale=True),
        v2.ToPureTensor(),
    )
    ds = dataset(voc, preset)
    loader = fused(ds, batch_size=4, collate_fn=items)
    assert {m.dtype for b in loader for _, m in b} == {torch.int64}
    preset.transforms.transforms[2].dtype[tv_tensors.Mask] = torch.float32
    ours = [m for b in loader for _, m in b]
    theirs = [
        m
        for b in torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=items)
        for _, m in b
    ]
    for a, b in zip(ours, theirs):
        same_mask(a, b)
        assert a.dtype == torch.float32
