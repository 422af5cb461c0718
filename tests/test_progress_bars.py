"""The datasets' progress bars (presigning S3 URLs, indexing a folder):
drawn only when the dataset's ``progress`` allows it, and by the first
rank of a distributed job only (torch.distributed's rank, else the rank
the launchers export). The S3 objects are read through a Loader from
moto's S3 server, with the bar's threshold lowered to a few objects."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile

import pytest
import ringloader
from rlbench.servers import MotoS3, free_port
from ringloader import _core
from ringloader import transforms as T
from ringloader.datasets import FileList, TarShards, build_index
from ringloader.datasets import presign as presign_module

from images import jpeg_bytes
from subproc import HERE

SMALL = T.Resize((8, 8))
BAR = "presigning S3 URLs"
RANK_VARS = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID")
N = 4  # objects, and shards


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """Bucket "bars": img/0.jpg.. (N images) and tar/0.tar.. (N shards of
    one labelled image each)."""
    base = tmp_path_factory.mktemp("bars")
    files = {}
    for i in range(N):
        blob = jpeg_bytes("baseline", 40, 50, seed=i)
        files[f"img/{i}.jpg"] = blob
        tar = base / f"{i}.tar"
        with tarfile.open(tar, "w") as tf:
            for name, data in ((f"s{i}.jpg", blob), (f"s{i}.cls", b"%d" % i)):
                (base / name).write_bytes(data)
                tf.add(base / name, arcname=name)
        files[f"tar/{i}.tar"] = tar
    with MotoS3() as server:
        server.upload("bars", files)
        yield server


@pytest.fixture
def no_rank(monkeypatch):
    """No launcher's rank in the environment, and a bar from N objects,
    presigned as with a libcurl older than 7.75 (else the C source signs
    each GET and nothing is presigned: no bar)."""
    for name in RANK_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(presign_module, "PRESIGN_BAR", N)
    monkeypatch.setattr(_core, "http_sigv4", lambda: False)


def _dataset(kind: str, s3, tmp_path, **kw):
    if kind == "files":
        names = [f"s3://bars/img/{i}.jpg" for i in range(N)]
        return FileList(names, list(range(N)), **kw)
    return TarShards(f"s3://bars/tar/{{0..{N - 1}}}.tar", cache_dir=tmp_path, **kw)


def _read(kind: str, s3, tmp_path, **kw) -> None:
    """One epoch of the dataset through a Loader (which presigns the URLs
    when it starts), checking that the images did come."""
    with s3.environ():
        ds = _dataset(kind, s3, tmp_path, **kw)
        with ringloader.Loader(ds, batch_size=N, transform=SMALL) as loader:
            (images, labels), *rest = list(loader)
    assert not rest and sorted(labels.tolist()) == list(range(N))


@pytest.mark.parametrize("kind", ["files", "shards"])
def test_presign_bar_obeys_the_datasets_progress(kind, s3, tmp_path, no_rank, capsys):
    _read(kind, s3, tmp_path)
    assert BAR in capsys.readouterr().err  # the default: progress=True
    _read(kind, s3, tmp_path, progress=False)
    assert BAR not in capsys.readouterr().err


@pytest.mark.parametrize(
    "env, drawn",
    [
        ({"RANK": "0", "LOCAL_RANK": "0"}, True),  # torchrun, Accelerate
        ({"RANK": "1", "LOCAL_RANK": "1"}, False),
        ({"RANK": "3", "LOCAL_RANK": "0"}, False),  # second node's first
        ({"LOCAL_RANK": "0", "NODE_RANK": "0"}, True),  # Lightning's launcher
        ({"LOCAL_RANK": "1"}, False),
        ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, False),
        ({"SLURM_PROCID": "0"}, True),
        ({"SLURM_PROCID": "2"}, False),
    ],
)
def test_presign_bar_on_the_first_rank_only(
    env, drawn, s3, tmp_path, no_rank, monkeypatch, capsys
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _read("files", s3, tmp_path)
    assert (BAR in capsys.readouterr().err) == drawn, env


# Run by each of two processes of a gloo group (argv: rank, port): reads
# its half of the FileList of S3 objects. No launcher's rank in the
# environment: torch.distributed's rank decides.
WORKER = r"""
import sys
import torch.distributed as dist
import ringloader
from ringloader import _core
from ringloader import transforms as T
from ringloader.datasets import FileList, presign

rank, port, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
_core.http_sigv4 = lambda: False  # presigned, as with a libcurl before 7.75
dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
)
presign.PRESIGN_BAR = n
ds = FileList([f"s3://bars/img/{i}.jpg" for i in range(n)], list(range(n)))
with ringloader.Loader(
    ds, batch_size=n, distributed=True, transform=T.Resize((8, 8))
) as loader:
    labels = [int(v) for _, batch in loader for v in batch]
print("labels", sorted(labels))
dist.barrier()
dist.destroy_process_group()
"""


def test_presign_bar_on_torch_distributed_rank_zero_only(s3, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
    env.update(s3.env(), PYTHONPATH=HERE)
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(rank), port, str(N)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in (0, 1)
    ]
    outs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        assert proc.returncode == 0, err[-3000:]
        outs.append((out, err))
    # Each rank read its half (DistributedSampler's: 0, 2 and 1, 3)...
    assert [out.split("\n")[-2] for out, _ in outs] == [
        "labels [0, 2]",
        "labels [1, 3]",
    ]
    # ...and only rank 0 drew the bar.
    assert [BAR in err for _, err in outs] == [True, False]


def test_index_bar_on_the_first_rank_only(tmp_path, monkeypatch, capsys):
    for name in RANK_VARS:
        monkeypatch.delenv(name, raising=False)
    for c in range(2):
        (tmp_path / "root" / f"c{c}").mkdir(parents=True)
        (tmp_path / "root" / f"c{c}" / "a.jpg").write_bytes(
            jpeg_bytes("baseline", 8, 8)
        )
    build_index(tmp_path / "root", tmp_path / "cache0", progress=True)
    assert "indexing" in capsys.readouterr().err
    monkeypatch.setenv("RANK", "1")
    build_index(tmp_path / "root", tmp_path / "cache1", progress=True)
    assert "indexing" not in capsys.readouterr().err
