"""Test images made on the fly with Pillow: every colour space and chroma
subsampling the decoder must handle, with photo-like content (smooth
gradients, edges and mild texture), so resampling comparisons mean
something; and the content photos lack, which real datasets hold too: line
drawings, screenshots and fine textures, whose detail sits at the highest
frequencies, where DCT-scaled decoding and resampling differ most."""

from __future__ import annotations

import contextlib
import io
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFont


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


def line_drawing(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Dark strokes 1-3 px wide on white, and hatching: a diagram."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    for _ in range(max(8, h * w // 6000)):
        x0, x1 = rng.integers(0, w, 2)
        y0, y1 = rng.integers(0, h, 2)
        ink = tuple(int(v) for v in rng.integers(0, 90, 3))
        shape = rng.integers(0, 3)
        if shape == 0:
            d.line([(x0, y0), (x1, y1)], fill=ink, width=int(rng.integers(1, 4)))
        elif shape == 1:
            box = [min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)]
            d.ellipse(box, outline=ink, width=int(rng.integers(1, 3)))
        else:  # a hatched rectangle
            x0, x1 = sorted((x0, x1))
            y0, y1 = sorted((y0, y1))
            d.rectangle([x0, y0, x1, y1], outline=ink)
            for x in range(x0, x1, int(rng.integers(3, 7))):
                d.line([(x, y0), (x, y1)], fill=ink)
    return np.asarray(img)


def screenshot(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Flat panels with 1 px borders and lines of small text: a screen."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (w, h), (240, 240, 240))
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=int(rng.integers(11, 15)))
    y = 0
    while y < h:
        ph = int(rng.integers(40, 200))
        fill = tuple(int(v) for v in rng.integers(180, 256, 3))
        d.rectangle([4, y + 2, w - 5, y + ph - 2], fill=fill, outline=(90, 90, 90))
        for ty in range(y + 6, y + ph - 16, 16):
            words = " ".join(
                "".join(chr(c) for c in rng.integers(97, 123, rng.integers(2, 9)))
                for _ in range(w // 40)
            )
            d.text((10, ty), words, fill=(20, 20, 20), font=font)
        y += ph
    return np.asarray(img)


def texture(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Fine periodic detail over the whole image (a fabric, a grating):
    periods of 2.5 to 8 px in several directions, and grain."""
    rng = np.random.default_rng(seed)
    y = np.arange(h, dtype=np.float32)[:, None]
    x = np.arange(w, dtype=np.float32)[None, :]
    img = np.full((h, w, 3), 128.0, np.float32)
    for _ in range(4):
        angle = rng.uniform(0, np.pi)
        period = rng.uniform(2.5, 8.0)
        phase = (2 * np.pi / period) * (x * np.cos(angle) + y * np.sin(angle))
        amp = rng.uniform(15, 35, 3).astype(np.float32)
        img += amp * np.sin(phase, dtype=np.float32)[..., None]
    img += rng.normal(0, 10, (h, w, 3)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


# content name -> generator of an h x w RGB array
CONTENTS = {
    "photo": photo_like,
    "lines": line_drawing,
    "screen": screenshot,
    "texture": texture,
}


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


def jpeg_bytes(
    kind: str, h: int, w: int, seed: int = 0, content: str = "photo"
) -> bytes:
    """A JPEG of the given kind and size, photo-like unless content names
    another entry of CONTENTS."""
    rgb = Image.fromarray(CONTENTS[content](h, w, seed))
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


def png_bytes(h: int, w: int, seed: int = 0) -> bytes:
    """A photo-like RGB PNG."""
    buf = io.BytesIO()
    Image.fromarray(photo_like(h, w, seed)).save(buf, "PNG")
    return buf.getvalue()


def mixed_images(n: int) -> list[bytes]:
    """n encoded images of sizes that differ: every third a PNG, the others
    baseline JPEGs (what a table of encoded images, such as a Hugging Face
    data set's image column, holds)."""
    return [
        png_bytes(30 + i, 44 + i, i)
        if i % 3 == 0
        else jpeg_bytes("baseline", 50 + i, 40 + 2 * i, seed=i)
        for i in range(n)
    ]


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


def write_jpegs(root, name: str, n: int, seed: int = 0, bad: int = -1) -> list[str]:
    """n small JPEGs root/{name}{i}.jpg (a few dozen pixels, each size its
    own), their paths in order; the one at index ``bad`` is not a JPEG."""
    paths = []
    for i in range(n):
        path = os.path.join(str(root), f"{name}{i}.jpg")
        with open(path, "wb") as f:
            f.write(
                b"\xff\xd8\xff\xe0 not a JPEG"
                if i == bad
                else jpeg_bytes("baseline", 24 + i, 20 + i, seed=seed + i)
            )
        paths.append(path)
    return paths


def labelled_jpegs(root, n: int) -> tuple[list[str], np.ndarray, list[str]]:
    """(n JPEG files root/img{i:02d}.jpg, each of its own size, their
    labels, their captions). The labels are a permutation of 0..n-1 (7
    prime to n): a sample read twice or missed shows in an epoch's."""
    files = []
    for i in range(n):
        path = os.path.join(str(root), f"img{i:02d}.jpg")
        with open(path, "wb") as f:
            f.write(jpeg_bytes("baseline", 40 + i, 36 + 2 * i, seed=i))
        files.append(path)
    labels = np.array([(7 * i) % n for i in range(n)])
    assert sorted(labels.tolist()) == list(range(n))
    return files, labels, [f"caption {i}" for i in range(n)]


@contextlib.contextmanager
def opened_rows(files: list[str], labels: np.ndarray, captions: list[str]):
    """Rows {"image": the file as Pillow opens it, "label", "caption"}
    (what a writer that keeps an opened JPEG's own bytes is given), the
    images closed after."""
    opened = [Image.open(p) for p in files]
    try:
        yield [
            {"image": im, "label": int(y), "caption": c}
            for im, y, c in zip(opened, labels, captions)
        ]
    finally:
        for im in opened:
            im.close()


def some_as_png(files: list[str], root) -> list[str]:
    """``files`` with every third one (from the first) replaced by a PNG
    of its own size, root/img{i:02d}.png."""
    paths = list(files)
    for i in range(0, len(paths), 3):
        paths[i] = os.path.join(str(root), f"img{i:02d}.png")
        with open(paths[i], "wb") as f:
            f.write(png_bytes(30 + i, 44 + i, i))
    return paths


def labelled_data(root, n: int, write_rows):
    """(the files, labels and captions of :func:`labelled_jpegs`, a
    function ``write(name, **kw)`` that writes them as a folder
    root/name: ``write_rows(folder, rows, **kw)`` given the
    :func:`opened_rows` of them)."""
    files, labels, captions = labelled_jpegs(root, n)

    def write(name, **kw):
        with opened_rows(files, labels, captions) as rows:
            return write_rows(os.path.join(str(root), name), rows, **kw)

    return files, labels, captions, write


def write_png_jpeg(d, sizes) -> list[str]:
    """A file of each (h, w) in d, PNG (decoded exactly) and baseline JPEG
    in turn; their paths."""
    paths = []
    for i, (h, w) in enumerate(sizes):
        if i % 2:
            p = d / f"{i:02d}.jpg"
            p.write_bytes(jpeg_bytes("baseline", h, w, seed=i))
        else:
            p = d / f"{i:02d}.png"
            p.write_bytes(png_bytes(h, w, seed=i))
        paths.append(str(p))
    return paths


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)
