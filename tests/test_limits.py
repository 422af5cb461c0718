"""Memory bounds for untrusted files (docs/reliability.md: "a decode
thread's memory for one image has a stated bound"): PNGs and WebPs
(libspng, libwebp) and the images that Pillow decodes are refused from
their header when over max_pixels, as JPEGs are, before any pixel memory
exists; libjpeg's memory for one image is bounded (by default 8 bytes per
pixel of max_pixels + 64 MiB), which a progressive JPEG's whole-image
coefficient buffers are checked against before they are allocated."""

from __future__ import annotations

import io
import struct
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image

import ringloader
from ringloader import _core
from ringloader import transforms as T

from subproc import run_python

SIDE = 4000  # 16 M pixels: over the 1 M limit the measurements set
LIMIT = 1_000_000


def png_gray(side: int) -> bytes:
    """A real greyscale PNG of side x side, compressed row by row (the
    raw image is never in memory)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    z = zlib.compressobj(9)
    row = b"\0" + bytes(range(256)) * (side // 256) + bytes(side % 256)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", idat)
        + chunk(b"IEND", b"")
    )


def bmp_rle8(side: int) -> bytes:
    """A real 8-bit run-length-encoded BMP of side x side (a few bytes a
    row), grey stripes."""
    rows = bytearray()
    for y in range(side):
        left = side
        while left:
            n = min(left, 255)
            rows += bytes([n, y % 256])
            left -= n
        rows += b"\0\0"  # end of line
    rows += b"\0\1"  # end of bitmap
    palette = b"".join(bytes([i, i, i, 0]) for i in range(256))
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, side, side, 1, 8, 1, len(rows), 0, 0, 256, 0)
    head = b"BM" + struct.pack("<IHHI", offset + len(rows), 0, 0, offset)
    return head + info + palette + bytes(rows)


def gif(side: int) -> bytes:
    out = io.BytesIO()
    Image.new("P", (side, side), 3).save(out, "GIF")
    return out.getvalue()


def webp_flat(side: int) -> bytes:
    """A real lossless WebP of side x side, one colour."""
    out = io.BytesIO()
    Image.new("RGB", (side, side), (10, 200, 30)).save(out, "WEBP", lossless=True)
    return out.getvalue()


MAKERS = {"png": png_gray, "webp": webp_flat, "bmp": bmp_rle8, "gif": gif}
NATIVE = ("png", "webp")  # decoded by libspng and libwebp; the rest by Pillow
TRANSFORM = T.Compose([T.Resize((64, 64)), T.CenterCrop(64)])

MEASURE = r"""
import sys, warnings
import ringloader
from ringloader import _core, transforms as T

path, limit = sys.argv[1], int(sys.argv[2])
max_decode_bytes = int(sys.argv[3]) if len(sys.argv) > 3 else None
warnings.simplefilter("ignore")  # the one-time FallbackWarning

def rss_kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

class DS:
    samples = [(path, 0)]

loader = ringloader.Loader(DS, batch_size=1, num_threads=1, max_pixels=limit,
                           transform=T.Compose([T.Resize(64), T.CenterCrop(64)]))
data = open(path, "rb").read()
calls = [lambda: list(loader)]
if max_decode_bytes is not None:  # a bound of its own: what _core.decode takes
    calls = [lambda: _core.decode(data, max_pixels=limit,
                                  max_decode_bytes=max_decode_bytes)]
for attempt in range(2):  # the first round warms up threads and caches
    worst_kb, outcome = 0, []
    for fn in calls:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM, the peak RSS, to the current RSS
        base = rss_kb("VmHWM")
        try:
            fn()
            outcome.append("decoded")
        except ringloader.DecodeError as e:
            outcome.append(f"{e.kind}: {e}")
        worst_kb = max(worst_kb, rss_kb("VmHWM") - base)
print(worst_kb)
print("\n".join(outcome))
"""


def measure(path: str, limit: int, *extra: str, env: dict | None = None):
    proc = run_python(MEASURE, path, str(limit), *extra, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kb, *outcomes = proc.stdout.splitlines()
    return int(kb), outcomes


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_other_formats_over_max_pixels_refused_from_the_header(tmp_path, kind):
    path = tmp_path / f"big.{kind}"
    path.write_bytes(MAKERS[kind](SIDE))
    with Image.open(path) as im:  # a valid image, as Pillow sees it
        assert im.size == (SIDE, SIDE)
    kb, (outcome,) = measure(str(path), LIMIT)
    # Decoding it would take 16 M pixels x 12 bytes or more.
    assert kb < 16 * 1024, f"RSS grew by {kb / 1024:.1f} MB"
    # The same kind and words as a JPEG over the limit, naming the file.
    assert outcome == (
        f"too_big: cannot decode {path}: image is {SIDE}x{SIDE} = "
        f"{SIDE * SIDE} pixels, over the limit of {LIMIT} (decompression "
        "bomb?); if it is trusted, raise the limit with max_pixels="
    )


def test_other_formats_within_max_pixels_still_decode(tmp_path):
    for kind, make in MAKERS.items():
        path = tmp_path / f"small.{kind}"
        path.write_bytes(make(300))

        class DS:
            samples = [(str(path), 0)]

        loader = ringloader.Loader(
            DS, batch_size=1, max_pixels=300 * 300, transform=TRANSFORM
        )
        if kind in NATIVE:
            with warnings.catch_warnings():
                warnings.simplefilter("error", ringloader.FallbackWarning)
                ((x, _),) = list(loader)
            assert loader.stats()[f"decodes_{kind}"] == 1, kind
        else:
            with pytest.warns(ringloader.FallbackWarning):
                ((x, _),) = list(loader)
            assert loader.stats()["fallback_decodes"] == 1, kind
        ref = np.asarray(Image.open(path).convert("RGB").resize((64, 64)))
        assert x.shape == (1, 3, 64, 64), kind
        got = x[0].permute(1, 2, 0).numpy().astype(int)
        assert np.abs(got - ref).mean() < 8, kind


# ---- libjpeg's memory: progressive JPEGs ----

PSIDE = 3000  # 9 M pixels; a 4:4:4 progressive file keeps 54 MB of coefficients


@pytest.fixture(scope="module")
def progressive(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("progressive")
    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (PSIDE // 30, PSIDE // 30, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((PSIDE, PSIDE), Image.BILINEAR)
    out = {}
    for name, progressive in (("progressive", True), ("baseline", False)):
        p = d / f"{name}.jpg"
        img.save(p, "JPEG", quality=90, subsampling=0, progressive=progressive)
        out[name] = str(p)
    return out


def bound(max_pixels: int) -> int:
    """The stated per-thread bound of libjpeg's memory (rl.h)."""
    return 8 * max_pixels + (64 << 20)


def test_progressive_jpeg_decodes_within_the_stated_bound(progressive):
    pixels = PSIDE * PSIDE
    kb, (outcome,) = measure(progressive["progressive"], pixels)
    assert outcome == "decoded"
    # The coefficients alone are 6 bytes a pixel (3 components at full
    # resolution): the measure sees them.
    assert 6 * pixels <= kb * 1024 <= bound(pixels), f"RSS grew by {kb / 1024:.1f} MB"


def test_progressive_jpeg_over_the_bound_refused_before_allocating(progressive):
    """A bound below what the file's coefficients need (54 MB) refuses it
    cleanly, naming the bound, with little memory touched; a baseline file
    of the same size needs no such buffers and decodes under it."""
    small = 16 << 20
    pixels = PSIDE * PSIDE
    kb, (outcome,) = measure(progressive["progressive"], pixels, str(small))
    assert outcome.startswith("too_big: ") and (
        f"JPEG needs more than the {small} bytes a decode thread may hold "
        "for one image" in outcome
    ), outcome
    assert kb < 16 * 1024, f"RSS grew by {kb / 1024:.1f} MB"
    data = open(progressive["baseline"], "rb").read()
    _, h, w = _core.decode(data, max_pixels=pixels, max_decode_bytes=small)
    assert (h, w) == (PSIDE, PSIDE)


def test_jpegmem_in_the_environment_changes_nothing(progressive):
    """JPEGMEM (djpeg's setting, read by libjpeg-turbo at every decompressor's
    creation) once made every progressive file fail as corrupt ("Backing
    store not supported"); the bound is ours."""
    pixels = PSIDE * PSIDE
    _, (outcome,) = measure(progressive["progressive"], pixels, env={"JPEGMEM": "1M"})
    assert outcome == "decoded"
