"""A PNG's outcome never depends on the crop (decode/decode.h): a file whose
zlib stream and CRCs are right but one row's filter byte is not a filter
type (over 4) raises the same DecodeError whatever region is decoded, the
whole image or any crop, wherever the bad row lies (the first scanline, a
middle one, the last one), on every path a PNG takes: the fast path
(libdeflate, png_rows.c), libspng row by row for a non-interlaced file the
fast path declines (here: a stream longer than the image; in real sets an
image over RL_PNG_ROWS_MAX, made here too), and libspng for an Adam7 file.
Seen from _core.decode(box=...), which decodes a region as a pipeline does,
and from a Loader under every geometry a pipeline asks of a PNG decoder
(PNG has no DCT scaling: a crop, a resize and a warp each ask a region at
full size), where the error names the file."""

from __future__ import annotations

import struct
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image

import ringloader
from ringloader import _core
from ringloader import transforms as T

from pngmake import (
    CHANNELS,
    DEPTHS,
    chunk,
    png_bytes,
    random_samples,
    raw_data,
    scanline_starts,
)

tv = pytest.importorskip("torchvision.transforms")

H, W = 64, 48
# Every colour type and depth the decoders take (pngmake.DEPTHS).
KINDS = [(ct, d) for ct, depths in sorted(DEPTHS.items()) for d in depths]
ROUTES = ("fast", "libspng", "adam7")
WHERE = ("first", "middle", "last")
# Regions as (left, top, width, height): the centre, rows at the top and at
# the bottom, single pixels at two corners, the whole image as a box.
BOXES = {
    "centre": ((W - 32) // 2, (H - 32) // 2, 32, 32),
    "top": (0, 0, W, 8),
    "bottom": (0, H - 8, W, 8),
    "top-left": (0, 0, 1, 1),
    "bottom-right": (W - 1, H - 1, 1, 1),
    "whole": (0, 0, W, H),
}


def bad_png(ct: int, depth: int, route: str, where: str, bad: int = 5) -> bytes:
    """A PNG of that kind whose scanline `where` (in the file's order) has
    the filter byte `bad`; the stream is one more row of zeros long on the
    libspng route (declined by the fast path, decoded by libspng)."""
    rng = np.random.default_rng(ct * 100 + depth)
    pal = rng.integers(0, 256, (1 << depth, 3)) if ct == 3 else None
    s = random_samples(rng, H, W, ct, depth, palette_len=1 << depth)
    interlace = route == "adam7"
    raw = bytearray(raw_data(s, depth, interlace))
    if bad is not None:
        starts = scanline_starts(H, W, CHANNELS[ct], depth, interlace)
        at = {"first": 0, "middle": len(starts) // 2, "last": -1}[where]
        raw[starts[at]] = bad
    if route == "libspng":
        raw += bytes(1 + -(-W * CHANNELS[ct] * depth // 8))
    return png_bytes(s, ct, depth, interlace, palette=pal, idat_pieces=3, raw=raw)


def reason(data: bytes, box=None) -> str:
    """The DecodeError's reason for that region (the test fails when it
    decodes)."""
    with pytest.raises(ringloader.DecodeError) as e:
        _core.decode(data, box=box)
    assert e.value.kind == "corrupt", (box, e.value)
    return e.value.reason


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: f"ct{k[0]}-d{k[1]}")
def test_every_region_gets_the_whole_files_error(kind, route):
    for where in WHERE:
        data = bad_png(*kind, route, where)
        whole = reason(data)
        assert "filter" in whole, whole
        for name, box in BOXES.items():
            assert reason(data, box) == whole, (where, name)
    # The same file with its filter bytes right decodes, every region:
    # what fails above is the bad byte, not the route.
    good = bad_png(*kind, route, "first", bad=None)
    full = np.frombuffer(_core.decode(good)[0], np.uint8).reshape(H, W, 3)
    for name, (x, y, w, h) in BOXES.items():
        got = np.frombuffer(_core.decode(good, box=(x, y, w, h))[0], np.uint8)
        assert np.array_equal(got.reshape(h, w, 3), full[y : y + h, x : x + w]), name


@pytest.mark.parametrize("kind", ((2, 8), (0, 1), (6, 16)), ids=str)
def test_a_stream_that_ends_early_fails_whatever_the_crop(kind):
    """A zlib stream complete but short of the image's last rows (the
    chunks whole, their CRCs right): declined by the fast path, and
    libspng finds it short only in the rows it decodes."""
    ct, depth = kind
    rng = np.random.default_rng(8)
    s = random_samples(rng, H, W, ct, depth, palette_len=1 << depth)
    raw = raw_data(s, depth, False)
    for keep in (0.25, 0.9):
        data = png_bytes(s, ct, depth, raw=raw[: int(len(raw) * keep)])
        whole = reason(data)
        for name, box in BOXES.items():
            assert reason(data, box) == whole, (keep, name)


def big_png(where: str) -> bytes:
    """An RGBA 16-bit PNG of 4096 x 2100 (68.8 MB of filtered rows, over
    RL_PNG_ROWS_MAX: libspng decodes it row by row), zeros but one bad
    filter byte."""
    h, w = 2100, 4096
    rowbytes = 8 * w
    raw = bytearray(h * (rowbytes + 1))
    row = {"first": 0, "middle": h // 2, "last": h - 1}[where]
    raw[row * (rowbytes + 1)] = 0xFF
    ihdr = struct.pack(">IIBBBBB", w, h, 16, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(bytes(raw), 1))
        + chunk(b"IEND", b"")
    )


def test_an_image_over_the_fast_paths_bound_too():
    for where in WHERE:
        data = big_png(where)
        whole = reason(data)
        for box in ((2000, 1000, 32, 32), (0, 0, 4096, 4), (0, 2096, 4096, 4)):
            assert reason(data, box) == whole, (where, box)


class Files:
    def __init__(self, paths):
        self.samples = [(str(p), i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


# What a pipeline asks of a PNG decoder: crops of every kind, resizes of
# the whole image (antialiased and nearest), a random box, a padded random
# crop, and a warp after a resize (torchvision's RandomRotation).
GEOMETRIES = {
    "centre-crop": T.CenterCrop(32),
    "small-crop": T.CenterCrop(1),
    "resize": T.Resize((16, 16)),
    "resize-nearest": T.Resize((16, 16), interpolation="nearest"),
    "random-resized-crop": T.RandomResizedCrop(16),
    "random-crop": T.RandomCrop(8, padding=4),
    "rotation": tv.Compose(
        [tv.Resize((20, 20)), tv.RandomRotation(15), tv.PILToTensor()]
    ),
}


@pytest.mark.parametrize("route", ROUTES)
def test_a_loader_raises_naming_the_file_whatever_the_geometry(tmp_path, route):
    kinds = ((2, 8), (6, 16), (3, 4), (0, 1))
    for ct, depth in kinds:
        for where in WHERE:
            data = bad_png(ct, depth, route, where)
            whole = reason(data)
            path = tmp_path / f"ct{ct}-d{depth}-{route}-{where}.png"
            path.write_bytes(data)
            # Pillow refuses it too: the error is the file's.
            with pytest.raises(OSError), Image.open(path) as im:
                im.load()
            for name, tf in GEOMETRIES.items():
                loader = ringloader.Loader(
                    Files([path] * 4), batch_size=4, seed=3, transform=tf
                )
                with warnings.catch_warnings():
                    warnings.simplefilter("error", ringloader.FallbackWarning)
                    with pytest.raises(ringloader.DecodeError) as e:
                        list(loader)
                assert e.value.path == str(path), name
                assert str(path) in str(e.value), name
                assert e.value.reason == whole, (path.name, name)
                assert e.value.kind == "corrupt", (path.name, name)
