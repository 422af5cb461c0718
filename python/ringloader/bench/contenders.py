"""The loaders the benchmarks compare (see base.py for what they share):
torch's DataLoader with PIL or torchvision.io decoding, ringloader, the
decode-only bound, and the registry of contenders, which modules outside
the package extend (:func:`register`: the repository's benchmarks/rlbench,
with DALI, SPDL, FFCV and the remote-shard contenders).

Contenders import torch, torchvision and ringloader only inside their
methods: the harness loads this package by file path in a child whose
``ringloader`` may be another build (see harness.py).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from . import data, system
from .base import AUGMENT, MEAN, STD, Contender, augment_recipe, recipe_steps, split

# In a checkout; benchmarks/compare.py sets it to its own folder's, so that
# the bound is found whichever ringloader.bench is imported (an installed one
# has no benchmarks/ beside it).
BOUND_SOURCE = Path(__file__).resolve().parents[3] / "benchmarks" / "decode_bound.c"


JPEG_MAGIC = b"\xff\xd8\xff"


def _is_jpeg(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(3) == JPEG_MAGIC


def _decode_jpeg_file(path: str) -> Any:
    """decode_jpeg, or decode_image for a file that is not JPEG (a PNG named
    .JPEG, as ImageNet has), as a user of decode_jpeg must do."""
    import torchvision.io as tio

    raw = tio.read_file(path)
    if bytes(raw[:3].tolist()) == JPEG_MAGIC:
        return tio.decode_jpeg(raw, mode=tio.ImageReadMode.RGB)
    return tio.decode_image(raw, mode=tio.ImageReadMode.RGB)


class TorchDataLoader(Contender):
    """torch DataLoader over torchvision's ImageFolder (PIL decode) or
    DatasetFolder with torchvision.io.decode_jpeg; v2 transforms."""

    packages = ("torch", "torchvision", "pillow")

    def __init__(self, spec: Any, decoder: str) -> None:
        super().__init__(spec)
        self.decoder = decoder

    def load(self) -> None:
        import torch  # noqa: F401
        from torchvision.transforms import v2  # noqa: F401

    def build(self) -> None:
        import torch
        from torchvision import datasets
        from torchvision.transforms import v2

        s = self.spec
        torch.manual_seed(s.seed)
        if s.pipeline in AUGMENT:
            if self.decoder != "pil":
                raise RuntimeError(f"{s.pipeline}: the recipes decode with PIL")
            ds = datasets.ImageFolder(s.data, transform=augment_recipe(s.pipeline))
        elif self.decoder == "pil":
            steps = recipe_steps(v2, s.pipeline)
            tf = v2.Compose(steps + [v2.PILToTensor()])
            ds = datasets.ImageFolder(s.data, transform=tf)
        else:
            ds = datasets.DatasetFolder(
                s.data,
                loader=_decode_jpeg_file,
                extensions=data.JPEG_SUFFIXES,
                transform=v2.Compose(recipe_steps(v2, s.pipeline)),
            )
        if s.images is not None:
            ds = torch.utils.data.Subset(ds, data.spread(len(ds), s.images))
        if self.decoder == "decode_jpeg":
            others = [p for p, _ in self.samples() if not _is_jpeg(p)]
            if others:
                self.notes.append(
                    f"{len(others)} of {len(ds)} files are not JPEG (the first: "
                    f"{os.path.relpath(others[0], s.data)}), decoded with "
                    "torchvision.io.decode_image"
                )
        self.loader = torch.utils.data.DataLoader(
            ds,
            batch_size=s.batch_size,
            shuffle=self.train,
            num_workers=s.threads,
            pin_memory=False,
            persistent_workers=True,
        )
        self.notes.append(
            f"num_workers={s.threads}, persistent_workers=True, prefetch_factor=2 "
            "(default), pin_memory=False (pinning is a no-op without CUDA; with a "
            "GPU it is recommended and adds a copy)"
        )


class Ringloader(Contender):
    """ringloader.Loader over ringloader.ImageFolder; ``spec.options`` may
    set ``dtype`` (float32/float16/bfloat16: ToDtype + Normalize fused),
    ``layout`` (NCHW, NHWC, channels_last) and ``io`` (io_uring, pread)."""

    packages = ("ringloader",)

    def __init__(self, spec: Any, dtype: str) -> None:
        super().__init__(spec)
        self.dtype = spec.options.get("dtype", dtype)
        self.layout = spec.options.get("layout", "NCHW")
        self.io = spec.options.get("io")

    def load(self) -> None:
        import ringloader
        import torch  # noqa: F401

        self.extra.update(system.imported_ringloader(self.spec.build))
        with contextlib.suppress(Exception):
            self.extra["libjpeg_version"] = ringloader._core.libjpeg_version
        if self.spec.pipeline in AUGMENT:  # the recipes are torchvision's
            from torchvision.transforms import v2  # noqa: F401

    def build(self) -> None:
        import ringloader
        import torch
        from ringloader import transforms as T

        s = self.spec
        if s.pipeline in AUGMENT:  # torchvision's own objects, as users write
            steps = [augment_recipe(s.pipeline)]
        else:
            steps = recipe_steps(T, s.pipeline)
        if s.pipeline not in AUGMENT and self.dtype != "uint8":
            for name in ("ToDtype", "Normalize"):
                if not hasattr(T, name):
                    raise RuntimeError(
                        f"ringloader.transforms has no {name}: float normalised "
                        "output is not in this build of ringloader"
                    )
            steps += [
                T.ToDtype(getattr(torch, self.dtype), scale=True),
                T.Normalize(MEAN, STD),
            ]
        ds = ringloader.ImageFolder(s.data)
        if s.images is not None:
            picked = [ds.samples[i] for i in data.spread(len(ds), s.images)]
            ds = ringloader.FileList([p for p, _ in picked], [c for _, c in picked])
        kwargs = {"layout": self.layout} if self.layout != "NCHW" else {}
        if self.io:
            kwargs["io"] = self.io
        self.loader = ringloader.Loader(
            ds,
            batch_size=s.batch_size,
            shuffle=self.train,
            num_threads=s.threads,
            prefetch=s.prefetch,
            seed=s.seed,
            transform=T.Compose(steps),
            **kwargs,
        )
        self.extra["io_backend"] = self.loader.io_backend
        self.notes.append(
            f"num_threads={s.threads}, prefetch={s.prefetch}, io={self.loader.io_backend}"
            + "".join(f", {k}={v}" for k, v in sorted(s.options.items()) if k != "io")
        )

    def epoch(self, e: int) -> Iterator[tuple[Any, Any]]:
        self.loader.set_epoch(e)
        return iter(self.loader)


class DecodeBound(Contender):
    """benchmarks/decode_bound.c: every file read into memory, then decoded
    in full (libjpeg defaults, as Pillow) on the threads, nothing else."""

    external = True

    def command(self) -> list[str]:
        s = self.spec
        work = Path(s.workdir)
        work.mkdir(parents=True, exist_ok=True)
        exe = work / "decode_bound"
        source = Path(BOUND_SOURCE)
        if not source.exists():
            raise RuntimeError(
                f"{source} not found: the bound needs a ringloader checkout"
            )
        if not exe.exists() or exe.stat().st_mtime < source.stat().st_mtime:
            flags = subprocess.run(
                ["pkg-config", "--cflags", "--libs", "libjpeg"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            cc = os.environ.get("CC", "cc")
            cmd = [
                cc,
                "-O2",
                "-std=c11",
                "-o",
                str(exe),
                str(source),
                *flags,
                "-lpthread",
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"could not build decode_bound.c: {' '.join(cmd)}:\n{proc.stderr}"
                )
        files = work / f"files-{os.getpid()}.txt"
        files.write_text("".join(p + "\n" for p, _ in self.samples()))
        return [str(exe), str(files), str(s.threads), str(s.epochs)]

    def result(self, stdout: str) -> dict[str, Any]:
        out = json.loads(stdout.strip().splitlines()[-1])
        note = (
            f"{out['files']} files ({out['bytes'] / 1e6:.1f} MB) read into memory "
            f"first ({out['load_s']:.2f} s), {self.spec.threads} threads, libjpeg "
            "defaults (ISLOW DCT, fancy upsampling), full size, RGB out; "
            f"{out['megapixels_per_s']:.0f} Mpixel/s; {out['failures']} failures"
        )
        return {
            "images_per_s": out["images_per_s"],
            "cpu_s_per_image": out["cpu_s_per_image"],
            "first_batch_s": None,
            "cold_first_batch_s": None,
            "bound": out,
            "notes": [note],
        }


FACTORIES: dict[str, Callable[[Any], Contender]] = {
    "dataloader": lambda s: TorchDataLoader(s, "pil"),
    "dataloader-tvio": lambda s: TorchDataLoader(s, "decode_jpeg"),
    "decode-bound": DecodeBound,
    "ringloader": lambda s: Ringloader(s, "uint8"),
    "ringloader-float": lambda s: Ringloader(s, "float32"),
}
# Contender name -> (module, folder it is imported from) for those that
# register() added: a harness child imports the module again (Spec.plugin).
PLUGINS: dict[str, tuple[str, str]] = {}


def register(module: Any) -> None:
    """Adds ``module.FACTORIES`` (name -> factory of a Contender) to the
    registry: contenders defined outside this package. The module must be
    importable by name from a folder on ``sys.path`` (its package's parent),
    which the harness's child processes are given."""
    name = module.__name__
    depth = name.count(".") + 1
    if Path(module.__file__).name == "__init__.py":
        depth += 1
    folder = str(Path(module.__file__).resolve().parents[depth - 1])
    for contender, factory in module.FACTORIES.items():
        FACTORIES[contender] = factory
        PLUGINS[contender] = (name, folder)


def plugin_of(contender: str) -> Optional[list[str]]:
    """[module, folder] of a contender register() added; None otherwise."""
    found = PLUGINS.get(split(contender)[0])
    return list(found) if found else None


def load_plugin(plugin: Optional[list[str]]) -> None:
    """In a child: imports and registers the module a Spec names."""
    if plugin:
        module, folder = plugin
        if folder not in sys.path:
            sys.path.insert(0, folder)
        register(importlib.import_module(module))


def known(name: str) -> bool:
    base, build = split(name)
    return base in FACTORIES and (build is None or base.startswith("ringloader"))


def make(spec: Any) -> Contender:
    return FACTORIES[split(spec.contender)[0]](spec)
