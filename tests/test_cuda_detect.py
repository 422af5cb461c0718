"""Detection, keypoints and segmentation with ``device="cuda"`` on a real
GPU: every image and every target tensor the loader hands out is on the
device and equals what the same loader gives in host memory (same seed,
same objects). The images are read straight away, on torch's current
stream, with no synchronize: the copy stream's work must be ordered before
them. Images past a batch's arena (its spill buffers) are checked too, and
torch's allocator is back where it started once the loader is closed.
These run only where torch sees a CUDA device; everywhere else the same
paths are checked against the project's CUDA runtime double
(test_detect_gpu.py)."""

from __future__ import annotations

import gc

import pytest
import torch
from torch.utils.data import Subset
from torchvision import datasets, tv_tensors
from torchvision.transforms import v2

import ringloader
from ringloader.datasets import CocoKeypoints

import reference_pairs as R
from detection_data import coco_json, write_coco, write_voc
from test_detect_keypoints import add_keypoints
from test_segment_pairs_coco import _uncompressed

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (the same paths run on the CUDA runtime "
        "double in test_detect_gpu.py on this machine)",
    ),
]

KEYS = ["boxes", "labels", "masks", "image_id"]
FLOAT = v2.Compose(
    [v2.ToImage(), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float, scale=True)]
)
UINT8 = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip()])
MULTISCALE = v2.Compose(
    [
        v2.ToImage(),
        v2.RandomShortestSize(min_size=(24, 32, 40), max_size=64),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float, scale=True),
        v2.SanitizeBoundingBoxes(),
    ]
)


def collate_fn(batch):
    return tuple(zip(*batch))


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    data = add_keypoints(coco_json(18, seed=4))
    return write_coco(tmp_path_factory.mktemp("coco"), 18, seed=4, data=data)


def wrapped(coco, transforms, keys=KEYS):
    ds = datasets.CocoDetection(*coco, transforms=transforms)
    ds = datasets.wrap_dataset_for_transforms_v2(ds, target_keys=keys)
    if transforms is not MULTISCALE:
        return ds  # images without annotations too: empty targets
    return annotated(ds)  # SanitizeBoundingBoxes needs labels, as torch's


def annotated(ds):
    """ds in a Subset of its images with annotations, as the references
    train on."""
    keep = [k for k, i in enumerate(ds.ids) if ds.coco.getAnnIds(imgIds=i)]
    return Subset(ds, keep)


def both(make, **kw):
    """The batches of the same loader in host memory and on the device, and
    the device loader's stats and allocator growth once it is closed."""
    kw = dict(batch_size=4, collate_fn=collate_fn, seed=3, num_workers=2, **kw)
    host = list(ringloader.DataLoader(make(), **kw))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    loader = ringloader.DataLoader(make(), device="cuda", **kw)
    assert isinstance(loader, ringloader.DataLoader), type(loader)
    pairs = []
    for want, got in zip(host, loader):
        # read at once, on the current stream: no synchronize
        sums = [float(x.double().sum()) for x in got[0]]
        pairs.append((want, got, sums))
    stats = loader.stats()
    loader.close()
    left = [len(host), len(pairs), stats]
    del loader, got
    return pairs, left, before


def check(pairs, left, before, image_tol=0.0):
    batches, seen, _ = left
    assert batches == seen > 0
    compare(pairs, image_tol)  # its locals (device tensors) end with it
    pairs.clear()
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


def compare(pairs, image_tol):
    images = targets = 0
    for want, got, sums in pairs:
        for a, b, s in zip(want[0], got[0], sums):
            assert b.device.type == "cuda" and type(b) is type(a)
            assert a.shape == b.shape and a.dtype == b.dtype
            here = b.cpu()
            # the sum read at once equals the image's once it is surely there
            assert abs(s - float(here.double().sum())) <= 1e-9 * max(1.0, abs(s))
            diff = (a - here).abs().max()
            assert torch.allclose(a, here, rtol=0, atol=image_tol), diff
            images += 1
        for a, b in zip(want[1], got[1]):
            same_target(a, b)
            targets += 1
    assert images == targets > 0


def same_target(want, got):
    if isinstance(want, torch.Tensor):
        assert got.device.type == "cuda" and type(got) is type(want)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
        for attr in ("canvas_size", "format"):
            assert getattr(got, attr, None) == getattr(want, attr, None)
        return
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            same_target(want[key], got[key])
    else:
        assert got == want


# Float images are converted on the device: a few float ULPs of the host's.
FLOAT_TOL = 1e-5


@pytest.mark.parametrize(
    "tf, tol",
    [(FLOAT, FLOAT_TOL), (UINT8, 0.0), (MULTISCALE, FLOAT_TOL)],
    ids=["float", "uint8", "multiscale"],
)
def test_detection_on_the_device_equals_host_memory(coco, tf, tol):
    check(*both(lambda: wrapped(coco, tf)), image_tol=tol)


@pytest.mark.parametrize("arena", [6000, 1], ids=["some-fit", "none-fits"])
def test_images_past_the_arena_reach_the_device(coco, arena):
    pairs, left, before = both(lambda: wrapped(coco, UINT8), arena_bytes=arena)
    assert left[2]["past_arena"] > 0, left[2]
    check(pairs, left, before)


def test_keypoints_on_the_device_equal_host_memory(coco):
    keys = ["boxes", "labels", "keypoints", "image_id"]

    def make():
        return annotated(CocoKeypoints(*coco, transforms=MULTISCALE, target_keys=keys))

    pairs, left, before = both(make)
    kinds = {type(t["keypoints"]) for _, got, _ in pairs for t in got[1]}
    assert kinds == {tv_tensors.KeyPoints}, kinds
    check(pairs, left, before, image_tol=FLOAT_TOL)


def test_voc_segmentation_masks_on_the_device_equal_host_memory(tmp_path):
    root = write_voc(tmp_path, 7, seed=2)

    def make():
        ds = datasets.VOCSegmentation(
            root, year="2012", image_set="train", transforms=FLOAT
        )
        return datasets.wrap_dataset_for_transforms_v2(ds)

    check(*both(make), image_tol=FLOAT_TOL)


def test_the_segmentation_references_coco_preset_on_the_device(tmp_path):
    """The reference's default (``--dataset coco``, no ``--use-v2``): its
    category filter, polygon merge and v1 train preset, natively (on RLEs
    as lists, which its merge reads)."""
    data = _uncompressed(coco_json(16, seed=5))
    coco = write_coco(tmp_path, 16, seed=5, data=data)

    def make():
        preset = R.train_preset(40, 32)
        tf = R.coco_transforms(preset, R.VOC_FROM_COCO)
        return annotated(datasets.CocoDetection(*coco, transforms=tf))

    check(*both(make), image_tol=FLOAT_TOL)
