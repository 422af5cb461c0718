"""The PNG decoder's fast path (csrc/decode/png_rows.c): a non-interlaced
file whose IDAT stream inflates to exactly the image is inflated whole with
libdeflate and unfiltered by our own loops (Paeth on 3- and 4-byte pixels
with SSE2, two rows at a time where two Paeth rows follow each other).
Its pixels must be Pillow's at every SIMD level, for every filter type and
run of them, in whole decodes and in crops; the files it declines (a
stream longer or shorter than the image, IDAT chunks apart, a filter type
over 4, a zlib header zlib refuses) get libspng's verdict as before."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

import ringloader
from ringloader import _core
from ringloader import transforms as T

from pngmake import chunk, random_samples, raw_data

MAGIC = b"\x89PNG\r\n\x1a\n"
# Runs of Paeth rows of both parities (pairs, a row alone), next to every
# other filter type.
FILTERS = {
    "paeth": (4,),
    "mixed": (4, 4, 1, 4, 4, 4, 2, 4, 3, 0, 4, 4, 4, 4, 4, 1, 2),
}
# (colour type, depth): 3-byte (RGB) and 4-byte (RGBA, 16-bit grey+alpha)
# pixels take the SIMD loops; the others the bytewise ones.
KINDS = ((2, 8), (6, 8), (4, 16), (0, 8), (2, 16), (3, 4))


@pytest.fixture(params=["c", "sse2"])
def simd(request):
    before = _core.resample_simd()
    got = _core.resample_simd(request.param)
    if got != request.param:
        _core.resample_simd(before)
        pytest.skip(f"this machine has no {request.param}")
    yield got
    _core.resample_simd(before)


def pillow_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def native_rgb(data: bytes) -> np.ndarray:
    pixels, h, w = _core.decode(data)
    return np.frombuffer(pixels, np.uint8).reshape(h, w, 3)


def make(rng, h, w, ct, depth, filters, pieces=3):
    """A PNG of random samples (photo-like runs would not reach every
    branch of Paeth's choice) with the given filter types by row."""
    pal = rng.integers(0, 256, (16, 3)) if ct == 3 else None
    s = random_samples(rng, h, w, ct, depth, palette_len=16)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ct, 0, 0, 0)
    out = MAGIC + chunk(b"IHDR", ihdr)
    if pal is not None:
        out += chunk(b"PLTE", np.asarray(pal, np.uint8).tobytes())
    z = zlib.compress(raw_data(s, depth, False, filters=filters))
    step = max(1, -(-len(z) // pieces))
    for i in range(0, len(z), step):
        out += chunk(b"IDAT", z[i : i + step])
    return out + chunk(b"IEND", b"")


def png_of_stream(w, h, stream: bytes, between: bytes = b"") -> bytes:
    """An RGB 8-bit PNG of w x h whose IDAT data is stream (zlib), split
    in two chunks with `between` (whole chunks) between them."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    half = len(stream) // 2
    return (
        MAGIC
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", stream[:half])
        + between
        + chunk(b"IDAT", stream[half:])
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: f"ct{k[0]}-d{k[1]}")
@pytest.mark.parametrize("filters", sorted(FILTERS))
def test_every_filter_run_decodes_as_pillow(simd, kind, filters):
    rng = np.random.default_rng(kind[0] * 100 + kind[1])
    for h, w in ((1, 1), (2, 3), (7, 1), (33, 29), (64, 101)):
        data = make(rng, h, w, *kind, FILTERS[filters])
        assert np.array_equal(native_rgb(data), pillow_rgb(data)), (h, w)


def test_crops_are_pillows_pixels(simd, tmp_path):
    """Crops of files with Paeth runs (rows unfiltered down to the crop's
    last one, converted only inside it) give Pillow's very pixels."""
    rng = np.random.default_rng(7)
    paths = []
    for i, (ct, depth) in enumerate(KINDS):
        p = tmp_path / f"{i}.png"
        p.write_bytes(make(rng, 45 + i, 38 + 3 * i, ct, depth, FILTERS["mixed"]))
        paths.append(p)
    samples = [(str(p), 0) for p in paths]
    for crop in ((1, 1), (9, 30), (31, 17), (44, 37)):
        with ringloader.Loader(
            ringloader.FileList([s for s, _ in samples], [0] * len(samples)),
            batch_size=len(paths),
            layout="NHWC",
            transform=T.CenterCrop(crop),
        ) as loader:
            ours = next(iter(loader))[0].numpy()
            assert loader.stats()["decodes_png"] == len(paths)
        for i, p in enumerate(paths):
            with Image.open(p) as im:
                full = np.asarray(im.convert("RGB"))
            top = int(round((full.shape[0] - crop[0]) / 2.0))
            left = int(round((full.shape[1] - crop[1]) / 2.0))
            ref = full[top : top + crop[0], left : left + crop[1]]
            assert np.array_equal(ours[i], ref), (p.name, crop)


def test_a_stream_longer_than_the_image_decodes_as_pillow():
    """Declined (libdeflate stops at the image's end); libspng, like
    Pillow, decodes the image's rows and ignores the rest."""
    rng = np.random.default_rng(3)
    s = random_samples(rng, 40, 30, 2, 8)
    data = png_of_stream(30, 30, zlib.compress(raw_data(s, 8, False)))
    assert np.array_equal(native_rgb(data), pillow_rgb(data))


def test_declined_files_get_libspngs_verdict():
    rng = np.random.default_rng(4)
    s = random_samples(rng, 40, 30, 2, 8)
    raw = raw_data(s, 8, False)
    bad = {
        # half the rows: libspng finds the stream short
        "short": png_of_stream(30, 40, zlib.compress(raw[: len(raw) // 2])),
        # a filter type of 5 on row 3
        "filter": png_of_stream(
            30, 40, zlib.compress(raw[: 3 * 91] + b"\x05" + raw[3 * 91 + 1 :])
        ),
        # a preset dictionary flagged in the zlib header (FDICT)
        "fdict": png_of_stream(30, 40, b"\x78\xbb" + zlib.compress(raw)[2:]),
    }
    for name, data in bad.items():
        with pytest.raises(ringloader.DecodeError) as e:
            _core.decode(data)
        assert e.value.kind == "corrupt", name
    # IDAT chunks with another chunk between them: libspng refuses it.
    apart = png_of_stream(30, 40, zlib.compress(raw), between=chunk(b"tEXt", b"k\0v"))
    with pytest.raises(ringloader.DecodeError):
        _core.decode(apart)
