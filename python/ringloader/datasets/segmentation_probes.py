"""Running the user's objects beside what they are read as, on probes.

:mod:`.segmentation_pairs` reads the segmentation reference's own classes
by their names and attributes; a name proves nothing, so each object is
run here on small probe samples beside a model of the class it is read as
(``step.model``, drawing as the reference's class draws), with the same
draws, and must give the same image and mask, type, dtype, size and
values (:func:`beside`, :func:`check`). The probes are made by a generator
of their own: VOC-style pairs of an RGB image and a palette mask, COCO
annotations (polygons, overlaps, an uncompressed RLE, ids kept and
dropped) and the v2 wrapper's targets (:func:`probe_pairs`,
:func:`v2_samples`). They seed Python's generator and torch's CPU one
only (``torch.manual_seed`` would reseed every GPU's, which
``fork_rng(devices=[])`` does not restore), and leave Python's, NumPy's
and torch's as they found them (:func:`generators_kept`).
"""

from __future__ import annotations

import contextlib
import random
from typing import Any, Callable, Optional

import numpy as np

from .detection_batch import NotNative

__all__ = [
    "CHAINS",
    "MASK_FILL",
    "WHERE",
    "beside",
    "check",
    "generators_kept",
    "probe_pairs",
    "run",
    "same",
    "seeded",
    "v2_samples",
]

MASK_FILL = 255  # the reference pads masks with it, and marks overlaps
CHAINS = 6  # probe chains, each its own seed and starting pair
WHERE = "the dataset's transforms"


def _side(gen: Any) -> tuple[int, int]:
    """A probe's (h, w): 5..39 pixels a side, neither side over twice the
    other (a long probe would make a resize to the preset's size long)."""
    h = int(gen.integers(5, 40))
    return h, int(gen.integers(max(5, (h + 1) // 2), min(40, 2 * h + 1)))


def probe_pairs(categories: Optional[list] = None) -> list[tuple[Any, Any]]:
    """The chains' starting pairs (a fixed generator of their own), as the
    dataset gives them: an RGB image (one of 560 x 700, the others 5-39
    pixels a side) and a palette mask of class indices and 255
    (VOCSegmentation), or, given the ``categories`` a COCO filter keeps
    (None: no filter), a list of annotations (CocoDetection): polygons,
    overlapping, and an uncompressed RLE, of categories kept and not."""
    from PIL import Image

    gen = np.random.default_rng(20261205)
    palette = [v for i in range(256) for v in (i, 255 - i, (7 * i) % 256)]
    out = []
    for k in range(CHAINS):
        # the last chain's image large (a preset's resize shrinks it, as it
        # shrinks most photos), the others small (it enlarges them)
        h, w = (560, 700) if k == CHAINS - 1 else _side(gen)
        pixels = gen.integers(0, 256, (h, w, 3), dtype=np.uint8)
        image = Image.fromarray(pixels, mode="RGB")
        if categories is not None:
            out.append((image, _annotations(gen, h, w, categories)))
            continue
        classes = gen.integers(0, 22, (h, w), dtype=np.uint8)
        classes[gen.random((h, w)) < 0.1] = MASK_FILL
        mask = Image.fromarray(classes, mode="P")
        mask.putpalette(palette)
        out.append((image, mask))
    return out


def _annotations(gen: Any, h: int, w: int, categories: Optional[list]) -> list:
    """1-5 COCO annotations on an h x w image: star polygons (one of two
    parts), the last an iscrowd RLE (counts of a random mask, column by
    column from a run of zeros)."""
    ids = list(categories or []) + [1, 2, 3, 500] + _unlisted(categories or [])
    anno: list = []
    for k in range(int(gen.integers(1, 6))):
        cid = int(ids[int(gen.integers(len(ids)))])
        if k == 3:
            cells = (gen.random((h, w)) < 0.3).flatten(order="F")
            edges = np.flatnonzero(np.diff(np.concatenate([[0], cells, [2]])))
            counts = np.diff(np.concatenate([[0], edges])).tolist()
            counts[-1] = len(cells) - sum(counts[:-1])
            seg: Any = {"counts": counts, "size": [h, w]}
        else:
            seg = [_star(gen, h, w) for _ in range(int(gen.integers(1, 3)))]
        anno.append({"segmentation": seg, "category_id": cid, "iscrowd": int(k == 3)})
    return anno


def _unlisted(ids: list) -> list:
    """Ids a filter of ``ids`` drops that look like kept ones: the smallest
    non-negative one not listed, and one between the listed."""
    listed = {int(i) for i in ids}
    out = [min(set(range(len(listed) + 1)) - listed)]
    between = [i + 1 for i in sorted(listed) if i + 1 not in listed]
    return out + between[:1]


def _star(gen: Any, h: int, w: int) -> list:
    """A polygon of 3-7 points around a random centre, inside the image."""
    cx, cy = gen.uniform(0, w), gen.uniform(0, h)
    angles = np.sort(gen.uniform(0, 2 * np.pi, int(gen.integers(3, 8))))
    radii = gen.uniform(1, max(h, w) / 2, len(angles))
    xs = np.clip(cx + radii * np.cos(angles), 0, w)
    ys = np.clip(cy + radii * np.sin(angles), 0, h)
    return [float(v) for xy in zip(xs, ys) for v in xy]


def same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same image, mask or annotations:
    one type, and PIL images of one mode, size and pixels, tensors of one
    dtype, shape and values, or equal lists."""
    import torch
    from PIL import Image

    if type(a) is not type(b):
        return False
    if isinstance(a, Image.Image):
        return a.mode == b.mode and a.size == b.size and np.array_equal(a, b)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return isinstance(a, list) and a == b  # COCO's annotations


def seeded(seed: int) -> None:
    """Seeds Python's and torch's CPU generator (torch.manual_seed would
    reseed the GPUs' too, which fork_rng(devices=[]) does not restore)."""
    import torch

    random.seed(seed)
    torch.default_generator.manual_seed(seed)


def run(fn: Callable[..., Any], pair: tuple[Any, Any], who: str) -> tuple[Any, Any]:
    """``fn`` (the user's objects, ``who``) on a probe ``pair``: the pair it
    returns, or NotNative where it raises or returns something else."""
    try:
        out = fn(*pair)
    except Exception as e:  # noqa: BLE001 - the user's objects
        raise NotNative(
            f"{who} raised {type(e).__name__} on a probe pair ({e})"
        ) from None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise NotNative(
            f"{who}: called on an image and a target, it does not return the two"
        )
    return out


@contextlib.contextmanager
def generators_kept() -> Any:
    """The global generators (Python's, NumPy's, torch's) as they were
    found once the block ends, however it ends: the user's classes draw."""
    import torch

    state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])


def beside(t: Any, step: Any, pair: tuple[Any, Any]) -> tuple[Any, Any]:
    """The user's ``t`` on ``pair``, then ``step``'s model with the same
    draws (the generators left as ``t`` left them); what ``t`` gave, or
    NotNative where it raises or the two differ."""
    import torch

    draws = random.getstate(), torch.get_rng_state()
    theirs = run(t, pair, f"{WHERE}: {step.name}")
    after = random.getstate(), torch.get_rng_state()
    random.setstate(draws[0])
    torch.set_rng_state(draws[1])
    try:
        ours = step.model(*pair)
    except Exception:  # noqa: BLE001 - the reference's would raise here
        ours = None
    random.setstate(after[0])
    torch.set_rng_state(after[1])
    if ours is None or not all(map(same, theirs, ours)):
        raise NotNative(
            f"{WHERE}: {step.name} does not do what the segmentation reference's "
            "does (its image or mask differs on a probe pair), so it is not read "
            "natively"
        )
    return theirs


def check(given: Any, objects: list, steps: list, categories: Optional[list]) -> None:
    """Each object beside its reading on the probe chains (a step with
    edge ``seeds`` also alone on each, on the first chain's pair and the
    large last one's), then the whole
    ``given`` beside the chain; NotNative naming the first difference."""
    import torch

    with generators_kept():
        for seed, start in enumerate(probe_pairs(categories)):
            seeded(seed)
            pair = start
            for t, step in zip(objects, steps):
                # the step alone, at its edges, on a small pair and the large
                if seed in (0, CHAINS - 1) and step.seeds:
                    draws = random.getstate(), torch.get_rng_state()
                    for edge in step.seeds:
                        seeded(edge)
                        beside(t, step, pair)
                    random.setstate(draws[0])
                    torch.set_rng_state(draws[1])
                pair = beside(t, step, pair)
            seeded(seed)
            whole = run(given, start, WHERE)
            if not all(map(same, whole, pair)):
                raise NotNative(
                    f"{WHERE}: called whole, they do not give what their steps "
                    "give in order, so they are not read natively"
                )


def v2_samples(labels: list) -> list[tuple[Any, Any]]:
    """(PIL image, the v2 wrapper's target) samples: instance masks that
    overlap, of labels mapped and not, one with none kept, one without
    masks (an image with no annotations)."""
    import torch
    from PIL import Image
    from torchvision import tv_tensors

    gen = np.random.default_rng(20261205)
    out = []
    for k in range(CHAINS):
        h, w = _side(gen)
        image = Image.fromarray(gen.integers(0, 256, (h, w, 3), dtype=np.uint8))
        if k == 0:
            out.append((image, {"image_id": 1}))
            continue
        n = int(gen.integers(1, 5))
        pool = [900, 901] if k == 1 else labels[:8] + [900] + _unlisted(labels)
        ids = [int(pool[int(gen.integers(len(pool)))]) for _ in range(n)]
        masks = torch.from_numpy(gen.random((n, h, w)) < 0.4).to(torch.uint8)
        target = {"masks": tv_tensors.Mask(masks), "labels": torch.tensor(ids)}
        out.append((image, target))
    return out
