"""Segmentation PNGs (csrc/decode/png_index.c, csrc/targets/mask_png.c):
a palette PNG's indices (1, 2, 4 or 8 bits, interlaced or not) or an 8-bit
greyscale PNG's values, sampled through per-axis index maps, must be
identical to what torchvision's segmentation path gives: the file opened
with Pillow, made a tv_tensors.Mask (what wrap_dataset_for_transforms_v2
does with VOCSegmentation's target) and put through nearest resize, crop,
flips and pads (fill 255, the segmentation presets' pad value, or 0). VOC-like
masks: class shapes with a border of the top index. Every bad file and map
is a ValueError naming what is wrong."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageDraw
from torchvision import tv_tensors

from ringloader import _core

from pngmake import chunk, png_bytes, raw_data
from test_masks import apply_steps, identity, index_maps, random_geometry, sampled

# --- VOC-like masks ---


def voc_like(rng, h, w, bits):
    """A 'P' image of class shapes (indices 1.. below the top) each with a
    border of the top index (255 in 8 bits, VOC's 'void'), on background 0."""
    top = (1 << bits) - 1
    img = Image.new("P", (w, h), 0)
    img.putpalette([v % 256 for v in range(768)])
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(1, 6))):
        x0, x1 = sorted(int(v) for v in rng.integers(-2, w + 2, size=2))
        y0, y1 = sorted(int(v) for v in rng.integers(-2, h + 2, size=2))
        cls = int(rng.integers(1, max(2, min(top, 21))))
        box = [x0, y0, x1, y1]
        width = int(rng.integers(1, 4))
        if rng.random() < 0.5:
            draw.ellipse(box, fill=cls, outline=top, width=width)
        else:
            draw.rectangle(box, fill=cls, outline=top, width=width)
    return np.array(img)


def pil_png(indices, mode, bits=8):
    """The bytes Pillow writes for an array as a 'P' (with `bits`) or 'L'
    image."""
    img = Image.fromarray(indices, mode)
    if mode == "P":
        img.putpalette([v % 256 for v in range(768)])
    buf = io.BytesIO()
    img.save(buf, "PNG", **({"bits": bits} if mode == "P" else {}))
    return buf.getvalue()


def made_png(indices, colour_type, bits, interlace):
    """The file written byte by byte (tests/pngmake.py): Pillow writes no
    Adam7."""
    palette = np.arange(768, dtype=np.int64).reshape(256, 3) % 256
    return png_bytes(
        indices[:, :, None].astype(np.int64),
        colour_type,
        bits,
        interlace=interlace,
        palette=palette[: 1 << bits] if colour_type == 3 else None,
    )


def torchvision_mask(data, steps, fill):
    """torchvision's path: Pillow's image, a tv_tensors.Mask of it (1, h, w),
    the ops of the chain."""
    mask = tv_tensors.Mask(Image.open(io.BytesIO(data)))
    assert mask.shape[0] == 1
    return apply_steps(mask, steps, fill)[0]


def ours(data, rows, cols, fill=255):
    return sampled(_core.mask_from_png(data, rows, cols, fill=fill), rows, cols)


def random_file(rng, case):
    """A random mask PNG of every accepted kind: (bytes, Pillow's mode)."""
    h = int(rng.integers(1, 70))
    w = int(rng.integers(1, 70))
    if case % 7 == 0:
        h, w = (1, w) if case % 2 else (h, 1)
    kind = case % 4
    bits = [1, 2, 4, 8][int(rng.integers(0, 4))]
    indices = voc_like(rng, h, w, bits)
    if kind == 0:
        return pil_png(indices, "P", bits), "P"
    if kind == 1:
        return made_png(indices, 3, bits, interlace=True), "P"
    if kind == 2:
        return pil_png(voc_like(rng, h, w, 8), "L"), "L"
    return made_png(voc_like(rng, h, w, 8), 0, 8, interlace=rng.random() < 0.5), "L"


# --- identical to torchvision's path ---


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("interlace", [False, True])
def test_indices_as_pillow_gives_them(bits, interlace):
    rng = np.random.default_rng(bits * 2 + interlace)
    for h, w in [(1, 1), (1, 9), (9, 1), (7, 13), (33, 17), (64, 80)]:
        indices = voc_like(rng, h, w, bits)
        for data in (made_png(indices, 3, bits, interlace),) + (
            () if interlace else (pil_png(indices, "P", bits),)
        ):
            pillow = Image.open(io.BytesIO(data))
            assert pillow.mode == "P"
            assert np.array_equal(np.array(pillow), indices)
            assert _core.png_mask_size(data) == (h, w)
            assert np.array_equal(ours(data, *identity(h, w)), indices)


@pytest.mark.parametrize("interlace", [False, True])
def test_grey_values_as_pillow_gives_them(interlace):
    rng = np.random.default_rng(7 + interlace)
    values = rng.integers(0, 256, size=(21, 34), dtype=np.uint8)
    files = [made_png(values, 0, 8, interlace)]
    if not interlace:
        files.append(pil_png(values, "L"))
    for data in files:
        assert Image.open(io.BytesIO(data)).mode == "L"
        assert np.array_equal(ours(data, *identity(21, 34)), values)


@pytest.mark.parametrize("block", range(6))
@pytest.mark.parametrize("fill", [255, 0])
def test_through_torchvision_geometry(block, fill):
    rng = np.random.default_rng(1000 * block + fill)
    for case in range(40):
        data, mode = random_file(rng, case)
        assert Image.open(io.BytesIO(data)).mode == mode
        h, w = _core.png_mask_size(data)
        steps = random_geometry(rng, h, w, fill)
        rows, cols = index_maps(h, w, steps)
        expected = torchvision_mask(data, steps, fill)
        got = ours(data, rows, cols, fill=fill)
        assert np.array_equal(got, expected), (case, mode, steps)


def test_segmentation_preset_sizes():
    """The reference recipe's shapes: a random resize of the short side,
    pad to the crop size with 255, a random crop, a flip."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        h, w = (int(v) for v in rng.integers(180, 500, size=2))
        data = pil_png(voc_like(rng, h, w, 8), "P")
        short = int(rng.integers(260, 1040))
        oh, ow = (short, int(w * short / h)) if h <= w else (int(h * short / w), short)
        steps = [("resize", (oh, ow))]
        crop = 480
        steps.append(("pad", (0, 0, max(crop - ow, 0), max(crop - oh, 0))))
        ph, pw = max(oh, crop), max(ow, crop)
        top = int(rng.integers(0, ph - crop + 1))
        left = int(rng.integers(0, pw - crop + 1))
        steps += [("crop", (top, left, crop, crop)), ("hflip", ())]
        rows, cols = index_maps(h, w, steps)
        assert np.array_equal(
            ours(data, rows, cols), torchvision_mask(data, steps, 255)
        )


def test_indices_past_the_palette_and_tRNS_kept():
    """Pillow's array holds the stored index even past PLTE's end, and a
    tRNS chunk changes nothing."""
    rng = np.random.default_rng(3)
    indices = rng.integers(0, 256, size=(6, 9, 1), dtype=np.int64)
    data = png_bytes(indices, 3, 8, palette=np.zeros((4, 3)), trns=b"\x00\x80")
    assert np.array_equal(np.array(Image.open(io.BytesIO(data))), indices[:, :, 0])
    assert np.array_equal(ours(data, *identity(6, 9)), indices[:, :, 0])


def test_data_past_the_image_decodes_row_by_row():
    """More image data than the rows hold: the whole-stream path declines
    it and libspng decodes it, as Pillow does."""
    rng = np.random.default_rng(4)
    indices = rng.integers(0, 30, size=(12, 15, 1), dtype=np.int64)
    raw = raw_data(indices, 8, False) + b"\x00" * 40
    data = png_bytes(indices, 3, 8, palette=np.zeros((30, 3)), raw=raw)
    assert np.array_equal(np.array(Image.open(io.BytesIO(data))), indices[:, :, 0])
    rows, cols = np.array([11, 0, 5, 5, -1], np.int32), np.array([14, -1, 0], np.int32)
    assert np.array_equal(
        ours(data, rows, cols),
        np.array(
            [
                [indices[r, c, 0] if r >= 0 and c >= 0 else 255 for c in cols]
                for r in rows
            ]
        ),
    )


def test_empty_maps_and_fill_only():
    data = pil_png(np.zeros((4, 5), np.uint8), "P")
    empty = np.zeros(0, np.int32)
    assert _core.mask_from_png(data, empty, np.arange(5, dtype=np.int32)) == b""
    assert _core.mask_from_png(data, np.arange(4, dtype=np.int32), empty) == b""
    raw = _core.mask_from_png(
        data, np.full(2, -1, np.int32), np.zeros(3, np.int32), fill=7
    )
    assert raw == b"\x07" * 6
    # the default fill is 255, the segmentation presets' pad value
    raw = _core.mask_from_png(
        data, np.array([-1, 0], np.int32), np.array([0, -1], np.int32)
    )
    assert raw == b"\xff\xff\x00\xff"
    # a bad file fails with no row read as it fails with all of them
    with pytest.raises(ValueError, match="wrong CRC"):
        _core.mask_from_png(flip_byte(data, data.index(b"IDAT") + 6), empty, empty)


# --- bad input ---


def good_png():
    return pil_png(np.arange(60, dtype=np.uint8).reshape(6, 10), "P")


def with_chunk(data, kind, body):
    """data with the first `kind` chunk's data replaced (CRC made anew)."""
    at = data.index(kind) - 4
    n = struct.unpack(">I", data[at : at + 4])[0]
    return data[:at] + chunk(kind, body) + data[at + 12 + n :]


def flip_byte(data, at):
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


def ihdr_of(w, h, depth, colour, interlace=0):
    return struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, interlace)


GOOD = good_png()
IDAT_AT = GOOD.index(b"IDAT")
BAD_FILES = [
    (b"", "not a PNG file \\(0 bytes"),
    (b"\xff\xd8\xff\xe0" + b"\x00" * 40, "not a PNG file \\(44 bytes"),
    (GOOD[:8], "truncated file"),
    (GOOD[:30], "truncated file"),
    (GOOD[: IDAT_AT + 10], "truncated file"),
    (GOOD[:-12], "ends at byte .* before its IEND chunk"),
    (flip_byte(GOOD, IDAT_AT + 6), "IDAT chunk at byte .* wrong CRC"),
    (flip_byte(GOOD, 20), "IHDR chunk at byte 8 has a wrong CRC"),
    (with_chunk(GOOD, b"IDAT", b"\x78\x9c" + b"\xff" * 20), "PNG data: "),
    (with_chunk(GOOD, b"IDAT", zlib.compress(b"\x07" + b"\x00" * 10)), "PNG data: "),
    (with_chunk(GOOD, b"IHDR", ihdr_of(0, 6, 8, 3)), "PNG header: "),
    (with_chunk(GOOD, b"IHDR", ihdr_of(10, 6, 3, 3)), "PNG header: "),
    (with_chunk(GOOD, b"IHDR", ihdr_of(70000, 1, 8, 3)), "70000.*1..65535"),
]


@pytest.mark.parametrize("data, text", BAD_FILES)
def test_bad_files(data, text):
    maps = identity(6, 10)
    with pytest.raises(ValueError, match=text):
        _core.mask_from_png(data, *maps)
    if "PNG data" not in text:  # what the size read alone refuses
        with pytest.raises(ValueError, match=text):
            _core.png_mask_size(data)


@pytest.mark.parametrize(
    "colour, depth, name",
    [
        (2, 8, "RGB \\(colour type 2\\), 8-bit"),
        (2, 16, "RGB \\(colour type 2\\), 16-bit"),
        (6, 8, "RGBA \\(colour type 6\\), 8-bit"),
        (4, 8, "greyscale\\+alpha \\(colour type 4\\), 8-bit"),
        (0, 16, "greyscale \\(colour type 0\\), 16-bit"),
        (0, 1, "greyscale \\(colour type 0\\), 1-bit"),
        (0, 4, "greyscale \\(colour type 0\\), 4-bit"),
    ],
)
def test_refused_colour_types(colour, depth, name):
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    data = png_bytes(np.zeros((3, 4, channels), np.int64), colour, depth)
    for call in (
        lambda: _core.mask_from_png(data, *identity(3, 4)),
        lambda: _core.png_mask_size(data),
    ):
        with pytest.raises(
            ValueError, match=f"PNG is {name}: a mask PNG must be a palette"
        ):
            call()


def test_pillow_rgb_refused():
    buf = io.BytesIO()
    Image.new("RGB", (5, 4), (255, 0, 0)).save(buf, "PNG")
    with pytest.raises(ValueError, match="RGB .* 8-bit greyscale"):
        _core.mask_from_png(buf.getvalue(), *identity(4, 5))


def test_damage_below_the_rows_read_fails_too():
    """The outcome does not depend on the maps: a bad filter type in the
    last row fails a sample of row 0 alone, and one with no row at all."""
    indices = np.zeros((8, 6, 1), np.int64)
    raw = bytearray(raw_data(indices, 8, False, filters=(0,)))
    raw[7 * 7] = 9
    data = png_bytes(indices, 3, 8, palette=np.zeros((1, 3)), raw=bytes(raw))
    with pytest.raises(OSError):
        np.array(Image.open(io.BytesIO(data)))
    for rows in (np.zeros(1, np.int32), np.zeros(0, np.int32)):
        with pytest.raises(ValueError, match="PNG data: "):
            _core.mask_from_png(data, rows, np.arange(6, dtype=np.int32))


ROWS, COLS = identity(6, 10)


@pytest.mark.parametrize(
    "rows, cols, fill, error, text",
    [
        (np.array([0, 6], np.int32), COLS, 255, ValueError, "row map entry 1 is 6"),
        (np.array([-2], np.int32), COLS, 255, ValueError, "row map entry 0 is -2"),
        (
            ROWS,
            np.array([3, 10], np.int32),
            255,
            ValueError,
            "column map entry 1 is 10",
        ),
        (ROWS, np.array([-5], np.int32), 255, ValueError, "column map entry 0 is -5"),
        (ROWS.astype(np.int64), COLS, 255, TypeError, "row_map must be a 1-d int32"),
        (ROWS, [0, 1], 255, TypeError, "col_map must be a C-contiguous int32"),
        (ROWS, COLS, 256, ValueError, "fill must be 0..255"),
        (ROWS, COLS, -1, ValueError, "fill must be 0..255"),
        (np.zeros(70000, np.int32), COLS, 255, ValueError, "at most 65535 each"),
    ],
)
def test_bad_maps(rows, cols, fill, error, text):
    with pytest.raises(error, match=text):
        _core.mask_from_png(GOOD, rows, cols, fill=fill)


def test_bad_argument_types():
    with pytest.raises(TypeError):
        _core.mask_from_png("not bytes", ROWS, COLS)
    with pytest.raises(TypeError):
        _core.png_mask_size(12)
    assert _core.png_mask_size(bytearray(GOOD)) == (6, 10)
    assert _core.png_mask_size(memoryview(GOOD)) == (6, 10)
