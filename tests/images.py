"""Test images made on the fly with Pillow: every colour space and chroma
subsampling the decoder must handle, with photo-like content (smooth
gradients, edges and mild texture), so resampling comparisons mean
something."""

from __future__ import annotations

import io
import os

import numpy as np
from PIL import Image


def photo_like(h: int, w: int, seed: int = 0) -> np.ndarray:
    """An RGB image with smooth shading, hard edges and fine texture."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for c in range(3):
        fx, fy = rng.uniform(0.5, 4.0, 2) * 2 * np.pi
        phase = rng.uniform(0, 2 * np.pi)
        img[..., c] = 128 + 70 * np.sin(fx * x / w + phase) * np.cos(fy * y / h)
    # A few solid discs with hard edges.
    for _ in range(4):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        r = rng.uniform(0.05, 0.25) * min(h, w)
        mask = (y - cy) ** 2 + (x - cx) ** 2 < r * r
        img[mask] = rng.uniform(20, 235, 3)
    # Texture: low-amplitude noise, lightly smoothed.
    noise = rng.normal(0, 12, (h, w, 3))
    noise = (noise + np.roll(noise, 1, 0) + np.roll(noise, 1, 1)) / 3
    return np.clip(img + noise, 0, 255).astype(np.uint8)


# name -> Pillow save options (subsampling: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0)
KINDS = {
    "baseline": dict(quality=90),
    "progressive": dict(quality=85, progressive=True),
    "grayscale": dict(quality=90),
    "cmyk": dict(quality=90),
    "s444": dict(quality=90, subsampling=0),
    "s422": dict(quality=90, subsampling=1),
    "s420": dict(quality=90, subsampling=2),
    "restart": dict(quality=80, restart_marker_blocks=4),
}


def jpeg_bytes(kind: str, h: int, w: int, seed: int = 0) -> bytes:
    """A JPEG of the given kind and size."""
    rgb = Image.fromarray(photo_like(h, w, seed))
    if kind == "grayscale":
        img = rgb.convert("L")
    elif kind == "cmyk":
        img = rgb.convert("CMYK")
    else:
        img = rgb
    opts = dict(KINDS[kind])
    if "restart_marker_blocks" in opts:
        blocks = opts.pop("restart_marker_blocks")
        try:
            buf = io.BytesIO()
            img.save(buf, "JPEG", restart_marker_blocks=blocks, **opts)
            return buf.getvalue()
        except TypeError:  # older Pillow: no restart option
            pass
    buf = io.BytesIO()
    img.save(buf, "JPEG", **opts)
    return buf.getvalue()


def write_folder(
    root: str, n_per_class: int = 6, classes: int = 3, seed: int = 0
) -> str:
    """An ImageFolder of varied JPEGs (all kinds, sizes 120..700 px)."""
    rng = np.random.default_rng(seed)
    kinds = list(KINDS)
    k = 0
    for c in range(classes):
        d = os.path.join(root, f"class_{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(n_per_class):
            h, w = (int(v) for v in rng.integers(120, 700, 2))
            kind = kinds[k % len(kinds)]
            with open(os.path.join(d, f"img_{i:03d}_{kind}.jpg"), "wb") as f:
                f.write(jpeg_bytes(kind, h, w, seed=k))
            k += 1
    return root


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)
