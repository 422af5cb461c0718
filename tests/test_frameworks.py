"""ringloader.DataLoader inside Lightning and Accelerate, on the CPU (gloo,
2 processes, 23 samples whose label is their index): both frameworks
rebuild it with their sharding and it stays a ringloader.DataLoader (no
FallbackWarning: the scripts make it an error); each rank gets what it
would get with torch's DataLoader. The scripts are in tests/frameworks/."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest
from torch.utils.data import DistributedSampler

from images import jpeg_bytes
from test_distributed import torchrun

pytest.importorskip("lightning")
pytest.importorskip("accelerate")

N = 23
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frameworks")


@pytest.fixture(scope="module")
def jpeg(tmp_path_factory):
    p = tmp_path_factory.mktemp("fw") / "one.jpg"
    p.write_bytes(jpeg_bytes("baseline", 24, 24))
    return str(p)


def run(script: str, *args: str, timeout: float = 240) -> None:
    proc = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def load(path) -> dict:
    with open(path) as f:
        return json.load(f)


def test_lightning_ddp_shards_as_distributed_sampler(jpeg, tmp_path):
    """use_distributed_sampler=True: Lightning's DistributedSampler
    (shuffle, seed_everything's seed) decides each rank's samples; before,
    every rank read all 23."""
    run("lightning_ddp.py", jpeg, str(tmp_path), "lightning-sampler")
    for rank in (0, 1):
        got = load(tmp_path / f"lightning-sampler-rank{rank}.json")
        assert got["type"] == "DataLoader ringloader.dataloader"
        for epoch in (0, 1):
            s = DistributedSampler(range(N), num_replicas=2, rank=rank, seed=3)
            s.set_epoch(epoch)
            want = list(s)
            seen = [i for e, labels in got["seen"] if e == epoch for i in labels]
            assert seen == want, (rank, epoch)


def test_lightning_ddp_without_its_sampler_refuses(jpeg, tmp_path):
    """use_distributed_sampler=False and no sampler: iterating says what to
    pass rather than every rank training on the whole data set."""
    run("lightning_ddp.py", jpeg, str(tmp_path), "plain")
    for rank in (0, 1):
        got = load(tmp_path / f"plain-rank{rank}.json")
        assert "nothing shards this loader's data" in got["error"]
        assert "DistributedSampler" in got["error"] and got["seen"] == []


def test_lightning_mid_epoch_resume_is_exact(jpeg, tmp_path):
    for phase in ("full", "stop", "resume"):
        run("lightning_resume.py", jpeg, str(tmp_path), phase)
    full = load(tmp_path / "resume-full.json")
    stop = load(tmp_path / "resume-stop.json")
    resumed = load(tmp_path / "resume-resume.json")
    assert len(full) == 12 and stop == full[:3]
    assert stop + resumed == full


def test_accelerate_one_process_as_torch(jpeg, tmp_path):
    """prepare() keeps ringloader's loader (also after skip_first_batches);
    the last batch ends the gradient-accumulation window; batches, skipped
    batches are torch's; a checkpoint (register_for_checkpointing) taken
    after 2 batches resumes with the 3rd."""
    for kind in ("ringloader", "torch"):
        run("accelerate_one.py", jpeg, str(tmp_path), kind)
    ours, ref = load(tmp_path / "ringloader.json"), load(tmp_path / "torch.json")
    assert ours["type"] == ours["skipped_type"] == "ringloader.dataloader"
    assert ours["syncs"] == ref["syncs"] == [False, True] * 3
    for key in ("full", "skipped"):
        assert ours[key] == ref[key], key
    assert ours["resumed"] == ours["full"][2:]


def test_accelerate_two_processes_shard_as_torch(jpeg, tmp_path):
    script = os.path.join(SCRIPTS, "accelerate_ddp.py")
    torchrun(script, jpeg, str(tmp_path))
    union: collections.Counter = collections.Counter()
    for rank in (0, 1):
        got = load(tmp_path / f"acc-rank{rank}.json")
        assert got["type"] == got["skipped_type"] == "ringloader.dataloader"
        assert got["len"] == 3
        assert got["epochs"] == got["ref"], rank  # torch's, batch for batch
        assert got["ends"] == [[False, False, True]] * 2
        assert got["skipped"] == got["epochs"][0][2:] or len(got["skipped"]) == 1
        union.update(i for b in got["epochs"][0] for i in b)
    assert set(union) == set(range(N)) and sum(union.values()) == 24


def test_accelerate_device_placement_is_the_loaders(jpeg, tmp_path):
    """Accelerate's device placement on a CUDA device (fake runtime): the
    ringloader.DataLoader that prepare_data_loader builds copies its batches
    to that device itself, and the batches equal the host path's; the loader
    skip_first_batches builds keeps the device. Before, the base loader
    stayed on the CPU and Accelerate copied each batch again."""
    sys.path.insert(0, os.path.join(os.path.dirname(SCRIPTS), "cuda"))
    import fake_gpu

    lib = fake_gpu.build(str(tmp_path / "fake_cudart.so"))
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(SCRIPTS, "accelerate_device.py"),
            jpeg,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, OMP_NUM_THREADS="1", RINGLOADER_CUDART=lib),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = load(tmp_path / "acc-device.json")
    assert got["shard"] and got["shard_device"] == "cuda:0"
    assert got["host_device"] == "cpu"
    assert got["base_type"] == "ringloader.dataloader"
    assert (got["base_device"], got["gpu"]) == ("cuda:0", "FakeGpu")
    assert got["batches"] == 6 and got["device_copies"] >= 6
    assert got["violations"] == 0
    assert got["labels_equal"] and got["images_equal"]
    assert got["skipped_base_device"] == "cuda:0"
    # (which 4: the shuffle's generator is shared and has moved on; the
    # order under skip_first_batches is checked in the one-process test)
    assert len(got["skipped_labels"]) == 4
