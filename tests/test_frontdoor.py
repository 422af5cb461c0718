"""ringloader.DataLoader's front door as scripts one does not own use it:
a preset that wraps its Compose (torchvision's reference scripts), a
collate_fn (MixUp/CutMix, ``tuple(zip(*batch))``), a dataset class of the
user's that says where its files are (``ringloader_files()``), and
ringloader's own options (``on_error="skip"``...), kept when Lightning and
Accelerate rebuild the loader."""

from __future__ import annotations

import functools
import os
import shutil
import warnings

import numpy as np
import pytest
import torch

import ringloader
from ringloader.transforms_v2 import FixedSizeCrop

tv = pytest.importorskip("torchvision")
from torchvision import datasets  # noqa: E402
from torchvision import transforms as v1  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

from test_dropin import STD, eval_tf, fused  # noqa: E402


class Holding:
    """Keeps a Compose in ``transforms``, as torchvision's presets do."""

    def __init__(self):
        self.transforms = eval_tf()


class EvalPreset(Holding):
    """The shape of torchvision's ClassificationPresetEval."""

    def __call__(self, img):
        return self.transforms(img)


class DocumentedPreset(Holding):
    def __call__(self, image):
        """Apply the preset (another argument name, a docstring)."""
        return self.transforms(image)


class PairPreset(Holding):
    """The shape of the detection and segmentation presets."""

    def __call__(self, img, target):
        return self.transforms(img, target)


class Scaled(Holding):
    """A wrapper that does more than apply its transforms."""

    def __call__(self, img):
        return self.transforms(img) * 2


class Defaulted(Holding):
    def __call__(self, img, flip=False):
        return self.transforms(img)


def logged(fn):
    def call(self, img):
        print("called")
        return fn(self, img)

    return call


class Decorated(Holding):
    @logged
    def __call__(self, img):
        return self.transforms(img)


class OtherAttribute(Holding):
    def __init__(self):
        super().__init__()
        self.other = eval_tf()

    def __call__(self, img):
        return self.other(img)


class Partial(Holding):
    def _apply(self, img, scale):
        return self.transforms(img) * scale

    __call__ = functools.partialmethod(_apply, scale=1)


def close_to_torch(ours, ref):
    """Images within the drop-in's eval promise (as test_dropin measures
    it: under 4.5 LSB RMS after Normalize)."""
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    rms = ((ours - ref) * torch.tensor(STD).view(3, 1, 1)).pow(2).mean().sqrt()
    assert rms.item() * 255 < 4.5, rms.item() * 255


@pytest.mark.parametrize("preset", [EvalPreset, DocumentedPreset])
def test_a_preset_wrapping_its_compose_is_fused(folder, preset):
    """Before, 'EvalPreset is not a torchvision or timm transform': torch's
    DataLoader. Now its Compose is fused, and the batches are those of the
    Compose given directly."""
    ds = datasets.ImageFolder(folder, transform=preset())
    direct = datasets.ImageFolder(folder, transform=eval_tf())
    ours = list(fused(ds, batch_size=6))
    ref = list(fused(direct, batch_size=6))
    assert len(ours) == len(ref) == 3
    for (a, la), (b, lb) in zip(ours, ref):
        assert torch.equal(a, b) and torch.equal(la, lb)


@pytest.mark.parametrize(
    "wrapper, why",
    [
        (
            Scaled,
            "Scaled is not a torchvision or timm transform, and its __call__ "
            r"does more than return self\.transforms\(img\)",
        ),
        (
            Defaulted,
            "Defaulted is not a torchvision or timm transform, and its "
            "__call__ does more",
        ),
        (
            Decorated,
            "Decorated is not a torchvision or timm transform, and its "
            "__call__ does more",
        ),
        (
            OtherAttribute,
            "OtherAttribute is not a torchvision or timm transform, "
            "and its __call__ does more",
        ),
        (Partial, r"Partial\.__call__ is not a plain Python function"),
        (PairPreset, r"PairPreset transforms an \(image, target\) pair together"),
    ],
)
def test_other_wrappers_still_fall_back_saying_why(folder, wrapper, why):
    ds = datasets.ImageFolder(folder, transform=wrapper())
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(ds, batch_size=2)
    assert type(loader) is torch.utils.data.DataLoader


def mixup_cutmix(num_classes):
    """As torchvision's references/classification writes it (use_v2)."""
    return v2.RandomChoice(
        [
            v2.MixUp(alpha=0.2, num_classes=num_classes),
            v2.CutMix(alpha=1.0, num_classes=num_classes),
        ]
    )


def test_mixup_cutmix_collate_stays_fused_and_mixes_torchs_batch(folder):
    """train.py's collate_fn (mixup_cutmix(*default_collate(batch))): before,
    'collate_fn is set' and torch's DataLoader. Now the collate runs on
    ringloader's samples; with torch seeded alike, its draws and so its
    output are those it makes of torch's DataLoader's samples (images
    within the eval promise, targets equal)."""
    ds = datasets.ImageFolder(folder, transform=EvalPreset())
    mix = mixup_cutmix(len(ds.classes))

    def collate_fn(batch):
        return mix(*torch.utils.data.default_collate(batch))

    loader = fused(ds, batch_size=6, collate_fn=collate_fn)
    assert loader.collate_fn is collate_fn
    ref = torch.utils.data.DataLoader(ds, batch_size=6, collate_fn=collate_fn)
    torch.manual_seed(7)
    ours = list(loader)
    torch.manual_seed(7)
    theirs = list(ref)
    assert len(ours) == len(theirs) == 3
    for (a, ya), (b, yb) in zip(ours, theirs):
        assert ya.shape == (6, 3) and ya.dtype == torch.float32
        assert torch.allclose(ya, yb)
        for x, y in zip(a, b):
            close_to_torch(x, y)


def test_zip_collate_gets_samples_as_torch_gives_them(folder):
    """The references' detection collate, tuple(zip(*batch)): a tuple of
    the images (each a CHW tensor) and one of the targets (Python ints),
    as torch's DataLoader gives them; the images are those of ringloader's
    own batch."""
    ds = datasets.ImageFolder(folder, transform=EvalPreset())

    def collate_fn(batch):
        return tuple(zip(*batch))

    ours = list(fused(ds, batch_size=5, collate_fn=collate_fn))
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=5, collate_fn=collate_fn))
    batches = list(fused(ds, batch_size=5))
    assert len(ours) == len(theirs) == len(batches) == 4
    for (images, targets), (ref_images, ref_targets), (batch, labels) in zip(
        ours, theirs, batches
    ):
        assert type(images) is tuple and type(targets) is tuple
        assert targets == ref_targets == tuple(labels.tolist())
        assert all(type(t) is int for t in targets)
        for k, (x, y) in enumerate(zip(images, ref_images)):
            assert torch.equal(x, batch[k])
            close_to_torch(x, y)


def test_collate_gets_target_transform_and_a_python_tail(folder):
    """target_transform applied to each target, and a transform that
    finishes in Python (a Lambda after the fused part) handed over per
    sample, not batched first: the collate sees what indexing gives."""
    tf = v1.Compose([v1.Resize((24, 24)), v1.PILToTensor(), v1.Lambda(lambda x: x[0])])
    ds = datasets.ImageFolder(folder, transform=tf, target_transform=str)
    with pytest.warns(ringloader.FallbackWarning, match="Lambda"):
        loader = ringloader.DataLoader(ds, batch_size=4, collate_fn=list)
    assert type(loader) is ringloader.DataLoader
    ours = next(iter(loader))
    ref = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=list)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ringloader.FallbackWarning)
        batch, _ = next(iter(ringloader.DataLoader(ds, batch_size=4)))
    assert len(ours) == len(ref) == 4
    for k, ((x, t), (y, u)) in enumerate(zip(ours, ref)):
        assert t == u == "0" and x.shape == y.shape == (24, 24)
        assert x.dtype == y.dtype == torch.uint8 and torch.equal(x, batch[k])


def test_collate_with_pil_output_falls_back(folder):
    """DataLoader would hand the collate_fn PIL images: ringloader makes
    tensors, so it says so and leaves the loader to torch."""
    ds = datasets.ImageFolder(folder, transform=v1.Resize((16, 16)))
    with pytest.warns(ringloader.FallbackWarning, match="ends in a PIL image"):
        loader = ringloader.DataLoader(ds, batch_size=2, collate_fn=list)
    assert type(loader) is torch.utils.data.DataLoader


@pytest.mark.parametrize(
    "steps, dtype, kind",
    [
        # v2's ToDtype, ConvertImageDtype and ToPureTensor pass a PIL image
        # by: the image is 8-bit when ToImage or PILToTensor meets it.
        (
            lambda: [v2.ToDtype(torch.float32, scale=True), v2.ToImage()],
            torch.uint8,
            tv.tv_tensors.Image,
        ),
        (
            lambda: [v2.ConvertImageDtype(torch.float32), v2.PILToTensor()],
            torch.uint8,
            torch.Tensor,
        ),
        (
            lambda: [
                v2.ToPureTensor(),
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
            ],
            torch.float32,
            tv.tv_tensors.Image,
        ),
    ],
)
def test_conversions_before_the_tensor_leave_the_pil_image(folder, steps, dtype, kind):
    """Before, a v2 ToDtype met before ToImage was fused as the conversion:
    float images in [0, 1] where torch's DataLoader gives 8-bit ones."""
    tf = v2.Compose([v2.CenterCrop(24), *steps()])
    ds = datasets.ImageFolder(folder, transform=tf)
    batches = 0
    for (a, la), (b, lb) in zip(
        fused(ds, batch_size=6, collate_fn=lambda b: tuple(zip(*b))),
        torch.utils.data.DataLoader(
            ds, batch_size=6, collate_fn=lambda b: tuple(zip(*b))
        ),
    ):
        assert la == lb
        for x, y in zip(a, b):
            assert type(x) is type(y) and issubclass(type(x), kind)
            assert x.dtype == y.dtype == dtype and x.shape == y.shape
            scale = 255.0 if dtype.is_floating_point else 1.0
            diff = (x.double() - y.double()).abs().mean() * scale
            assert diff < 2.0, diff
        batches += 1
    assert batches == 3


MEAN = [0.485, 0.456, 0.406]
PER_TYPE = {
    tv.tv_tensors.Image: torch.float32,
    torch.Tensor: torch.float16,
    "others": None,
}


def flip_then_per_type(p):
    return [
        v2.ToImage(),
        v1.RandomHorizontalFlip(p=p),
        v2.ToDtype(PER_TYPE, scale=True),
    ]


@pytest.mark.parametrize(
    "steps, kind, dtype",
    [
        # after ToImage, a v1 step's torch ops give a plain tensor
        (
            lambda: [v2.ToImage(), v1.ConvertImageDtype(torch.float32)],
            "Tensor",
            torch.float32,
        ),
        (
            lambda: [
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
                v1.Normalize(MEAN, STD),
            ],
            "Tensor",
            torch.float32,
        ),
        (lambda: [v2.ToImage(), v1.RandomHorizontalFlip(p=1.0)], "Tensor", torch.uint8),
        # and the per-type ToDtype after it takes the plain tensor's entry
        (lambda: flip_then_per_type(1.0), "Tensor", torch.float16),
        # v2's PILToTensor and ToTensor pass a tensor by: it stays an Image
        (
            lambda: [v2.ToImage(), v2.PILToTensor(), v2.ToDtype(PER_TYPE, scale=True)],
            "Image",
            torch.float32,
        ),
        (lambda: [v2.ToImage(), v2.ToTensor()], "Image", torch.uint8),
        (lambda: [v1.PILToTensor(), v2.ToImage()], "Image", torch.uint8),
        # v1's erase writes into the image (or a clone: still an Image), a
        # flip of p 0 returns it; ringloader's FixedSizeCrop is v2's kind
        (
            lambda: [
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
                v1.RandomErasing(p=1.0, scale=(0.01, 0.01)),
            ],
            "Image",
            torch.float32,
        ),
        (lambda: flip_then_per_type(0.0), "Image", torch.float32),
        (lambda: [v2.ToImage(), v1.RandomGrayscale(p=0.0)], "Image", torch.uint8),
    ],
)
def test_the_image_type_and_dtype_follow_what_each_step_makes(
    folder, steps, kind, dtype
):
    """Before, a v1 step after ToImage kept the Image type (the per-type
    ToDtype then took the Image's entry), v2's PILToTensor after ToImage
    made it plain, and v2's ToTensor after ToImage was fused as a
    conversion to float, where torch's DataLoader gives 8-bit images."""
    same_items(folder, [v2.CenterCrop(24), *steps()], kind, dtype)


@pytest.mark.parametrize(
    "steps, collate_fn",
    [
        (lambda: flip_then_per_type(0.5), None),
        (lambda: flip_then_per_type(0.5)[:2], list),
    ],
)
def test_a_random_v1_step_after_to_image_falls_back_saying_why(
    folder, steps, collate_fn
):
    """Under torch, a random v1 flip after ToImage makes a plain tensor of
    the samples it flips and leaves the others Images: a per-type ToDtype
    gives two dtypes, a collate_fn sees two types. Before, every sample
    took the plain tensor's entry and type."""
    ds = datasets.ImageFolder(
        folder, transform=v2.Compose([v2.CenterCrop(24), *steps()])
    )
    torch.manual_seed(0)
    kinds = {
        (type(x).__name__, x.dtype)
        for batch in torch.utils.data.DataLoader(ds, batch_size=6, collate_fn=list)
        for x, _ in batch
    }
    assert len(kinds) == 2, kinds  # (18 samples: both draws, all but surely)
    with pytest.warns(ringloader.FallbackWarning, match="after RandomHorizontalFlip"):
        loader = ringloader.DataLoader(ds, batch_size=6, collate_fn=collate_fn)
    assert type(loader) is torch.utils.data.DataLoader


@pytest.mark.parametrize(
    "make, unwraps",
    [
        # a probability as the adapters read it (float(p))
        (lambda: v1.RandomHorizontalFlip(np.float32(0.5)), "sometimes"),
        (lambda: v1.RandomHorizontalFlip(torch.tensor(0.5)), "sometimes"),
        (lambda: v1.RandomHorizontalFlip(False), "never"),
        (lambda: v1.ColorJitter(0.4), "always"),
        (lambda: v2.RandomHorizontalFlip(0.5), "never"),
        # a group as its steps and its draw make it, whichever its library
        (lambda: v2.RandomApply([v1.ColorJitter(0.4)], p=0.5), "sometimes"),
        (lambda: v1.RandomApply([v2.ColorJitter(0.4)], p=0.5), "never"),
        (lambda: v1.RandomApply([v1.ColorJitter(0.4)], p=1.0), "always"),
        (lambda: v1.RandomApply([v1.RandomGrayscale(0.5)], p=1.0), "sometimes"),
        (
            lambda: v2.RandomChoice([v1.ColorJitter(0.4), v2.ColorJitter(0.4)]),
            "sometimes",
        ),
        (lambda: v2.RandomOrder([v1.ColorJitter(0.4), v2.ColorJitter(0.4)]), "always"),
    ],
)
def test_which_steps_make_an_image_a_plain_tensor(make, unwraps):
    """Under torch, a v1 step's torch ops unwrap a tv_tensors.Image where
    the step acts; a group's children decide, not its library (a review:
    a v2 RandomApply of a v1 ColorJitter was "never", an np.float32 p
    "always")."""
    from ringloader import adapt

    assert adapt.describe(make()).unwraps == unwraps


def test_ringloaders_fixed_size_crop_keeps_the_image(folder):
    """A v2 transform of ringloader's: an Image stays one through it."""
    tf = [v2.Resize((24, 24)), v2.ToImage(), FixedSizeCrop((24, 24))]
    same_items(folder, tf + [v2.ToDtype(PER_TYPE, scale=True)], "Image", torch.float32)


def same_items(folder, steps, kind, dtype):
    """The items a collate_fn gets, natively and from torch's DataLoader:
    each of type ``kind`` and ``dtype``, the images within a mean of 2 LSB
    (the JPEG decoders' 1 LSB; a float image's erase draws its own
    patches, hence 0.05)."""
    ds = datasets.ImageFolder(folder, transform=v2.Compose(steps))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # v2.ToTensor's deprecation
        warnings.simplefilter("error", ringloader.FallbackWarning)
        ours = [x for batch in fused(ds, batch_size=6, collate_fn=list) for x in batch]
        theirs = [
            x
            for batch in torch.utils.data.DataLoader(ds, batch_size=6, collate_fn=list)
            for x in batch
        ]
    assert len(ours) == len(theirs) == 18
    for (x, a), (y, b) in zip(ours, theirs):
        assert a == b and type(x) is type(y) and type(x).__name__ == kind
        assert x.dtype == y.dtype == dtype and x.shape == y.shape
        tol = 2.0 if dtype == torch.uint8 else 0.05
        assert (x.double() - y.double()).abs().mean() < tol


@pytest.mark.parametrize(
    "step",
    [lambda: v2.ToDtype(torch.float32, scale=True), v2.ToPureTensor],
)
def test_a_transform_ending_in_a_passed_step_falls_back_saying_so(folder, step):
    """v2's ToDtype with no ToImage before it leaves the PIL image, which
    torch's default collate refuses: ringloader says what to do and leaves
    the loader to torch (before, a float batch; then, a uint8 one)."""
    tf = v2.Compose([v2.CenterCrop(24), step()])
    ds = datasets.ImageFolder(folder, transform=tf)
    with pytest.warns(ringloader.FallbackWarning, match=r"put ToImage\(\) before them"):
        loader = ringloader.DataLoader(ds, batch_size=6)
    assert type(loader) is torch.utils.data.DataLoader
    with pytest.raises(TypeError, match="default_collate"):
        next(iter(loader))


def _kind(x):
    return type(x).__name__, x.dtype, tuple(x.shape)


@pytest.mark.parametrize("after", [[], [v2.ToPureTensor()]])
def test_a_python_tail_gets_the_image_type_torchs_steps_make(folder, after):
    """A step left to Python after v2's ToImage gets a tv_tensors.Image (a
    plain tensor after ToPureTensor), as under torch's DataLoader."""
    tf = v2.Compose([v2.CenterCrop(24), v2.ToImage(), *after, v2.Lambda(_kind)])
    ds = datasets.ImageFolder(folder, transform=tf)
    with pytest.warns(ringloader.FallbackWarning, match="Lambda"):
        loader = ringloader.DataLoader(ds, batch_size=6, collate_fn=list)
    ours = [x for batch in loader for x in batch]
    theirs = [
        x
        for batch in torch.utils.data.DataLoader(ds, batch_size=6, collate_fn=list)
        for x in batch
    ]
    assert ours == theirs and len(ours) == 18
    assert ours[0][0][0] == ("Image" if not after else "Tensor")


@pytest.mark.parametrize(
    "steps, error, why",
    [
        # v1's ConvertImageDtype takes tensors only
        (
            lambda: [v1.ConvertImageDtype(torch.float32)],
            "Tensor Image",
            "takes a tensor image",
        ),
        # v1's ToTensor and PILToTensor take PIL images
        (
            lambda: [v2.ToImage(), v1.ToTensor()],
            "pic should be PIL Image",
            "takes a PIL",
        ),
        (
            lambda: [v2.ToImage(), v1.PILToTensor()],
            "pic should be PIL Image",
            "takes a PIL",
        ),
    ],
)
def test_a_v1_conversion_of_the_wrong_type_raises_as_torchs(folder, steps, error, why):
    """Before, each was fused (float images where torch raises)."""
    tf = v1.Compose([v1.CenterCrop(24), *steps()])
    ds = datasets.ImageFolder(folder, transform=tf)
    with pytest.raises(TypeError, match=error):
        next(iter(torch.utils.data.DataLoader(ds, batch_size=6)))
    with pytest.warns(ringloader.FallbackWarning, match=why):
        loader = ringloader.DataLoader(ds, batch_size=6)
    with pytest.raises(TypeError, match=error):
        next(iter(loader))


class Table(torch.utils.data.Dataset):
    """A user's dataset of its own, rows of a table: files and labels as
    arrays, with ringloader's protocol. Its __getitem__ is ImageFolder's."""

    def __init__(self, paths, labels, transform=None, as_blob=False):
        self.paths = np.array(paths)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.transform = transform
        self.as_blob = as_blob

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            image = im.convert("RGB")
        return self.transform(image), int(self.labels[i])

    def ringloader_files(self):
        if not self.as_blob:
            return self.paths, self.labels
        encoded = [os.fsencode(p) for p in self.paths]
        offsets = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int64)
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        return (blob, offsets), self.labels


@pytest.mark.parametrize("as_blob", [False, True])
def test_a_users_dataset_with_ringloader_files_is_read_natively(folder, as_blob):
    """Before: 'Table is not an ImageFolder-like dataset of files', torch's
    DataLoader. With ringloader_files() (paths as an array, or a blob and
    offsets) it is read by the C pipeline, as torch reads it."""
    base = datasets.ImageFolder(folder)
    paths = [p for p, _ in base.samples][::-1]
    labels = [t for _, t in base.samples][::-1]
    ds = Table(paths, labels, transform=eval_tf(), as_blob=as_blob)
    ours = list(fused(ds, batch_size=6))
    theirs = list(torch.utils.data.DataLoader(ds, batch_size=6))
    assert len(ours) == len(theirs) == 3
    for (a, la), (b, lb) in zip(ours, theirs):
        assert torch.equal(la, lb)
        for x, y in zip(a, b):
            close_to_torch(x, y)


def test_a_dataset_without_the_protocol_names_it(folder):
    class Plain(torch.utils.data.Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            return torch.zeros(3, 4, 4), 0

    with pytest.warns(
        ringloader.FallbackWarning,
        match=r"Plain is not an ImageFolder-like dataset of files \(to be read "
        r"natively, it can give a ringloader_files\(\) method returning "
        r"\(paths, targets\)\)",
    ):
        ringloader.DataLoader(Plain(), batch_size=1)


def test_ringloader_files_errors_name_the_dataset(folder):
    ds = Table([os.path.join(folder, "nope.jpg")], [0], transform=eval_tf())
    ds.ringloader_files = lambda: ("x",)
    with pytest.raises(TypeError, match=r"Table.ringloader_files\(\) must return"):
        ringloader.DataLoader(ds, batch_size=1)
    ds.ringloader_files = lambda: ((np.zeros(3, np.uint8), np.array([0, 5])), [0])
    with pytest.raises(ValueError, match="offsets must rise"):
        ringloader.DataLoader(ds, batch_size=1)


@pytest.fixture
def with_bad_file(folder, tmp_path):
    """The folder with a corrupt JPEG first in class_0."""
    root = tmp_path / "data"
    shutil.copytree(folder, root)
    (root / "class_0" / "000_bad.jpg").write_bytes(b"\xff\xd8\xff\xe0 broken")
    return str(root)


def test_loader_options_are_dataloader_keywords(with_bad_file):
    """Before: TypeError (unexpected keyword argument 'on_error')."""
    ds = datasets.ImageFolder(with_bad_file, transform=eval_tf())
    loader = fused(ds, batch_size=4, on_error="skip", max_consecutive_errors=4, seed=11)
    assert loader.on_error == "skip" and loader.seed == 11
    with pytest.warns(ringloader.DataWarning):
        labels = torch.cat([y for _, y in loader]).tolist()
    assert len(labels) == 19 and loader.stats()["skipped"] == 1
    strict = fused(ds, batch_size=4)
    with pytest.raises(ringloader.DecodeError, match="000_bad.jpg"):
        list(strict)


def test_options_given_to_a_fallback_are_named_or_refused(folder):
    with pytest.warns(
        ringloader.FallbackWarning, match="on_error apply to ringloader's pipeline only"
    ):
        loader = ringloader.DataLoader(range(4), batch_size=2, on_error="skip")
    assert type(loader) is torch.utils.data.DataLoader
    with pytest.raises(ValueError, match="DataLoader has no layout='NHWC'"):
        ringloader.DataLoader(range(4), batch_size=2, layout="NHWC")


def test_lightning_rebuild_keeps_the_options(with_bad_file):
    """Lightning's own _update_dataloader (what its Trainer calls to put
    its DistributedSampler in) rebuilds the loader from its attributes:
    on_error and seed come through, the resolved rank does not."""
    data = pytest.importorskip("lightning.fabric.utilities.data")
    ds = datasets.ImageFolder(with_bad_file, transform=eval_tf())
    loader = fused(ds, batch_size=4, shuffle=True, on_error="skip", seed=5)
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        rebuilt = data._update_dataloader(loader, sampler)
    assert type(rebuilt) is ringloader.DataLoader
    assert rebuilt.on_error == "skip" and rebuilt.seed == 5
    assert rebuilt.sampler is sampler
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ringloader.DataWarning)
        n = sum(len(y) for _, y in rebuilt)
    assert n == 10  # its half of 19 (padded), the bad file replaced


def test_accelerate_rebuild_keeps_the_options(with_bad_file):
    """Accelerate builds its loader from torch's arguments only: the
    options come from the loader it rebuilds."""
    accelerate = pytest.importorskip("accelerate")
    ds = datasets.ImageFolder(with_bad_file, transform=eval_tf())
    loader = fused(ds, batch_size=4, on_error="skip", max_consecutive_errors=3)
    prepared = accelerate.Accelerator(cpu=True).prepare(loader)
    base = prepared.base_dataloader
    assert type(base) is ringloader.DataLoader and base is not loader
    assert base.on_error == "skip" and base.max_consecutive_errors == 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ringloader.DataWarning)
        n = sum(len(y) for _, y in prepared)
    assert n == 19


def test_collate_gets_a_shards_field_tuples(tmp_path):
    """For TarShards(fields=...), the collate gets each sample's tuple of
    fields, as indexing the dataset gives it."""
    import io
    import tarfile

    from images import jpeg_bytes

    with tarfile.open(tmp_path / "s-0.tar", "w") as tf:
        for i in range(5):
            members = (
                ("jpg", jpeg_bytes("baseline", 40, 48, seed=i)),
                ("txt", f"caption {i}".encode()),
                ("cls", str(i % 2).encode()),
            )
            for ext, blob in members:
                info = tarfile.TarInfo(f"k{i}.{ext}")
                info.size = len(blob)
                tf.addfile(info, io.BytesIO(blob))
    shards = ringloader.TarShards(
        str(tmp_path / "s-*.tar"),
        fields=("jpg", "txt", "cls"),
        transform=v1.Compose([v1.Resize((16, 16)), v1.PILToTensor()]),
        progress=False,
    )
    ours = list(fused(shards, batch_size=5, collate_fn=list))
    assert len(ours) == 1 and len(ours[0]) == 5
    batch = next(iter(fused(shards, batch_size=5)))
    for k, (image, text, label) in enumerate(ours[0]):
        ref = shards[k]
        assert (text, label) == (ref[1], ref[2]) == (f"caption {k}", k % 2)
        assert torch.equal(image, batch[0][k]) and image.shape == ref[0].shape
