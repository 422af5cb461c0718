"""bench_detect's data: ImageNet-like JPEGs (ringloader.bench.data) with a
COCO-style instances json of random polygons, 1-6 objects an image, and
the same JPEGs as a VOC-style segmentation tree whose class masks fill
those polygons. Written once under a folder named after the image count."""

from __future__ import annotations

import json
import os
import random
import shutil

CATEGORIES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 44, 62, 63)


def coco_paths(data: str) -> tuple[str, str]:
    """(the images' root, the instances json) of a folder ``write`` made."""
    return os.path.join(data, "images"), os.path.join(data, "instances.json")


def voc_root(data: str) -> str:
    """The VOCSegmentation root of a folder ``write`` made."""
    return os.path.join(data, "voc")


def _polygon(rng: random.Random, w: int, h: int) -> list[float]:
    """A star-shaped polygon of 5-12 points inside the image."""
    import math

    n = rng.randint(5, 12)
    cx, cy = rng.uniform(0.15, 0.85) * w, rng.uniform(0.15, 0.85) * h
    r = rng.uniform(0.05, 0.35) * min(w, h)
    pts = []
    for k in range(n):
        a = 2 * math.pi * k / n
        rr = r * rng.uniform(0.5, 1.0)
        x = min(max(cx + rr * math.cos(a), 0.0), w - 1.0)
        y = min(max(cy + rr * math.sin(a), 0.0), h - 1.0)
        pts += [round(x, 2), round(y, 2)]
    return pts


def _area(pts: list[float]) -> float:
    xs, ys = pts[0::2], pts[1::2]
    n = len(xs)
    return (
        abs(sum(xs[i] * ys[(i + 1) % n] - xs[(i + 1) % n] * ys[i] for i in range(n)))
        / 2
    )


def _annotate(files: list[tuple[str, int, int]], seed: int) -> tuple[dict, dict]:
    """The instances json of ``files`` ((relpath, width, height)) and, per
    file, its objects as (category index, polygon)."""
    rng = random.Random(seed)
    images, anns, objects = [], [], {}
    for k, (rel, w, h) in enumerate(files):
        images.append({"id": k + 1, "file_name": rel, "width": w, "height": h})
        objects[rel] = []
        for _ in range(rng.randint(1, 6)):
            pts = _polygon(rng, w, h)
            xs, ys = pts[0::2], pts[1::2]
            cat = rng.randrange(len(CATEGORIES))
            objects[rel].append((cat, pts))
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": k + 1,
                    "category_id": CATEGORIES[cat],
                    "segmentation": [pts],
                    "area": round(_area(pts), 2),
                    "bbox": [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)],
                    "iscrowd": 0,
                }
            )
    cats = [{"id": c, "name": f"class_{c}", "supercategory": "x"} for c in CATEGORIES]
    return {"images": images, "annotations": anns, "categories": cats}, objects


def _write_voc(voc: str, images: str, objects: dict) -> None:
    """VOCdevkit/VOC2012 under ``voc``: each JPEG linked, its class mask
    (the polygons filled, classes 1-20, outlines 255) as a palette PNG."""
    from PIL import Image, ImageDraw

    top = os.path.join(voc, "VOCdevkit", "VOC2012")
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        os.makedirs(os.path.join(top, sub), exist_ok=True)
    palette = [(i * v) % 256 for i in range(256) for v in (37, 91, 53)]
    names = []
    for rel, objs in objects.items():
        name = os.path.splitext(rel.replace("/", "_"))[0]
        names.append(name)
        src = os.path.join(images, rel)
        os.symlink(src, os.path.join(top, "JPEGImages", name + ".jpg"))
        with Image.open(src) as im:
            size = im.size
        mask = Image.new("P", size, 0)
        draw = ImageDraw.Draw(mask)
        for cat, pts in objs:
            draw.polygon(pts, fill=1 + cat % 20, outline=255)
        mask.putpalette(palette)
        mask.save(os.path.join(top, "SegmentationClass", name + ".png"))
    with open(os.path.join(top, "ImageSets", "Segmentation", "train.txt"), "w") as f:
        f.write("".join(n + "\n" for n in names))


def write(root: str, n: int, seed: int = 0) -> str:
    """The folder root/detect-{n} (made once): images/, instances.json and
    voc/; returns its path."""
    from PIL import Image

    from ringloader.bench import data

    folder = os.path.join(os.path.abspath(root), f"detect-{n}")
    if os.path.isfile(os.path.join(folder, "done")):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    images = data.build(os.path.join(folder, "images"), n, 10, seed, progress=False)
    files = []
    for path, _ in data.scan_folder(images)[1]:
        with Image.open(path) as im:
            files.append((os.path.relpath(path, images), *im.size))
    instances, objects = _annotate(files, seed)
    with open(os.path.join(folder, "instances.json"), "w") as f:
        json.dump(instances, f)
    _write_voc(voc_root(folder), images, objects)
    open(os.path.join(folder, "done"), "w").close()
    return folder
