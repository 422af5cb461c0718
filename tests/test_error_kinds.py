"""Errors that are neither the data's nor a bug of ringloader's have their
own statuses: a configuration the user gave is a ValueError where it is
given; a fallback decoder that returns something other than (RGB bytes,
width, height) is a TypeError naming the callable and the file, an error of
that sample which skip_errors replaces like a DecodeError (the callable may
fail on some inputs only), never "ringloader internal error"."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image

import ringloader
from ringloader import _core
from ringloader import transforms as T

from images import jpeg_bytes

SPEC = T.compile_transform(T.Compose([T.Resize(32), T.CenterCrop(32)])).spec


@pytest.fixture
def files(tmp_path):
    """A JPEG, a BMP (which only the fallback decodes), another JPEG."""
    paths = []
    for i in range(3):
        p = tmp_path / f"{i}.jpg"
        if i == 1:
            out = io.BytesIO()
            Image.new("RGB", (40, 30), "red").save(out, "BMP")
            p.write_bytes(out.getvalue())
        else:
            p.write_bytes(jpeg_bytes("baseline", 48, 64, seed=i))
        paths.append(str(p))
    return paths


def rgb(data, max_pixels=None):
    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB").tobytes(), im.width, im.height


def not_a_tuple(data, max_pixels=None):
    return rgb(data, max_pixels)[0]


def short_pixels(data, max_pixels=None):
    pixels, w, h = rgb(data, max_pixels)
    return pixels[:-3], w, h


def rgba_pixels(data, max_pixels=None):
    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGBA").tobytes(), im.width, im.height


def no_pixels(data, max_pixels=None):
    return None, *rgb(data, max_pixels)[1:]


def not_a_buffer(data, max_pixels=None):
    return [0, 0, 0], *rgb(data, max_pixels)[1:]


def empty_size(data, max_pixels=None):
    return b"", 0, 0


BAD = {
    not_a_tuple: "returned no tuple",
    short_pixels: "3597 bytes for 40x30 RGB, not 3600",
    rgba_pixels: "4800 bytes for 40x30 RGB, not 3600",
    no_pixels: "no pixels for an image within max_pixels",
    not_a_buffer: "a bytes-like object is required, not 'list'",
    empty_size: "a size of 0x0",
}


@pytest.mark.parametrize("bad", list(BAD), ids=lambda f: f.__name__)
def test_a_fallback_result_of_the_wrong_shape_is_a_type_error(files, bad):
    p = _core.Pipeline(SPEC, paths=files, fallback=bad)
    try:
        p.submit([0, 1, 2], [0, 1, 2], 0)
        with pytest.raises(TypeError) as e:
            p.next(timeout=30)
    finally:
        p.close()
    text = str(e.value)
    assert text.startswith(
        f"the fallback decoder {bad.__qualname__} broke its contract ("
    )
    assert BAD[bad] in text, text
    assert text.endswith(
        "it must return (RGB bytes, width, height) (decoding " + files[1] + ")"
    )
    assert e.value.path == files[1] and e.value.index == 1


@pytest.mark.parametrize("bad", [short_pixels, no_pixels], ids=lambda f: f.__name__)
def test_skip_errors_replaces_a_sample_whose_fallback_result_is_bad(files, bad):
    p = _core.Pipeline(SPEC, paths=files, fallback=bad, skip_errors=True)
    try:
        p.submit([0, 1, 2], [0, 1, 2], 0)
        batch = p.next(timeout=30)
        ((pos, by, error),) = batch.replaced
        assert (pos, by) == (1, 2)  # the BMP, replaced by the next JPEG
        assert isinstance(error, TypeError) and BAD[bad] in str(error)
        assert p.stats()["skipped"] == 1
    finally:
        p.close()


def test_a_good_fallback_result_decodes(files):
    p = _core.Pipeline(SPEC, paths=files, fallback=rgb)
    try:
        p.submit([0, 1, 2], [0, 1, 2], 0)
        batch = p.next(timeout=30)
        assert batch.replaced == () and batch.fallback == (1,)
    finally:
        p.close()


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("out_w", 70000, "the output size must be 1..65535 a side, not 70000x32"),
        ("flip_p", 2.0, "invalid scale, ratio or flip_p"),
        ("resize_short", -1, "resize sizes must be in 0..65535"),
        ("vflip_p", 2.0, "vflip_p must be in [0, 1]"),
        ("pad_left", -1, "RandomCrop padding must be in 0..65535"),
    ],
)
def test_a_bad_configuration_is_a_value_error_at_creation(files, field, value, words):
    spec = dict(SPEC, **{field: value})
    with pytest.raises(ValueError, match=re.escape(words)):
        _core.Pipeline(spec, paths=files)


def test_a_bad_augmentation_argument_is_a_value_error_at_creation(files):
    spec = dict(SPEC, ops=[("erase", [2.0] + [0.0] * 8)])
    with pytest.raises(ValueError, match=r"erase: p must be in \[0, 1\], not 2"):
        _core.Pipeline(spec, paths=files)


def test_the_loader_still_decodes_with_pillow(files):
    class DS:
        samples = [(f, 0) for f in files]

    loader = ringloader.Loader(
        DS, batch_size=3, transform=T.Compose([T.Resize(32), T.CenterCrop(32)])
    )
    with pytest.warns(ringloader.FallbackWarning):
        ((x, _),) = list(loader)
    assert x.shape[0] == 3
