"""Writes the fuzzer's seed corpus: valid and odd JPEGs made with Pillow.

Each file is an 8-byte header that fuzz_decode.c reads as the transform
choice (kind, output size, resize, flip, layout, sample index), followed by
a JPEG. The JPEGs cover every subsampling, progressive, grayscale, CMYK,
restart markers, tiny and odd sizes, EXIF and ICC segments, and truncated
or header-only files, so the fuzzer starts from every decoder path.

Usage: python3 make_corpus.py OUT_DIR
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image


def image(h: int, w: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(w - 1, 1) + y * 127 // max(h - 1, 1)) % 256
    noise = rng.integers(0, 40, (h, w, 3))
    rgb = np.clip(base[..., None] + noise - 20, 0, 255).astype(np.uint8)
    return Image.fromarray(rgb)


def jpeg(img: Image.Image, **opts) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", **opts)
    return buf.getvalue()


def icc_profile() -> bytes:
    try:
        from PIL import ImageCms

        return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    except ImportError:  # Pillow built without littleCMS
        return b"\0" * 600


def exif() -> bytes:
    e = Image.Exif()
    e[0x0112] = 6  # orientation
    e[0x010F] = "ringloader"
    return e.tobytes()


def cjpeg_411(img: Image.Image) -> list[bytes]:
    """4:1:1 (4x1 luma sampling), which Pillow cannot write; made with
    libjpeg-turbo's cjpeg when it is installed, else left out."""
    if shutil.which("cjpeg") is None:
        return []
    ppm = io.BytesIO()
    img.save(ppm, "PPM")
    out = []
    for args in (["-sample", "4x1"], ["-sample", "4x1", "-progressive"]):
        proc = subprocess.run(
            ["cjpeg", *args], input=ppm.getvalue(), capture_output=True, check=True
        )
        out.append(proc.stdout)
    return out


def seeds() -> list[bytes]:
    out = []
    sizes = [(1, 1), (8, 8), (16, 16), (17, 23), (31, 7), (64, 48), (130, 97)]
    for i, (h, w) in enumerate(sizes):
        img = image(h, w, i)
        for sub in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
            out.append(jpeg(img, quality=90, subsampling=sub))
        out.append(jpeg(img, quality=75, progressive=True))
        out.append(jpeg(img.convert("L"), quality=90))
        out.append(jpeg(img.convert("CMYK"), quality=90))
    img = image(100, 140, 99)
    out.append(jpeg(img, quality=80, restart_marker_blocks=2))
    out.append(jpeg(img, quality=80, restart_marker_rows=1))
    out.append(jpeg(img, quality=85, progressive=True, subsampling=2))
    out.append(jpeg(img.convert("L"), quality=85, progressive=True))
    out.append(jpeg(img.convert("CMYK"), quality=85, progressive=True))
    out.append(jpeg(img, quality=95, exif=exif(), icc_profile=icc_profile()))
    out.append(jpeg(img, quality=1))
    out.append(jpeg(img, quality=100, optimize=True))
    out.append(jpeg(image(33, 65, 5), quality=90, subsampling=2))
    out.extend(cjpeg_411(image(40, 72, 6)))
    # Odd files: truncated at several points, header only, and EOI only.
    whole = jpeg(img, quality=85)
    prog = jpeg(img, quality=85, progressive=True)
    for frac in (0.1, 0.5, 0.9):
        out.append(whole[: int(len(whole) * frac)])
        out.append(prog[: int(len(prog) * frac)])
    sos = whole.find(b"\xff\xda")
    out.append(whole[:sos])
    out.append(whole[: sos + 14])
    out.append(b"\xff\xd8\xff\xd9")
    return out


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else "seeds"
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    n = 0
    for data in seeds():
        # Two headers per JPEG: one resize/crop, one random crop.
        for kind in (0, 1):
            head = bytearray(rng.integers(0, 256, 8, dtype=np.uint8).tobytes())
            head[0] = (head[0] & ~1) | kind
            blob = bytes(head) + data
            name = hashlib.sha1(blob).hexdigest()
            with open(os.path.join(root, name), "wb") as f:
                f.write(blob)
            n += 1
    print(f"{n} seeds in {root}")


if __name__ == "__main__":
    main()
