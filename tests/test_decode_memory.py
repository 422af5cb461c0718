"""What the decode threads keep between images (decode.h's rl_decode_buf):
after one very large image among small ones, a thread's decoder buffers
shrink back within two windows of RL_DECODE_TRIM_IMAGES (32) images,
instead of holding the large image's pixels for the pipeline's life.
Seen from stats()["decode_buffer_bytes"] and from the process's resident
memory, on real JPEG, PNG and WebP files."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from PIL import Image

import ringloader
from ringloader import transforms as T

# 4000 x 3000 in RGBX is 48 MB: one buffer alone is over glibc's largest
# mmap threshold (32 MiB), so freeing it unmaps it and resident memory
# shows the difference.
BIG = (4000, 3000)
BIG_BYTES = BIG[0] * BIG[1] * 4
SMALL = 64
# Enough small images for two windows to pass after the big one.
N_SMALL = 2 * 32 + 8
FORMATS = {
    "jpeg": dict(format="JPEG", quality=90),
    "png": dict(format="PNG", compress_level=1),
    "webp": dict(format="WEBP", quality=80, method=0),
}


def write_set(root, fmt: str) -> None:
    """One big image (sorted first), then N_SMALL small ones, as files."""
    d = root / "c"
    d.mkdir(parents=True)
    ext = {"jpeg": "jpg", "png": "png", "webp": "webp"}[fmt]
    w, h = BIG
    yy, xx = np.mgrid[0:h, 0:w]
    big = np.stack([xx % 256, yy % 256, (xx + yy) % 256], -1).astype(np.uint8)
    Image.fromarray(big).save(d / f"a_big.{ext}", **FORMATS[fmt])
    rng = np.random.default_rng(0)
    for i in range(N_SMALL):
        px = rng.integers(0, 256, (SMALL, SMALL, 3), dtype=np.uint8)
        Image.fromarray(px).save(d / f"b_{i:03d}.{ext}", **FORMATS[fmt])


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_big_image_memory_is_given_back(tmp_path, fmt):
    write_set(tmp_path, fmt)
    # Nearest resampling decodes every pixel of the box at full scale (no
    # DCT scaling for JPEG either): the big image's whole 48 MB region.
    tf = T.Resize((32, 32), interpolation="nearest")
    ds = ringloader.ImageFolder(str(tmp_path))
    assert len(ds) == 1 + N_SMALL
    with ringloader.Loader(
        ds, batch_size=1, num_threads=1, prefetch=2, transform=tf
    ) as loader:
        it = iter(loader)
        first, _ = next(it)
        assert first.shape == (1, 3, 32, 32)
        # The big image was decoded, then at most a few small ones: the
        # thread still holds its region (nearly all of the image: the
        # nearest samples span it but for a few edge pixels).
        held = loader.stats()["decode_buffer_bytes"]
        assert held >= BIG_BYTES * 0.9, held
        gc.collect()
        with_big = rss()
        n = 1 + sum(1 for _ in it)
        assert n == 1 + N_SMALL
        held_after = loader.stats()["decode_buffer_bytes"]
        gc.collect()
        after = rss()
    # What small images need: kilobytes, not the big one's megabytes.
    assert held_after < 1 << 20, (held, held_after)
    # And the memory went back to the system, not only out of the count.
    assert with_big - after >= BIG_BYTES // 2, (with_big, after)
