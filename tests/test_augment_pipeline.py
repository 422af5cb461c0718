"""Augmentation ops in the loader.

- torchvision's reference recipes fuse entirely, with no FallbackWarning;
- in the loader, the ops give torchvision's pixels for the parameters
  ``_core.augment_draw`` reports for (seed, epoch, sample index);
- what cannot be fused is named with the reason, and runs in Python with
  the same result as torchvision;
- RandomErasing after Normalize (value 0, a tuple, "random"), with
  torchvision's distribution of boxes;
- batches are bit-identical across thread counts and I/O backends.
"""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import stats
from torchvision import datasets as tvd
from torchvision import transforms as T
from torchvision.transforms import v2

import ringloader
from ringloader import _core
from ringloader.transforms import compile_transform

from images import write_folder

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SEED = 5


def reference_ta():
    """torchvision's classification reference recipe (TrivialAugmentWide)."""
    return T.Compose(
        [
            T.RandomResizedCrop(176),
            T.RandomHorizontalFlip(),
            T.TrivialAugmentWide(),
            T.PILToTensor(),
            T.ConvertImageDtype(torch.float),
            T.Normalize(MEAN, STD),
            T.RandomErasing(0.1),
        ]
    )


def color_jitter():
    return T.Compose(
        [
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            T.ColorJitter(0.4, 0.4, 0.4),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ]
    )


def rand_augment_v2():
    return v2.Compose(
        [
            v2.RandomResizedCrop(224),
            v2.RandomHorizontalFlip(),
            v2.RandAugment(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )


def everything():
    """Every fused op once, then RandomErasing with noise."""
    return v2.Compose(
        [
            v2.RandomResizedCrop(64),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
            v2.RandomGrayscale(0.2),
            v2.GaussianBlur(5, (0.1, 2.0)),
            v2.RandomAutocontrast(),
            v2.RandomEqualize(),
            v2.RandomPosterize(4),
            v2.RandomSolarize(128),
            v2.RandomAdjustSharpness(2),
            v2.RandomInvert(0.2),
            v2.RandomRotation(15),
            v2.RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5),
            v2.AutoAugment(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
            v2.RandomErasing(value="random"),
        ]
    )


RECIPES = {
    "reference_ta": reference_ta,
    "color_jitter": color_jitter,
    "rand_augment_v2": rand_augment_v2,
    "everything": everything,
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_folder(str(tmp_path_factory.mktemp("aug")), n_per_class=5)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_recipes_fuse_with_no_warning(root, recipe):
    tf = RECIPES[recipe]()
    compiled = compile_transform(tf)
    assert compiled.rest == [], compiled.reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = ringloader.DataLoader(
            tvd.ImageFolder(root, transform=tf), batch_size=4, num_workers=2
        )
        assert isinstance(loader, ringloader.DataLoader)
        n = 0
        for images, labels in loader:
            assert images.dtype == torch.float32
            assert torch.isfinite(images).all()
            n += len(labels)
    assert n == 15


def _loader(root, tf, **kw):
    kw.setdefault("seed", SEED)
    return ringloader.Loader(tvd.ImageFolder(root), batch_size=5, transform=tf, **kw)


def _first_epoch(loader) -> torch.Tensor:
    with loader:
        return torch.cat([images for images, _ in loader])


def test_ops_in_the_loader_equal_torchvision_with_the_drawn_parameters(root):
    """ColorJitter(0.4, 0.4, 0.4, 0.1) on each sample of the loader equals
    torchvision's adjust_* on the loader's sample without it, in the drawn
    order and factors of that sample's key."""
    geometry = [v2.RandomResizedCrop(48), v2.RandomHorizontalFlip()]
    jitter = v2.ColorJitter(0.4, 0.4, 0.4, 0.1)
    plain = _first_epoch(_loader(root, v2.Compose(geometry + [v2.ToImage()])))
    ours = _first_epoch(_loader(root, v2.Compose(geometry + [jitter, v2.ToImage()])))
    ops = compile_transform(v2.Compose(geometry + [jitter])).spec["ops"]
    fns = [
        v2.functional.adjust_brightness,
        v2.functional.adjust_contrast,
        v2.functional.adjust_saturation,
        v2.functional.adjust_hue,
    ]
    for key in range(len(plain)):
        p = _core.augment_draw(ops, 48, 48, SEED, 0, key)[0]
        ref = plain[key]
        for fn_id in p[:4]:
            factor = p[4 + int(fn_id)]
            ref = fns[int(fn_id)](ref, factor)
        diff = (ours[key].int() - ref.int()).abs().max().item()
        assert diff <= 1, f"sample {key}: {diff} LSB"


def test_unfused_op_is_named_with_its_reason_and_runs_in_python(root):
    geometry = [v2.RandomResizedCrop(40), v2.RandomHorizontalFlip()]
    tail = v2.RandomRotation(20, expand=True)  # varying size: cannot fuse
    tf = v2.Compose(
        geometry + [v2.ColorJitter(0.3), tail, v2.CenterCrop(40), v2.ToImage()]
    )
    with pytest.warns(ringloader.FallbackWarning) as record:
        loader = _loader(root, tf)
    msg = str(record[0].message)
    assert "RandomRotation" in msg and "expand=True" in msg, msg
    # the fused prefix, then the tail in Python with torch's generator
    prefix = _first_epoch(_loader(root, v2.Compose(geometry + [v2.ColorJitter(0.3)])))
    torch.manual_seed(0)
    got = _first_epoch(loader)
    torch.manual_seed(0)
    # the tail gets each fused sample as a PIL image, as DataLoader would
    ref = torch.stack(
        [
            v2.ToImage()(
                v2.CenterCrop(40)(tail(Image.fromarray(img.permute(1, 2, 0).numpy())))
            )
            for img in prefix
        ]
    )
    assert torch.equal(got, ref)


def test_augmix_beyond_the_parameter_limit_is_not_fused_and_says_so():
    compiled = compile_transform(
        v2.Compose([v2.RandomResizedCrop(32), v2.AugMix(mixture_width=4), v2.ToImage()])
    )
    assert [type(t).__name__ for t in compiled.rest] == ["AugMix", "ToImage"]
    assert "AugMix" in compiled.reason and "mixture_width" in compiled.reason, (
        compiled.reason
    )


def test_flip_after_geometric_op_is_not_fused_with_reason():
    compiled = compile_transform(
        v2.Compose(
            [v2.RandomResizedCrop(32), v2.RandomRotation(10), v2.RandomHorizontalFlip()]
        )
    )
    assert "put the flip first" in compiled.reason
    # a flip after colour ops commutes with them: fused
    compiled = compile_transform(
        v2.Compose(
            [v2.RandomResizedCrop(32), v2.ColorJitter(0.2), v2.RandomHorizontalFlip()]
        )
    )
    assert compiled.rest == [] and compiled.spec["flip_p"] == 0.5


# ---- RandomErasing ----


def _erase_case(root, erasing, dtype=torch.float32, normalize=True):
    convert = [v2.ToImage(), v2.ToDtype(dtype, scale=dtype != torch.uint8)]
    if normalize:
        convert.append(v2.Normalize(MEAN, STD))
    base = [v2.RandomResizedCrop(40), v2.RandomHorizontalFlip()] + convert
    plain = _first_epoch(_loader(root, v2.Compose(base)))
    erased = _first_epoch(_loader(root, v2.Compose(base + [erasing])))
    ops = compile_transform(v2.Compose(base + [erasing])).spec["ops"]
    boxes = [_core.augment_draw(ops, 40, 40, SEED, 0, k)[0] for k in range(len(plain))]
    return plain, erased, boxes


@pytest.mark.parametrize("value", [0, (0.5, -1.0, 2.0)])
def test_erasing_after_normalize_writes_the_value_in_the_box(root, value):
    plain, erased, boxes = _erase_case(root, v2.RandomErasing(0.7, value=value))
    values = torch.tensor(value if isinstance(value, tuple) else (value,) * 3)
    applied = 0
    for k, (a, b, p) in enumerate(zip(plain, erased, boxes)):
        mask = torch.zeros(40, 40, dtype=torch.bool)
        if p[0]:
            i, j, h, w = (int(v) for v in p[1:5])
            mask[i : i + h, j : j + w] = True
            applied += 1
            assert torch.equal(b[:, mask], values[:, None].expand(3, int(mask.sum())))
        assert torch.equal(a[:, ~mask], b[:, ~mask]), f"sample {k}"
    assert 0 < applied < len(plain)


def test_erasing_random_is_standard_normal_noise(root):
    plain, erased, boxes = _erase_case(root, v2.RandomErasing(1.0, value="random"))
    noise = []
    for b, p in zip(erased, boxes):
        if p[0]:
            i, j, h, w = (int(v) for v in p[1:5])
            noise.append(b[:, i : i + h, j : j + w].reshape(-1))
    noise = torch.cat(noise).double().numpy()
    assert len(noise) > 1000
    assert stats.kstest(noise[:5000], "norm").pvalue > 0.01


def test_erasing_uint8_tuple_value(root):
    erasing = v2.RandomErasing(1.0, value=(10, 200, 255))
    _, erased, boxes = _erase_case(root, erasing, torch.uint8, normalize=False)
    for b, p in zip(erased, boxes):
        if p[0]:
            i, j, h, w = (int(v) for v in p[1:5])
            box = b[:, i : i + h, j : j + w]
            assert box.dtype == torch.uint8
            assert box[0].eq(10).all() and box[1].eq(200).all() and box[2].eq(255).all()


def test_erasing_box_distribution_matches_torchvision():
    t = v2.RandomErasing(0.5)
    ops = compile_transform(
        v2.Compose(
            [v2.RandomResizedCrop((48, 64)), v2.ToImage(), v2.ToDtype(torch.float32), t]
        )
    ).spec["ops"]
    ours = np.array(
        [_core.augment_draw(ops, 48, 64, 1, 0, k)[0][:5] for k in range(20000)]
    )
    torch.manual_seed(1)
    img = torch.zeros(3, 48, 64)
    theirs = []
    for _ in range(20000):
        if torch.rand(1) >= t.p:
            theirs.append((0, 0, 0, 0, 0))
            continue
        p = t.make_params([img])
        applied = p["v"] is not None
        theirs.append(
            (1, p["i"], p["j"], p["h"], p["w"]) if applied else (0, 0, 0, 0, 0)
        )
    theirs = np.array(theirs, dtype=float)
    table = [[int((x[:, 0] == v).sum()) for v in (0, 1)] for x in (ours, theirs)]
    assert stats.chi2_contingency(table)[1] > 0.01
    a, b = ours[ours[:, 0] == 1], theirs[theirs[:, 0] == 1]
    for col, what in enumerate(("i", "j", "h", "w"), start=1):
        p = stats.ks_2samp(a[:, col], b[:, col]).pvalue
        assert p > 0.01, f"{what}: p = {p:.4g}"


# ---- determinism ----


def _digest(root, tf, **kw) -> str:
    h = hashlib.sha256()
    with _loader(root, tf, **kw) as loader:
        for _ in range(2):
            for images, labels in loader:
                h.update(images.numpy().tobytes())
                h.update(labels.numpy().tobytes())
    return h.hexdigest()


def test_batches_identical_across_threads_and_io_backends(root):
    tf = everything()
    one = _digest(root, tf, num_threads=1, io="pread")
    assert _digest(root, tf, num_threads=2, io="io_uring") == one
    assert _digest(root, tf, num_threads=3, io="pread", prefetch=1) == one
    # and the digest does see the draws: another seed, other batches
    assert _digest(root, tf, num_threads=1, io="pread", seed=SEED + 1) != one


def test_erasing_with_device_cuda_says_what_to_do(root):
    with pytest.raises(
        ValueError, match="RandomErasing cannot be fused with device='cuda'"
    ):
        _loader(root, reference_ta(), device="cuda")


# ---- CutMix and MixUp: on whole batches, in the user's loop ----


@pytest.mark.parametrize("mix", ["CutMix", "MixUp"])
def test_cutmix_and_mixup_on_ringloader_batches(root, mix):
    classes = 3
    op = getattr(v2, mix)(num_classes=classes)
    with _loader(root, color_jitter(), shuffle=True) as loader:
        for images, labels in loader:
            torch.manual_seed(0)
            mixed, soft = op(images, labels)
            assert mixed.shape == images.shape and mixed.dtype == images.dtype
            assert soft.shape == (len(labels), classes)
            assert torch.allclose(soft.sum(1), torch.ones(len(labels)))
            # each mixed sample is made of its own image and the batch's
            # roll by one, as torchvision documents
            other = images.roll(1, 0)
            if mix == "MixUp":
                lam = soft[0, labels[0]].item() if labels[0] != labels[-1] else None
                if lam is not None:
                    assert torch.allclose(
                        mixed[0], lam * images[0] + (1 - lam) * other[0], atol=1e-5
                    )
            else:
                from_self = (mixed == images).all(1)
                from_other = (mixed == other).all(1)
                assert (from_self | from_other).all()


# ---- the mapping of torchvision's classes ----

BOTH = [
    ("ColorJitter", (0.4, 0.3, 0.2, 0.1), {}),
    ("RandomGrayscale", (0.3,), {}),
    ("Grayscale", (3,), {}),
    ("GaussianBlur", ((9, 5), (0.2, 3.0)), {}),
    ("RandomAutocontrast", (0.3,), {}),
    ("RandomEqualize", (0.3,), {}),
    ("RandomInvert", (0.3,), {}),
    ("RandomPosterize", (3, 0.3), {}),
    ("RandomSolarize", (100, 0.3), {}),
    ("RandomAdjustSharpness", (2.0, 0.3), {}),
    ("RandomRotation", (30,), dict(center=(3, 4), fill=(1, 2, 3))),
    ("RandomAffine", (10, (0.1, 0.2), (0.8, 1.2), (1, 2, 3, 4)), dict(fill=7)),
    ("TrivialAugmentWide", (), dict(num_magnitude_bins=20)),
    ("RandAugment", (3, 5, 11), {}),
    ("AutoAugment", (), {}),
]


@pytest.mark.parametrize("name,args,kw", BOTH, ids=[b[0] for b in BOTH])
def test_v1_and_v2_classes_map_to_the_same_op(name, args, kw):
    """transforms and transforms.v2 name the same op with the same
    arguments (NaN for what is unset), and the op accepts them."""
    from ringloader.adapt import torchvision_ops

    one = torchvision_ops.op_of(getattr(T, name)(*args, **kw), 48, 40)
    two = torchvision_ops.op_of(getattr(v2, name)(*args, **kw), 48, 40)
    assert one[0] == two[0]
    assert np.allclose(one[1], two[1], equal_nan=True), (one, two)
    _core.augment_draw([one], 48, 40, 0, 0, 0)  # the C check accepts them


@pytest.mark.parametrize(
    "t,why",
    [
        (v2.Grayscale(), "num_output_channels=1"),
        (v2.RandomRotation(10, interpolation=v2.InterpolationMode.BICUBIC), "bicubic"),
        (v2.RandomSolarize(300), "outside 0..255"),
        (v2.RandomRotation(10, expand=True), "expand=True"),
    ],
)
def test_unfusable_settings_fall_back_with_the_reason(t, why):
    compiled = compile_transform(
        v2.Compose([v2.RandomResizedCrop(32), t, v2.ToImage()])
    )
    assert compiled.rest[0] is t and why in compiled.reason, compiled.reason
