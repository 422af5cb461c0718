"""The one data set of the benchmarks: an ImageNet-like folder of JPEGs.

Every file is a random crop, rescale, flip and mild colour jitter of a
source photograph, encoded with the ImageNet validation set's mix: short
side 256-500 px, aspect 3:4 to 4:3 (log-uniform), quality 75-95, mostly
4:2:0 with about 3% 4:4:4 and 2% 4:2:2, 3% progressive, 2% grayscale and 1%
CMYK files. The sources are the photographs in the scikit-image wheel (no
network); without scikit-image, NumPy drawings (smooth shading, hard-edged
shapes, noise), and the folder's name and description say so. Files average
about 40 kB against ImageNet's 110 kB at the same sizes: entropy decoding
weighs less than on the real data, the pixel work (IDCT, colour conversion,
resize) the same.

The layout is torchvision's ImageFolder (``class_000/img_000000.JPEG``), the
output deterministic for a seed (and a Pillow build). A folder is built in a
temporary sibling and renamed once complete, with a marker file of its
parameters: an interrupted build is never mistaken for a finished one, and
a second call with the same parameters returns at once. Pillow is imported
only when a folder is built.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
import zlib
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["build", "demo_folder", "describe", "scan_folder", "spread", "summary"]

FORMAT_VERSION = 2
MARKER = ".ringloader-data.json"
# Markers of the two generators this one replaced: such folders are ours.
OLD_MARKERS = (".imagenet_like.json", ".ringloader-demo.json")
# Real photographs shipped inside the scikit-image wheel; the grayscale ones
# are drawn only for grayscale outputs.
COLOR_SOURCES = (
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
GRAY_SOURCES = ("camera", "coins", "moon", "grass", "gravel", "brick", "clock")
SHORT_SIDE = (256, 500)
ASPECT = (3 / 4, 4 / 3)
QUALITY = (75, 95)
P_CMYK, P_GRAY, P_PROGRESSIVE, P_444, P_422 = 0.01, 0.02, 0.03, 0.03, 0.02
JPEG_SUFFIXES = (".jpg", ".jpeg")

_sources: dict[str, Any] = {}


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise RuntimeError(
            "the benchmark data set needs Pillow to write its JPEG files: pip "
            "install pillow (or pass --data DIR, an ImageFolder of your own)"
        ) from None
    return Image


def source_kind() -> str:
    """``"photos"`` with scikit-image installed, else ``"synthetic"``."""
    try:
        import skimage.data  # noqa: F401
    except ImportError:
        return "synthetic"
    return "photos"


def _synthetic(name: str, gray: bool) -> Any:
    """A photo-like stand-in for the photograph ``name``: smooth shading,
    hard-edged shapes lit from above, sensor-like noise."""
    import numpy as np

    Image = _pillow()
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    h, w = 512, 640
    coarse = rng.integers(0, 256, (int(rng.integers(3, 7)), 5, 3), dtype=np.uint8)
    img = np.array(Image.fromarray(coarse).resize((w, h), Image.BICUBIC))
    y, x = np.ogrid[0:h, 0:w]
    for _ in range(int(rng.integers(3, 8))):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(0.05, 0.3, 2) * (h, w)
        mask = ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 < 1
        shade = 0.6 + 0.4 * np.clip((y - cy + ry) / (2 * ry), 0, 1)
        colour = (rng.uniform(10, 245, 3) * shade[..., None]).astype(np.uint8)
        np.copyto(img, np.broadcast_to(colour, img.shape), where=mask[..., None])
    noisy = img + rng.integers(-8, 9, img.shape, dtype=np.int16)
    img = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    return img.convert("L") if gray else img


def load_source(name: str) -> Any:
    """The source photograph ``name`` as a PIL image (cached per process)."""
    if name in _sources:
        return _sources[name]
    if source_kind() == "synthetic":
        img = _synthetic(name, name in GRAY_SOURCES)
    else:
        import numpy as np
        import skimage.data as sk

        if name.startswith("motorcycle_"):
            left, right, _ = sk.stereo_motorcycle()
            array = left if name == "motorcycle_left" else right
        else:
            array = getattr(sk, name)()
        img = _pillow().fromarray(np.ascontiguousarray(array))
    img.load()
    _sources[name] = img
    return img


@dataclass(frozen=True)
class ImageSpec:
    """Everything needed to render and encode one file."""

    index: int
    label: int
    source: str
    size: tuple[int, int]  # (width, height) of the output
    crop: tuple[int, int, int, int]  # box in the source
    flip: bool
    jitter: tuple[float, float, float]  # brightness, contrast, saturation
    mode: str  # "RGB", "L" or "CMYK"
    quality: int
    subsampling: Optional[int]  # Pillow's: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0
    progressive: bool

    @property
    def relpath(self) -> str:
        return f"class_{self.label:03d}/img_{self.index:06d}.JPEG"

    @property
    def kind(self) -> str:
        """The encoding in short ("420", "L-progressive"...), for the summary."""
        chroma = ("444", "422", "420")[self.subsampling or 0]
        kind = chroma if self.mode == "RGB" else self.mode
        return kind + "-progressive" if self.progressive else kind


def plan_image(index: int, label: int, seed: int) -> ImageSpec:
    """The random parameters of file ``index`` (deterministic)."""
    import numpy as np

    rng = np.random.default_rng([seed, index])
    u = rng.random()
    mode = "CMYK" if u < P_CMYK else "L" if u < P_CMYK + P_GRAY else "RGB"
    progressive = bool(rng.random() < P_PROGRESSIVE)
    subsampling = None
    if mode == "RGB":
        v = rng.random()
        subsampling = 0 if v < P_444 else 1 if v < P_444 + P_422 else 2
    quality = int(rng.integers(QUALITY[0], QUALITY[1] + 1))
    short = int(rng.integers(SHORT_SIDE[0], SHORT_SIDE[1] + 1))
    aspect = math.exp(rng.uniform(math.log(ASPECT[0]), math.log(ASPECT[1])))  # w / h
    if aspect >= 1.0:
        width, height = round(short * aspect), short
    else:
        width, height = short, round(short / aspect)
    sources = COLOR_SOURCES + GRAY_SOURCES if mode == "L" else COLOR_SOURCES
    source = sources[int(rng.integers(len(sources)))]
    sw, sh = load_source(source).size
    area = rng.uniform(0.3, 1.0) * sw * sh
    cw = math.sqrt(area * width / height)
    ch = cw * height / width
    shrink = min(1.0, sw / cw, sh / ch)
    cw, ch = max(16, int(cw * shrink)), max(16, int(ch * shrink))
    x0, y0 = int(rng.integers(0, sw - cw + 1)), int(rng.integers(0, sh - ch + 1))
    return ImageSpec(
        index=index,
        label=label,
        source=source,
        size=(width, height),
        crop=(x0, y0, x0 + cw, y0 + ch),
        flip=bool(rng.random() < 0.5),
        jitter=tuple(
            float(rng.uniform(*r)) for r in ((0.8, 1.2), (0.8, 1.2), (0.7, 1.3))
        ),
        mode=mode,
        quality=quality,
        subsampling=subsampling,
        progressive=progressive,
    )


def write_image(spec: ImageSpec, root: str) -> int:
    """Renders and encodes ``spec`` below ``root``; returns the file size."""
    from PIL import ImageEnhance

    Image = _pillow()
    img = load_source(spec.source).resize(
        spec.size, Image.Resampling.LANCZOS, box=spec.crop
    )
    if spec.flip:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    brightness, contrast, saturation = spec.jitter
    img = ImageEnhance.Brightness(img).enhance(brightness)
    img = ImageEnhance.Contrast(img).enhance(contrast)
    if img.mode == "RGB":
        img = ImageEnhance.Color(img).enhance(saturation)
    if img.mode != spec.mode:  # RGB to L or CMYK
        img = img.convert(spec.mode)
    options: dict[str, Any] = {"quality": spec.quality, "progressive": spec.progressive}
    if spec.subsampling is not None:
        options["subsampling"] = spec.subsampling
    path = os.path.join(root, spec.relpath)
    img.save(path, format="JPEG", **options)
    return os.path.getsize(path)


def _make_one(job: tuple[int, int, int, str]) -> tuple[str, int]:
    index, label, seed, root = job
    spec = plan_image(index, label, seed)
    return spec.kind, write_image(spec, root)


def _read_marker(root: str, name: str = MARKER) -> Optional[dict]:
    """The JSON marker ``name`` a generator left in ``root``, or None."""
    try:
        with open(os.path.join(root, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _progress(items: Any, total: int, enabled: bool) -> Any:
    if enabled:
        with contextlib.suppress(ImportError):
            from tqdm import tqdm

            desc = f"writing {total} JPEGs"
            return tqdm(
                items, total=total, desc=desc, unit="img", leave=False, file=sys.stderr
            )
    return items


def _write_all(jobs: list, workers: int, progress: bool) -> dict:
    counts: dict[str, int] = {}
    total = 0
    with contextlib.ExitStack() as stack:
        results: Any = map(_make_one, jobs)
        if workers > 1:
            pool = multiprocessing.get_context("spawn").Pool(workers)
            results = stack.enter_context(pool).imap(_make_one, jobs, chunksize=16)
        for kind, size in _progress(results, len(jobs), progress):
            total += size
            counts[kind] = counts.get(kind, 0) + 1
    return {"bytes": total, "kinds": dict(sorted(counts.items()))}


def build(
    out_dir: str,
    images: int = 2000,
    classes: int = 10,
    seed: int = 0,
    *,
    jobs: Optional[int] = None,
    progress: bool = True,
) -> str:
    """Builds the data set in ``out_dir`` (once) and returns its path.

    A folder built with the same parameters is returned as it is; one built
    with others is replaced; an existing directory that this function did
    not build (and is not empty) is left alone and FileExistsError raised.
    ``jobs`` worker processes write the files (default: one per CPU; the
    result does not depend on it). Raises RuntimeError naming ``pip install
    pillow`` when Pillow is missing, before anything is written.
    """
    if images < 1 or classes < 1:
        raise ValueError("images and classes must be positive")
    classes = min(classes, images)
    out_dir = os.path.abspath(out_dir)
    params = {"format": FORMAT_VERSION, "images": images, "classes": classes}
    params.update(seed=seed, source=source_kind())
    marker = _read_marker(out_dir)
    if marker is not None and marker.get("params") == params:
        return out_dir
    if marker is None and os.path.isdir(out_dir):
        entries = os.listdir(out_dir)
        if entries and not any(m in entries for m in OLD_MARKERS):
            raise FileExistsError(
                f"{out_dir} is not empty and was not built by ringloader.bench.data; "
                "choose another directory"
            )
    _pillow()
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".building-", dir=parent)
    try:
        for c in range(classes):
            os.mkdir(os.path.join(tmp, f"class_{c:03d}"))
        jobs_list = [(i, i % classes, seed, tmp) for i in range(images)]
        workers = max(1, min(jobs or os.cpu_count() or 1, images // 64 or 1))
        stats = _write_all(jobs_list, workers, progress)
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump({"params": params, **stats}, f, indent=1)
        if (_read_marker(out_dir) or {}).get("params") == params:
            shutil.rmtree(tmp)  # another process finished the same folder first
            return out_dir
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)  # ours with other parameters, or empty
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def cache_root() -> str:
    """ringloader's cache directory, as for index files."""
    import importlib

    import ringloader

    # default_cache_dir lives beside build_index, whichever module holds it.
    return importlib.import_module(
        ringloader.build_index.__module__
    ).default_cache_dir()


def demo_folder(
    images: int = 1000,
    classes: int = 10,
    seed: int = 0,
    cache_dir: Optional[str] = None,
    progress: bool = True,
) -> str:
    """The data set with these parameters in ringloader's cache directory
    (or ``cache_dir``), built on first use and reused afterwards."""
    base = cache_dir or cache_root()
    name = f"demo-v{FORMAT_VERSION}-{source_kind()}-{images}x{min(classes, images)}-seed{seed}"
    return build(os.path.join(base, name), images, classes, seed, progress=progress)


def describe(root: str) -> str:
    """How a folder was made, for a benchmark's header ("" when not ours)."""
    source = (_read_marker(root) or {}).get("params", {}).get("source")
    if source == "photos":
        return "generated from scikit-image's photographs"
    if source == "synthetic":
        return "generated with NumPy (install scikit-image for real photographs)"
    return ""


def scan_folder(root: str) -> tuple[list[str], list[tuple[str, int]]]:
    """(classes, [(path, class index)]) of the JPEGs below ``root``, in
    torchvision ImageFolder order."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    samples = []
    for label, cls in enumerate(classes):
        for dirpath, _dirs, files in sorted(os.walk(os.path.join(root, cls))):
            for f in sorted(files):
                if f.lower().endswith(JPEG_SUFFIXES):
                    samples.append((os.path.join(dirpath, f), label))
    return classes, samples


def spread(total: int, n: Optional[int]) -> list[int]:
    """Indices of ``n`` samples spread over all ``total`` (all by default)."""
    if n is None or n >= total:
        return list(range(total))
    step = total / n
    return [int(i * step) for i in range(n)]


def summary(root: str) -> str:
    """ "2000 images in 10 classes, 81.5 MB (41 kB/image): 1784 colour, ..."."""
    classes, samples = scan_folder(root)
    nbytes = sum(os.path.getsize(p) for p, _ in samples)
    kinds = (_read_marker(root) or {}).get("kinds", {})
    text = (
        f"{len(samples)} images in {len(classes)} classes, {nbytes / 1e6:.1f} MB "
        f"({nbytes / max(1, len(samples)) / 1e3:.0f} kB/image)"
    )
    if not kinds:
        return text
    return text + ": " + ", ".join(f"{v} {plain_kind(k)}" for k, v in kinds.items())


def plain_kind(kind: str) -> str:
    """An encoding as :attr:`ImageSpec.kind` names it ("420", "L-progressive"),
    in words ("colour", "grayscale progressive")."""
    base, _, progressive = kind.partition("-")
    words = {
        "420": "colour",
        "422": "colour (4:2:2, finer colour detail)",
        "444": "colour (4:4:4, full colour detail)",
        "L": "grayscale",
        "CMYK": "CMYK (print colours)",
    }.get(base, base)
    return words + (" progressive" if progressive else "")


def warm(paths: list[str]) -> None:
    """Reads every file once, so that every contender finds the page cache warm."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass
