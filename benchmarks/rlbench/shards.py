"""The benchmark data set as WebDataset tar shards, for the benchmarks of
remote shards (benchmarks/remote/compare.py).

:func:`build` writes the JPEGs of a :mod:`.data` folder into ``shards``
uncompressed tar files (``train-0000.tar``...), WebDataset layout: each
sample is ``KEY.jpg`` (the file's bytes as they are) and ``KEY.cls`` (its
class index as ASCII digits), the samples shuffled across the shards with
a fixed seed, so that a shard holds every class. Members are written in
ustar format with fixed owners and times: the shards are the same bytes
for the same folder and seed. A ``nosidecar/`` folder holds hard links to
the shards (copies where links fail), so that a server of the folder
serves the same shards with no index beside them (the streamed-index
measurement).

As data.py does, the shards are written in a temporary sibling and renamed
once complete, with a marker of their parameters; a second call with the
same parameters returns at once. Nothing here imports ringloader or torch.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import sys
import tarfile
import tempfile
from typing import Any

from ringloader.bench import data

__all__ = ["build", "pattern", "shard_names", "summary"]

MARKER = ".ringloader-shards.json"
FORMAT_VERSION = 1
NOSIDECAR = "nosidecar"


def shard_names(shards: int) -> list[str]:
    return [f"train-{i:04d}.tar" for i in range(shards)]


def pattern(shards: int) -> str:
    """The brace pattern of the shards' names: ``train-{0000..0015}.tar``."""
    return f"train-{{0000..{shards - 1:04d}}}.tar"


def _member(tf: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    info.mtime = 0
    info.mode = 0o644
    info.uname = info.gname = ""
    tf.addfile(info, io.BytesIO(payload))


def build(
    folder: str, out_dir: str, shards: int = 16, seed: int = 0, progress: bool = True
) -> str:
    """Writes the JPEGs of ``folder`` (an ImageFolder) as ``shards`` tar
    shards in ``out_dir`` (once); returns ``out_dir``. A folder of shards
    made from another folder or with other parameters is replaced; a
    non-empty directory that this function did not make is left alone and
    FileExistsError raised."""
    folder, out_dir = os.path.abspath(folder), os.path.abspath(out_dir)
    classes, samples = data.scan_folder(folder)
    if not samples:
        raise ValueError(f"{folder}: no JPEG files")
    params = {
        "format": FORMAT_VERSION,
        "folder": folder,
        "images": len(samples),
        "shards": shards,
        "seed": seed,
        "folder_marker": (data._read_marker(folder) or {}).get("params"),
    }
    marker = data._read_marker(out_dir, MARKER)
    if marker is not None and marker.get("params") == params:
        return out_dir
    if marker is None and os.path.isdir(out_dir) and os.listdir(out_dir):
        raise FileExistsError(
            f"{out_dir} is not empty and holds no shards of ours; choose another"
        )
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".building-shards-", dir=parent)
    os.chmod(tmp, 0o755)  # mkdtemp makes it 0700: servers may run as another user
    bar: Any = None
    if progress:
        with contextlib.suppress(ImportError):
            from tqdm import tqdm

            bar = tqdm(
                total=len(order),
                desc=f"writing {shards} shards",
                unit="img",
                leave=False,
                file=sys.stderr,
            )
    try:
        names = shard_names(shards)
        sizes = []
        for s, name in enumerate(names):
            path = os.path.join(tmp, name)
            with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
                for i in order[s::shards]:
                    src, label = samples[i]
                    key = os.path.splitext(os.path.basename(src))[0]
                    with open(src, "rb") as f:
                        _member(tf, key + ".jpg", f.read())
                    _member(tf, key + ".cls", str(label).encode())
                    if bar is not None:
                        bar.update(1)
            sizes.append(os.path.getsize(path))
        os.mkdir(os.path.join(tmp, NOSIDECAR))
        for name in names:
            link = os.path.join(tmp, NOSIDECAR, name)
            try:
                os.link(os.path.join(tmp, name), link)
            except OSError:
                shutil.copyfile(os.path.join(tmp, name), link)
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump(
                {
                    "params": params,
                    "classes": len(classes),
                    "bytes": sum(sizes),
                    "jpeg_bytes": sum(os.path.getsize(p) for p, _ in samples),
                },
                f,
                indent=1,
            )
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    return out_dir


def summary(out_dir: str) -> str:
    """ "16 shards of 5.1 MB (81.9 MB), 2000 samples (KEY.jpg + KEY.cls)"."""
    m = data._read_marker(out_dir, MARKER) or {}
    p = m.get("params", {})
    n, total = p.get("shards", 0), m.get("bytes", 0)
    return (
        f"{n} uncompressed tar shards of {total / max(1, n) / 1e6:.1f} MB on average "
        f"({total / 1e6:.1f} MB), {p.get('images', 0)} samples (KEY.jpg + KEY.cls) "
        f"shuffled across them (seed {p.get('seed', 0)}), from `{os.path.basename(str(p.get('folder', '?')).rstrip('/'))}`"
    )
