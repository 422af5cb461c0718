"""The remote-shards benchmark (benchmarks/remote/compare.py): its shards,
the harness's measurement of servers and loader counters, and each
contender run in a child against real nginx and rclone S3 servers."""

from __future__ import annotations

import os
import tarfile

import pytest

import ringloader
from ringloader.bench import contenders, data, harness, system
from rlbench import remote, shards
from rlbench.servers import Nginx, RcloneS3, find_nginx

contenders.register(remote)  # as benchmarks/remote/compare.py does

BUILD = os.path.dirname(os.path.dirname(os.path.abspath(ringloader.__file__)))
IMAGES, CLASSES, SHARDS = 12, 3, 3


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory):
    top = tmp_path_factory.mktemp("remote-bench")
    folder = data.build(str(top / "images"), IMAGES, CLASSES, progress=False)
    return shards.build(folder, str(top / "shards"), shards=SHARDS, progress=False)


def test_shards_hold_every_image_once_with_its_label(shard_dir):
    folder = os.path.join(os.path.dirname(shard_dir), "images")
    _, samples = data.scan_folder(folder)
    want = {
        os.path.splitext(os.path.basename(p))[0]: (open(p, "rb").read(), c)
        for p, c in samples
    }
    seen = {}
    for name in shards.shard_names(SHARDS):
        with tarfile.open(os.path.join(shard_dir, name)) as tf:
            members = tf.getmembers()
            assert [m.name.rsplit(".", 1)[1] for m in members] == ["jpg", "cls"] * (
                len(members) // 2
            )
            for jpg, cls in zip(members[::2], members[1::2]):
                key = jpg.name[: -len(".jpg")]
                assert cls.name == key + ".cls" and key not in seen
                seen[key] = (
                    tf.extractfile(jpg).read(),
                    int(tf.extractfile(cls).read()),
                )
        assert os.path.samefile(
            os.path.join(shard_dir, name),
            os.path.join(shard_dir, shards.NOSIDECAR, name),
        )
    assert seen == want
    ds = ringloader.TarShards(os.path.join(shard_dir, shards.pattern(SHARDS)))
    assert len(ds) == IMAGES and sorted(ds.targets.tolist()) == sorted(
        c for _, c in want.values()
    )
    # the same parameters: the same folder, returned at once
    assert shards.build(folder, shard_dir, shards=SHARDS, progress=False) == shard_dir


def test_process_cpu_seconds_counts_another_process():
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ninput()",
        ],
        stdin=subprocess.PIPE,
    )
    try:
        import time

        time.sleep(1.0)
        assert system.process_cpu_seconds(proc.pid) >= 0.25
    finally:
        proc.communicate(b"\n", timeout=10)
    assert system.process_cpu_seconds(proc.pid) == 0.0  # gone


def test_every_contender_runs_against_the_servers(shard_dir, tmp_path):
    if find_nginx() is None:
        pytest.fail("nginx is missing: apt-get install nginx (CI installs it)")
    for name in ("webdataset", "s3fs", "s3torchconnector"):
        pytest.importorskip(name)
    pattern = shards.pattern(SHARDS)
    names = shards.shard_names(SHARDS)
    # the sidecars (<shard>.idx.npz) uploaded beside the shards, written
    # here whether or not another test wrote them first
    ringloader.TarShards(os.path.join(shard_dir, pattern), progress=False)
    saved = dict(os.environ)
    with Nginx(shard_dir) as nginx, RcloneS3() as s3:
        try:
            os.environ.update(remote.s3_env(s3.endpoint_url))
            files = {n: os.path.join(shard_dir, n) for n in names}
            files.update(
                {n + ".idx.npz": os.path.join(shard_dir, n + ".idx.npz") for n in names}
            )
            remote.upload(s3.endpoint_url, files, progress=False)
            where = {
                "local": os.path.join(shard_dir, pattern),
                "http": f"{nginx.url}/{pattern}",
                "s3": f"s3://{remote.BUCKET}/{pattern}",
            }
            specs = [
                harness.Spec(
                    c,
                    "train",
                    2,
                    shard_dir,
                    batch_size=4,
                    epochs=1,
                    warmup=1,
                    build=BUILD,
                    workdir=str(tmp_path),
                    options={
                        "shards": where[remote.STORE[c]],
                        "endpoint": s3.endpoint_url,
                    },
                    watch={"s3": s3.pid},
                )
                for c in remote.FACTORIES
            ]
            results = harness.run_rounds(
                specs, 1, harness.Runner(timeout=300), say=None
            )
        finally:
            os.environ.clear()
            os.environ.update(saved)
    for r in results:
        assert "error" not in r, (r["contender"], r.get("traceback", r.get("error")))
        assert r["images_per_epoch"] == IMAGES, r["contender"]
        assert set(r["watched_cpu_s_per_image"]) == {"s3"}
        if r["contender"].startswith("ringloader"):
            # Imported from the build (else an error), recorded by version and commit.
            assert r["ringloader_version"] == ringloader.__version__
            assert r["ringloader_commit"] == system.ringloader_commit(
                os.path.join(BUILD, "ringloader")
            )
            assert r["counters_per_image"]["io_cpu_s"] >= 0
    by = {r["contender"]: r for r in results}
    # rclone serves 12 images within a clock tick: its CPU time is read (the
    # key is there) but may be 0 here; test_process_cpu_seconds_counts_
    # another_process checks the reading itself.
    assert by["ringloader-s3"]["watched_cpu_s_per_image"]["s3"] >= 0
    assert by["ringloader-http"]["io_backend"] == "http"


def _compare_script():
    """benchmarks/remote/compare.py as a module (it is a script, not in the
    package)."""
    import importlib.util

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(repo, "benchmarks", "remote", "compare.py")
    spec = importlib.util.spec_from_file_location("remote_compare", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_server_cpus_are_taken_from_the_contenders(monkeypatch):
    compare = _compare_script()
    monkeypatch.setattr(system, "cpus", lambda: [0, 1, 2, 3])
    args = compare.parse_args(["--server-cpus", "2-3"])
    assert (args.server_cpus, args.cpus, args.threads) == ([2, 3], [0, 1], 2)
    args = compare.parse_args(["--server-cpus", "0,3", "--threads", "1"])
    assert (args.server_cpus, args.cpus, args.threads) == ([0, 3], [1, 2], 1)
    args = compare.parse_args([])
    assert (args.server_cpus, args.cpus, args.threads) == ([], [0, 1, 2, 3], 4)
    # all the CPUs, one not usable, not numbers, one not usable among others
    for bad in ("0-3", "5", "one", "-1", "1,9"):
        with pytest.raises(SystemExit):
            compare.parse_args(["--server-cpus", bad])
    with pytest.raises(SystemExit):  # 2 CPUs left, 3 threads asked
        compare.parse_args(["--server-cpus", "2-3", "--threads", "3"])


def test_pin_keeps_every_thread_of_a_server_on_its_cpus():
    import subprocess
    import sys

    from rlbench.servers import pin

    cpu = system.cpus()[-1]
    code = (
        "import threading, os, sys\n"
        "ev = threading.Event()\n"
        "ts = [threading.Thread(target=ev.wait) for _ in range(3)]\n"
        "[t.start() for t in ts]\n"
        "print('up', flush=True)\n"
        "sys.stdin.readline()\n"  # pinned now: one more thread, then report
        "t = threading.Thread(target=ev.wait); t.start()\n"
        "print(sorted({tuple(sorted(os.sched_getaffinity(int(x))))"
        " for x in os.listdir('/proc/self/task')}), flush=True)\n"
        "ev.set()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "up"
        assert len(os.listdir(f"/proc/{proc.pid}/task")) >= 4
        pin(proc.pid, [cpu])
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == str([(cpu,)])
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
