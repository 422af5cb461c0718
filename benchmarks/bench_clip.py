"""Image-text training input (CLIP): ringloader's TarShards with fields
against webdataset + torch's DataLoader, side by side, from the same shards.

The shards are CLIP-style, as img2dataset writes them: each sample a JPEG
(320 to 512 pixels a side), a caption (``.txt``) and its metadata
(``.json``). Both contenders give batches of (images, tokens, metadata):
images through the same torchvision ``RandomResizedCrop(224)``,
``ToTensor``, ``Normalize`` (CLIP's mean and std), shuffled, and the
captions tokenized once per batch by the same callable (open_clip's
tokenizer for ViT-B-32; ringloader runs it as ``field_transforms``,
webdataset as a ``map_tuple`` after ``batched``, in its workers).

- ringloader: ``Loader(TarShards(urls, fields=("jpg", "txt", "json"),
  field_transforms={"txt": tokenizer}), shuffle=True, num_threads=T)``:
  images decoded and cropped in C, each sample's members in one read
  (one range GET over HTTP);
- webdataset: ``WebDataset(urls).shuffle(1000).decode("pil")
  .to_tuple("jpg", "txt", "json").map_tuple(transform, ...).batched(B)``
  in ``DataLoader(num_workers=T, batch_size=None)``, as open_clip reads
  shards.

Usage::

    python benchmarks/bench_clip.py [--data DIR] [--images 2000] [--shards 8]
        [--threads 2] [--batch 64] [--rounds 2] [--where local,http]

For each place (local files, HTTP from nginx on 127.0.0.1) and round
(rounds interleave the contenders): one epoch of each contender after a
warm-up batch. Prints images/s and the ratio, with the load average. Not
run in CI: compare ratios measured in one run (2 shared cores are noisy).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as tv

import ringloader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
MEAN = (0.48145466, 0.4578275, 0.40821073)  # CLIP's
STD = (0.26862954, 0.26130258, 0.27577711)
WORDS = "a photo of the small large red blue dog cat car tree on in with at".split()


def make_shards(root: str, images: int, shards: int, seed: int = 0) -> list[str]:
    """CLIP-style shards (jpg, txt, json per sample) written by
    webdataset's ShardWriter, once; their paths."""
    import webdataset as wds

    per = -(-images // shards)
    root = os.path.join(root, f"{images}-in-{shards}")
    paths = [os.path.join(root, f"clip-{s:06d}.tar") for s in range(shards)]
    if all(os.path.exists(p) for p in paths):
        return paths
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(seed)
    with wds.ShardWriter(
        os.path.join(root, "clip-%06d.tar"), maxcount=per, verbose=0
    ) as w:
        for i in range(images):
            h, wd = (int(v) for v in rng.integers(320, 513, 2))
            # Smooth content (a coarse noise field, upsampled): photo-like
            # JPEG sizes, unlike white noise.
            coarse = rng.integers(0, 256, (h // 16 + 1, wd // 16 + 1, 3), np.uint8)
            img = Image.fromarray(coarse).resize((wd, h), Image.BICUBIC)
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=90)
            caption = " ".join(rng.choice(WORDS, int(rng.integers(5, 25))))
            w.write(
                {
                    "__key__": f"{i:09d}",
                    "jpg": buf.getvalue(),
                    "txt": caption,
                    "json": {
                        "key": f"{i:09d}",
                        "width": wd,
                        "height": h,
                        "url": f"https://example.com/{i}.jpg",
                    },
                }
            )
    return paths


def train_transform() -> Any:
    return tv.Compose(
        [tv.RandomResizedCrop(224), tv.ToTensor(), tv.Normalize(MEAN, STD)]
    )


def ringloader_epochs(urls: list[str], tokenizer: Callable, a: Any) -> Any:
    ds = ringloader.TarShards(
        urls,
        fields=("jpg", "txt", "json"),
        field_transforms={"txt": tokenizer},
        cache_dir=a.data,
        progress=False,
    )
    loader = ringloader.Loader(
        ds,
        batch_size=a.batch,
        shuffle=True,
        num_threads=a.threads,
        transform=train_transform(),
        drop_last=True,
    )
    return loader


def webdataset_epochs(urls: list[str], tokenizer: Callable, a: Any) -> Any:
    import webdataset as wds

    pipe = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .shuffle(1000)
        .decode("pil")
        .to_tuple("jpg", "txt", "json")
        .map_tuple(train_transform(), lambda t: t, lambda m: m)
        .batched(a.batch, partial=False)
        .map_tuple(lambda x: x, tokenizer, lambda m: m)
    )
    return torch.utils.data.DataLoader(
        pipe, batch_size=None, num_workers=a.threads, persistent_workers=False
    )


def epoch(loader: Any) -> tuple[float, int]:
    """(images/s, images) of one epoch, timed from its first batch on."""
    it = iter(loader)
    x, tokens, meta = next(it)
    assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32
    assert tokens.shape == (x.shape[0], 77) and len(meta) == x.shape[0]
    n, t0 = 0, time.perf_counter()
    for x, _tokens, _meta in it:
        n += x.shape[0]
    return n / (time.perf_counter() - t0), n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/tmp/ringloader-bench-clip")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--where", default="local,http")
    a = p.parse_args()
    import open_clip

    tokenizer = open_clip.get_tokenizer("ViT-B-32")
    paths = make_shards(a.data, a.images, a.shards)
    folder = os.path.dirname(paths[0])
    places: dict[str, Any] = {}
    server = None
    if "local" in a.where:
        places["local"] = paths
    if "http" in a.where:
        from rlbench.servers import Nginx

        server = Nginx(folder)
        base = server.url
        places["http"] = [f"{base}/{os.path.basename(q)}" for q in paths]
    contenders = {"ringloader": ringloader_epochs, "webdataset": webdataset_epochs}
    print(
        f"{a.images} images in {a.shards} shards, batch {a.batch}, "
        f"{a.threads} threads/workers, load {os.getloadavg()[0]:.2f}"
    )
    try:
        for where, urls in places.items():
            rates: dict[str, list[float]] = {c: [] for c in contenders}
            for r in range(a.rounds):
                for name, make in contenders.items():
                    rate, n = epoch(make(urls, tokenizer, a))
                    rates[name].append(rate)
                    print(
                        f"  {where:5} round {r}: {name:10} {rate:7.1f} images/s "
                        f"({n} images)",
                        flush=True,
                    )
            rl = statistics.median(rates["ringloader"])
            wd = statistics.median(rates["webdataset"])
            print(
                f"{where}: ringloader {rl:.1f} images/s, webdataset + DataLoader "
                f"{wd:.1f} images/s: {rl / wd:.2f}x "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
