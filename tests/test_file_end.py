"""A file is judged whole, whatever part of it a crop decodes: a JPEG
whose data ends before its EOI marker is truncated for every crop (unless
allow_truncated=True), and what follows the last scan is judged as
libjpeg-turbo, Pillow and torchvision judge it (bytes after EOI and stray
bytes before it are ignored; a marker libjpeg refuses there is an error)."""

import io
import warnings

import numpy as np
import pytest
from PIL import Image

import ringloader
from ringloader import _core
from ringloader import transforms as T

from images import jpeg_bytes

TRAIN = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip()])
EVAL = T.Compose([T.Resize(80), T.CenterCrop(64)])
N = 24


class Batches:
    """One file, each epoch one sample of it: sample i draws crop i."""

    def __init__(self, path, n):
        self.samples = [(path, i) for i in range(n)]
        self.batches = [[0]]

    def __len__(self):
        return len(self.samples)


def each_crop(path, transform, n=N, **kw):
    """The outcome of every one of n crops of the file, one epoch each:
    ("ok", image) or ("DecodeError", error)."""
    ds = Batches(path, n)
    out = []
    with ringloader.Loader(
        ds, batch_sampler=ds.batches, transform=transform, seed=4, **kw
    ) as loader:
        for i in range(n):
            ds.batches[:] = [[i]]
            try:
                ((images, _),) = list(loader)
                out.append(("ok", images[0]))
            except ringloader.DecodeError as e:
                out.append(("DecodeError", e))
        stats = loader.stats()
    return out, stats


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def pillow_decodes(data):
    try:
        Image.open(io.BytesIO(data)).load()
        return True
    except OSError:
        return False


def torchvision_decodes(data):
    tvio = pytest.importorskip("torchvision.io")
    torch = pytest.importorskip("torch")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tvio.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return True
    except RuntimeError:
        return False


# ---- item 3: truncation is an error whatever the crop ----

# A tall image, cut at 60% of its bytes: most crops need no row of the
# missing part, which is what let them through before.
SOURCES = {
    "baseline": lambda: jpeg_bytes("baseline", 480, 200, seed=1),
    "progressive": lambda: jpeg_bytes("progressive", 480, 200, seed=2),
    "restart": lambda: jpeg_bytes("restart", 480, 200, seed=3),
    "line drawing": lambda: jpeg_bytes("s420", 480, 200, seed=4, content="lines"),
}


@pytest.mark.parametrize("source", list(SOURCES))
def test_truncated_raises_whatever_the_crop(tmp_path, source):
    data = SOURCES[source]()
    for cut in (len(data) * 6 // 10, len(data) - 2):  # mid-data; only EOI lost
        path = write(tmp_path, f"cut{cut}.jpg", data[:cut])
        for transform in (TRAIN, EVAL):
            outcomes, _ = each_crop(path, transform)
            for kind, e in outcomes:
                assert kind == "DecodeError", (source, cut)
                assert e.kind == "truncated" and e.path == path
                assert "Premature end of JPEG file" in str(e)
        with pytest.raises(ringloader.DecodeError) as e:
            _core.decode(data[:cut])
        assert e.value.kind == "truncated"


@pytest.mark.parametrize("source", list(SOURCES))
def test_truncated_allowed_loads_every_crop_and_counts_it(tmp_path, source):
    data = SOURCES[source]()
    path = write(tmp_path, "cut.jpg", data[: len(data) * 6 // 10])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ringloader.DataWarning)
        outcomes, stats = each_crop(path, TRAIN, allow_truncated=True)
    assert all(kind == "ok" for kind, _ in outcomes)
    assert stats["truncated"] == N
    if source != "progressive":  # whose cut loses detail everywhere
        # The crops above the cut are the complete file's.
        full, _ = each_crop(write(tmp_path, "full.jpg", data), TRAIN)
        same = sum(np.array_equal(a[1], b[1]) for a, b in zip(outcomes, full))
        assert same >= N // 4, same


def test_truncation_check_reads_no_row(tmp_path):
    """A truncated file is refused before any row is decoded: as fast as a
    header read, not a decode (a 3200 x 2400 image, cut near its end)."""
    import time

    data = jpeg_bytes("baseline", 2400, 3200, seed=5, content="lines")
    cut = data[: len(data) - 100]
    t0 = time.perf_counter()
    _core.decode(data)
    full = time.perf_counter() - t0
    t0 = time.perf_counter()
    with pytest.raises(ringloader.DecodeError):
        _core.decode(cut)
    refused = time.perf_counter() - t0
    assert refused < full / 5, (refused, full)


# ---- item 6: what follows the last scan ----


def body(data):
    assert data.endswith(b"\xff\xd9")
    return data[:-2]


def trailers(good):
    """Files whose image data is complete, with something after it, that
    libjpeg-turbo, Pillow and torchvision all decode."""
    return {
        "text after EOI": good + b"appended by some tool\n" * 20,
        "a second image after EOI": good + good,  # MPO-like
        "junk after EOI": good + bytes([0xFF, 0x02, 0xFF, 0xD8, 0x00]) * 9,
        "stray bytes before EOI": body(good) + b"stray bytes" * 4 + b"\xff\xd9",
        "comment before EOI": body(good) + b"\xff\xfe\x00\x07hello\xff\xd9",
    }


def refused(good, progressive):
    """Garbage after the last scan that libjpeg's jpeg_finish_decompress
    refuses, and with it Pillow and torchvision (the issue's example,
    ImageMagick's SEGV-CVE-2016-5841.jpg, is of this kind)."""
    sos = good.index(b"\xff\xda")
    sof = min(good.find(bytes([0xFF, c])) % len(good) for c in (0xC0, 0xC1, 0xC2))
    cases = {
        "unknown marker": body(good) + b"\xff\x02\x00\x04ab\xff\xd9",
        "second SOI": body(good) + b"\xff\xd8\xff\xd9",
        "second SOF": body(good) + good[sof : sof + 19] + b"\xff\xd9",
        "second scan": body(good) + good[sos : sos + 14] + b"\x12\x34\xff\xd9",
    }
    if progressive:  # one more scan is only a warning in a progressive file
        del cases["second scan"]
    return cases


@pytest.mark.parametrize("kind", ["baseline", "s444", "progressive", "grayscale"])
def test_data_after_the_image_is_ignored(tmp_path, kind):
    good = jpeg_bytes(kind, 120, 96, seed=6)
    want, _ = each_crop(write(tmp_path, "good.jpg", good), TRAIN, n=6)
    ref_rgb = _core.decode(good)[0]
    for name, data in trailers(good).items():
        assert pillow_decodes(data) and torchvision_decodes(data), name
        assert _core.decode(data)[0] == ref_rgb, name
        got, _ = each_crop(write(tmp_path, "t.jpg", data), TRAIN, n=6)
        for (k, a), (_, b) in zip(got, want):
            assert k == "ok" and np.array_equal(a, b), name


@pytest.mark.parametrize("kind", ["baseline", "restart", "progressive"])
def test_garbage_refused_by_libjpeg_is_an_error_whatever_the_crop(tmp_path, kind):
    good = jpeg_bytes(kind, 480, 200, seed=7)
    for name, data in refused(good, kind == "progressive").items():
        assert not pillow_decodes(data) and not torchvision_decodes(data), name
        with pytest.raises(ringloader.DecodeError) as e:
            _core.decode(data)
        assert e.value.kind == "corrupt", name
        path = write(tmp_path, "bad.jpg", data)
        for transform in (TRAIN, EVAL):
            outcomes, _ = each_crop(path, transform, n=8)
            for k, e in outcomes:
                assert k == "DecodeError" and e.kind == "corrupt", name
                assert e.path == path


def test_garbage_without_eoi_is_truncated(tmp_path):
    """Stray bytes where the EOI marker should be: the data ends before EOI,
    which libjpeg calls premature (torchvision refuses it too)."""
    good = jpeg_bytes("baseline", 480, 200, seed=8)
    data = body(good) + b"stray bytes" * 4
    assert not torchvision_decodes(data)
    outcomes, _ = each_crop(write(tmp_path, "x.jpg", data), TRAIN)
    assert all(k == "DecodeError" and e.kind == "truncated" for k, e in outcomes)
