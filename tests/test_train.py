"""Training augmentations fused into the decode, output conversion, and the
torchvision drop-in (ringloader.DataLoader)."""

import hashlib
import io
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import ringloader
from ringloader import _core
from ringloader import transforms as T

from images import KINDS, jpeg_bytes, psnr

tv = pytest.importorskip("torchvision")
from torchvision import datasets  # noqa: E402
from torchvision import transforms as v1  # noqa: E402
from torchvision.transforms import functional as F  # noqa: E402
from torchvision.transforms import v2  # noqa: E402
from scipy import stats  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
RRC = {
    "kind": "random_crop",
    "out_h": 224,
    "out_w": 224,
    "scale": (0.08, 1.0),
    "ratio": (3 / 4, 4 / 3),
    "flip_p": 0.5,
}


class Files:
    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


def test_random_resized_crop_distribution_matches_torchvision():
    sizes = [(500, 375), (375, 500), (256, 256), (1200, 300), (300, 1000), (64, 80)]
    n = 20000
    ours_area, ours_ratio, ref_area, ref_ratio = [], [], [], []
    flips = 0
    torch.manual_seed(0)
    for i in range(n):
        h, w = sizes[i % len(sizes)]
        top, left, ch, cw, flip = _core.plan(RRC, w, h, 7, 0, i)
        assert 0 <= top and top + ch <= h and 0 <= left and left + cw <= w
        assert ch == int(ch) and cw == int(cw)
        ours_area.append(ch * cw / (h * w))
        ours_ratio.append(cw / ch)
        flips += flip
        _, _, rh, rw = v1.RandomResizedCrop.get_params(
            torch.empty(1, h, w), scale=[0.08, 1.0], ratio=[3 / 4, 4 / 3]
        )
        ref_area.append(rh * rw / (h * w))
        ref_ratio.append(rw / rh)
    p_area = stats.ks_2samp(ours_area, ref_area).pvalue
    p_ratio = stats.ks_2samp(ours_ratio, ref_ratio).pvalue
    assert p_area > 0.01, p_area
    assert p_ratio > 0.01, p_ratio
    # Flip frequency: 0.5 within 4 standard deviations.
    assert abs(flips - n / 2) < 4 * np.sqrt(n * 0.25), flips


@pytest.mark.parametrize("p", [0.0, 0.2, 1.0])
def test_flip_frequency_matches_p(p):
    spec = dict(RRC, flip_p=p)
    n = 20000
    flips = sum(_core.plan(spec, 400, 300, 1, 3, i)[4] for i in range(n))
    assert abs(flips - n * p) <= 4 * np.sqrt(n * p * (1 - p)) + 1e-9


def test_plan_is_a_pure_function_of_seed_epoch_index():
    a = [_core.plan(RRC, 640, 480, 5, 2, i) for i in range(100)]
    assert a == [_core.plan(RRC, 640, 480, 5, 2, i) for i in range(100)]
    assert a != [_core.plan(RRC, 640, 480, 5, 3, i) for i in range(100)]
    assert a != [_core.plan(RRC, 640, 480, 6, 2, i) for i in range(100)]


def test_repeated_indices_draw_different_augmentations(folder):
    """A sampler that repeats an index (with replacement, or repeated
    augmentation as DeiT trains) gets a new crop and flip for each repeat;
    the first occurrence keeps the draw keyed by its index."""
    ds = ringloader.ImageFolder(folder)
    tf = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])
    repeated = ringloader.Loader(ds, batch_size=4, sampler=[0, 0, 0, 0], transform=tf)
    images, _ = next(iter(repeated))
    copies = {images[k].numpy().tobytes() for k in range(4)}
    assert len(copies) == 4
    single = ringloader.Loader(ds, batch_size=1, sampler=[0], transform=tf)
    assert torch.equal(next(iter(single))[0][0], images[0])


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("size", [(300, 400), (500, 333), (900, 1200)])
def test_random_crop_output_matches_torchvision_given_the_box(tmp_path, kind, size):
    data = jpeg_bytes(kind, *size, seed=size[1])
    paths = []
    for i in range(6):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(data)
        paths.append(str(p))
    loader = ringloader.Loader(
        Files(paths),
        batch_size=6,
        seed=11,
        layout="NHWC",
        transform=T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()]),
    )
    images, _ = next(iter(loader))
    img = Image.open(io.BytesIO(data)).convert("RGB")
    for i in range(6):
        top, left, ch, cw, flip = _core.plan(RRC, size[1], size[0], 11, 0, i)
        ref = F.resized_crop(
            img, int(top), int(left), int(ch), int(cw), [224, 224], antialias=True
        )
        if flip:
            ref = F.hflip(ref)
        got = images[i].numpy()
        assert psnr(got, np.asarray(ref)) >= 35.0, (kind, size, i)


def epoch_digest(folder, epoch, threads, io_backend):
    ds = ringloader.ImageFolder(folder)
    loader = ringloader.Loader(
        ds,
        batch_size=5,
        shuffle=True,
        seed=3,
        num_threads=threads,
        io=io_backend,
        transform=T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip()]),
    )
    loader.set_epoch(epoch)
    h = hashlib.sha256()
    for images, labels in loader:
        h.update(images.numpy().tobytes())
        h.update(labels.numpy().tobytes())
    return h.hexdigest()


def test_epochs_are_bit_identical_across_threads_and_backends(folder):
    for epoch in (0, 1):
        digests = {
            (t, b): epoch_digest(folder, epoch, t, b)
            for t in (1, 2, 4)
            for b in ("io_uring", "pread")
        }
        assert len(set(digests.values())) == 1, digests
        if epoch == 0:
            first = next(iter(digests.values()))
    assert next(iter(digests.values())) != first  # epoch 1 differs from 0


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NCHW", "channels_last"])
def test_float_output_is_the_normalised_uint8_output(folder, dtype, layout):
    ds = ringloader.ImageFolder(folder)
    geometry = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]
    u8 = ringloader.Loader(ds, batch_size=6, seed=1, transform=T.Compose(geometry))
    fl = ringloader.Loader(
        ds,
        batch_size=6,
        seed=1,
        layout=layout,
        transform=T.Compose(
            geometry
            + [T.ToDtype(getattr(torch, dtype), scale=True), T.Normalize(MEAN, STD)]
        ),
    )
    for (a, la), (b, lb) in zip(u8, fl):
        assert b.dtype == getattr(torch, dtype) and b.shape == a.shape
        if layout == "channels_last":
            assert b.is_contiguous(memory_format=torch.channels_last)
        want = (a.float() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(
            STD
        ).view(1, 3, 1, 1)
        tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
        err = ((b.float() - want).abs() / want.abs().clamp(min=1)).max().item()
        assert err <= tol, err
        assert torch.equal(la, lb)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NCHW", "channels_last"])
@pytest.mark.parametrize("normalise", [True, False])
def test_half_outputs_are_the_float32_value_rounded_to_nearest_even(
    folder, dtype, layout, normalise
):
    """float16/bfloat16 are v * mul + add in float32, then rounded to nearest
    even exactly as torch rounds: the vector conversion and its scalar
    fallback (zeros, from black pixels without Normalize) agree with it."""
    ds = ringloader.ImageFolder(folder)
    geometry = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]
    if not normalise:  # a crop past the image's edge pads with zeros
        geometry = [T.Resize(40), T.CenterCrop((64, 48))]
    tail = [T.ToDtype(getattr(torch, dtype), scale=True)]
    if normalise:
        tail.append(T.Normalize(MEAN, STD))
    compiled = T.compile_transform(T.Compose(geometry + tail))
    mul = torch.tensor(compiled.mul, dtype=torch.float32).view(1, 3, 1, 1)
    add = torch.tensor(compiled.add, dtype=torch.float32).view(1, 3, 1, 1)
    u8 = ringloader.Loader(ds, batch_size=6, seed=3, transform=T.Compose(geometry))
    half = ringloader.Loader(
        ds, batch_size=6, seed=3, layout=layout, transform=T.Compose(geometry + tail)
    )
    zeros = 0
    for (a, _), (b, _) in zip(u8, half):
        want = (a.to(torch.float32) * mul + add).to(getattr(torch, dtype))
        assert torch.equal(b.contiguous(), want)
        zeros += int((want == 0).sum())
    if not normalise:
        assert zeros > 0  # the scalar fallback for zeros ran


def standard_train():
    return v1.Compose(
        [
            v1.RandomResizedCrop(224),
            v1.RandomHorizontalFlip(),
            v1.ToTensor(),
            v1.Normalize(MEAN, STD),
        ]
    )


def standard_eval():
    return v1.Compose(
        [v1.Resize(256), v1.CenterCrop(224), v1.ToTensor(), v1.Normalize(MEAN, STD)]
    )


def v2_train():
    return v2.Compose(
        [
            v2.RandomResizedCrop(224),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )


@pytest.mark.parametrize("make", [standard_train, standard_eval, v2_train])
def test_drop_in_matches_torch_dataloader(folder, make):
    def run(loader_cls):
        ds = datasets.ImageFolder(
            folder, transform=make(), target_transform=lambda t: t + 100
        )
        loader = loader_cls(ds, batch_size=6, shuffle=False, num_workers=2)
        batches = list(loader)
        return loader, batches

    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        ours, got = run(ringloader.DataLoader)
    assert isinstance(ours, ringloader.Loader)
    _, ref = run(torch.utils.data.DataLoader)
    assert len(got) == len(ref)
    for (a, la), (b, lb) in zip(got, ref):
        assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
        assert torch.equal(la, lb) and la.min() >= 100
        diff = (a.mean(dim=(0, 2, 3)) - b.mean(dim=(0, 2, 3))).abs().max().item()
        if make is standard_eval:
            assert diff < 0.05, diff
        else:  # different random crops: same distribution, loose bound
            assert diff < 0.5, diff
    # Over the whole folder the per-channel means agree within 0.05.
    if make is not standard_eval:
        m_ours = torch.cat([a for a, _ in got]).mean(dim=(0, 2, 3))
        m_ref = torch.cat([b for b, _ in ref]).mean(dim=(0, 2, 3))
        assert (m_ours - m_ref).abs().max().item() < 0.25


def test_eval_drop_in_agrees_pixelwise(folder):
    ds = datasets.ImageFolder(folder, transform=standard_eval())
    ours = ringloader.DataLoader(ds, batch_size=4, num_workers=2)
    ref = torch.utils.data.DataLoader(ds, batch_size=4)
    for (a, _), (b, _) in zip(ours, ref):
        # Normalised values; 35 dB on 8-bit data is an RMS error of 4.5/255.
        rms = ((a - b) * torch.tensor(STD).view(1, 3, 1, 1)).pow(2).mean().sqrt()
        assert rms.item() * 255 < 4.5


def test_unfusable_tail_runs_in_python_with_one_line(folder):
    # (Grayscale(3), then RandomVerticalFlip(1.0), were the example until
    # they were fused; Pad is as deterministic and has no C op.)
    t = v1.Compose([v1.Resize(256), v1.CenterCrop(224), v1.Pad(2), v1.ToTensor()])
    ds = datasets.ImageFolder(folder, transform=t)
    with pytest.warns(ringloader.FallbackWarning, match="Pad") as rec:
        ours = ringloader.DataLoader(ds, batch_size=4)
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert isinstance(ours, ringloader.Loader)
    ref = torch.utils.data.DataLoader(ds, batch_size=4)
    for (a, la), (b, lb) in zip(ours, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert torch.equal(la, lb)
        assert psnr((a * 255).round().numpy(), (b * 255).round().numpy()) >= 35


def test_unfusable_dataset_falls_back_to_torch(folder):
    class Custom(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.full((3, 8, 8), float(i)), i

    with pytest.warns(
        ringloader.FallbackWarning, match="Custom is not an ImageFolder-like dataset"
    ):
        loader = ringloader.DataLoader(Custom(), batch_size=2)
    assert type(loader) is torch.utils.data.DataLoader
    assert [lb.tolist() for _, lb in loader] == [[0, 1], [2, 3]]
    rot = datasets.ImageFolder(
        folder, transform=v1.Compose([v1.ElasticTransform(), v1.ToTensor()])
    )
    with pytest.warns(ringloader.FallbackWarning, match="ElasticTransform"):
        loader = ringloader.DataLoader(rot, batch_size=1)
    assert type(loader) is torch.utils.data.DataLoader


def test_loader_accepts_torchvision_transforms(folder):
    ds = ringloader.ImageFolder(folder)
    a = ringloader.Loader(ds, batch_size=6, seed=2, transform=v2_train())
    b = ringloader.Loader(
        ds,
        batch_size=6,
        seed=2,
        transform=T.Compose(
            [
                T.RandomResizedCrop(224),
                T.RandomHorizontalFlip(),
                T.ToDtype(torch.float32, scale=True),
                T.Normalize(MEAN, STD),
            ]
        ),
    )
    for (x, _), (y, _) in zip(a, b):
        assert torch.equal(x, y)


def test_flip_before_center_crop_is_not_reordered():
    """A crop after a flip is not fused (with an odd margin torchvision's
    rounded crop is not symmetric): it runs in the Python tail."""
    c = T.compile_transform(
        v1.Compose(
            [v1.Resize((40, 45)), v1.RandomHorizontalFlip(1.0), v1.CenterCrop(20)]
        )
    )
    assert c.fused == ["Resize", "RandomHorizontalFlip"]
    assert [type(t).__name__ for t in c.rest] == ["CenterCrop"]


def test_only_torchvision_and_ringloader_transforms_are_fused():
    class Resize:  # a user's own class with a familiar name
        def __init__(self, size):
            self.size = size

        def __call__(self, img):
            return img.resize(self.size)

    with pytest.raises(ringloader.transforms.UnsupportedTransform):
        T.compile_transform(v1.Compose([Resize((64, 32)), v1.CenterCrop(16)]))
    c = T.compile_transform(
        v1.Compose([v1.Resize(20), v1.CenterCrop(16), Resize((8, 8))])
    )
    assert [type(t).__name__ for t in c.rest] == ["Resize"]


def test_target_transform_results_are_collated_like_dataloader(folder):
    for target_transform, check in [
        (lambda t: float(t), lambda y: y.dtype == torch.float64),
        (lambda t: (t, -t), lambda y: isinstance(y, list) and len(y) == 2),
        (
            lambda t: torch.nn.functional.one_hot(torch.tensor(t), 3),
            lambda y: y.shape == (4, 3),
        ),
    ]:
        ds = datasets.ImageFolder(
            folder,
            transform=v1.Compose([v1.Resize((16, 16)), v1.PILToTensor()]),
            target_transform=target_transform,
        )
        ours = next(iter(ringloader.DataLoader(ds, batch_size=4)))[1]
        theirs = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))[1]
        assert check(ours) and check(theirs)
        if isinstance(ours, list):
            assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
        else:
            assert torch.equal(ours, theirs)


def test_a_new_dataset_transform_or_samples_list_is_followed(folder):
    """Progressive resizing swaps dataset.transform between epochs, and some
    recipes swap dataset.samples: DataLoader reads both at every fetch, so
    the next epoch must use them."""
    ds = datasets.ImageFolder(
        folder, transform=v1.Compose([v1.Resize((32, 32)), v1.PILToTensor()])
    )
    loader = ringloader.DataLoader(ds, batch_size=4)
    assert next(iter(loader))[0].shape[-2:] == (32, 32)
    ds.transform = v1.Compose([v1.CenterCrop((40, 36)), v1.PILToTensor()])
    ds.samples = ds.samples[:4]
    batches = list(loader)
    assert len(batches) == 1 and batches[0][0].shape == (4, 3, 40, 36)
    ref = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert torch.equal(batches[0][1], ref[1])
    assert (batches[0][0].int() - ref[0].int()).abs().max() <= 1
