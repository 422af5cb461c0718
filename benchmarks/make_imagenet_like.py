"""Build an ImageNet-like folder of JPEG files for benchmarking ringloader.

The images are derived from real photographs bundled inside the scikit-image
wheel (no network access is needed).  Every output file is a random crop,
rescale, horizontal flip and mild colour jitter of a random source photo, so
no two files are alike, and the encoding parameters follow the mix found in
the ImageNet validation set:

* short side uniform in [256, 500] pixels, aspect ratio (log-)uniform in
  [3/4, 4/3], landscape and portrait;
* JPEG quality uniform in [75, 95];
* mostly 4:2:0 chroma subsampling, about 3% 4:4:4 and 2% 4:2:2;
* about 3% progressive, 2% grayscale and 1% CMYK files.

The source photographs are small and fairly smooth, so the files average
about 40 kB, against about 110 kB for ImageNet validation images of similar
dimensions: entropy decoding is a smaller share of the work than on the real
data set, while the pixel counts (and so the IDCT, colour conversion and
resize work) match.

The layout is the one expected by ``torchvision.datasets.ImageFolder``::

    OUT_DIR/class_000/img_000000.JPEG
    OUT_DIR/class_001/img_000001.JPEG
    ...

The output is deterministic for a given ``--seed`` (and the same Pillow /
libjpeg build).  A small JSON marker file records the parameters; calling the
builder again with the same parameters returns immediately.

Usage::

    python benchmarks/make_imagenet_like.py OUT_DIR [--images N] [--classes C] [--seed S]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from PIL import Image, ImageEnhance

__all__ = ["ImageSpec", "build", "main", "plan_image", "render", "summary"]

MARKER_NAME = ".imagenet_like.json"
"""Name of the marker file written into the output directory once complete."""

FORMAT_VERSION = 1
"""Bump when the generation procedure changes so stale folders are rebuilt."""

# Real colour photographs shipped inside the scikit-image wheel.
COLOR_SOURCES: tuple[str, ...] = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "motorcycle_left",
    "motorcycle_right",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
)
# Real grayscale photographs, used (together with the colour ones) for the
# grayscale share of the output.
GRAY_SOURCES: tuple[str, ...] = (
    "camera",
    "coins",
    "moon",
    "grass",
    "gravel",
    "brick",
    "clock",
)

SHORT_SIDE_RANGE = (256, 500)
ASPECT_RANGE = (3 / 4, 4 / 3)
QUALITY_RANGE = (75, 95)
P_CMYK = 0.01
P_GRAY = 0.02
P_PROGRESSIVE = 0.03
P_444 = 0.03
P_422 = 0.02

_T = TypeVar("_T")
_CLASS_DIR_RE = re.compile(r"^class_\d+$")
_source_cache: dict[str, Image.Image] = {}


@dataclass(frozen=True)
class ImageSpec:
    """Everything needed to render and encode one output image."""

    index: int
    label: int
    source: str
    width: int
    height: int
    crop: tuple[int, int, int, int]
    flip: bool
    brightness: float
    contrast: float
    saturation: float
    mode: str  # "RGB", "L" or "CMYK"
    quality: int
    subsampling: int | None  # Pillow value: 0=4:4:4, 1=4:2:2, 2=4:2:0
    progressive: bool

    @property
    def relpath(self) -> str:
        """Path of the output file relative to the dataset root."""
        return f"class_{self.label:03d}/img_{self.index:06d}.JPEG"


def load_source(name: str) -> Image.Image:
    """Return the bundled scikit-image photograph ``name`` as a PIL image.

    Images are cached per process.  Only files shipped inside the
    scikit-image wheel are used, so this never touches the network.
    """
    img = _source_cache.get(name)
    if img is not None:
        return img
    try:
        import skimage.data as skdata
    except ImportError as exc:  # pragma: no cover - depends on environment
        raise SystemExit(
            "scikit-image is required to build the benchmark data set: "
            "pip install scikit-image"
        ) from exc

    if name in ("motorcycle_left", "motorcycle_right"):
        left, right, _disp = skdata.stereo_motorcycle()
        array = left if name == "motorcycle_left" else right
    else:
        array = getattr(skdata, name)()
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8:
        raise ValueError(f"unexpected dtype {array.dtype} for source {name!r}")
    img = Image.fromarray(array)
    img.load()
    _source_cache[name] = img
    return img


def _source_size(name: str) -> tuple[int, int]:
    return load_source(name).size


def plan_image(index: int, label: int, seed: int) -> ImageSpec:
    """Draw the random parameters of image ``index`` (deterministic)."""
    rng = np.random.default_rng([seed, index])

    # Colour space and encoder settings.
    u = rng.random()
    if u < P_CMYK:
        mode = "CMYK"
    elif u < P_CMYK + P_GRAY:
        mode = "L"
    else:
        mode = "RGB"
    progressive = bool(rng.random() < P_PROGRESSIVE)
    subsampling: int | None = None
    if mode == "RGB":
        v = rng.random()
        subsampling = 0 if v < P_444 else 1 if v < P_444 + P_422 else 2
    quality = int(rng.integers(QUALITY_RANGE[0], QUALITY_RANGE[1] + 1))

    # Geometry: short side uniform, aspect ratio log-uniform in either
    # orientation.
    short = int(rng.integers(SHORT_SIDE_RANGE[0], SHORT_SIDE_RANGE[1] + 1))
    log_lo, log_hi = math.log(ASPECT_RANGE[0]), math.log(ASPECT_RANGE[1])
    aspect = math.exp(rng.uniform(log_lo, log_hi))  # width / height
    if aspect >= 1.0:
        height, width = short, round(short * aspect)
    else:
        width, height = short, round(short / aspect)

    # Source photograph and crop window with the output aspect ratio.
    sources = COLOR_SOURCES + GRAY_SOURCES if mode == "L" else COLOR_SOURCES
    source = sources[int(rng.integers(len(sources)))]
    sw, sh = _source_size(source)
    area = rng.uniform(0.3, 1.0) * sw * sh
    cw = math.sqrt(area * width / height)
    ch = cw * height / width
    shrink = min(1.0, sw / cw, sh / ch)
    cw, ch = max(16, int(cw * shrink)), max(16, int(ch * shrink))
    x0 = int(rng.integers(0, sw - cw + 1))
    y0 = int(rng.integers(0, sh - ch + 1))

    return ImageSpec(
        index=index,
        label=label,
        source=source,
        width=width,
        height=height,
        crop=(x0, y0, x0 + cw, y0 + ch),
        flip=bool(rng.random() < 0.5),
        brightness=float(rng.uniform(0.8, 1.2)),
        contrast=float(rng.uniform(0.8, 1.2)),
        saturation=float(rng.uniform(0.7, 1.3)),
        mode=mode,
        quality=quality,
        subsampling=subsampling,
        progressive=progressive,
    )


def render(spec: ImageSpec) -> Image.Image:
    """Produce the (not yet encoded) output image described by ``spec``."""
    img = load_source(spec.source)
    img = img.resize((spec.width, spec.height), Image.Resampling.LANCZOS, box=spec.crop)
    if spec.flip:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    img = ImageEnhance.Brightness(img).enhance(spec.brightness)
    img = ImageEnhance.Contrast(img).enhance(spec.contrast)
    if img.mode == "RGB":
        img = ImageEnhance.Color(img).enhance(spec.saturation)
    if img.mode != spec.mode:
        # Grayscale sources are only drawn for grayscale outputs, so this is
        # RGB -> L or RGB -> CMYK.
        img = img.convert(spec.mode)
    return img


def write_image(spec: ImageSpec, root: Path) -> int:
    """Render and encode ``spec`` below ``root``; return the file size."""
    path = root / spec.relpath
    kwargs: dict[str, object] = {
        "quality": spec.quality,
        "progressive": spec.progressive,
    }
    if spec.subsampling is not None:
        kwargs["subsampling"] = spec.subsampling
    render(spec).save(path, format="JPEG", **kwargs)
    return path.stat().st_size


def _kind(spec: ImageSpec) -> str:
    """Short description of the encoding of ``spec`` (for statistics)."""
    kind = (
        spec.mode
        if spec.mode != "RGB"
        else ("444", "422", "420")[spec.subsampling or 0]
    )
    return kind + "-progressive" if spec.progressive else kind


def _make_one(job: tuple[int, int, int, str]) -> tuple[str, int]:
    """Plan and write one image; returns ``(kind, file size)``."""
    index, label, seed, root = job
    spec = plan_image(index, label, seed)
    return _kind(spec), write_image(spec, Path(root))


def _progress(items: Iterable[_T], total: int) -> Iterator[_T]:
    """Wrap ``items`` in a tqdm progress bar, or print coarse progress."""
    try:
        from tqdm import tqdm
    except ImportError:
        step = max(1, total // 10)
        for i, item in enumerate(items, 1):
            yield item
            if i % step == 0 or i == total:
                print(f"  {i}/{total} images", file=sys.stderr, flush=True)
        return
    yield from tqdm(items, total=total, unit="img", desc="building", file=sys.stderr)


def _params(images: int, classes: int, seed: int) -> dict[str, int]:
    return {
        "format": FORMAT_VERSION,
        "images": images,
        "classes": classes,
        "seed": seed,
    }


def _read_marker(root: Path) -> dict[str, object] | None:
    try:
        return json.loads((root / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None


def _clear_previous(root: Path, *, has_marker: bool) -> None:
    """Remove an earlier data set from ``root``, refusing to touch other files."""
    if not root.exists():
        return
    entries = [p for p in root.iterdir() if p.name != MARKER_NAME]
    ours = [p for p in entries if p.is_dir() and _CLASS_DIR_RE.match(p.name)]
    if not has_marker and len(ours) != len(entries):
        raise FileExistsError(
            f"{root} is not empty and was not built by this script; "
            "choose another directory"
        )
    (root / MARKER_NAME).unlink(missing_ok=True)
    for p in ours:
        shutil.rmtree(p)


def build(
    out_dir: str | os.PathLike[str],
    images: int = 2000,
    classes: int = 10,
    seed: int = 0,
    *,
    jobs: int | None = None,
    quiet: bool = False,
) -> str:
    """Build the data set in ``out_dir`` and return its path as a string.

    If ``out_dir`` already holds a complete data set built with the same
    parameters (recorded in a JSON marker file) nothing is done.  A data set
    with other parameters is replaced; a non-empty directory that was not
    produced by this script is left untouched and an error is raised.

    ``jobs`` worker processes are used (default: one per CPU); the result does
    not depend on it.  ``quiet`` suppresses the progress bar.
    """
    if images < 1 or classes < 1:
        raise ValueError("images and classes must be positive")
    if classes > images:
        raise ValueError("need at least one image per class")
    root = Path(out_dir)
    params = _params(images, classes, seed)

    marker = _read_marker(root)
    if marker is not None and marker.get("params") == params:
        return str(root)
    _clear_previous(root, has_marker=marker is not None)
    root.mkdir(parents=True, exist_ok=True)
    for c in range(classes):
        (root / f"class_{c:03d}").mkdir(exist_ok=True)

    jobs_list = [(i, i % classes, seed, str(root)) for i in range(images)]
    workers = max(1, min(jobs or os.cpu_count() or 1, images // 64 or 1))
    counts: dict[str, int] = {}
    total_bytes = 0
    with contextlib.ExitStack() as stack:
        if workers > 1:
            pool = stack.enter_context(
                multiprocessing.get_context("spawn").Pool(workers)
            )
            results: Iterable[tuple[str, int]] = pool.imap(
                _make_one, jobs_list, chunksize=16
            )
        else:
            results = map(_make_one, jobs_list)
        for kind, size in results if quiet else _progress(results, images):
            total_bytes += size
            counts[kind] = counts.get(kind, 0) + 1

    marker_data = {
        "params": params,
        "bytes": total_bytes,
        "kinds": dict(sorted(counts.items())),
    }
    tmp = root / (MARKER_NAME + ".tmp")
    tmp.write_text(json.dumps(marker_data, indent=2) + "\n")
    tmp.replace(root / MARKER_NAME)
    return str(root)


def summary(out_dir: str | os.PathLike[str]) -> str:
    """One-line description of the data set in ``out_dir``."""
    root = Path(out_dir)
    files = [p for p in root.glob("class_*/*.JPEG") if p.is_file()]
    nbytes = sum(p.stat().st_size for p in files)
    ndirs = sum(1 for p in root.iterdir() if p.is_dir() and _CLASS_DIR_RE.match(p.name))
    marker = _read_marker(root) or {}
    kinds = marker.get("kinds", {})
    kinds_txt = (
        ", ".join(f"{k}: {v}" for k, v in kinds.items())
        if isinstance(kinds, dict)
        else ""
    )
    return (
        f"{root}: {len(files)} images in {ndirs} classes, {nbytes / 1e6:.1f} MB "
        f"({nbytes / max(1, len(files)) / 1e3:.0f} kB/image) [{kinds_txt}]"
    )


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="output directory (ImageFolder layout)")
    parser.add_argument(
        "--images", type=int, default=2000, help="total number of images"
    )
    parser.add_argument(
        "--classes", type=int, default=10, help="number of class folders"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--jobs", type=int, default=None, help="worker processes (default: one per CPU)"
    )
    args = parser.parse_args(argv)
    try:
        build(
            args.out_dir,
            images=args.images,
            classes=args.classes,
            seed=args.seed,
            jobs=args.jobs,
        )
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summary(args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
