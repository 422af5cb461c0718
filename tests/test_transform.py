"""The fused eval transform against torchvision on the same images."""

import io

import numpy as np
import pytest
from PIL import Image

import ringloader
from ringloader import transforms as T

from images import KINDS, jpeg_bytes, psnr

tv = pytest.importorskip("torchvision.transforms")


class Files:
    """The smallest dataset ringloader.Loader accepts."""

    def __init__(self, paths, targets=None):
        self.samples = [(p, t) for p, t in zip(paths, targets or range(len(paths)))]

    def __len__(self):
        return len(self.samples)


def load_one(path, transform, layout="NHWC"):
    loader = ringloader.Loader(
        Files([path]), transform=transform, layout=layout, num_threads=1
    )
    images, _ = next(iter(loader))
    loader.close()
    return images[0].numpy()


# Sizes chosen to hit every DCT scale: from no scaling (short side < 256)
# to 1/4 (short side near 1000).
SIZES = [(200, 300), (256, 256), (333, 500), (500, 375), (640, 480), (1000, 1400)]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("size", SIZES)
def test_eval_transform_matches_torchvision(tmp_path, kind, size):
    data = jpeg_bytes(kind, *size, seed=size[0])
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    ref_t = tv.Compose([tv.Resize(256), tv.CenterCrop(224)])
    ref = np.asarray(ref_t(Image.open(io.BytesIO(data)).convert("RGB")))
    ours = load_one(str(path), T.Compose([T.Resize(256), T.CenterCrop(224)]))
    assert ours.shape == ref.shape == (224, 224, 3)
    assert psnr(ours, ref) >= 35.0, f"{kind} {size}: {psnr(ours, ref):.1f} dB"


def test_same_transform_given_as_torchvision_objects(tmp_path):
    data = jpeg_bytes("baseline", 333, 500)
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    a = load_one(str(path), T.Compose([T.Resize(256), T.CenterCrop(224)]))
    b = load_one(str(path), tv.Compose([tv.Resize(256), tv.CenterCrop(224)]))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("size", [(200, 300), (480, 640)])
def test_resize_to_exact_size(tmp_path, size):
    data = jpeg_bytes("s420", *size)
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    ref = np.asarray(tv.Resize((160, 224))(Image.open(io.BytesIO(data)).convert("RGB")))
    ours = load_one(str(path), T.Resize((160, 224)))
    assert ours.shape == (160, 224, 3)
    assert psnr(ours, ref) >= 35.0


def test_without_dct_scaling_the_resampler_is_near_exact(tmp_path):
    # A small image is never DCT-scaled: only our resampler differs from
    # torchvision's, and it uses the same filter and fixed-point rounding.
    data = jpeg_bytes("s444", 230, 250)
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    img = Image.open(io.BytesIO(data)).convert("RGB")
    # 230 -> 224 keeps the 180 px crop box above 7/8 of the output size, so
    # the decode runs at 8/8.
    ref = np.asarray(tv.Compose([tv.Resize(224), tv.CenterCrop(180)])(img))
    ours = load_one(str(path), T.Compose([T.Resize(224), T.CenterCrop(180)]))
    diff = np.abs(ours.astype(int) - ref.astype(int))
    assert diff.max() <= 1, diff.max()
    # Upscaling too.
    ref = np.asarray(tv.Resize((300, 320))(img))
    ours = load_one(str(path), T.Resize((300, 320)))
    assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 1


def test_center_crop_larger_than_image_pads_with_zeros(tmp_path):
    data = jpeg_bytes("baseline", 100, 150)
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    img = Image.open(io.BytesIO(data)).convert("RGB")
    ref = np.asarray(tv.CenterCrop(200)(img))
    ours = load_one(str(path), T.CenterCrop(200))
    assert ours.shape == ref.shape == (200, 200, 3)
    assert (ours[:50] == 0).all() and (ours[150:] == 0).all()
    np.testing.assert_array_equal(ours[ref.sum(-1) == 0].max(initial=0), 0)
    diff = np.abs(ours.astype(int) - ref.astype(int))
    assert diff.max() <= 1


def test_nchw_is_nhwc_permuted(tmp_path):
    data = jpeg_bytes("baseline", 300, 400)
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    t = T.Compose([T.Resize(256), T.CenterCrop(224)])
    nhwc = load_one(str(path), t, "NHWC")
    nchw = load_one(str(path), t, "NCHW")
    np.testing.assert_array_equal(nchw, nhwc.transpose(2, 0, 1))


def test_unfusable_transforms_say_why():
    # (A Loader takes Resize(256) alone, or no transform, as images of
    # varying sizes: tests/test_varying_size.py, with ops drawn on each
    # image's size: tests/test_varying_ops.py. What needs one size still
    # refuses: a MultiView's view, a policy's magnitudes in pixels.)
    with pytest.raises(ValueError, match="varying sizes"):
        ringloader.Loader(Files(["x"]), transform=T.MultiView(T.Resize(256)))
    with pytest.raises(ValueError, match="depend on the image size"):
        ringloader.Loader(
            Files(["x"]), transform=tv.Compose([tv.Resize(256), tv.RandAugment()])
        )
    with pytest.raises(ValueError, match="interpolation"):
        ringloader.Loader(
            Files(["x"]),
            transform=tv.Resize((64, 64), interpolation=tv.InterpolationMode.LANCZOS),
        )


STARTS_WITH = (
    "the transform starts with {}, not Resize, CenterCrop or RandomResizedCrop: "
    "ringloader needs a fixed output size to fuse, e.g. "
    "Compose([Resize(256), CenterCrop(224)])"
)


@pytest.mark.parametrize(
    "steps, head",
    [
        (
            lambda: [tv.RandomHorizontalFlip(), tv.RandomResizedCrop(224)],
            "RandomHorizontalFlip",
        ),
        (
            lambda: [
                tv.ToTensor(),
                tv.Normalize([0.5] * 3, [0.5] * 3),
                tv.RandomResizedCrop(224),
            ],
            "ToTensor",
        ),
        (
            lambda: [tv.RandomHorizontalFlip(), tv.CenterCrop(8), tv.ToTensor()],
            "RandomHorizontalFlip",
        ),
        (
            lambda: [tv.RandomHorizontalFlip(), tv.Resize((8, 8))],
            "RandomHorizontalFlip",
        ),
    ],
)
def test_a_size_fixed_too_late_says_where_to_put_it(steps, head):
    # A Loader takes images of varying sizes, but a step that fixes the
    # size means the user wanted one: the message of a fixed-size compile.
    with pytest.raises(ValueError) as e:
        ringloader.Loader(Files(["x"]), transform=tv.Compose(steps()))
    assert str(e.value) == STARTS_WITH.format(head)


def test_a_size_never_fixed_says_varying_sizes_fuse_whole():
    with pytest.raises(
        ValueError,
        match="not fused after RandomHorizontalFlip; images of varying sizes",
    ):
        ringloader.Loader(
            Files(["x"]),
            transform=tv.Compose([tv.RandomHorizontalFlip(), tv.Resize(8)]),
        )


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("size", [(199, 401), (256, 256), (240, 320)])
def test_crop_edges_decode_like_the_full_image(tmp_path, kind, size):
    """A crop decodes only part of the image; its edge columns and rows must
    still equal a full decode's (libjpeg upsamples chroma at a region's
    edge from the region alone, so a region cut at the crop's edge was off
    by up to 8 levels there)."""
    data = jpeg_bytes(kind, *size, seed=size[1])
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    full = Image.open(io.BytesIO(data)).convert("RGB")
    for crop in (40, 64, 77, 96):
        ours = load_one(str(path), T.Compose([T.CenterCrop(crop)])).astype(int)
        ref = np.asarray(tv.CenterCrop(crop)(full)).astype(int)
        assert np.abs(ours - ref).max() <= 1, (kind, size, crop)
