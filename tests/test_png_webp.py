"""PNG and WebP are decoded natively (libspng, libwebp; csrc/decode/png.c
and webp.c), on the decode threads without the GIL, to exactly what
Pillow's ``Image.open(f).convert("RGB")`` gives, which is what
torchvision's ImageFolder loader hands a transform: alpha dropped, palettes
expanded, 16 bits reduced as Pillow reduces them (16-bit grey clipped to
255, the other 16-bit types by their high byte).

The corpus: PngSuite (tests/data/pngsuite.tar.xz, every valid file; the
invalid x*.png files must raise DecodeError naming the file), real WebP
files (tests/data/webp.tar.xz, see tests/data/README.md), PNGs of every
colour type, bit depth and interlacing written by tests/pngmake.py, and
WebPs of every kind written by Pillow. Crops and the train recipe on them
are checked against torchvision and against the same pixels decoded by
Pillow (the fallback) through the same pipeline."""

from __future__ import annotations

import io
import os
import tarfile
import warnings

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile

import ringloader
from ringloader import _core
from ringloader import transforms as T

from images import photo_like
from pngmake import DEPTHS, chunk, png_bytes, random_samples

tv = pytest.importorskip("torchvision.transforms")
from torchvision.transforms import functional as F  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def members(archive: str) -> dict[str, bytes]:
    with tarfile.open(os.path.join(DATA, archive)) as t:
        return {
            m.name.lstrip("./"): t.extractfile(m).read()
            for m in t.getmembers()
            if m.isfile() and m.name.endswith((".png", ".webp"))
        }


PNGSUITE = members("pngsuite.tar.xz")
VALID = {n: b for n, b in PNGSUITE.items() if not os.path.basename(n).startswith("x")}
INVALID = {n: b for n, b in PNGSUITE.items() if os.path.basename(n).startswith("x")}
WEBP_FILES = members("webp.tar.xz")


def pillow_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im, warnings.catch_warnings():
        # "Palette images with Transparency expressed in bytes should be
        # converted to RGBA images": what we compare is convert("RGB").
        warnings.simplefilter("ignore", UserWarning)
        return np.asarray(im.convert("RGB"))


def native_rgb(data: bytes, **kw) -> np.ndarray:
    pixels, h, w = _core.decode(data, **kw)
    return np.frombuffer(pixels, np.uint8).reshape(h, w, 3)


def generated_pngs() -> dict[str, bytes]:
    """Every colour type x bit depth x interlacing, at sizes that leave
    partial bytes and empty Adam7 passes; tRNS where it applies; palettes
    short of 2^depth entries with indexes past their end."""
    rng = np.random.default_rng(32)
    out = {}
    for ct, depths in DEPTHS.items():
        for depth in depths:
            for interlace in (False, True):
                for h, w in ((1, 1), (3, 5), (13, 17), (40, 9)):
                    pal = None
                    if ct == 3:
                        pal = rng.integers(0, 256, (max(1, (1 << depth) - 1), 3))
                    s = random_samples(rng, h, w, ct, depth, palette_len=1 << depth)
                    trns = None
                    if ct == 0:
                        trns = (int(s[0, 0, 0])).to_bytes(2, "big")
                    elif ct == 2:
                        trns = b"".join(int(v).to_bytes(2, "big") for v in s[0, 0])
                    elif ct == 3:
                        trns = bytes([0, 128])
                    name = f"ct{ct}-d{depth}-{'adam7' if interlace else 'flat'}-{h}x{w}"
                    out[name] = png_bytes(
                        s, ct, depth, interlace, palette=pal, trns=trns, idat_pieces=3
                    )
    return out


GENERATED = generated_pngs()


def generated_webps() -> dict[str, bytes]:
    """Lossy and lossless, with and without alpha, odd sizes, and
    animations whose later frames differ."""
    out = {}
    for h, w in ((1, 1), (17, 31), (150, 97)):
        rgb = photo_like(h, w, seed=h)
        alpha = np.random.default_rng(w).integers(0, 256, (h, w, 1), dtype=np.uint8)
        for name, img in (("rgb", rgb), ("rgba", np.concatenate([rgb, alpha], axis=2))):
            for opts in ({"quality": 75}, {"lossless": True}):
                buf = io.BytesIO()
                Image.fromarray(img).save(buf, "WEBP", **opts)
                kind = "lossless" if opts.get("lossless") else "lossy"
                out[f"{name}-{kind}-{h}x{w}"] = buf.getvalue()
    frames = [Image.fromarray(photo_like(60, 80, seed=k)) for k in range(3)]
    frames[2].paste((0, 0, 0), (10, 10, 30, 30))
    for opts in ({"quality": 80}, {"lossless": True}):
        buf = io.BytesIO()
        frames[0].save(buf, "WEBP", save_all=True, append_images=frames[1:], **opts)
        out[f"animated-{'lossless' if opts.get('lossless') else 'lossy'}"] = (
            buf.getvalue()
        )
    return out


WEBPS = {**WEBP_FILES, **generated_webps()}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_pngs_decode_as_pillow(name):
    data = GENERATED[name]
    assert np.array_equal(native_rgb(data), pillow_rgb(data)), name


def test_pngsuite_decodes_as_pillow_bit_for_bit():
    assert len(VALID) >= 150
    for name, data in VALID.items():
        ours = native_rgb(data)
        ref = pillow_rgb(data)
        assert ours.shape == ref.shape and np.array_equal(ours, ref), name


def test_16_bit_reduction_is_pillows():
    """Pillow opens 16-bit grey as I;16 and converts it by clipping to 255;
    grey+alpha, RGB and RGBA keep the high byte."""
    v = np.array([[[0], [1], [255], [256], [4095], [65535]]])
    assert native_rgb(png_bytes(v, 0, 16))[0, :, 0].tolist() == [
        0,
        1,
        255,
        255,
        255,
        255,
    ]
    rgb = np.array([[[0x12FF, 0x0001, 0xFF00]]])
    assert native_rgb(png_bytes(rgb, 2, 16))[0, 0].tolist() == [0x12, 0x00, 0xFF]
    ga = np.array([[[0x8001, 0x0000]]])
    assert native_rgb(png_bytes(ga, 4, 16))[0, 0].tolist() == [0x80] * 3


def test_an_apng_gives_its_first_frame():
    frames = [Image.fromarray(photo_like(30, 40, seed=k)) for k in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:])
    data = buf.getvalue()
    assert b"acTL" in data and b"fdAT" in data
    assert np.array_equal(native_rgb(data), np.asarray(frames[0]))
    assert np.array_equal(native_rgb(data), pillow_rgb(data))


@pytest.mark.parametrize("name", sorted(WEBPS))
def test_webp_decodes_as_pillow(name):
    data = WEBPS[name]
    ours, ref = native_rgb(data), pillow_rgb(data)
    assert ours.shape == ref.shape and np.array_equal(ours, ref), name


class Files:
    def __init__(self, paths):
        self.samples = [(str(p), i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


def test_invalid_pngsuite_files_raise_decode_error_naming_the_file(tmp_path):
    """Each x*.png fails alone, as a DecodeError naming it (those whose
    signature is broken go to Pillow, which cannot read them either), and
    never crashes; the decoder used after a failure still decodes."""
    assert len(INVALID) >= 12
    good = tmp_path / "good.png"
    good.write_bytes(VALID["primary/basn2c08.png"])
    for name, data in INVALID.items():
        with pytest.raises(ringloader.DecodeError):
            _core.decode(data)
        path = tmp_path / os.path.basename(name)
        path.write_bytes(data)
        loader = ringloader.Loader(
            Files([path, good]), batch_size=2, transform=T.CenterCrop(16)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ringloader.FallbackWarning)
            with pytest.raises(ringloader.DecodeError) as e:
                list(loader)
        assert e.value.path == str(path), name
        assert str(path) in str(e.value)
        skip = ringloader.Loader(
            Files([path, good]),
            batch_size=1,
            transform=T.CenterCrop(16),
            on_error="skip",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ((x, _),) = list(skip)[:1]
        ref = np.asarray(tv.CenterCrop(16)(Image.open(good).convert("RGB")))
        assert np.array_equal(x[0].permute(1, 2, 0).numpy(), ref), name


def load(paths, transform, seed=5, **kw):
    with ringloader.Loader(
        Files(paths),
        batch_size=len(paths),
        seed=seed,
        layout="NHWC",
        transform=transform,
        **kw,
    ) as loader:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ringloader.FallbackWarning)
            images, _ = next(iter(loader))
        stats = loader.stats()
    return images.numpy(), stats


def corpus_files(tmp_path) -> list:
    """PNGs (flat and interlaced, 8 and 16 bits, palette, grey+alpha) and
    WebPs (lossy, lossless, alpha, animated) of sizes a crop can land in."""
    paths = []
    for name in (
        "primary/basn2c08.png",
        "primary/basi3p08.png",
        "16bit/basi6a16.png",
        "primary/basn4a08.png",
        "primary/tbrn2c08.png",
        "primary/s39i3p04.png",
    ):
        paths.append(tmp_path / os.path.basename(name))
        paths[-1].write_bytes(VALID[name])
    rng = np.random.default_rng(5)
    for ct, depth, interlace in (
        (2, 8, False),
        (6, 16, True),
        (0, 16, False),
        (3, 2, True),
    ):
        s = random_samples(rng, 97, 131, ct, depth, palette_len=4)
        pal = rng.integers(0, 256, (4, 3)) if ct == 3 else None
        paths.append(tmp_path / f"g{ct}-{depth}-{int(interlace)}.png")
        paths[-1].write_bytes(
            png_bytes(s, ct, depth, interlace, palette=pal, idat_pieces=4)
        )
    for name in ("flower.webp", "transparent.webp", "hopper.webp"):
        paths.append(tmp_path / name)
        paths[-1].write_bytes(WEBP_FILES[name])
    for name in ("rgba-lossy-150x97", "rgb-lossless-150x97", "animated-lossy"):
        paths.append(tmp_path / f"{name}.webp")
        paths[-1].write_bytes(WEBPS[name])
    return paths


def test_center_crops_are_exact(tmp_path):
    """A crop without resampling gives the very pixels of Pillow's decode:
    PNG rows outside the crop are decoded but not converted, WebP is decoded with libwebp's cropping (one pixel wider,
    as its edges are not exact), and neither shows at the crop's edges."""
    paths = corpus_files(tmp_path)
    for crop in (1, 7, 16, 33, 64):
        ours, stats = load(paths, T.CenterCrop(crop))
        for i, p in enumerate(paths):
            full = Image.open(p).convert("RGB")
            ref = np.asarray(tv.CenterCrop(crop)(full))
            assert np.array_equal(ours[i], ref), (p.name, crop)
    assert stats["fallback_decodes"] == 0
    assert stats["decodes_png"] + stats["decodes_webp"] == len(paths)


def test_train_recipe_matches_torchvision(tmp_path):
    """RandomResizedCrop + flip as torchvision applies them to Pillow's
    image, within the resampler's 1 level (as for a JPEG without DCT
    scaling), and Normalize in floats on top."""
    paths = corpus_files(tmp_path)
    n = len(paths)
    geo = [T.RandomResizedCrop(48), T.RandomHorizontalFlip()]
    ours, _ = load(paths, T.Compose(geo), seed=11)
    spec = T.compile_transform(T.Compose(geo)).spec
    for i, p in enumerate(paths):
        img = Image.open(p).convert("RGB")
        top, left, ch, cw, flip = _core.plan(spec, img.width, img.height, 11, 0, i)
        ref = F.resized_crop(
            img, int(top), int(left), int(ch), int(cw), [48, 48], antialias=True
        )
        ref = np.asarray(F.hflip(ref) if flip else ref)
        diff = np.abs(ours[i].astype(int) - ref.astype(int)).max()
        assert diff <= 1, (p.name, diff)
    norm = T.Compose(
        geo + [T.ToDtype(torch.float32, scale=True), T.Normalize([0.5] * 3, [0.25] * 3)]
    )
    floats, _ = load(paths, norm, seed=11)
    want = (ours.astype(np.float32) / 255 - 0.5) / 0.25
    assert floats.shape == (n, 48, 48, 3)
    assert np.abs(floats - want).max() < 1e-4


def test_ops_give_what_they_give_on_the_same_pixels(tmp_path):
    """The same pixels as a BMP, which Pillow decodes (the fallback), and as
    a PNG and a lossless WebP, which are decoded natively, give the same
    batch through crops, flips, colour ops, a warp and Normalize."""
    pixels = photo_like(173, 211, seed=3)
    paths = []
    for fmt, opts in (("BMP", {}), ("PNG", {}), ("WEBP", {"lossless": True})):
        paths.append(tmp_path / f"x.{fmt.lower()}")
        Image.fromarray(pixels).save(paths[-1], fmt, **opts)
    t = tv.Compose(
        [
            tv.RandomResizedCrop(64),
            tv.RandomHorizontalFlip(),
            tv.ColorJitter(0.4, 0.4, 0.4, 0.1),
            tv.RandomGrayscale(0.3),
            tv.RandomRotation(15),
            tv.ToTensor(),
            tv.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    batches = []
    for p in paths:
        with ringloader.Loader(
            Files([p] * 8), batch_size=8, seed=2, transform=t
        ) as loader:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ringloader.FallbackWarning)
                images, _ = next(iter(loader))
            batches.append(images)
            kind = (
                "fallback_decodes" if p.suffix == ".bmp" else f"decodes_{p.suffix[1:]}"
            )
            assert loader.stats()[kind] == 8
    assert torch.equal(batches[0], batches[1]) and torch.equal(batches[0], batches[2])


def test_truncated_png_and_webp(tmp_path):
    """A file cut short is truncated whatever the crop (a PNG's chunk list
    and a WebP's RIFF size are checked before any row is decoded); with
    allow_truncated it decodes what its data holds, counted, and a PNG
    equals Pillow's LOAD_TRUNCATED_IMAGES decode."""
    rng = np.random.default_rng(7)
    png = png_bytes(random_samples(rng, 64, 48, 2, 8), 2, 8, idat_pieces=6, level=0)
    webp = WEBPS["rgb-lossy-150x97"]
    for name, data in (("cut.png", png), ("cut.webp", webp)):
        cut = data[: len(data) * 6 // 10]
        path = tmp_path / name
        path.write_bytes(cut)
        for transform in (T.CenterCrop(4), T.Resize((16, 16))):
            loader = ringloader.Loader(Files([path]), batch_size=1, transform=transform)
            with pytest.raises(ringloader.DecodeError) as e:
                list(loader)
            assert e.value.kind == "truncated" and e.value.path == str(path)
        with pytest.raises(ringloader.DecodeError, match="truncated"):
            _core.decode(cut)
        loader = ringloader.Loader(
            Files([path]),
            batch_size=1,
            transform=T.Resize((16, 16)),
            allow_truncated=True,
        )
        with pytest.warns(ringloader.DataWarning, match="truncated"):
            ((x, _),) = list(loader)
        assert loader.stats()["truncated"] == 1 and x.shape == (1, 3, 16, 16)
    cut = png[: len(png) * 6 // 10]
    ImageFile.LOAD_TRUNCATED_IMAGES = True
    try:
        ref = pillow_rgb(cut)
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = False
    ours = native_rgb(cut, allow_truncated=True)
    assert np.array_equal(ours, ref)
    assert 0 < (ours.reshape(64, -1) != 0).any(axis=1).sum() < 64  # rows lost


def test_a_compressed_chunk_is_held_to_a_bound():
    """A zTXt chunk that inflates to 100 MiB (100 KiB in the file) is
    refused as too big, not inflated: libspng holds ancillary chunks to
    64 MiB, as Pillow bounds its text chunks."""
    import zlib

    s = np.zeros((4, 4, 3), np.int64)
    bomb = chunk(b"zTXt", b"k\0\0" + zlib.compress(bytes(100 << 20), 9))
    data = png_bytes(s, 2, 8, extra=[bomb])
    with pytest.raises(ringloader.DecodeError) as e:
        _core.decode(data)
    assert e.value.kind == "too_big"


def test_a_bad_idat_crc_fails_whatever_the_crop(tmp_path):
    """The IDAT chunks' CRCs are checked from the bytes, so a damaged chunk
    below a crop fails too (libspng checks those it reads)."""
    rng = np.random.default_rng(9)
    data = bytearray(png_bytes(random_samples(rng, 64, 32, 2, 8), 2, 8, idat_pieces=4))
    last = data.rfind(b"IDAT")
    data[last + 10] ^= 0xFF
    path = tmp_path / "crc.png"
    path.write_bytes(bytes(data))
    loader = ringloader.Loader(Files([path]), batch_size=1, transform=T.CenterCrop(2))
    with pytest.raises(ringloader.DecodeError, match="CRC") as e:
        list(loader)
    assert e.value.kind == "corrupt"
