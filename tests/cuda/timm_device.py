"""ringloader.timm.create_loader with a CUDA device, under the fake CUDA
runtime (fake_cudart.c; RINGLOADER_CUDART names it), as timm's train.py and
validate.py call it: with the prefetcher the batches come through the
loader's own GPU path (pinned slots, its copy stream, the conversion on the
device), and each is compared with the host path's (device=cpu). argv: a
timm ImageDataset folder, the output JSON file.

A CPU build of torch cannot make a CUDA tensor: the fake's device memory
is host memory (fake_gpu.py), so "device" tensors here report the CPU, and
the erasing and mixing that run on the device run on those."""

import ctypes
import json
import os
import random
import sys
import warnings

import numpy as np
import torch
from timm.data import FastCollateMixup, ImageDataset

import ringloader
from ringloader.timm import create_loader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_gpu  # noqa: E402

fake_gpu.install()
fake = ctypes.CDLL(os.environ["RINGLOADER_CUDART"])
fake.fake_cuda_last_violation.restype = ctypes.c_char_p
warnings.simplefilter("error", ringloader.FallbackWarning)
folder, out = sys.argv[1], sys.argv[2]
CUDA, CPU = torch.device("cuda"), torch.device("cpu")
SIZE = (3, 32, 32)
# The device's float32 normalisation (torch.addcmul) and the C core's may
# round the last bit differently.
CLOSE = 1e-6


def load(device, seed=0, **kw):
    """One epoch of create_loader(ImageDataset(folder), ...) on ``device``,
    every generator seeded alike; with the copies the fake counted and the
    inner loader (its GPU object and pinned slots)."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    loader = create_loader(ImageDataset(folder), SIZE, 4, device=device, **kw)
    copies = fake.fake_cuda_copies()
    got = [(x.clone(), y.clone()) for x, y in loader]
    inner = loader
    while not isinstance(inner, ringloader.Loader):
        inner = inner.loader  # PrefetchLoader, _Collated, _OnDevice
    info = dict(
        type=type(loader).__name__,
        copies=fake.fake_cuda_copies() - copies,
        gpu=type(getattr(inner, "_gpu", None)).__name__,
        pinned=getattr(inner, "pinned_slots", 0),
        dtype=str(got[0][0].dtype),
    )
    inner.close()
    return got, info


def same(a, b, equal=torch.equal):
    return len(a) == len(b) and all(
        equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b)
    )


result = {}
# validate.py: the eval recipe (bicubic, crop_pct) in each img_dtype.
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    kw = dict(
        is_training=False,
        interpolation="bicubic",
        crop_pct=0.9,
        use_prefetcher=True,
        img_dtype=dtype,
    )
    dev, info = load(CUDA, **kw)
    host, _ = load(CPU, **kw)
    info["equal"] = same(dev, host, lambda x, u: torch.allclose(x, u, 0, CLOSE))
    info["max_diff"] = max(
        float((a - b).abs().max()) for (a, _), (b, _) in zip(dev, host)
    )
    result[f"eval-{dtype}"] = info

# train.py without mixup: timm's RandomErasing (const) on the device, after
# the normalised batch; the host path without erasing draws the same crops.
dev, info = load(
    CUDA, is_training=True, interpolation="random", re_prob=0.5, re_mode="const"
)
host, _ = load(CPU, is_training=True, interpolation="random", re_prob=0.0)
kept = erased = 0
for (a, y), (b, z) in zip(dev, host):
    info.setdefault("labels_equal", True)
    info["labels_equal"] &= torch.equal(y, z)
    same_px = (a - b).abs() <= CLOSE
    zero = (a == 0) & ~same_px
    kept += int(same_px.sum())
    erased += int(zero.sum())
    info.setdefault("other", 0)
    info["other"] += int((~same_px & ~zero).sum())
info.update(kept=kept, erased=erased)
result["train-erase"] = info

# train.py with FastCollateMixup: mixed on the device, against timm's
# collate + PrefetchLoader on the host (the same draws from numpy's and
# Python's generators), each mode; erasing (const) after it, as timm's.
for mode in ("batch", "elem", "pair", "half"):

    def kw(mode=mode):
        return dict(
            is_training=True,
            re_prob=0.25,
            re_mode="const",
            use_prefetcher=True,
            collate_fn=FastCollateMixup(
                mixup_alpha=0.8,
                cutmix_alpha=1.0,
                switch_prob=0.5,
                mode=mode,
                label_smoothing=0.1,
                num_classes=3,
            ),
        )

    dev, info = load(CUDA, seed=3, **kw())
    host, _ = load(CPU, seed=3, **kw())
    info["equal"] = same(dev, host)
    info["shape"] = list(dev[0][0].shape) + list(dev[0][1].shape)
    result[f"mixup-{mode}"] = info

# re_split without mixup: timm's PrefetchLoader normalisation and split
# erasing, on the device.
kw = dict(is_training=True, re_prob=0.5, re_mode="const", re_split=True)
dev, info = load(CUDA, seed=5, **kw)
host, _ = load(CPU, seed=5, **kw)
info["equal"] = same(dev, host)
result["re-split"] = info

# train.py and validate.py without the prefetcher: host batches, as timm's.
for training in (True, False):
    kw = dict(is_training=training, use_prefetcher=False)
    dev, info = load(CUDA, **kw)
    host, _ = load(CPU, **kw)
    info["equal"] = same(dev, host)
    info["device"] = str(dev[0][0].device)
    result[f"no-prefetcher-{training}"] = info

result.update(
    violations=fake.fake_cuda_violations(),
    last=fake.fake_cuda_last_violation().decode(),
    host=fake.fake_cuda_host_outstanding(),
    dev=fake.fake_cuda_device_outstanding(),
)
with open(out, "w") as f:
    json.dump(result, f, indent=1)
