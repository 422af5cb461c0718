"""Full-image decode against Pillow, and errors for bad input."""

import io

import numpy as np
import pytest
from PIL import Image

import ringloader
from ringloader import _core

from images import KINDS, jpeg_bytes


def pillow_rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def core_rgb(data: bytes) -> np.ndarray:
    rgb, h, w = _core.decode(data)
    return np.frombuffer(rgb, np.uint8).reshape(h, w, 3)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("size", [(64, 64), (237, 351), (480, 319)])
def test_full_decode_matches_pillow(kind, size):
    data = jpeg_bytes(kind, *size, seed=hash(kind) % 1000)
    ours, ref = core_rgb(data), pillow_rgb(data)
    assert ours.shape == ref.shape == (size[0], size[1], 3)
    diff = np.abs(ours.astype(int) - ref.astype(int))
    assert diff.max() <= 1, f"{kind}: max diff {diff.max()}"


def test_cmyk_really_is_cmyk():
    data = jpeg_bytes("cmyk", 50, 60)
    assert Image.open(io.BytesIO(data)).mode == "CMYK"
    assert Image.open(io.BytesIO(jpeg_bytes("grayscale", 50, 60))).mode == "L"
    assert Image.open(io.BytesIO(jpeg_bytes("progressive", 50, 60))).info.get(
        "progressive"
    )


def test_decode_error_is_value_error_with_libjpeg_message():
    data = jpeg_bytes("baseline", 64, 64)
    bad = data[:2] + b"\xff\xc0\x00\x03" + data[200:]  # a broken SOF
    with pytest.raises(ringloader.DecodeError) as e:
        _core.decode(bad)
    assert isinstance(e.value, ValueError)
    assert e.value.reason


def test_not_a_jpeg():
    # No native decoder claims a GIF (_core.decode has no Pillow fallback).
    with pytest.raises(ringloader.DecodeError, match="not a JPEG, PNG or WebP"):
        _core.decode(b"GIF89a" + b"\0" * 100)
    # A PNG signature goes to the PNG decoder, which names the format.
    with pytest.raises(ringloader.DecodeError, match="PNG header"):
        _core.decode(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    with pytest.raises(ringloader.DecodeError):
        _core.decode(b"")


def test_truncated_is_an_error_unless_allowed():
    data = jpeg_bytes("baseline", 200, 200)
    cut = data[: len(data) // 2]
    with pytest.raises(ringloader.DecodeError) as e:
        _core.decode(cut)
    assert e.value.kind == "truncated"
    rgb, h, w = _core.decode(cut, allow_truncated=True)
    assert (h, w) == (200, 200)


def test_pixel_limit_refuses_before_decoding():
    data = jpeg_bytes("baseline", 100, 100)
    with pytest.raises(ringloader.DecodeError) as e:
        _core.decode(data, max_pixels=100 * 100 - 1)
    assert e.value.kind == "too_big"
    _core.decode(data, max_pixels=100 * 100)


def _encoded(fmt: str, h: int, w: int) -> bytes:
    from images import photo_like

    buf = io.BytesIO()
    Image.fromarray(photo_like(h, w, seed=5)).save(buf, fmt)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize(
    "box", [(0, 0, 101, 77), (33, 17, 40, 51), (1, 1, 1, 1), (60, 40, 41, 37)]
)
def test_box_is_the_region_of_the_whole_decode(fmt, box):
    # decode(box=) decodes the region as a pipeline decodes a crop (JPEG by
    # its crop, PNG down to the box's last row, WebP with libwebp's
    # cropping), and gives the pixels of the whole decode there.
    data = _encoded(fmt, 77, 101)
    whole = core_rgb(data)
    rgb, h, w = _core.decode(data, box=box)
    left, top, bw, bh = box
    assert (h, w) == (bh, bw)
    region = np.frombuffer(rgb, np.uint8).reshape(h, w, 3)
    np.testing.assert_array_equal(region, whole[top : top + bh, left : left + bw])


@pytest.mark.parametrize(
    "box", [(0, 0, 102, 77), (-1, 0, 5, 5), (100, 76, 2, 1), (0, 0, 0, 4)]
)
def test_box_outside_the_image_is_a_value_error(box):
    data = _encoded("PNG", 77, 101)
    with pytest.raises(ValueError, match="not inside the 101x77 image"):
        _core.decode(data, box=box)
    with pytest.raises(TypeError, match="left, top, width, height"):
        _core.decode(data, box=(1, 2, 3))
