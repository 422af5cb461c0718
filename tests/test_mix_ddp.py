"""ringloader.Mix across real processes: 2 ranks under torchrun
(DistributedSampler; Accelerate), Lightning's DDP on the CPU (gloo). Each
rank builds the same Mix of a FileList, an ImageFolder and TarShards of
small JPEGs, labelled source * 1000 + index; what the ranks read together
must be the epoch's draws of one process reading the same Mix (same seed),
each draw's pixels that process's. The scripts are in tests/frameworks/."""

from __future__ import annotations

import collections
import io
import json
import os
import sys
import tarfile

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from torch.utils.data import DistributedSampler

import ringloader
from images import jpeg_bytes
from ringloader import transforms as T
from test_distributed import torchrun
from test_frameworks import run

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frameworks")
sys.path.insert(0, SCRIPTS)
import mixdata  # noqa: E402

SEED, SAMPLER_SEED, N, BATCH, STOP = 7, 5, 80, 8, 2  # as mix_ddp.py
TRAIN = T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip()])


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("mixddp")
    n_list, n_folder, n_shards = mixdata.SIZES
    (root / "list").mkdir()
    for i in range(n_list):
        body = jpeg_bytes("baseline", 18 + i % 5, 20 + i % 7, seed=i)
        (root / "list" / f"{i:03d}.jpg").write_bytes(body)
    for i in range(n_folder):
        cls = root / "folder" / f"c{i * 2 // n_folder}"
        cls.mkdir(parents=True, exist_ok=True)
        body = jpeg_bytes("baseline", 20 + i % 3, 18 + i % 4, seed=100 + i)
        (cls / f"{i:03d}.jpg").write_bytes(body)
    (root / "shards").mkdir()
    per = n_shards // 2
    for s in range(2):
        with tarfile.open(root / "shards" / f"{s}.tar", "w") as tf:
            for i in range(s * per, (s + 1) * per):
                for name, body in (
                    (f"k{i:03d}.jpg", jpeg_bytes("baseline", 22, 19, seed=200 + i)),
                    (f"k{i:03d}.cls", str(2000 + i).encode()),
                ):
                    info = tarfile.TarInfo(name)
                    info.size = len(body)
                    tf.addfile(info, io.BytesIO(body))
    return str(root)


def one_process(data: str, epoch: int) -> tuple[np.ndarray, torch.Tensor]:
    """Labels and images of the epoch's draws, in order, read by one
    process: what the ranks' positions index."""
    mix = mixdata.mix(data, TRAIN, N, replacement=False)
    loader = ringloader.Loader(mix, batch_size=BATCH, seed=SEED, num_threads=2)
    loader.set_epoch(epoch)
    got = [(x.clone(), y.clone()) for x, y in loader]
    loader.close()
    return torch.cat([y for _, y in got]).numpy(), torch.cat([x for x, _ in got])


def positions(rank: int, epoch: int) -> list[int]:
    s = DistributedSampler(range(N), num_replicas=2, rank=rank, seed=SAMPLER_SEED)
    s.set_epoch(epoch)
    return list(s)


def flat(batches) -> list[int]:
    return [i for b in batches for i in b]


def load(path) -> dict:
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def torchrun_same(data, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("same")
    torchrun(os.path.join(SCRIPTS, "mix_ddp.py"), data, str(out), timeout=240)
    return str(out)


def test_ranks_split_the_epochs_draws(data, torchrun_same):
    """DistributedSampler(shuffle=True) over a Mix, 2 processes, 2 epochs:
    each rank reads the draws at its positions, pixels and all; together
    the epoch's draws exactly; no sample on both ranks in epoch 0 (no
    sample drawn twice there); epoch 1 draws anew."""
    ref = [one_process(data, e) for e in (0, 1)]
    assert ref[0][0].tolist() != ref[1][0].tolist()
    for epoch, (labels, images) in enumerate(ref):
        union: collections.Counter = collections.Counter()
        per_rank = []
        for rank in (0, 1):
            got = load(os.path.join(torchrun_same, f"rank{rank}.json"))
            pixels = torch.load(os.path.join(torchrun_same, f"rank{rank}.pt"))
            assert got["len"] == N // 2 // BATCH
            mine = flat(got["epochs"][epoch])
            where = positions(rank, epoch)
            assert mine == labels[where].tolist(), (rank, epoch)
            assert torch.equal(pixels[f"epoch{epoch}"], images[where]), (rank, epoch)
            union.update(mine)
            per_rank.append(set(mine))
            # Each rank's share of each source: as a random half's would be.
            counts = np.bincount(np.array(mine) // 1000, minlength=3)
            expected = np.array(mixdata.WEIGHTS) * len(mine)
            assert chisquare(counts, expected).pvalue > 0.01, (rank, epoch, counts)
        assert union == collections.Counter(labels.tolist())
        counts = np.bincount(labels // 1000, minlength=3)
        assert counts.tolist() == [40, 24, 16]  # the weights' shares of 80
        if epoch == 0:
            assert len(set(labels.tolist())) == N
            assert not per_rank[0] & per_rank[1]


def test_a_ranks_state_dict_resumes_its_draws(data, torchrun_same):
    """A rank's state_dict after 2 batches of epoch 1, loaded into a new
    DataLoader (a new DistributedSampler): the rank's remaining draws, pixels
    and all; so does rank 0's, loaded on every rank (docs/distributed.md)."""
    for rank in (0, 1):
        got = load(os.path.join(torchrun_same, f"rank{rank}.json"))
        pixels = torch.load(os.path.join(torchrun_same, f"rank{rank}.pt"))
        for key in ("resumed", "resumed_from_rank0"):
            assert got[key] == got["epochs"][1][STOP:], (rank, key)
            assert torch.equal(pixels[key], pixels["epoch1"][STOP * BATCH :])


def test_ranks_seeding_torch_apart_split_the_epochs_draws(data, torchrun_same):
    """Each rank seeding torch with SEED + rank, so that the loaders'
    seeds differ: the ranks still split epoch 0's draws (the Mix draws
    with its own seed). Before: 40 of 80 draws not the epoch's."""
    labels, _ = one_process(data, 0)
    wrong, union = 0, collections.Counter()
    for rank in (0, 1):
        mine = flat(
            load(os.path.join(torchrun_same, f"rank{rank}.json"))["seed_plus_rank"]
        )
        wrong += sum(a != b for a, b in zip(mine, labels[positions(rank, 0)].tolist()))
        union.update(mine)
    assert wrong == 0, f"{wrong} of {N} draws not the epoch's"
    assert union == collections.Counter(labels.tolist())


def test_a_samplers_set_epoch_alone_picks_the_draws(data, torchrun_same):
    """A fresh loader on each rank whose DistributedSampler alone is told
    set_epoch(3) (a script restarted at epoch 3): the ranks split epoch
    3's draws. Before: 80 of 80 draws not epoch 3's (epoch 0's)."""
    labels, _ = one_process(data, 3)
    wrong, union = 0, collections.Counter()
    for rank in (0, 1):
        mine = flat(
            load(os.path.join(torchrun_same, f"rank{rank}.json"))["sampler_epoch3"]
        )
        wrong += sum(a != b for a, b in zip(mine, labels[positions(rank, 3)].tolist()))
        union.update(mine)
    assert wrong == 0, f"{wrong} of {N} draws not epoch 3's"
    assert union == collections.Counter(labels.tolist())


def test_accelerate_shards_a_mix_as_torchs_dataloader(torchrun_same):
    """Accelerate's prepare() over ringloader.DataLoader and over torch's
    DataLoader of an equal Mix: the same draws on each rank, batch for
    batch, the same pixels; the ranks' batches together are the epoch's;
    so for a fresh pair told set_epoch(3) (before the Mix followed the
    sampler's epoch, ours read epoch 0's draws there)."""
    union: list[collections.Counter] = [collections.Counter() for _ in range(2)]
    for rank in (0, 1):
        got = load(os.path.join(torchrun_same, f"rank{rank}.json"))
        assert got["acc_type"] == "ringloader.dataloader"
        assert got["acc"] == got["acc_ref"], rank
        assert got["acc_pixels_equal"] == [True, True], rank
        # A fresh prepared loader told set_epoch(3): epoch 3's draws.
        assert got["acc_epoch3"] == got["acc_ref_epoch3"], rank
        assert got["acc_epoch3"] != got["acc"][0], rank
        for epoch in (0, 1):
            assert len(got["acc"][epoch]) == N // BATCH // 2
            union[epoch].update(flat(got["acc"][epoch]))
    assert union[0] != union[1]
    for counter in union:
        counts = np.bincount(np.array(list(counter.elements())) // 1000, minlength=3)
        assert counts.tolist() == [40, 24, 16]


def test_lightning_ddp_splits_the_epochs_draws(data, tmp_path):
    """Lightning's DDP (2 CPU processes) rebuilds ringloader.DataLoader over
    a Mix with its DistributedSampler (shuffle, seed_everything's seed):
    each rank trains on the draws at its positions, the two ranks on the
    epoch's draws of one process with that seed, each epoch its own."""
    run("mix_lightning.py", data, str(tmp_path))
    mix = mixdata.mix(data, TRAIN, 64, replacement=True)
    loader = ringloader.Loader(mix, batch_size=64, seed=3, num_threads=2)
    draws = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        draws.append(torch.cat([y for _, y in loader]).numpy())
    loader.close()
    assert draws[0].tolist() != draws[1].tolist()
    for epoch in (0, 1):
        union: collections.Counter = collections.Counter()
        for rank in (0, 1):
            got = load(tmp_path / f"lightning-rank{rank}.json")
            assert "error" not in got, got["error"]
            assert got["type"] == "ringloader.dataloader"
            assert got["sampler"] == "DistributedSampler"
            mine = [i for e, labels in got["seen"] if e == epoch for i in labels]
            s = DistributedSampler(range(64), num_replicas=2, rank=rank, seed=3)
            s.set_epoch(epoch)
            assert mine == draws[epoch][list(s)].tolist(), (rank, epoch)
            union.update(mine)
        assert union == collections.Counter(draws[epoch].tolist())
        counts = np.bincount(draws[epoch] // 1000, minlength=3)
        assert counts.tolist() == [32, 19, 13]  # 0.5, 0.3, 0.2 of 64
