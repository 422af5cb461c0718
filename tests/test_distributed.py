"""Sharding across processes: Loader(distributed=True) under torchrun yields,
on every rank, the share torch's DistributedSampler gives that rank (same
sizes, padding and drop rules; without shuffle the same indices; with it,
ringloader's own shuffle, which the ranks split as DistributedSampler splits
its permutation), epoch after epoch."""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DistributedSampler

import ringloader
from ringloader import transforms as T

from images import jpeg_bytes

N = 23  # odd: DistributedSampler pads (or drops) one sample
WORLD = 2
SEED = 7
SMALL = T.Resize((8, 8))
CONFIGS = [
    (shuffle, drop_last, batch_size)
    for shuffle in (False, True)
    for drop_last in (False, True)
    for batch_size in (1, 5)
]

# Run by each torchrun worker: argv = jpeg path, output directory.
WORKER = r"""
import json, os, sys
import torch.distributed as dist
import ringloader
from ringloader import transforms as T

class Indexed:
    def __init__(self, path, n):
        self.samples = [(path, i) for i in range(n)]
    def __len__(self):
        return len(self.samples)

jpeg, out = sys.argv[1], sys.argv[2]
n, seed, configs = int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
dist.init_process_group("gloo")
rank = dist.get_rank()
dataset = Indexed(jpeg, n)
result = {}
for shuffle, drop_last, batch_size in configs:
    loader = ringloader.Loader(dataset, batch_size=batch_size, shuffle=shuffle,
                               drop_last=drop_last, distributed=True, seed=seed,
                               num_threads=1, transform=T.Resize((8, 8)))
    epochs = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        order, sizes = [], []
        for images, labels in loader:
            assert images.shape[0] == labels.shape[0]
            order += labels.tolist()
            sizes.append(len(labels))
        epochs.append({"order": order, "sizes": sizes})
    result[f"{shuffle}-{drop_last}-{batch_size}"] = {
        "epochs": epochs, "len": len(loader), "rank": loader.rank,
        "world_size": loader.world_size,
    }
    loader.close()
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.barrier()
dist.destroy_process_group()
"""


class Indexed:
    """`n` samples of one small JPEG whose target is the sample index, so the
    labels of a batch reveal which indices the loader chose."""

    def __init__(self, path: str, n: int = N):
        self.samples = [(path, i) for i in range(n)]

    def __len__(self):
        return len(self.samples)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(
    script: str,
    *args: str,
    nproc: int = WORLD,
    timeout: float = 150,
    cwd: str | None = None,
) -> subprocess.CompletedProcess:
    """Runs `script` under `torchrun --nproc_per_node=nproc` on CPU; kills
    the whole process group on a timeout."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        script,
        *args,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"torchrun hung for {timeout} s:\n{out}\n{err}") from None
    assert proc.returncode == 0, (
        f"torchrun failed ({proc.returncode}):\n{out}\n{err[-4000:]}"
    )
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def reference(
    shuffle: bool, drop_last: bool, batch_size: int, rank: int, epoch: int, n: int = N
) -> list[int]:
    """The indices a DataLoader over DistributedSampler yields on `rank`:
    the sampler's order, without the last partial batch under drop_last
    (Loader passes drop_last to both, as a user would)."""
    s = DistributedSampler(
        range(n),
        num_replicas=WORLD,
        rank=rank,
        shuffle=shuffle,
        seed=SEED,
        drop_last=drop_last,
    )
    s.set_epoch(epoch)
    order = list(s)
    if drop_last:
        order = order[: len(order) // batch_size * batch_size]
    return order


def assert_shards(orders: list[list[int]], shuffle, drop_last, batch_size, epoch):
    """Each rank's indices are what DistributedSampler's rank gets: the same
    without shuffle; with it, as many, and rank r's j-th is position
    j * WORLD + r of one order of the epoch, a permutation of the samples
    padded by repeating its start (cut short with drop_last)."""
    padded = {}
    for r, order in enumerate(orders):
        want = reference(shuffle, drop_last, batch_size, r, epoch)
        if shuffle:
            assert len(order) == len(want), (r, epoch)
        else:
            assert order == want, (r, epoch)
        padded.update({j * WORLD + r: i for j, i in enumerate(order)})
    whole = [padded[g] for g in range(len(padded))]
    if drop_last:
        assert len(set(whole)) == len(whole)
    else:
        assert sorted(whole[:N]) == list(range(N))
        assert whole[N:] == whole[: len(whole) - N]


@pytest.fixture(scope="module")
def jpeg(tmp_path_factory):
    p = tmp_path_factory.mktemp("dist") / "one.jpg"
    p.write_bytes(jpeg_bytes("baseline", 24, 24))
    return str(p)


@pytest.fixture(scope="module")
def ranks(jpeg, tmp_path_factory):
    """What each torchrun worker saw: {rank: {config: result}}."""
    out = tmp_path_factory.mktemp("dist-out")
    script = out / "worker.py"
    script.write_text(WORKER)
    torchrun(str(script), jpeg, str(out), str(N), str(SEED), json.dumps(CONFIGS))
    result = {}
    for r in range(WORLD):
        with open(out / f"rank{r}.json") as f:
            result[r] = json.load(f)
    return result


@pytest.mark.parametrize("shuffle,drop_last,batch_size", CONFIGS)
def test_torchrun_ranks_match_distributed_sampler(
    ranks, shuffle, drop_last, batch_size
):
    key = f"{shuffle}-{drop_last}-{batch_size}"
    for epoch in (0, 1):
        union = collections.Counter()
        expected_union = collections.Counter()
        for r in range(WORLD):
            got = ranks[r][key]
            assert got["rank"] == r and got["world_size"] == WORLD
            order = got["epochs"][epoch]["order"]
            want = reference(shuffle, drop_last, batch_size, r, epoch)
            sizes = got["epochs"][epoch]["sizes"]
            assert all(s == batch_size for s in sizes[:-1])
            assert got["len"] == len(sizes)
            union.update(order)
            expected_union.update(want)
        orders = [ranks[r][key]["epochs"][epoch]["order"] for r in range(WORLD)]
        assert_shards(orders, shuffle, drop_last, batch_size, epoch)
        # No index is seen twice except the padding DistributedSampler adds.
        assert sum(union.values()) == sum(expected_union.values())
        if drop_last:
            assert max(union.values()) == 1
        else:
            assert set(union) == set(range(N))
            assert sum(union.values()) - N == (-N) % WORLD
    if shuffle:
        e0 = ranks[0][key]["epochs"][0]["order"]
        e1 = ranks[0][key]["epochs"][1]["order"]
        assert e0 != e1, "set_epoch did not change the shuffle"


def collect(loader, epochs=(0, 1)) -> list[list[int]]:
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        out.append([i for _, labels in loader for i in labels.tolist()])
    return out


@pytest.mark.parametrize(
    "shuffle,drop_last", [(False, False), (True, False), (True, True)]
)
def test_explicit_rank_and_world_size(jpeg, shuffle, drop_last):
    """No process group: rank= and world_size= alone shard the data."""
    for how in range(2):
        got_by_rank = []
        for r in range(WORLD):
            kwargs = {"rank": r, "world_size": WORLD}
            if how:
                kwargs["distributed"] = True
            with ringloader.Loader(
                Indexed(jpeg),
                batch_size=5,
                shuffle=shuffle,
                drop_last=drop_last,
                seed=SEED,
                num_threads=1,
                transform=SMALL,
                **kwargs,
            ) as loader:
                assert loader.distributed and loader.rank == r
                got = collect(loader)
                got_by_rank.append(got)
                assert len(loader) == -(-len(got[1]) // 5)
        for e in (0, 1):
            assert_shards([g[e] for g in got_by_rank], shuffle, drop_last, 5, e)
        if shuffle:
            assert got_by_rank[0][0] != got_by_rank[0][1]


@pytest.mark.parametrize("shuffle,drop_last", [(False, True), (True, False)])
def test_distributed_sampler_as_sampler(jpeg, shuffle, drop_last):
    """A user's own DistributedSampler: set_epoch is forwarded to it and the
    order is the sampler's."""
    for r in range(WORLD):
        dataset = Indexed(jpeg)
        sampler = DistributedSampler(
            dataset,
            num_replicas=WORLD,
            rank=r,
            shuffle=shuffle,
            seed=SEED,
            drop_last=drop_last,
        )
        with ringloader.Loader(
            dataset,
            batch_size=4,
            sampler=sampler,
            drop_last=drop_last,
            num_threads=1,
            transform=SMALL,
        ) as loader:
            got = collect(loader)
        assert got == [reference(shuffle, drop_last, 4, r, e) for e in (0, 1)]
        ref = torch.utils.data.DataLoader(
            range(N), batch_size=4, sampler=sampler, drop_last=drop_last
        )
        sampler.set_epoch(1)
        assert got[1] == [i for b in ref for i in b.tolist()]


def test_distributed_errors(jpeg):
    dataset = Indexed(jpeg)
    with pytest.raises(ValueError, match="init_process_group|rank"):
        ringloader.Loader(dataset, distributed=True, transform=SMALL)
    with pytest.raises(ValueError, match="rank"):
        ringloader.Loader(dataset, rank=2, world_size=2, transform=SMALL)
    sampler = DistributedSampler(dataset, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="sampler"):
        ringloader.Loader(
            dataset,
            sampler=sampler,
            distributed=True,
            rank=0,
            world_size=2,
            transform=SMALL,
        )


# ---- shuffle="runs": runs of consecutive samples, shuffled ----


def runs_of(order: list[int]) -> list[list[int]]:
    """order cut where it stops counting up by one."""
    out: list[list[int]] = []
    for i in order:
        if out and i == out[-1][-1] + 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def test_runs_shuffle_runs_of_consecutive_samples(jpeg):
    n = 100
    with ringloader.Loader(
        Indexed(jpeg, n), batch_size=8, shuffle="runs", seed=SEED, transform=SMALL
    ) as loader:
        e0, e1 = collect(loader)
        again = collect(loader)
    assert sorted(e0) == sorted(e1) == list(range(n))  # each sample once
    assert [e0, e1] == again  # a function of seed and epoch
    assert e0 != e1 and e0 != list(range(n))  # shuffled, anew each epoch
    for order in (e0, e1):
        pieces = runs_of(order)
        # Whole runs of 16 (the last one 4), each starting at a multiple of 16,
        # except where two runs happen to follow each other.
        assert all(p[0] % ringloader._sampling.RUN_LENGTH == 0 for p in pieces)
        assert len(pieces) < n // 8


@pytest.mark.parametrize("drop_last", [False, True])
def test_runs_split_across_ranks_keep_runs_whole(jpeg, drop_last):
    n, run = 75, ringloader._sampling.RUN_LENGTH
    got = []
    for r in range(WORLD):
        with ringloader.Loader(
            Indexed(jpeg, n),
            batch_size=4,
            shuffle="runs",
            drop_last=drop_last,
            seed=SEED,
            transform=SMALL,
            rank=r,
            world_size=WORLD,
        ) as loader:
            got.append(collect(loader, epochs=(0,))[0])
            assert len(loader) == -(-len(got[-1]) // 4)
    # As DistributedSampler: ceil(n / world) each (padded with repeats from
    # the start), or floor with drop_last, whose last short batch goes too.
    per_rank = n // WORLD if drop_last else -(-n // WORLD)
    yielded = per_rank // 4 * 4 if drop_last else per_rank
    assert [len(g) for g in got] == [yielded] * WORLD
    seen = got[0] + got[1]
    if drop_last:
        assert len(set(seen)) == len(seen)
    else:
        assert set(seen) == set(range(n))
    for g in got:
        pieces = runs_of(g)  # a rank's part may start inside a run
        assert all(p[0] % run == 0 for p in pieces[1:]), pieces


def test_shuffle_must_be_a_bool_runs_or_stream(jpeg):
    with pytest.raises(ValueError, match='shuffle must be a bool, "runs" or "stream"'):
        ringloader.Loader(Indexed(jpeg), shuffle="yes")


def test_dataloader_takes_shuffle_runs(jpeg):
    import torchvision.transforms as TV

    tf = TV.Compose([TV.Resize((8, 8)), TV.PILToTensor()])
    ds = ringloader.FileList([jpeg] * 40, list(range(40)), transform=tf)
    loader = ringloader.DataLoader(ds, batch_size=8, shuffle="runs")
    assert isinstance(loader, ringloader.Loader) and loader.runs
    order = [i for _, labels in loader for i in labels.tolist()]
    assert sorted(order) == list(range(40))
    assert all(p[0] % ringloader._sampling.RUN_LENGTH == 0 for p in runs_of(order))


def test_dataloader_falling_back_shuffles_plainly_with_runs(jpeg):
    ds = Indexed(jpeg, 10)  # no tensor transform: torch's DataLoader reads it
    with pytest.warns(ringloader.FallbackWarning, match='shuffle="runs" is plain'):
        loader = ringloader.DataLoader(ds, batch_size=2, shuffle="runs")
    assert isinstance(loader.sampler, torch.utils.data.RandomSampler)
