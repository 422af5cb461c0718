"""The three local sources of the Mix tests across processes (argv's data
folder, written by tests/test_mix_ddp.py): a FileList, an ImageFolder and
TarShards of small real JPEGs, whose targets tell the sample drawn: source
* 1000 + index."""

import glob
import os

import numpy as np
import ringloader

SIZES = (40, 30, 20)  # FileList, ImageFolder, TarShards
WEIGHTS = (0.5, 0.3, 0.2)


def sources(root: str, transform) -> list:
    files = sorted(glob.glob(os.path.join(root, "list", "*.jpg")))
    listed = ringloader.FileList(files, np.arange(len(files)), transform=transform)
    folder = ringloader.ImageFolder(os.path.join(root, "folder"), transform=transform)
    folder = ringloader.ImageFolder(
        os.path.join(root, "folder"),
        transform=transform,
        targets=1000 + np.arange(len(folder)),
    )
    shards = ringloader.TarShards(
        os.path.join(root, "shards", "{0..1}.tar"),
        transform=transform,
        progress=False,
    )
    assert (len(listed), len(folder), len(shards)) == SIZES
    return [listed, folder, shards]


def mix(root: str, transform, n: int, replacement: bool) -> "ringloader.Mix":
    return ringloader.Mix(
        sources(root, transform), WEIGHTS, samples_per_epoch=n, replacement=replacement
    )
