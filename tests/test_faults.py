"""Injected I/O faults (RINGLOADER_IO_FAULTS, a test hook of the C I/O
layer) seen from the Loader: short reads, EAGAIN and EINTR leave every batch
bit-identical; EIO raises OSError naming the file. Each run is a child
interpreter, since the variable is read once per process."""

from __future__ import annotations

import errno
import json

import pytest
from images import jpeg_bytes
from subproc import run_python

RUN = r"""
import hashlib, json, sys
import ringloader
from ringloader import transforms as T

paths = json.loads(sys.argv[1])

class DS:
    samples = [(p, i) for i, p in enumerate(paths)]

out = {}
for io in ("pread", "io_uring"):
    loader = ringloader.Loader(DS, batch_size=5, num_threads=2, io=io,
                               transform=T.Compose([T.RandomResizedCrop(48),
                                                    T.RandomHorizontalFlip()]))
    out[io] = {"backend": loader.io_backend}
    for epoch in range(2):
        h = hashlib.sha256()
        try:
            for images, labels in loader:
                h.update(images.numpy().tobytes())
                h.update(labels.numpy().tobytes())
            out[io][f"epoch{epoch}"] = h.hexdigest()
        except OSError as e:
            out[io][f"epoch{epoch}"] = ["OSError", e.errno, e.filename]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    paths = []
    for i in range(40):
        p = d / f"{i:02d}.jpg"
        # Sizes from 2 KB to ~100 KB, so reads split at many places.
        p.write_bytes(jpeg_bytes("baseline", 40 + 9 * i, 60 + 5 * i, seed=i))
        paths.append(str(p))
    return paths


def run(files, faults):
    """{backend asked: {backend, epoch0, epoch1}} under `faults`."""
    env = {"RINGLOADER_IO_FAULTS": faults} if faults else {}
    proc = run_python(RUN, json.dumps(files), timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def clean(files):
    out = run(files, None)
    for res in out.values():
        assert isinstance(res["epoch0"], str) and isinstance(res["epoch1"], str)
    return out


def test_retried_faults_give_identical_batches(files, clean):
    faulty = run(files, "short=0.4,eagain=0.15,eintr=0.15,seed=7")
    assert faulty == clean
    assert clean["pread"]["epoch0"] == clean["io_uring"]["epoch0"]


def test_eio_is_an_oserror_naming_the_file(files, clean):
    out = run(files, "short=0.2,eintr=0.1,eio=0.3,seed=3")
    for io in ("pread", "io_uring"):
        assert out[io]["backend"] == clean[io]["backend"]
        for epoch in ("epoch0", "epoch1"):
            # 40 files at >= 30% each: some read fails in every epoch.
            kind, code, filename = out[io][epoch]
            assert kind == "OSError" and code == errno.EIO
            assert filename in files


def test_bad_setting_is_ignored(files, clean):
    assert run(files, "short=7") == clean


def test_direct_io_gives_identical_batches(tmp_path):
    """O_DIRECT reads (aligned, the extra bytes skipped) give the same
    batches as buffered ones, on both backends, also under retried faults
    and for byte ranges inside tar shards; where the file system refuses
    O_DIRECT (tmpfs) the loader reads buffered and counts it."""
    import hashlib
    import io
    import tarfile

    import ringloader
    from images import write_folder
    from ringloader import transforms as T

    root = write_folder(str(tmp_path / "d"), n_per_class=4)
    shard = tmp_path / "s.tar"
    ds = ringloader.ImageFolder(root)
    with tarfile.open(shard, "w") as tar:
        for k, (p, t) in enumerate(ds.samples):
            for ext, data in (("jpg", open(p, "rb").read()), ("cls", str(t).encode())):
                info = tarfile.TarInfo(f"{k:03d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    tf = T.Compose([T.RandomResizedCrop(40), T.RandomHorizontalFlip()])

    def digest(dataset, **kw):
        loader = ringloader.Loader(dataset, batch_size=5, transform=tf, **kw)
        h = hashlib.sha256()
        for x, y in loader:
            h.update(x.numpy().tobytes())
            h.update(y.numpy().tobytes())
        return h.hexdigest(), loader.stats()["direct_refused"]

    base, _ = digest(ds)
    for io_backend in ("io_uring", "pread"):
        got, refused = digest(ds, io=io_backend, direct_io=True)
        assert got == base
        assert refused in (0, len(ds))  # one file system: all or none
        assert (
            digest(ringloader.TarShards(str(shard)), io=io_backend, direct_io=True)[0]
            == base
        )
