"""Detection and segmentation datasets written on the fly: a COCO-style
folder (JPEG images and an instances json with random polygons, crowd RLEs
compressed and as counts lists, images without annotations) and a
VOC-style tree (JPEGImages, SegmentationClass palette PNGs, Annotations
XML, ImageSets)."""

from __future__ import annotations

import json
import os

import numpy as np
from PIL import Image

CATEGORIES = [1, 2, 3, 5, 8, 13, 21]

VOC_NAMES = ["aeroplane", "bicycle", "bird", "boat", "car", "cat", "dog", "person"]


def _jpeg(path: str, h: int, w: int, rng: np.random.Generator) -> None:
    pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=80)


def _polygon(rng: np.random.Generator, h: int, w: int) -> list[float]:
    """3-8 points, some outside the image, some on whole or half pixels."""
    n = int(rng.integers(3, 9))
    cx, cy = rng.uniform(0, w), rng.uniform(0, h)
    r = rng.uniform(1, max(h, w) / 2)
    xs = cx + rng.uniform(-r, r, n)
    ys = cy + rng.uniform(-r, r, n)
    pts = np.stack([xs, ys], axis=1).ravel()
    kind = rng.random()
    if kind < 0.2:
        pts = np.round(pts)
    elif kind < 0.35:
        pts = np.round(pts) + 0.5
    else:
        pts = np.round(pts, 2)
    return [float(v) for v in pts]


def _rle(rng: np.random.Generator, h: int, w: int, compressed: bool) -> dict:
    from pycocotools import mask as coco_mask

    m = np.zeros((h, w), dtype=np.uint8)
    for _ in range(int(rng.integers(1, 4))):
        y0, x0 = int(rng.integers(0, h)), int(rng.integers(0, w))
        m[y0 : y0 + int(rng.integers(1, h)), x0 : x0 + int(rng.integers(1, w))] = 1
    enc = coco_mask.encode(np.asfortranarray(m))
    if compressed:
        return {"size": [h, w], "counts": enc["counts"].decode("ascii")}
    # The counts list of the same mask: the runs of the column-major pixels.
    flat = m.ravel(order="F")
    edges = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat[0] == 1:
        runs = [0, *runs]
    return {"size": [h, w], "counts": [int(v) for v in runs]}


def _bbox(rng: np.random.Generator, h: int, w: int) -> list:
    x, y = rng.uniform(0, w - 1), rng.uniform(0, h - 1)
    bw, bh = rng.uniform(0.5, w - x), rng.uniform(0.5, h - y)
    if rng.random() < 0.15:
        # all whole numbers written as JSON integers
        return [int(x), int(y), max(1, int(bw)), max(1, int(bh))]
    return [round(float(v), 2) for v in (x, y, bw, bh)]


def coco_json(
    n_images: int, seed: int = 0, *, sizes: list[tuple[int, int]] | None = None
) -> dict:
    """An instances json: 1-6 annotations an image, every fifth image none;
    a crowd annotation an RLE (compressed or a counts list)."""
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    ann_id = 1000
    for k in range(n_images):
        h, w = (
            sizes[k] if sizes else (int(rng.integers(8, 48)), int(rng.integers(8, 48)))
        )
        image_id = 7 * k + 3
        images.append(
            {
                "id": image_id,
                "file_name": f"img/{image_id:06d}.jpg",
                "height": h,
                "width": w,
            }
        )
        count = 0 if k % 5 == 4 else int(rng.integers(1, 7))
        for _ in range(count):
            crowd = rng.random() < 0.2
            if crowd:
                seg = _rle(rng, h, w, compressed=rng.random() < 0.5)
            else:
                seg = [_polygon(rng, h, w) for _ in range(int(rng.integers(1, 4)))]
            area = (
                float(round(rng.uniform(1, h * w), 3))
                if rng.random() < 0.8
                else int(rng.integers(1, h * w))
            )
            annotations.append(
                {
                    "id": ann_id,
                    "image_id": image_id,
                    "category_id": int(rng.choice(CATEGORIES)),
                    "bbox": _bbox(rng, h, w),
                    "area": area,
                    "iscrowd": int(crowd),
                    "segmentation": seg,
                }
            )
            ann_id += int(rng.integers(1, 4))
    # annotations not grouped by image: the order within an image is kept
    order = rng.permutation(len(annotations))
    shuffled = [annotations[i] for i in order]
    categories = [{"id": c, "name": f"c{c}", "supercategory": "x"} for c in CATEGORIES]
    return {"images": images, "annotations": shuffled, "categories": categories}


def write_coco(
    root, n_images: int, seed: int = 0, data: dict | None = None
) -> tuple[str, str]:
    """The images and the json under root: (image root, json path)."""
    data = coco_json(n_images, seed) if data is None else data
    rng = np.random.default_rng(seed + 1)
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    for image in data["images"]:
        if "file_name" in image:
            _jpeg(
                os.path.join(root, image["file_name"]),
                image["height"],
                image["width"],
                rng,
            )
    ann = os.path.join(root, "instances.json")
    with open(ann, "w") as f:
        json.dump(data, f)
    return str(root), ann


def _palette() -> list[int]:
    pal = []
    for i in range(256):
        pal += [(i * 37) % 256, (i * 91) % 256, (i * 53) % 256]
    return pal


def _voc_xml(name: str, h: int, w: int, objects: list[tuple]) -> str:
    parts = [
        "<annotation>",
        "<folder>VOC2012</folder>",
        f"<filename>{name}.jpg</filename>",
        f"<size><width>{w}</width><height>{h}</height><depth>3</depth></size>",
    ]
    for label, box, difficult in objects:
        xmin, ymin, xmax, ymax = box
        parts.append(
            f"<object><name>{label}</name><pose>Unspecified</pose><truncated>0</truncated>"
            f"<difficult>{difficult}</difficult><bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin>"
            f"<xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox></object>"
        )
    parts.append("</annotation>")
    return "\n".join(parts)


def write_voc(root, n: int, seed: int = 0, *, objects=None) -> str:
    """A VOC2012 tree under root (VOCdevkit/VOC2012), its 'train' split
    listing n images in both Segmentation and Main; returns root.
    ``objects(k, h, w, rng)`` may give image k's XML objects."""
    rng = np.random.default_rng(seed)
    voc = os.path.join(root, "VOCdevkit", "VOC2012")
    for sub in (
        "JPEGImages",
        "SegmentationClass",
        "Annotations",
        "ImageSets/Segmentation",
        "ImageSets/Main",
    ):
        os.makedirs(os.path.join(voc, sub), exist_ok=True)
    names = []
    for k in range(n):
        name = f"2012_{k:06d}"
        names.append(name)
        h, w = int(rng.integers(8, 40)), int(rng.integers(8, 40))
        _jpeg(os.path.join(voc, "JPEGImages", name + ".jpg"), h, w, rng)
        mask = rng.integers(0, 21, size=(h, w), dtype=np.uint8)
        mask[rng.random((h, w)) < 0.1] = 255
        png = Image.fromarray(mask, mode="P")
        png.putpalette(_palette())
        png.save(os.path.join(voc, "SegmentationClass", name + ".png"))
        if objects is not None:
            objs = objects(k, h, w, rng)
        else:
            objs = []
            for _ in range(int(rng.integers(1, 7))):
                x0, y0 = int(rng.integers(1, w)), int(rng.integers(1, h))
                box = (
                    x0,
                    y0,
                    int(rng.integers(x0, w + 1)),
                    int(rng.integers(y0, h + 1)),
                )
                objs.append((str(rng.choice(VOC_NAMES)), box, int(rng.random() < 0.2)))
        with open(os.path.join(voc, "Annotations", name + ".xml"), "w") as f:
            f.write(_voc_xml(name, h, w, objs))
    for split in ("Segmentation", "Main"):
        with open(os.path.join(voc, "ImageSets", split, "train.txt"), "w") as f:
            f.write("".join(x + "\n" for x in names))
    return str(root)
