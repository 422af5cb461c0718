"""The other loaders: NVIDIA DALI's CPU pipeline, SPDL and FFCV, and the
virtual environment they are installed into.

They run only in a child process of the harness (``--python``, usually
the venv that :func:`make_venv` makes, which sees the packages of the
interpreter that made it, so that torch, torchvision and the ringloader
measured are the same for every contender, and pinned: no peer may replace
them). Each is configured for the pipelines of base.py and its notes
say how; a peer that cannot be installed or run is reported with its error.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ._bench import base, data

CROP, RESIZE, Contender = base.CROP, base.RESIZE, base.Contender

# Peer packages (also in benchmarks/requirements-peers.txt) and the Debian
# 12 packages they need: FFCV compiles against OpenCV and libturbojpeg,
# SPDL loads the FFmpeg 5 shared libraries.
PEER_PACKAGES = {"dali": "nvidia-dali-cuda120", "spdl": "spdl", "ffcv": "ffcv"}
APT_PACKAGES = [
    "pkg-config",
    "libjpeg62-turbo-dev",  # decode_bound.c
    "libopencv-dev",
    "libturbojpeg0-dev",  # ffcv build
    "libavutil57",
    "libavcodec59",
    "libavformat59",
    "libavfilter8",  # spdl
    "libavdevice59",
    "libswscale6",
    "libswresample4",
]


class Dali(Contender):
    packages = ("nvidia-dali-cuda120",)

    def load(self) -> None:
        import nvidia.dali.fn  # noqa: F401
        from nvidia.dali.plugin.pytorch import DALIGenericIterator  # noqa: F401

    def build(self) -> None:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        s, train = self.spec, self.train
        if s.images is None:
            where: dict[str, Any] = {"file_root": s.data}
        else:
            picked = self.samples()
            where = {"files": [p for p, _ in picked], "labels": [c for _, c in picked]}

        @pipeline_def(
            batch_size=s.batch_size,
            num_threads=s.threads,
            device_id=None,
            seed=s.seed + 1,
        )
        def pipe():  # type: ignore[no-untyped-def]
            jpegs, labels = fn.readers.file(
                **where, random_shuffle=train, name="Reader"
            )
            if train:
                images = fn.decoders.image_random_crop(
                    jpegs,
                    device="cpu",
                    output_type=types.RGB,
                    random_area=[0.08, 1.0],
                    random_aspect_ratio=[3 / 4, 4 / 3],
                )
                images = fn.resize(images, resize_x=CROP, resize_y=CROP)
                images = fn.flip(images, horizontal=fn.random.coin_flip())
            else:
                images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
                images = fn.resize(images, resize_shorter=RESIZE)
                images = fn.crop(images, crop=(CROP, CROP))
            return fn.transpose(images, perm=[2, 0, 1]), labels  # HWC -> CHW

        self.pipe = pipe()
        self.pipe.build()
        self.loader = DALIGenericIterator(
            [self.pipe],
            ["images", "labels"],
            reader_name="Reader",
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=True,
        )
        self.notes.append(
            f"device_id=None (CPU only), num_threads={s.threads}, fn.readers.file + "
            "fn.decoders.image_random_crop / fn.decoders.image + fn.resize (linear, "
            "antialiased) + fn.flip / fn.crop + fn.transpose to CHW, DALIGenericIterator"
        )

    def epoch(self, e: int):  # type: ignore[no-untyped-def]
        for out in self.loader:
            yield out[0]["images"], out[0]["labels"].view(-1)

    def batches(self) -> None:
        return None


def random_resized_crop_box(
    width: int, height: int, rnd: random.Random
) -> tuple[int, int, int, int]:
    """(x, y, w, h) of a RandomResizedCrop box (scale 0.08-1, ratio 3/4-4/3),
    drawn as torchvision does."""
    area = width * height
    log_lo, log_hi = math.log(3 / 4), math.log(4 / 3)
    for _ in range(10):
        target = area * rnd.uniform(0.08, 1.0)
        aspect = math.exp(rnd.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rnd.randint(0, width - w), rnd.randint(0, height - h), w, h
    ratio = width / height
    if ratio < 3 / 4:
        w, h = width, int(round(width * 4 / 3))
    elif ratio > 4 / 3:
        w, h = int(round(height * 4 / 3)), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


class Spdl(Contender):
    packages = ("spdl", "spdl_io", "spdl_core")

    def load(self) -> None:
        import spdl.io
        import spdl.io.utils
        import spdl.pipeline  # noqa: F401

        spdl.io.demux_image  # noqa: B018 - loads the FFmpeg bindings
        avcodec = spdl.io.utils.get_ffmpeg_versions()["libavcodec"]
        self.extra["ffmpeg"] = ".".join(str(v) for v in avcodec)

    def build(self) -> None:
        s = self.spec
        self.items = self.samples()
        self.notes.append(
            f"PipelineBuilder: decode stage concurrency={s.threads} on build(num_threads="
            f"{s.threads}), per image demux_image + decode_packets with an FFmpeg filter "
            "(crop, scale flags=bilinear, hflip, rgb24), aggregate, convert_frames to one "
            "NHWC batch, then permute to NCHW (a copy) in torch"
        )

    def _decode(self, item: tuple[str, int, int]) -> tuple[Any, int]:
        import spdl.io

        path, label, seed = item
        packets = spdl.io.demux_image(path)
        w, h = packets.width, packets.height
        if self.train:
            rnd = random.Random(seed)
            x, y, cw, ch = random_resized_crop_box(w, h, rnd)
            flip = ",hflip" if rnd.random() < 0.5 else ""
            desc = f"crop={cw}:{ch}:{x}:{y},scale={CROP}:{CROP}:flags=bilinear{flip},format=rgb24"
        else:
            nw, nh = (
                (RESIZE, int(RESIZE * h / w))
                if w <= h
                else (int(RESIZE * w / h), RESIZE)
            )
            x, y = int(round((nw - CROP) / 2)), int(round((nh - CROP) / 2))
            desc = f"scale={nw}:{nh}:flags=bilinear,crop={CROP}:{CROP}:{x}:{y},format=rgb24"
        return spdl.io.decode_packets(packets, filter_desc=desc), label

    @staticmethod
    def _collate(items: list) -> tuple[Any, Any]:
        import spdl.io
        import torch

        images = spdl.io.to_torch(spdl.io.convert_frames([f for f, _ in items]))
        labels = torch.tensor([c for _, c in items], dtype=torch.int64)
        return images.permute(0, 3, 1, 2).contiguous(), labels

    def epoch(self, e: int):  # type: ignore[no-untyped-def]
        from spdl.pipeline import PipelineBuilder

        s = self.spec
        rnd = random.Random(s.seed * 1000003 + e)
        order = list(range(len(self.items)))
        if self.train:
            rnd.shuffle(order)
        work = [(*self.items[i], rnd.getrandbits(63)) for i in order]
        pipeline = (
            PipelineBuilder()
            .add_source(work)
            .pipe(self._decode, concurrency=s.threads)
            .aggregate(s.batch_size)
            .pipe(self._collate)
            .add_sink(s.prefetch)
            .build(num_threads=s.threads)
        )
        with pipeline.auto_stop():
            yield from pipeline

    def batches(self) -> int:
        return -(-len(self.items) // self.spec.batch_size)


class Ffcv(Contender):
    packages = ("ffcv", "numba", "opencv-python")

    def load(self) -> None:
        import ffcv.fields.decoders  # noqa: F401
        import ffcv.loader  # noqa: F401
        import ffcv.transforms  # noqa: F401
        import ffcv.writer  # noqa: F401

    def _convert(self, beton: str) -> None:
        """The folder to a .beton file, once per command (timed apart)."""
        import torch
        from ffcv.fields import IntField, RGBImageField
        from ffcv.writer import DatasetWriter
        from torchvision.datasets import ImageFolder

        s = self.spec
        t0 = time.perf_counter()
        fields = {
            "image": RGBImageField(write_mode="jpg", jpeg_quality=90),
            "label": IntField(),
        }
        writer = DatasetWriter(beton + ".tmp", fields, num_workers=s.threads)
        ds: Any = ImageFolder(s.data)
        if s.images is not None:
            ds = torch.utils.data.Subset(ds, data.spread(len(ds), s.images))
        writer.from_indexed_dataset(ds)
        os.replace(beton + ".tmp", beton)
        self.extra["conversion_s"] = time.perf_counter() - t0

    def build(self) -> None:
        from ffcv.fields.decoders import (
            CenterCropRGBImageDecoder,
            IntDecoder,
            RandomResizedCropRGBImageDecoder,
        )
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage

        s = self.spec
        beton = os.path.join(s.workdir, "data.beton")  # removed by compare.py at start
        if os.path.exists(beton):
            self.extra["conversion_reused"] = True
        else:
            self._convert(beton)
        self.extra["beton_mb"] = os.path.getsize(beton) / 1e6
        if self.train:
            ops = [
                RandomResizedCropRGBImageDecoder((CROP, CROP)),
                RandomHorizontalFlip(),
            ]
        else:
            ops = [CenterCropRGBImageDecoder((CROP, CROP), ratio=CROP / RESIZE)]
        self.loader = Loader(
            beton,
            batch_size=s.batch_size,
            num_workers=s.threads,
            order=OrderOption.RANDOM if self.train else OrderOption.SEQUENTIAL,
            os_cache=True,
            drop_last=False,
            seed=s.seed,
            pipelines={
                "image": ops + [ToTensor(), ToTorchImage(channels_last=False)],
                "label": [IntDecoder(), ToTensor()],
            },
        )
        self.notes.append(
            "the folder is converted once to a .beton file (RGBImageField write_mode='jpg', "
            "jpeg_quality=90: FFCV decodes and re-encodes every image, full size); "
            f"num_workers={s.threads}, os_cache=True; RandomResizedCropRGBImageDecoder / "
            "CenterCropRGBImageDecoder(ratio=224/256) (OpenCV INTER_AREA resize), "
            "ToTorchImage(channels_last=False)"
        )

    def epoch(self, e: int):  # type: ignore[no-untyped-def]
        for images, labels in self.loader:
            yield images, labels.view(-1)


FACTORIES = {"dali": Dali, "spdl": Spdl, "ffcv": Ffcv}  # contenders.register


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# The peers' venv sees this interpreter's packages: a venv made from a venv
# is made from the base interpreter, whose site-packages
# (--system-site-packages) hold neither the torch nor the ringloader being
# measured. site.addsitedir, unlike a plain path line, also reads the .pth
# files there (a venv that sees another's packages through one, as the
# Makefile's test-asan venv does).
_PTH = "ringloader-bench-parent.pth"


def make_venv(venv: str) -> Path:
    """Makes the peers' venv at ``venv`` (if new) seeing the packages of
    this interpreter after its own; returns its python."""
    import sysconfig

    root = Path(venv)
    python = root / "bin" / "python"
    if not python.exists():
        _log(f"setup: python -m venv --system-site-packages {root}")
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", str(root)],
            check=True,
        )
    paths = sysconfig.get_paths()
    dirs = list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(where, _PTH).write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)
    )
    return python


def setup(venv: str) -> dict[str, str]:
    """Makes the peers' venv and installs each peer into it (with the
    Debian packages they need, as root); returns the install errors by
    contender, also kept in VENV/compare-setup.json."""
    root = Path(venv)
    errors: dict[str, str] = {}
    if os.geteuid() == 0 and shutil.which("apt-get"):
        dpkg = [
            subprocess.run(["dpkg", "-s", p], capture_output=True) for p in APT_PACKAGES
        ]
        missing = [p for p, r in zip(APT_PACKAGES, dpkg) if r.returncode != 0]
        if missing:
            _log(f"setup: apt-get install {' '.join(missing)}")
            subprocess.run(["apt-get", "update", "-qq"], check=False)
            apt = ["apt-get", "install", "-y", "-qq", "--no-install-recommends"]
            subprocess.run(apt + missing, check=False)
    else:
        _log(
            f"setup: not root: make sure these Debian packages are installed: {' '.join(APT_PACKAGES)}"
        )
    make_venv(venv)
    import torch
    import torchvision

    pins = root / "torch-pins.txt"  # never let a peer replace the tested torch
    pins.write_text(
        f"torch=={torch.__version__.split('+')[0]}\n"
        f"torchvision=={torchvision.__version__.split('+')[0]}\n"
    )
    pip = [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(pins)]
    for name, package in PEER_PACKAGES.items():
        _log(f"setup: pip install {package}")
        proc = subprocess.run([*pip, package], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-30:]
            errors[name] = f"pip install {package} failed:\n" + "\n".join(tail)
            _log(errors[name])
    (root / "compare-setup.json").write_text(json.dumps(errors, indent=2))
    return errors


def setup_errors(venv: str) -> dict[str, str]:
    """The errors the last :func:`setup` of ``venv`` recorded."""
    try:
        return json.loads((Path(venv) / "compare-setup.json").read_text())
    except (OSError, ValueError):
        return {}
