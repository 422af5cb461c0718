"""shuffle="stream": a shard set read shard by shard (the streaming order,
ringloader._stream_order), through the Loader and the DataLoader."""

from __future__ import annotations

import io
import math
import tarfile

import numpy as np
import pytest
import ringloader
import torch
from batches import assert_resumes
from images import jpeg_bytes
from ringloader import transforms as T
from ringloader._stream_order import StreamOrder

EVAL = T.Compose([T.Resize(16), T.CenterCrop(16)])
COUNTS = (10, 7, 13, 4)  # samples of each shard


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Shards whose every sample's label is its index in the set."""
    folder = tmp_path_factory.mktemp("stream")
    i = 0
    for s, count in enumerate(COUNTS):
        with tarfile.open(folder / f"s-{s}.tar", "w") as tf:
            for _ in range(count):
                for ext, data in (
                    ("jpg", jpeg_bytes("baseline", 20, 24, seed=i % 5)),
                    ("cls", str(i).encode()),
                ):
                    info = tarfile.TarInfo(f"k{i:04d}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
                i += 1
    return str(folder / "s-*.tar")


def _labels(loader) -> list[int]:
    return torch.cat([t for _, t in loader]).tolist()


def _starts() -> np.ndarray:
    return np.concatenate([[0], np.cumsum(COUNTS)]).astype(np.int64)


def test_an_epoch_reads_the_streaming_order(shards):
    ds = ringloader.TarShards(shards, progress=False)
    loader = ringloader.Loader(
        ds, batch_size=4, shuffle="stream", seed=3, transform=EVAL
    )
    first, second = _labels(loader), _labels(loader)
    assert sorted(first) == list(range(sum(COUNTS)))  # every sample once
    assert first == StreamOrder(_starts(), 3, 0).ids(0).tolist()
    assert second == StreamOrder(_starts(), 3, 1).ids(0).tolist()
    assert first != second


def test_ranks_split_the_stream_as_distributed_sampler_sizes_it(shards):
    ds = ringloader.TarShards(shards, progress=False)
    n, world = sum(COUNTS), 3
    parts = []
    for rank in range(world):
        loader = ringloader.Loader(
            ds,
            batch_size=5,
            shuffle="stream",
            rank=rank,
            world_size=world,
            transform=EVAL,
        )
        parts.append(_labels(loader))
        assert len(loader) == math.ceil(math.ceil(n / world) / 5)
    assert all(len(p) == math.ceil(n / world) for p in parts)
    got = [x for p in parts for x in p]
    assert sorted(set(got)) == list(range(n))  # all read; padding repeats
    assert len(got) - n == (-n) % world


def test_resuming_continues_the_epoch_exactly(shards):
    ds = ringloader.TarShards(shards, progress=False)

    def make():
        return ringloader.Loader(
            ds, batch_size=4, shuffle="stream", seed=9, transform=EVAL
        )

    assert_resumes(make)


def test_a_dataset_without_shards_is_refused_naming_it(jpeg_folder_list):
    files = ringloader.FileList(jpeg_folder_list, list(range(len(jpeg_folder_list))))
    with pytest.raises(ValueError, match='shuffle="stream".*FileList has no shards'):
        ringloader.Loader(files, batch_size=2, shuffle="stream", transform=EVAL)


def test_the_dataloader_takes_it_too(shards):
    ds = ringloader.TarShards(shards, progress=False, transform=EVAL)
    loader = ringloader.DataLoader(ds, batch_size=6, shuffle="stream", seed=3)
    labels = torch.cat([t for _, t in loader]).tolist()
    assert labels == StreamOrder(_starts(), 3, 0).ids(0).tolist()


@pytest.fixture
def jpeg_folder_list(tmp_path):
    paths = []
    for i in range(3):
        p = tmp_path / f"{i}.jpg"
        p.write_bytes(jpeg_bytes("baseline", 20, 24, seed=i))
        paths.append(str(p))
    return paths
