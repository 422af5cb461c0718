#!/usr/bin/env python3
"""Side-by-side benchmark of ringloader and the loaders people would otherwise use.

Every contender runs in a fresh subprocess pinned (``os.sched_setaffinity``)
to the same N cores, on the same ImageNet-like JPEG folder, with the same
batch size and the same output: uint8 NCHW 224x224 batches from

* the train pipeline: RandomResizedCrop(224) + RandomHorizontalFlip(), shuffled;
* the eval pipeline:  Resize(256) + CenterCrop(224), in order.

Each run does one warm-up epoch, then ``--epochs`` timed epochs, and records
images/s, CPU seconds per image (the contender's whole process tree), peak
resident memory of the process tree (sampled by this process) and the time
to the first batch.  The results go to RESULTS.md with plots in plots/.

Contenders (``--contenders``, comma separated):

  dataloader        torch DataLoader + torchvision ImageFolder (PIL decode)
  dataloader-tvio   torch DataLoader, torchvision.io.decode_jpeg + v2 transforms
  dali              NVIDIA DALI CPU pipeline
  spdl              SPDL pipeline, FFmpeg image decode
  ffcv              FFCV (the folder is first converted to a .beton file)
  decode-bound      full-image libjpeg-turbo decode from memory (decode_bound.c)
  ringloader        ringloader, uint8
  ringloader-float  ringloader, float32 normalised (ToDtype + Normalize)

Peers are installed into their own virtual environment (``--setup``; it reuses
torch/torchvision from the system site-packages).  A contender that cannot be
installed or run is reported with its error.

  python benchmarks/compare.py --setup            # full run, ~10 min on 2 cores
  python benchmarks/compare.py --images 300 --epochs 1 --no-scaling   # quick look
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULT_TAG = "@@compare-result@@ "
DEFAULT_VENV = "/tmp/bench-venv"
WORK_DIR = Path("/tmp/ringloader-compare")

CONTENDERS: dict[str, str] = {
    "dataloader": "DataLoader + ImageFolder (PIL)",
    "dataloader-tvio": "DataLoader + torchvision.io.decode_jpeg",
    "dali": "DALI CPU pipeline",
    "spdl": "SPDL (FFmpeg decode)",
    "ffcv": "FFCV",
    "decode-bound": "decode-only bound (full libjpeg-turbo decode)",
    "ringloader": "ringloader uint8",
    "ringloader-float": "ringloader float32 normalised",
}
PIPELINES = ("train", "eval")
BASELINE = "dataloader"
BOUND = "decode-bound"

CROP = 224
RESIZE = 256
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

# Peer packages (also in requirements-peers.txt) and the Debian packages
# they need on Debian 12: FFCV compiles against OpenCV and libturbojpeg,
# SPDL loads the FFmpeg 5 shared libraries.
PEER_PACKAGES = {
    "dali": "nvidia-dali-cuda120",
    "spdl": "spdl",
    "ffcv": "ffcv",
}
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


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ===========================================================================
# Inside a contender's subprocess
# ===========================================================================


def scan_folder(root: str) -> list[tuple[str, int]]:
    """(path, class index) of every JPEG, in torchvision ImageFolder order."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for label, cls in enumerate(classes):
        for dirpath, _dirs, files in sorted(os.walk(os.path.join(root, cls))):
            for f in sorted(files):
                if f.lower().endswith((".jpg", ".jpeg")):
                    out.append((os.path.join(dirpath, f), label))
    return out


def random_resized_crop_box(
    width: int,
    height: int,
    rnd: random.Random,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """(x, y, w, h) of a RandomResizedCrop box, drawn as torchvision does."""
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rnd.uniform(*scale)
        aspect = math.exp(rnd.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rnd.randint(0, width - w), rnd.randint(0, height - h), w, h
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        w, h = int(round(height * ratio[1])), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def resize_short(width: int, height: int, short: int) -> tuple[int, int]:
    """Output (w, h) of torchvision's Resize(short) on a width x height image."""
    if width <= height:
        return short, int(short * height / width)
    return int(short * width / height), short


class Contender:
    """One loader under test: ``load`` imports, ``build`` makes the loader,
    ``epoch(e)`` iterates one epoch as (images, labels)."""

    float_output = False
    packages: tuple[str, ...] = ()
    notes: list[str]

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.train = args.pipeline == "train"
        self.notes = []
        self.extra: dict[str, Any] = {}

    def load(self) -> None:
        pass

    def build(self) -> None:
        raise NotImplementedError

    def epoch(self, e: int) -> Iterator[tuple[Any, Any]]:
        raise NotImplementedError


def _decode_jpeg_file(path: str):
    import torchvision.io as tio

    return tio.decode_jpeg(tio.read_file(path), mode=tio.ImageReadMode.RGB)


class TorchDataLoader(Contender):
    packages = ("torch", "torchvision", "pillow")

    def __init__(self, args: argparse.Namespace, decoder: str) -> None:
        super().__init__(args)
        self.decoder = decoder

    def load(self) -> None:
        global torch
        import torch
        import torchvision  # noqa: F401
        from torchvision.transforms import v2  # noqa: F401

    def build(self) -> None:
        from torchvision import datasets
        from torchvision.transforms import v2

        torch.manual_seed(self.args.seed)
        if self.train:
            steps = [
                v2.RandomResizedCrop(CROP, antialias=True),
                v2.RandomHorizontalFlip(),
            ]
        else:
            steps = [v2.Resize(RESIZE, antialias=True), v2.CenterCrop(CROP)]
        if self.decoder == "pil":
            tf = v2.Compose(steps + [v2.PILToTensor()])
            ds = datasets.ImageFolder(self.args.data, transform=tf)
        else:
            tf = v2.Compose(steps)
            ds = datasets.DatasetFolder(
                self.args.data,
                loader=_decode_jpeg_file,
                extensions=(".jpg", ".jpeg"),
                transform=tf,
            )
        self.loader = torch.utils.data.DataLoader(
            ds,
            batch_size=self.args.batch_size,
            shuffle=self.train,
            num_workers=self.args.threads,
            pin_memory=False,
            persistent_workers=True,
        )
        self.notes.append(
            f"num_workers={self.args.threads}, persistent_workers=True, "
            "prefetch_factor=2 (default), pin_memory=False (pinning is a no-op "
            "without CUDA; with a GPU it is recommended and adds a copy)"
        )

    def epoch(self, e: int):
        return iter(self.loader)


class Dali(Contender):
    packages = ("nvidia-dali-cuda120",)

    def load(self) -> None:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.fn  # noqa: F401
        from nvidia.dali.plugin.pytorch import DALIGenericIterator  # noqa: F401

    def build(self) -> None:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        train = self.train

        @pipeline_def(
            batch_size=self.args.batch_size,
            num_threads=self.args.threads,
            device_id=None,
            seed=self.args.seed + 1,
        )
        def pipe():
            jpegs, labels = fn.readers.file(
                file_root=self.args.data, random_shuffle=train, name="Reader"
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
            images = fn.transpose(images, perm=[2, 0, 1])  # HWC -> CHW
            return images, labels

        self.pipe = pipe()
        self.pipe.build()
        self.iterator = DALIGenericIterator(
            [self.pipe],
            ["images", "labels"],
            reader_name="Reader",
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=True,
        )
        self.notes.append(
            f"device_id=None (CPU only), num_threads={self.args.threads}, "
            "fn.readers.file + fn.decoders.image_random_crop / fn.decoders.image "
            "+ fn.resize (linear, antialiased) + fn.flip / fn.crop + fn.transpose "
            "to CHW, DALIGenericIterator"
        )

    def epoch(self, e: int):
        for out in self.iterator:
            yield out[0]["images"], out[0]["labels"].view(-1)


class Spdl(Contender):
    packages = ("spdl", "spdl_io", "spdl_core")

    def load(self) -> None:
        global torch
        import spdl.io
        import spdl.pipeline  # noqa: F401
        import torch

        spdl.io.demux_image  # noqa: B018 - loads the FFmpeg bindings lazily below
        self.extra["ffmpeg"] = ".".join(
            str(v)
            for v in __import__("spdl.io.utils", fromlist=["x"]).get_ffmpeg_versions()[
                "libavcodec"
            ]
        )

    def build(self) -> None:
        self.samples = scan_folder(self.args.data)
        self.notes.append(
            f"PipelineBuilder: decode stage concurrency={self.args.threads} on "
            f"build(num_threads={self.args.threads}), per image demux_image + "
            "decode_packets with an FFmpeg filter (crop, scale flags=bilinear, "
            "hflip, rgb24), aggregate, convert_frames to one NHWC batch, then "
            "permute to NCHW (a copy) in torch"
        )

    def _decode(self, item):
        import spdl.io

        path, label, seed = item
        packets = spdl.io.demux_image(path)
        w, h = packets.width, packets.height
        if self.train:
            rnd = random.Random(seed)
            x, y, cw, ch = random_resized_crop_box(w, h, rnd)
            flip = ",hflip" if rnd.random() < 0.5 else ""
            desc = (
                f"crop={cw}:{ch}:{x}:{y},scale={CROP}:{CROP}:flags=bilinear"
                f"{flip},format=rgb24"
            )
        else:
            nw, nh = resize_short(w, h, RESIZE)
            x, y = int(round((nw - CROP) / 2)), int(round((nh - CROP) / 2))
            desc = (
                f"scale={nw}:{nh}:flags=bilinear,crop={CROP}:{CROP}:{x}:{y},"
                "format=rgb24"
            )
        return spdl.io.decode_packets(packets, filter_desc=desc), label

    @staticmethod
    def _collate(items):
        import spdl.io

        frames = [f for f, _ in items]
        images = spdl.io.to_torch(spdl.io.convert_frames(frames))
        images = images.permute(0, 3, 1, 2).contiguous()
        return images, torch.tensor([label for _, label in items], dtype=torch.int64)

    def epoch(self, e: int):
        from spdl.pipeline import PipelineBuilder

        rnd = random.Random(self.args.seed * 1000003 + e)
        order = list(range(len(self.samples)))
        if self.train:
            rnd.shuffle(order)
        items = [
            (self.samples[i][0], self.samples[i][1], rnd.getrandbits(63)) for i in order
        ]
        pipeline = (
            PipelineBuilder()
            .add_source(items)
            .pipe(self._decode, concurrency=self.args.threads)
            .aggregate(self.args.batch_size)
            .pipe(self._collate)
            .add_sink(self.args.prefetch)
            .build(num_threads=self.args.threads)
        )
        with pipeline.auto_stop():
            yield from pipeline


class Ffcv(Contender):
    packages = ("ffcv", "numba", "opencv-python")

    def load(self) -> None:
        import ffcv  # noqa: F401
        import ffcv.fields.decoders  # noqa: F401
        import ffcv.loader  # noqa: F401
        import ffcv.transforms  # noqa: F401
        import ffcv.writer  # noqa: F401

    def build(self) -> None:
        from ffcv.fields import IntField, RGBImageField
        from ffcv.fields.decoders import (
            CenterCropRGBImageDecoder,
            IntDecoder,
            RandomResizedCropRGBImageDecoder,
        )
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage
        from ffcv.writer import DatasetWriter

        beton = self.args.ffcv_file
        if not os.path.exists(beton):
            from torchvision.datasets import ImageFolder

            t0 = time.perf_counter()
            tmp = beton + ".tmp"
            writer = DatasetWriter(
                tmp,
                {
                    "image": RGBImageField(write_mode="jpg", jpeg_quality=90),
                    "label": IntField(),
                },
                num_workers=self.args.threads,
            )
            writer.from_indexed_dataset(ImageFolder(self.args.data))
            os.replace(tmp, beton)
            self.extra["conversion_s"] = time.perf_counter() - t0
        else:
            self.extra["conversion_reused"] = True
        self.extra["beton_mb"] = os.path.getsize(beton) / 1e6
        if self.train:
            decoder = RandomResizedCropRGBImageDecoder((CROP, CROP))
            image_ops = [decoder, RandomHorizontalFlip()]
        else:
            image_ops = [CenterCropRGBImageDecoder((CROP, CROP), ratio=CROP / RESIZE)]
        image_ops += [ToTensor(), ToTorchImage(channels_last=False)]
        self.loader = Loader(
            beton,
            batch_size=self.args.batch_size,
            num_workers=self.args.threads,
            order=OrderOption.RANDOM if self.train else OrderOption.SEQUENTIAL,
            os_cache=True,
            drop_last=False,
            seed=self.args.seed,
            pipelines={"image": image_ops, "label": [IntDecoder(), ToTensor()]},
        )
        self.notes.append(
            "the folder is converted once to a .beton file (RGBImageField "
            "write_mode='jpg', jpeg_quality=90: FFCV decodes and re-encodes every "
            "image, full size); num_workers="
            f"{self.args.threads}, os_cache=True; RandomResizedCropRGBImageDecoder / "
            "CenterCropRGBImageDecoder(ratio=224/256) (OpenCV INTER_AREA resize), "
            "ToTorchImage(channels_last=False)"
        )

    def epoch(self, e: int):
        for images, labels in self.loader:
            yield images, labels.view(-1)


class Ringloader(Contender):
    packages = ("ringloader",)

    def __init__(self, args: argparse.Namespace, float_output: bool) -> None:
        super().__init__(args)
        self.float_output = float_output

    def load(self) -> None:
        global torch
        import ringloader
        import torch

        self.extra["ringloader_path"] = os.path.dirname(ringloader.__file__)
        with contextlib.suppress(Exception):
            self.extra["libjpeg_version"] = ringloader._core.libjpeg_version

    def build(self) -> None:
        import ringloader
        from ringloader import transforms as RT

        if self.train:
            steps = [RT.RandomResizedCrop(CROP), RT.RandomHorizontalFlip()]
        else:
            steps = [RT.Resize(RESIZE), RT.CenterCrop(CROP)]
        if self.float_output:
            for name in ("ToDtype", "Normalize"):
                if not hasattr(RT, name):
                    raise RuntimeError(
                        f"ringloader.transforms has no {name}: float normalised "
                        "output is not in this build of ringloader"
                    )
            steps += [RT.ToDtype(torch.float32, scale=True), RT.Normalize(MEAN, STD)]
        ds = ringloader.ImageFolder(self.args.data)
        self.loader = ringloader.Loader(
            ds,
            batch_size=self.args.batch_size,
            shuffle=self.train,
            num_threads=self.args.threads,
            prefetch=self.args.prefetch,
            seed=self.args.seed,
            transform=RT.Compose(steps),
        )
        self.extra["io_backend"] = self.loader.io_backend
        self.notes.append(
            f"num_threads={self.args.threads}, prefetch={self.args.prefetch}, "
            f"io={self.loader.io_backend}"
        )

    def epoch(self, e: int):
        self.loader.set_epoch(e)
        return iter(self.loader)


FACTORIES: dict[str, Callable[[argparse.Namespace], Contender]] = {
    "dataloader": lambda a: TorchDataLoader(a, "pil"),
    "dataloader-tvio": lambda a: TorchDataLoader(a, "decode_jpeg"),
    "dali": Dali,
    "spdl": Spdl,
    "ffcv": Ffcv,
    "ringloader": lambda a: Ringloader(a, False),
    "ringloader-float": lambda a: Ringloader(a, True),
}


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process, its reaped children and its
    live descendants (with what they reaped)."""
    import resource

    import psutil

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        total += ru.ru_utime + ru.ru_stime
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_rss_mb() -> float:
    import psutil

    me = psutil.Process()
    total = me.memory_info().rss
    for p in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


def package_versions(names: tuple[str, ...]) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for n in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[n] = metadata.version(n)
    return out


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    """Measure one contender on one pipeline (runs in the subprocess)."""
    result: dict[str, Any] = {
        "contender": args.child,
        "pipeline": args.pipeline,
        "threads": args.threads,
        "pid": os.getpid(),
        "loadavg_start": os.getloadavg()[0],
        "cpus": sorted(os.sched_getaffinity(0)),
    }
    phase = "import"
    c = FACTORIES[args.child](args)
    try:
        t0 = time.perf_counter()
        c.load()
        import torch as _torch  # every contender hands out torch tensors

        result["import_s"] = time.perf_counter() - t0
        result["versions"] = package_versions(c.packages)
        phase = "set-up"
        t_build = time.perf_counter()
        c.build()
        result["setup_s"] = time.perf_counter() - t_build
        result["rss_after_setup_mb"] = tree_rss_mb()
        phase = "run"
        expected_dtype = _torch.float32 if c.float_output else _torch.uint8
        epochs = []
        made_contiguous = False
        for e in range(1 + args.epochs):
            cpu0 = tree_cpu_seconds()
            t0 = time.perf_counter()
            first = None
            images_seen = batches = 0
            for images, labels in c.epoch(e):
                if first is None:
                    first = time.perf_counter() - t0
                if not images.is_contiguous():
                    images = images.contiguous()  # same output for everyone
                    made_contiguous = True
                if batches == 0:
                    shape = tuple(images.shape)
                    if (
                        images.dtype != expected_dtype
                        or len(shape) != 4
                        or shape[1:] != (3, CROP, CROP)
                    ):
                        raise RuntimeError(
                            f"unexpected batch {images.dtype} {shape}, want "
                            f"{expected_dtype} (N, 3, {CROP}, {CROP})"
                        )
                    result["batch"] = (
                        f"{images.dtype} {list(shape)}, labels {list(labels.shape)}"
                    )
                images_seen += int(images.shape[0])
                batches += 1
            wall = time.perf_counter() - t0
            epochs.append(
                {
                    "images": images_seen,
                    "batches": batches,
                    "wall_s": wall,
                    "cpu_s": tree_cpu_seconds() - cpu0,
                    "first_batch_s": first,
                }
            )
            if e == 0:  # dataset conversion (FFCV) is reported on its own
                result["cold_first_batch_s"] = (
                    result["setup_s"]
                    - c.extra.get("conversion_s", 0.0)
                    + (first or 0.0)
                )
            log(
                f"  [{args.child}/{args.pipeline}/{args.threads}t] epoch {e}"
                f"{' (warm-up)' if e == 0 else ''}: {images_seen} images, "
                f"{images_seen / wall:.0f} img/s"
            )
        timed = epochs[1:]
        n = sum(ep["images"] for ep in timed)
        wall = sum(ep["wall_s"] for ep in timed)
        result.update(
            {
                "images_per_epoch": epochs[0]["images"],
                "images_per_s": n / wall,
                "cpu_s_per_image": sum(ep["cpu_s"] for ep in timed) / n,
                "first_batch_s": statistics.median(ep["first_batch_s"] for ep in timed),
                "epochs": epochs,
            }
        )
        if made_contiguous:
            c.notes.append(
                "batches came out non-contiguous; the harness made them "
                "contiguous (timed)"
            )
    except BaseException as exc:  # noqa: BLE001 - reported in RESULTS.md
        result["error"] = f"{type(exc).__name__}: {exc}".strip()
        result["error_phase"] = phase
        result["traceback"] = traceback.format_exc()
        log(result["traceback"])
    result["notes"] = c.notes
    result.update(c.extra)
    return result


# ===========================================================================
# The parent: runs the contenders and writes the report
# ===========================================================================


def smaps_pss_kb(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class TreeSampler:
    """Peak RSS (and PSS) of a process and its descendants, sampled."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.peak_rss = 0
        self.peak_pss_kb = 0
        self.max_procs = 0
        self._n = 0

    def sample(self) -> None:
        import psutil

        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            return
        rss = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss)
        self.max_procs = max(self.max_procs, len(procs))
        self._n += 1
        if self._n % 3 == 1:  # smaps_rollup walks the page tables: less often
            pss = sum(v for v in (smaps_pss_kb(p.pid) for p in procs) if v)
            self.peak_pss_kb = max(self.peak_pss_kb, pss)


def run_measured(
    cmd: list[str], cpus: list[int], timeout: float, env: Optional[dict] = None
) -> dict[str, Any]:
    """Run ``cmd`` pinned to ``cpus`` in its own session; sample its tree's
    memory; return exit status, output, wall time and the rusage of the whole
    tree from wait4."""
    out_f = tempfile.TemporaryFile(mode="w+")
    err_f = tempfile.TemporaryFile(mode="w+")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=out_f,
        stderr=err_f,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    sampler = TreeSampler(proc.pid)
    status = rusage = None
    timed_out = False
    while True:
        pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            status, rusage = st, ru
            break
        sampler.sample()
        if time.perf_counter() - t0 > timeout:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.1)
    proc.returncode = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(ProcessLookupError):  # stray grandchildren
        os.killpg(proc.pid, signal.SIGKILL)
    out_f.seek(0)
    err_f.seek(0)
    return {
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "stdout": out_f.read(),
        "stderr": err_f.read(),
        "wall_s": time.perf_counter() - t0,
        "tree_cpu_s": rusage.ru_utime + rusage.ru_stime,
        "peak_rss_mb": sampler.peak_rss / 2**20,
        "peak_pss_mb": sampler.peak_pss_kb / 1024,
        "max_processes": sampler.max_procs,
    }


def median_run(runs: list[dict]) -> dict[str, Any]:
    """The run with the median images/s (the lower middle one for an even
    count), with every round's images/s attached; an error if any round
    failed, since a contender that fails sometimes is not a result."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    ranked = sorted(runs, key=lambda r: r["images_per_s"])
    out = dict(ranked[(len(ranked) - 1) // 2])
    out["rounds_images_per_s"] = [round(r["images_per_s"], 1) for r in runs]
    # A one-off cost (FFCV's dataset conversion) is paid by the first round.
    first = next((r for r in runs if r.get("conversion_s") is not None), None)
    if first is not None:
        out["conversion_s"] = first["conversion_s"]
        out.pop("conversion_reused", None)
    return out


def spawn_contender(
    name: str, pipeline: str, threads: int, args: argparse.Namespace
) -> dict[str, Any]:
    cmd = [
        args.python,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--pipeline",
        pipeline,
        "--data",
        args.data,
        "--threads",
        str(threads),
        "--batch-size",
        str(args.batch_size),
        "--epochs",
        str(args.epochs),
        "--prefetch",
        str(args.prefetch),
        "--seed",
        str(args.seed),
        "--ffcv-file",
        args.ffcv_file,
    ]
    cpus = args.cpus[:threads]
    log(f"== {name} / {pipeline} / {threads} thread(s) on CPUs {cpus}")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    run = run_measured(cmd, cpus, args.timeout, env)
    result: Optional[dict[str, Any]] = None
    for line in run["stdout"].splitlines():
        if line.startswith(RESULT_TAG):
            result = json.loads(line[len(RESULT_TAG) :])
    if result is None:
        tail = "\n".join(run["stderr"].strip().splitlines()[-25:])
        why = (
            f"timed out after {args.timeout:.0f} s"
            if run["timed_out"]
            else f"exited with status {run['returncode']} and no result"
        )
        result = {
            "contender": name,
            "pipeline": pipeline,
            "threads": threads,
            "error": why,
            "traceback": tail,
            "error_phase": "process",
        }
    for key in ("wall_s", "tree_cpu_s", "peak_rss_mb", "peak_pss_mb", "max_processes"):
        result["process_" + key if key in ("wall_s", "tree_cpu_s") else key] = run[key]
    if "error" in result:
        log(f"   could not run: {result['error']}")
    else:
        log(
            f"   {result['images_per_s']:.0f} img/s, "
            f"{result['cpu_s_per_image'] * 1e3:.2f} ms CPU/img, "
            f"peak RSS {result['peak_rss_mb']:.0f} MB"
        )
    return result


def build_decode_bound(out_dir: Path) -> Path:
    exe = out_dir / "decode_bound"
    src = HERE / "decode_bound.c"
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "libjpeg"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-O2", "-std=c11", "-o", str(exe), str(src), *flags, "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return exe


def run_decode_bound(args: argparse.Namespace, threads: int) -> dict[str, Any]:
    result: dict[str, Any] = {"contender": BOUND, "pipeline": "any", "threads": threads}
    log(f"== {BOUND} / {threads} thread(s) on CPUs {args.cpus[:threads]}")
    try:
        exe = build_decode_bound(WORK_DIR)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        result["error"] = f"could not build decode_bound.c: {exc}"
        return result
    lst = WORK_DIR / "files.txt"
    lst.write_text("".join(p + "\n" for p, _ in scan_folder(args.data)))
    cmd = [str(exe), str(lst), str(threads), str(args.epochs)]
    run = run_measured(cmd, args.cpus[:threads], args.timeout)
    if run["returncode"] != 0:
        result["error"] = (
            f"{' '.join(cmd)}: status {run['returncode']}: {run['stderr'][-2000:]}"
        )
        return result
    out = json.loads(run["stdout"].strip().splitlines()[-1])
    result.update(
        {
            "images_per_s": out["images_per_s"],
            "cpu_s_per_image": out["cpu_s_per_image"],
            "first_batch_s": None,
            "cold_first_batch_s": None,
            "peak_rss_mb": run["peak_rss_mb"],
            "peak_pss_mb": run["peak_pss_mb"],
            "max_processes": run["max_processes"],
            "bound": out,
            "notes": [
                f"{out['files']} files ({out['bytes'] / 1e6:.1f} MB) read into "
                f"memory first ({out['load_s']:.2f} s), {threads} threads, "
                "libjpeg defaults (ISLOW DCT, fancy upsampling), full size, RGB "
                f"out; {out['megapixels_per_s']:.0f} Mpixel/s; "
                f"{out['failures']} failures"
            ],
        }
    )
    log(f"   {out['images_per_s']:.0f} img/s")
    return result


# ---------------------------------------------------------------------------
# Set-up of the peers' environment
# ---------------------------------------------------------------------------


def setup_peers(args: argparse.Namespace) -> dict[str, str]:
    """Create the peers' venv and install each peer; return install errors."""
    venv = Path(args.venv)
    errors: dict[str, str] = {}
    if os.geteuid() == 0 and shutil.which("apt-get"):
        missing = [
            p
            for p in APT_PACKAGES
            if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0
        ]
        if missing:
            log(f"setup: apt-get install {' '.join(missing)}")
            subprocess.run(["apt-get", "update", "-qq"], check=False)
            subprocess.run(
                [
                    "apt-get",
                    "install",
                    "-y",
                    "-qq",
                    "--no-install-recommends",
                    *missing,
                ],
                check=False,
            )
    else:
        log(
            f"setup: not root: make sure these Debian packages are installed: "
            f"{' '.join(APT_PACKAGES)}"
        )
    if not (venv / "bin" / "python").exists():
        log(f"setup: python3 -m venv --system-site-packages {venv}")
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
            check=True,
        )
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    # Never let a peer replace the torch the project is tested with.
    import torch
    import torchvision

    pins = venv / "torch-pins.txt"
    pins.write_text(
        f"torch=={torch.__version__.split('+')[0]}\n"
        f"torchvision=={torchvision.__version__.split('+')[0]}\n"
    )
    for name, package in PEER_PACKAGES.items():
        log(f"setup: pip install {package}")
        proc = subprocess.run(
            [*pip, "-c", str(pins), package], capture_output=True, text=True
        )
        if proc.returncode != 0:
            errors[name] = f"pip install {package} failed:\n" + "\n".join(
                (proc.stdout + proc.stderr).strip().splitlines()[-30:]
            )
            log(errors[name])
    (venv / "compare-setup.json").write_text(json.dumps(errors, indent=2))
    return errors


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def machine_info(args: argparse.Namespace) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "kernel": platform.release(),
        "cores": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["ram_gb"] = int(line.split()[1]) / 2**20
    probe = (
        "import json, platform, contextlib\n"
        "from importlib import metadata\n"
        "v = {'python': platform.python_version()}\n"
        "for n in ('torch', 'torchvision', 'pillow', 'numpy', 'ringloader',\n"
        "          'nvidia-dali-cuda120', 'spdl', 'spdl_io', 'ffcv', 'numba',\n"
        "          'opencv-python', 'psutil'):\n"
        "    with contextlib.suppress(Exception): v[n] = metadata.version(n)\n"
        "with contextlib.suppress(Exception):\n"
        "    from PIL import features\n"
        "    v['pillow libjpeg-turbo'] = features.version('libjpeg_turbo')\n"
        "with contextlib.suppress(Exception):\n"
        "    import torchvision\n"
        "    v['torchvision path'] = torchvision.__file__\n"
        "with contextlib.suppress(Exception):\n"
        "    import ringloader\n"
        "    v['ringloader path'] = ringloader.__file__\n"
        "print(json.dumps(v))\n"
    )
    with contextlib.suppress(Exception):
        out = subprocess.run(
            [args.python, "-c", probe], capture_output=True, text=True, timeout=120
        ).stdout
        info["versions"] = json.loads(out.strip().splitlines()[-1])
    with contextlib.suppress(Exception):
        info["versions"]["system libjpeg-turbo (pkg-config libjpeg)"] = subprocess.run(
            ["pkg-config", "--modversion", "libjpeg"], capture_output=True, text=True
        ).stdout.strip()
    return info


def _fmt(v: Any, spec: str, suffix: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return format(v, spec) + suffix


def _by(results: list[dict], pipeline: str, threads: int) -> dict[str, dict]:
    out = {}
    for r in results:
        if r.get("threads") == threads and r.get("pipeline") in (pipeline, "any"):
            out[r["contender"]] = r
    return out


def table(
    results: list[dict], pipeline: str, threads: int, order: list[str]
) -> list[str]:
    rows = _by(results, pipeline, threads)
    base = rows.get(BASELINE)
    bound = rows.get(BOUND)
    base_v = base.get("images_per_s") if base and "error" not in base else None
    bound_v = bound.get("images_per_s") if bound and "error" not in bound else None
    lines = [
        "| contender | images/s | × DataLoader | × decode bound | CPU s/img "
        "| peak RSS MB | peak PSS MB | first batch s (cold / warm) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in order:
        r = rows.get(name)
        if r is None:
            continue
        label = CONTENDERS[name]
        if "error" in r:
            lines.append(f"| {label} | could not run (below) | | | | | | |")
            continue
        v = r["images_per_s"]
        bold = "**" if name.startswith("ringloader") else ""
        first = (
            "–"
            if r.get("first_batch_s") is None
            else f"{r['cold_first_batch_s']:.2f} / {r['first_batch_s']:.2f}"
        )
        lines.append(
            f"| {bold}{label}{bold} | {bold}{v:.0f}{bold} "
            f"| {_fmt(v / base_v if base_v else None, '.2f', '×')} "
            f"| {_fmt(v / bound_v if bound_v else None, '.2f', '×')} "
            f"| {_fmt(r['cpu_s_per_image'], '.4f')} "
            f"| {_fmt(r.get('peak_rss_mb'), '.0f')} | {_fmt(r.get('peak_pss_mb'), '.0f')} "
            f"| {first} |"
        )
    return lines


def write_report(
    args: argparse.Namespace,
    info: dict,
    results: list[dict],
    scaling: list[dict],
    plots: list[Path],
    command: str,
    setup_errors: dict[str, str],
    data_desc: str,
) -> str:
    order = [c for c in CONTENDERS if c in args.contenders]
    v = info.get("versions", {})
    lines = [
        "# ringloader vs. the other loaders",
        "",
        "Made by `benchmarks/compare.py`; rerun with:",
        "",
        "```sh",
        command,
        "```",
        "",
        f"- date: {info['date']}",
        f"- machine: {info.get('cpu', '?')}, {info['cores']} cores "
        f"(contenders pinned to CPUs {args.cpus[: args.threads]}), "
        f"{info.get('ram_gb', 0):.0f} GiB RAM, Linux {info['kernel']}; "
        f"1-min load average at start {info['loadavg_start'][0]:.2f}",
        f"- data: `{args.data}`: {data_desc}",
        f"- batch size {args.batch_size}, {args.threads} threads / workers, "
        f"1 warm-up epoch + {args.epochs} timed epochs; ringloader prefetch "
        f"{args.prefetch}",
        "- versions: "
        + ", ".join(f"{k} {val}" for k, val in v.items() if not k.endswith(" path")),
    ]
    if v.get("ringloader path"):
        lines.append(
            f"- ringloader imported from `{os.path.dirname(v['ringloader path'])}`"
        )
    lines += [
        "",
        "Every contender yields the same batches: uint8 (B, 3, 224, 224) "
        "contiguous NCHW tensors (float32 normalised for *ringloader float32*), "
        "with labels. Train: RandomResizedCrop(224) + RandomHorizontalFlip, "
        "shuffled. Eval: Resize(256) + CenterCrop(224), in order.",
        "",
        "How it is measured: each contender runs in a fresh subprocess pinned to "
        f"the same cores, {args.rounds} times, round-robin (every contender once, "
        "then again), and the tables show each one's median run, since a shared "
        "machine's speed drifts over minutes; images/s is the images of the timed epochs over their "
        "wall time; CPU s/img is the user + system time of the contender's whole "
        "process tree (itself, its workers and threads) over the timed epochs, "
        "per image: a CPU s/img well below threads / (images/s) means the "
        "contender could not keep the cores busy; peak RSS / PSS is the sum over "
        "the process tree, sampled every 0.1 s (PSS every 0.3 s) by the parent "
        "(RSS counts pages shared by forked workers once per process, PSS splits "
        "them); first batch: cold = from building the loader to the first batch "
        "of the warm-up epoch, warm = median over the timed epochs from `iter()` "
        "to the first batch. The decode-only bound decodes every file in full "
        "(libjpeg defaults, as Pillow) from memory on all threads and does "
        "nothing else: no crop, resize, batching or I/O.",
        "",
    ]
    if info["loadavg_start"][0] > 0.5:
        lines += [
            f"> Note: the machine was not idle (load average {info['loadavg_start'][0]:.2f} "
            "at start, per-run load averages in the notes): these numbers are noisy.",
            "",
        ]
    for pipeline in args.pipelines:
        title = (
            "Train: RandomResizedCrop(224) + flip"
            if pipeline == "train"
            else "Eval: Resize(256) + CenterCrop(224)"
        )
        lines += [f"## {title}", ""]
        lines += table(results, pipeline, args.threads, order)
        lines.append("")
    for p in plots:
        lines += [f"![{p.stem}](plots/{p.name})", ""]
    if scaling:
        lines += [
            "## Thread scaling (train pipeline)",
            "",
            "| threads | "
            + " | ".join(CONTENDERS[c] for c in args.scaling_contenders)
            + " |",
            "|---:|" + "---:|" * len(args.scaling_contenders),
        ]
        for t in range(1, args.threads + 1):
            cells = []
            for c in args.scaling_contenders:
                r = next(
                    (s for s in scaling if s["contender"] == c and s["threads"] == t),
                    None,
                )
                if r is None or "error" in r:
                    cells.append("–")
                else:
                    one = next(
                        (
                            s
                            for s in scaling
                            if s["contender"] == c
                            and s["threads"] == 1
                            and "error" not in s
                        ),
                        None,
                    )
                    eff = (
                        f" ({r['images_per_s'] / (t * one['images_per_s']):.0%})"
                        if one and t > 1
                        else ""
                    )
                    cells.append(f"{r['images_per_s']:.0f}{eff}")
            lines.append(f"| {t} | " + " | ".join(cells) + " |")
        lines += ["", "(in brackets: scaling efficiency against 1 thread)", ""]

    failed = [r for r in results + scaling if "error" in r]
    lines += ["## Could not run", ""]
    if not failed:
        lines += ["Every contender ran.", ""]
    seen = set()
    for r in failed:
        key = (r["contender"], r["error"])
        if key in seen:
            continue
        seen.add(key)
        where = f"{r.get('pipeline')} pipeline, {r.get('threads')} threads"
        lines += [
            f"### {CONTENDERS[r['contender']]} ({where})",
            "",
            f"Failed during {r.get('error_phase', 'run')}: `{r['error'][:500]}`",
            "",
        ]
        install = setup_errors.get(r["contender"])
        if install:
            lines += ["Installation:", "", "```", install.strip(), "```", ""]
        tb = r.get("traceback", "").strip()
        if tb:
            tb = "\n".join(tb.splitlines()[-20:])
            lines += ["```", tb, "```", ""]
    lines += ["## Notes per contender", ""]
    noted = set()
    for r in results:
        if "error" in r or r["contender"] in noted:
            continue
        noted.add(r["contender"])
        extra = []
        for key, label in (
            ("conversion_s", "dataset conversion {:.1f} s"),
            ("beton_mb", ".beton file {:.0f} MB"),
            ("import_s", "import {:.1f} s"),
            ("ffmpeg", "libavcodec {}"),
            ("io_backend", "I/O {}"),
        ):
            if r.get(key) is not None:
                extra.append(label.format(r[key]))
        if r.get("conversion_reused"):
            extra.append("conversion reused from an earlier run of this command")
        notes = "; ".join(r.get("notes", []) + extra)
        lines.append(f"- **{CONTENDERS[r['contender']]}**: {notes}")
    lines.append("")
    per_run = [
        f"{r['contender']}/{r['pipeline']}: {r['loadavg_start']:.2f}"
        for r in results
        if "loadavg_start" in r
    ]
    if per_run:
        lines += ["1-min load average when each run started: " + ", ".join(per_run), ""]
    rounds = [
        f"{r['contender']}/{r['pipeline']}: "
        + ", ".join(f"{v:.0f}" for v in r["rounds_images_per_s"])
        for r in results
        if "rounds_images_per_s" in r and len(r["rounds_images_per_s"]) > 1
    ]
    if rounds:
        lines += [
            f"Images/s of each of the {args.rounds} rounds (the tables show the "
            "median): " + "; ".join(rounds),
            "",
        ]
    lines += [
        f"Raw numbers: `{args.json_name}` (next to this file). Where ringloader's "
        "time goes (perf, by library and kernel): [PROFILE.md](PROFILE.md), "
        "made with `benchmarks/profile_decode.py`.",
        "",
    ]
    return "\n".join(lines)


def make_plots(
    args: argparse.Namespace, results: list[dict], scaling: list[dict], plot_dir: Path
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    order = [c for c in CONTENDERS if c in args.contenders]
    pipes = list(args.pipelines)
    fig, axes = plt.subplots(
        1,
        len(pipes),
        figsize=(7.2 * len(pipes), 0.55 * len(order) + 1.8),
        squeeze=False,
    )
    for ax, pipeline in zip(axes[0], pipes):
        rows = _by(results, pipeline, args.threads)
        names = [c for c in order if c in rows][::-1]
        vals = [
            rows[c].get("images_per_s", 0.0) if "error" not in rows[c] else 0.0
            for c in names
        ]
        colors = [
            "#d62728"
            if c.startswith("ringloader")
            else "#7f7f7f"
            if c == BOUND
            else "#1f77b4"
            for c in names
        ]
        y = range(len(names))
        ax.barh(y, vals, color=colors)
        ax.set_yticks(
            list(y), [CONTENDERS[c].replace(" (", "\n(") for c in names], fontsize=9
        )
        base = rows.get(BASELINE, {}).get("images_per_s")
        top = max(vals + [1.0])
        for yi, (c, val) in enumerate(zip(names, vals)):
            if "error" in rows[c]:
                ax.text(
                    top * 0.01,
                    yi,
                    "could not run",
                    va="center",
                    fontsize=9,
                    color="#555555",
                )
                continue
            label = f"{val:.0f}"
            if base and c != BASELINE:
                label += f"  ({val / base:.1f}× DataLoader)"
            ax.text(val + top * 0.01, yi, label, va="center", fontsize=9)
        bound = rows.get(BOUND, {}).get("images_per_s")
        if bound:
            ax.axvline(bound, color="#7f7f7f", linestyle="--", linewidth=1)
        ax.set_xlim(0, top * 1.6)
        ax.set_xlabel("images / s (higher is better)")
        ax.set_title(
            f"{pipeline}: {'RandomResizedCrop+flip' if pipeline == 'train' else 'Resize 256 + CenterCrop 224'}"
            f", {args.threads} cores",
            fontsize=11,
        )
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = plot_dir / "throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    if scaling:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        ts = list(range(1, args.threads + 1))
        for c, color in zip(args.scaling_contenders, ["#d62728", "#1f77b4", "#2ca02c"]):
            pts = [
                (s["threads"], s["images_per_s"])
                for s in scaling
                if s["contender"] == c and "error" not in s
            ]
            pts.sort()
            if not pts:
                continue
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                "o-",
                color=color,
                label=CONTENDERS[c],
                linewidth=2,
            )
            one = dict(pts).get(1)
            if one:
                ax.plot(
                    ts,
                    [one * t for t in ts],
                    ":",
                    color=color,
                    alpha=0.6,
                    label=f"{CONTENDERS[c]}: linear",
                )
            for t, val in pts:
                ax.annotate(
                    f"{val:.0f}",
                    (t, val),
                    textcoords="offset points",
                    xytext=(6, -12),
                    fontsize=9,
                )
        ax.set_xticks(ts)
        ax.set_xlabel("threads (ringloader) / workers (DataLoader) = pinned cores")
        ax.set_ylabel("images / s")
        ax.set_ylim(bottom=0)
        ax.set_title("Thread scaling, train pipeline")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        path = plot_dir / "scaling.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--data",
        help="ImageFolder root (default: build an ImageNet-like "
        "folder of --images files with make_imagenet_like.py)",
    )
    p.add_argument("--images", type=int, default=2000)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="cores = threads = workers (default: all usable CPUs)",
    )
    p.add_argument("--pipelines", default="train,eval")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument(
        "--epochs", type=int, default=2, help="timed epochs after the warm-up"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="run every contender this many times, round-robin, and report "
        "each one's median run (a shared machine's speed drifts over minutes)",
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--prefetch", type=int, default=4, help="ringloader prefetch (batches)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(HERE), help="where RESULTS.md and plots/ go")
    p.add_argument(
        "--scaling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run ringloader and DataLoader on 1..N threads (train)",
    )
    p.add_argument(
        "--venv",
        default=DEFAULT_VENV,
        help="the peers' virtual environment (made by --setup)",
    )
    p.add_argument(
        "--python",
        help="interpreter for the contenders "
        "(default: the venv's if it exists, else this one)",
    )
    p.add_argument(
        "--setup",
        action="store_true",
        help="create the venv and install the peers first",
    )
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    p.add_argument("--child", choices=list(FACTORIES), help=argparse.SUPPRESS)
    p.add_argument("--pipeline", choices=PIPELINES, help=argparse.SUPPRESS)
    p.add_argument(
        "--ffcv-file", default=str(WORK_DIR / "data.beton"), help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    if args.child:
        return args
    args.pipelines = [x for x in args.pipelines.split(",") if x]
    args.contenders = [x for x in args.contenders.split(",") if x]
    for x in args.pipelines:
        if x not in PIPELINES:
            p.error(f"unknown pipeline {x!r} (choose from {', '.join(PIPELINES)})")
    for x in args.contenders:
        if x not in CONTENDERS:
            p.error(f"unknown contender {x!r} (choose from {', '.join(CONTENDERS)})")
    avail = sorted(os.sched_getaffinity(0))
    args.threads = args.threads or len(avail)
    if not 1 <= args.threads <= len(avail):
        p.error(f"--threads must be in 1..{len(avail)} (the CPUs this process may use)")
    args.cpus = avail
    if args.epochs < 1 or args.batch_size < 1:
        p.error("--epochs and --batch-size must be positive")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.child:
        result = run_child(args)
        print(RESULT_TAG + json.dumps(result), flush=True)
        return 0 if "error" not in result else 1

    command = "python benchmarks/compare.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    setup_errors: dict[str, str] = {}
    if args.setup:
        setup_errors = setup_peers(args)
    else:
        with contextlib.suppress(OSError, ValueError):
            setup_errors = json.loads(
                (Path(args.venv) / "compare-setup.json").read_text()
            )
    if not args.python:
        venv_py = Path(args.venv) / "bin" / "python"
        args.python = str(venv_py) if venv_py.exists() else sys.executable
    log(f"contenders run with {args.python}")

    if args.data:
        if not Path(args.data).is_dir():
            raise SystemExit(f"error: --data {args.data} is not a directory")
        args.data = str(Path(args.data).resolve())
    else:
        sys.path.insert(0, str(HERE))
        import make_imagenet_like

        root = f"/tmp/ringloader-compare-data-{args.images}"
        log(f"building {args.images} ImageNet-like images in {root} (once)")
        args.data = make_imagenet_like.build(root, images=args.images)
    files = scan_folder(args.data)
    size = sum(os.path.getsize(f) for f, _ in files)
    data_desc = (
        f"{len(files)} JPEG files, {len(set(c for _, c in files))} classes, "
        f"{size / 1e6:.1f} MB ({size / max(len(files), 1) / 1e3:.0f} kB/file)"
    )
    with contextlib.suppress(Exception):
        sys.path.insert(0, str(HERE))
        import make_imagenet_like

        data_desc = make_imagenet_like.summary(args.data).split(": ", 1)[-1]
    # A fresh FFCV conversion per command, so that its time is measured.
    with contextlib.suppress(FileNotFoundError):
        os.remove(args.ffcv_file)

    info = machine_info(args)
    args.scaling_contenders = [
        c for c in ("ringloader", "dataloader") if c in args.contenders
    ]
    # Every run of a round, in order; the same order each round, so that a
    # machine whose speed drifts slows every contender alike.
    plan: list[tuple[str, str, int]] = []
    if BOUND in args.contenders:
        plan.append((BOUND, "", args.threads))
    for pipeline in args.pipelines:
        plan += [(n, pipeline, args.threads) for n in args.contenders if n != BOUND]
    if args.scaling:
        plan += [
            (c, "train", t)
            for c in args.scaling_contenders
            for t in range(1, args.threads + 1)
            if (c, "train", t) not in plan
        ]
    runs: dict[tuple[str, str, int], list[dict]] = {}
    for r in range(args.rounds):
        log(f"-- round {r + 1} of {args.rounds}")
        for key in plan:
            name, pipeline, threads = key
            run = (
                run_decode_bound(args, threads)
                if name == BOUND
                else spawn_contender(name, pipeline, threads, args)
            )
            runs.setdefault(key, []).append(run)
    median = {key: median_run(rs) for key, rs in runs.items()}
    results = [
        median[key]
        for key in plan
        if key[2] == args.threads and (key[0] == BOUND or key[1] in args.pipelines)
    ]
    scaling: list[dict] = []
    if args.scaling:
        scaling = [
            median[(c, "train", t)]
            for c in args.scaling_contenders
            for t in range(1, args.threads + 1)
        ]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.json_name = "compare-results.json"
    plots = make_plots(args, results, scaling, out / "plots")
    report = write_report(
        args, info, results, scaling, plots, command, setup_errors, data_desc
    )
    (out / "RESULTS.md").write_text(report)
    (out / args.json_name).write_text(
        json.dumps(
            {
                "command": command,
                "machine": info,
                "results": results,
                "scaling": scaling,
                "setup_errors": setup_errors,
            },
            indent=1,
        )
        + "\n"
    )
    log(f"wrote {out / 'RESULTS.md'} and {', '.join(str(p) for p in plots)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
