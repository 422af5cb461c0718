"""Files are decoded by their magic bytes, whatever their names (ImageNet
has a PNG named .JPEG): JPEG, PNG and WebP natively (counted per format),
the others (BMP, GIF, TIFF...) by the fallback, Pillow; all placed with the
same fused transform. Pillow's decodes are counted and announced once."""

import io
import shutil
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import ringloader
from ringloader import transforms as T

from images import jpeg_bytes, photo_like

tv = pytest.importorskip("torchvision.transforms")


@pytest.fixture
def mixed(tmp_path):
    root = tmp_path / "mixed"
    (root / "a").mkdir(parents=True)
    for k in range(3):
        (root / "a" / f"{k}.JPEG").write_bytes(jpeg_bytes("baseline", 300, 400, seed=k))
    img = Image.fromarray(photo_like(333, 500, seed=9))
    img.save(root / "a" / "3.JPEG", format="PNG")  # a PNG named .JPEG
    img.save(root / "a" / "4.webp", format="WEBP", lossless=True)
    Image.fromarray(photo_like(120, 90, seed=4)).convert("L").save(
        root / "a" / "5.bmp", format="BMP"
    )
    return root


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_png_and_webp_load_like_torchvision(mixed, layout):
    ds = ringloader.ImageFolder(mixed)
    t = T.Compose([T.Resize(256), T.CenterCrop(224)])
    loader = ringloader.Loader(ds, batch_size=6, transform=t, layout=layout)
    with pytest.warns(ringloader.FallbackWarning, match="is BMP, not JPEG") as rec:
        ((images, labels),) = list(loader)
    assert len(rec) == 1  # announced once, for Pillow's file only
    stats = loader.stats()
    assert stats["fallback_decodes"] == 1
    assert (stats["decodes_jpeg"], stats["decodes_png"], stats["decodes_webp"]) == (
        3,
        1,
        1,
    )
    ref_t = tv.Compose([tv.Resize(256), tv.CenterCrop(224)])
    for pos, (path, _) in enumerate(ds.samples):
        ref = np.asarray(ref_t(Image.open(path).convert("RGB")))
        got = images[pos].numpy()
        if layout == "NCHW":
            got = got.transpose(1, 2, 0)
        diff = np.abs(got.astype(int) - ref.astype(int))
        if path.endswith(("3.JPEG", "4.webp", "5.bmp")):
            assert diff.max() <= 1, path  # no DCT scaling: same resampler
        else:
            assert diff.mean() < 3, path


def test_fallback_with_float_output_and_random_crop(mixed):
    ds = ringloader.ImageFolder(mixed)
    geo = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]
    u8 = ringloader.Loader(ds, batch_size=6, seed=3, transform=T.Compose(geo))
    fl = ringloader.Loader(
        ds,
        batch_size=6,
        seed=3,
        transform=T.Compose(
            geo
            + [T.ToDtype(torch.float32, scale=True), T.Normalize([0.5] * 3, [0.5] * 3)]
        ),
    )
    with pytest.warns(ringloader.FallbackWarning):
        ((a, _),) = list(u8)
        ((b, _),) = list(fl)
    assert torch.allclose(b, (a.float() / 255 - 0.5) / 0.5, atol=1e-5)


def test_unreadable_non_jpeg_names_the_file(mixed):
    (mixed / "a" / "6.bmp").write_bytes(b"BM" + b"\0" * 40)
    ds = ringloader.ImageFolder(mixed)
    loader = ringloader.Loader(ds, batch_size=7, transform=T.Resize((32, 32)))
    with pytest.raises(ringloader.DecodeError, match="6.bmp") as e:
        with pytest.warns(ringloader.FallbackWarning):
            list(loader)
    assert e.value.path.endswith("6.bmp") and e.value.kind == "not_jpeg"


@pytest.mark.parametrize(
    "ext, data",
    [
        ("png", b"\x89PNG\r\n\x1a\n" + b"\0" * 40),
        ("webp", b"RIFF\x20\0\0\0WEBPVP8 " + b"\0" * 24),
    ],
)
def test_unreadable_png_or_webp_names_the_file(tmp_path, ext, data):
    """A file with PNG's or WebP's magic bytes is the native decoder's: its
    error names the file and the format, and Pillow is never asked."""
    (tmp_path / "0.jpg").write_bytes(jpeg_bytes("baseline", 40, 60))
    (tmp_path / f"6.{ext}").write_bytes(data)
    ds = ringloader.FileList(
        [str(tmp_path / "0.jpg"), str(tmp_path / f"6.{ext}")], [0, 0]
    )
    loader = ringloader.Loader(ds, batch_size=2, transform=T.Resize((32, 32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        with pytest.raises(ringloader.DecodeError, match=f"6.{ext}") as e:
            list(loader)
    assert e.value.path.endswith(f"6.{ext}") and e.value.kind == "corrupt"
    assert ("PNG" if ext == "png" else "WebP") in e.value.reason


def test_fallback_in_tar_shards(tmp_path, mixed):
    import tarfile

    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for k, name in enumerate(["0.JPEG", "5.bmp"]):
            data = (mixed / "a" / name).read_bytes()
            info = tarfile.TarInfo(f"s{k}.jpg")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ds = ringloader.TarShards(str(shard), label_key=lambda key: 0)
    loader = ringloader.Loader(ds, batch_size=2, transform=T.Resize((48, 48)))
    with pytest.warns(ringloader.FallbackWarning):
        ((x, _),) = list(loader)
    ref = np.asarray(
        tv.Resize((48, 48))(Image.open(mixed / "a" / "5.bmp").convert("RGB"))
    )
    assert np.abs(x[1].numpy().transpose(1, 2, 0).astype(int) - ref).max() <= 1
    shutil.rmtree(tmp_path / "mixed")


def _tiff_with_garbage(kind: str) -> bytes:
    """TIFF magic followed by garbage: Pillow fails to open it, or (valid
    header, pixel data cut) to decode it."""
    rng = np.random.default_rng(16)
    if kind != "broken_data":
        tail = rng.integers(0, 256, 300, dtype=np.uint8).tobytes()
        return b"II*\0" + (bytes(300) if kind == "zeros" else tail)
    buf = io.BytesIO()
    Image.fromarray(photo_like(40, 40, seed=1)).save(buf, format="TIFF")
    data = buf.getvalue()
    return data[:1000]


@pytest.mark.parametrize("kind", ["zeros", "random", "broken_data"])
def test_fallback_error_names_the_file_not_a_buffer(tmp_path, kind):
    """Pillow names the file object it was given (``<_io.BytesIO object at
    0x...>``); the error names the file, whether raised or skipped."""
    paths = []
    for k in range(3):
        paths.append(tmp_path / f"{k}.jpg")
        paths[-1].write_bytes(jpeg_bytes("baseline", 40, 60, seed=k))
    (tmp_path / "junk.tif").write_bytes(_tiff_with_garbage(kind))
    paths.insert(1, tmp_path / "junk.tif")
    ds = ringloader.FileList([str(p) for p in paths], [0] * len(paths))
    loader = ringloader.Loader(ds, batch_size=4, transform=T.Resize((32, 32)))
    with pytest.raises(ringloader.DecodeError) as e:
        list(loader)
    message = str(e.value)
    print(message)
    assert str(tmp_path / "junk.tif") in message and "Pillow" in message
    assert "BytesIO" not in message and "object at 0x" not in message
    skip = ringloader.Loader(
        ds, batch_size=4, transform=T.Resize((32, 32)), on_error="skip"
    )
    with pytest.warns(ringloader.DataWarning, match="junk.tif") as rec:
        list(skip)
    said = " ".join(str(w.message) for w in rec)
    assert "BytesIO" not in said and "object at 0x" not in said
