"""The built-in data set of ``python -m ringloader bench``: an ImageFolder of
photo-like JPEGs written once into a cache directory, without network.

With scikit-image installed, every file is a random crop, rescale and flip
of one of the real photographs its wheel ships; without it, images are drawn
with NumPy (smooth shading, hard-edged shapes, sensor-like noise). Either
way the files look like ImageNet's to a decoder: short side 256-500 px,
aspect 3:4 to 4:3, quality 75-95, mostly 4:2:0 chroma subsampling with a few
4:4:4, progressive and grayscale files. Pillow writes the JPEGs.

The folder is named after its parameters and marked complete only once
every file is written (it is built in a temporary sibling and renamed), so
an interrupted build is never mistaken for a finished one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from typing import Any, Optional

import numpy as np

__all__ = ["cache_root", "demo_folder"]

VERSION = 1
MARKER = ".ringloader-demo.json"
# Colour photographs bundled inside the scikit-image wheel.
PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
)


def cache_root() -> str:
    """The cache directory, as for index files (see
    :func:`ringloader.index.default_cache_dir`)."""
    from .index import default_cache_dir

    return default_cache_dir()


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise RuntimeError(
            "the built-in benchmark data set needs Pillow to write its JPEG "
            "files: pip install pillow (or pass --data DIR, an ImageFolder "
            "of your own)"
        ) from None
    return Image


def _photos() -> list[np.ndarray]:
    """The scikit-image photographs available offline (empty without
    scikit-image)."""
    try:
        import skimage.data as data
    except ImportError:
        return []
    out = []
    for name in PHOTOS:
        try:
            out.append(np.ascontiguousarray(getattr(data, name)()))
        except Exception:  # not in this version's wheel, or needs a download
            continue
    return [a for a in out if a.dtype == np.uint8 and a.ndim == 3]


def _synthetic(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A photo-like RGB image: smooth shading, hard-edged shapes, noise."""
    Image = _pillow()
    coarse = rng.integers(
        0, 256, (int(rng.integers(3, 7)), int(rng.integers(3, 7)), 3), dtype=np.uint8
    )
    img = np.array(Image.fromarray(coarse).resize((w, h), Image.BICUBIC))
    y, x = np.ogrid[0:h, 0:w]
    for _ in range(int(rng.integers(2, 6))):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(0.05, 0.3, 2) * (h, w)
        mask = ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 < 1
        shade = 0.6 + 0.4 * np.clip((y - cy + ry) / (2 * ry), 0, 1)  # lit from above
        colour = (rng.uniform(10, 245, 3) * shade[..., None]).astype(np.uint8)
        np.copyto(img, np.broadcast_to(colour, img.shape), where=mask[..., None])
    # Sensor-like noise, drawn small and tiled so it costs little.
    noise = rng.integers(-8, 9, (64, 64, 3), dtype=np.int16)
    reps = (-(-h // 64), -(-w // 64), 1)
    noisy = img + np.tile(noise, reps)[:h, :w]
    return np.clip(noisy, 0, 255).astype(np.uint8)


def _render(i: int, seed: int, photos: list[np.ndarray], path: str) -> None:
    Image = _pillow()
    rng = np.random.default_rng([seed, i])
    short = int(rng.integers(256, 501))
    aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))  # w / h
    if aspect >= 1:
        h, w = short, round(short * aspect)
    else:
        h, w = round(short / aspect), short
    if photos:
        src = photos[int(rng.integers(len(photos)))]
        sh, sw = src.shape[:2]
        area = rng.uniform(0.3, 1.0) * sh * sw
        cw = min(sw, int(math.sqrt(area * w / h)))
        ch = min(sh, int(cw * h / w))
        top, left = int(rng.integers(0, sh - ch + 1)), int(rng.integers(0, sw - cw + 1))
        img = Image.fromarray(src[top : top + ch, left : left + cw]).resize(
            (w, h), Image.BILINEAR
        )
    else:
        img = Image.fromarray(_synthetic(rng, h, w))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    options: dict[str, Any] = {"quality": int(rng.integers(75, 96))}
    u = rng.random()
    if u < 0.02:
        img = img.convert("L")
    else:
        options["subsampling"] = 0 if u < 0.06 else 2  # 4:4:4 or 4:2:0
    if rng.random() < 0.03:
        options["progressive"] = True
    img.save(path, "JPEG", **options)


def demo_folder(
    images: int = 1000,
    classes: int = 10,
    seed: int = 0,
    cache_dir: Optional[str] = None,
    progress: bool = True,
) -> str:
    """The path of the demo ImageFolder with ``images`` files in
    ``classes`` classes, written on first use (a few seconds per thousand
    images) and reused afterwards.

    Raises RuntimeError naming ``pip install pillow`` when Pillow is
    missing, OSError when the cache directory cannot be written.
    """
    if images < 1 or classes < 1:
        raise ValueError("images and classes must be positive")
    classes = min(classes, images)
    photos = _photos()
    kind = "photos" if photos else "synthetic"
    base = cache_dir or cache_root()
    root = os.path.join(base, f"demo-v{VERSION}-{kind}-{images}x{classes}-seed{seed}")
    if os.path.exists(os.path.join(root, MARKER)):
        return root
    _pillow()
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".demo-", dir=base)
    try:
        for c in range(classes):
            os.makedirs(os.path.join(tmp, f"class_{c:03d}"))
        bar = _progress(images, f"writing {images} JPEGs", progress)
        for i in range(images):
            path = os.path.join(tmp, f"class_{i % classes:03d}", f"img_{i:06d}.JPEG")
            _render(i, seed, photos, path)
            bar.update(1)
        bar.close()
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump(
                {
                    "version": VERSION,
                    "images": images,
                    "classes": classes,
                    "seed": seed,
                    "source": kind,
                },
                f,
            )
        try:
            os.rename(tmp, root)
        except OSError:  # another process finished the same folder first
            if not os.path.exists(os.path.join(root, MARKER)):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def describe(root: str) -> str:
    """How a demo folder was made, for the benchmark's header."""
    try:
        with open(os.path.join(root, MARKER)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return ""
    if meta.get("source") == "photos":
        return "generated from scikit-image's photographs"
    return "generated with NumPy (install scikit-image for real photographs)"


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit="img", leave=False)
