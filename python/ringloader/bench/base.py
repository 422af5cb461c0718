"""What every contender shares: the pipelines they all run, the names
they are known by, and the :class:`Contender` interface.

Every contender yields the same batches from the same folder: uint8
(B, 3, 224, 224) contiguous NCHW tensors with int64 labels (ringloader may
be asked for another dtype or layout), from

* ``train``: RandomResizedCrop(224) + RandomHorizontalFlip, shuffled;
* ``eval``: Resize(256) + CenterCrop(224), in order;

and, float32 normalised, the augmentation recipes of torchvision's
classification references (``AUGMENT``), each given to every contender as
the very same torchvision transform object:

* ``ta``: RandomResizedCrop(176) + flip + TrivialAugmentWide + PILToTensor
  + ConvertImageDtype + Normalize + RandomErasing(0.1) (the reference
  recipe), and ``ta-plain``, the same without TrivialAugmentWide and
  RandomErasing (what the ops cost is measured against it);
* ``jitter``: RandomResizedCrop(224) + flip + ColorJitter(0.4, 0.4, 0.4) +
  ToTensor + Normalize;
* ``train-norm``: RandomResizedCrop(224) + flip + PILToTensor +
  ConvertImageDtype + Normalize, the train recipe as a training script
  writes it (benchmarks/bench_formats.py runs it on PNG and WebP);
* ``randaug``: transforms.v2 RandomResizedCrop(224) + flip + RandAugment +
  ToImage + ToDtype + Normalize.

A contender is made from a :class:`ringloader.bench.harness.Spec`:
``load()`` imports (timed apart), ``build()`` makes the loader,
``epoch(e)`` yields one epoch of (images, labels), ``close()`` stops it.
An *external* contender (the decode-only bound) is a program of its own:
``command()`` says what to run and ``result(stdout)`` reads its report.
``name@label`` is contender ``name`` importing ringloader from the build
labelled ``label``.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from . import data

PIPELINES = {
    "train": "RandomResizedCrop(224) + RandomHorizontalFlip",
    "eval": "Resize(256) + CenterCrop(224)",
    "ta": "RandomResizedCrop(176) + flip + TrivialAugmentWide + Normalize "
    "+ RandomErasing(0.1)",
    "ta-plain": "RandomResizedCrop(176) + flip + Normalize",
    "train-norm": "RandomResizedCrop(224) + flip + Normalize",
    "jitter": "RandomResizedCrop(224) + flip + ColorJitter(0.4, 0.4, 0.4) + Normalize",
    "randaug": "v2: RandomResizedCrop(224) + flip + RandAugment + Normalize",
    "timm-eval": "timm: create_transform(224, is_training=False, "
    'interpolation="bicubic", crop_pct=0.95)',
    "timm-train": "timm: create_transform(224, is_training=True, "
    'interpolation="bilinear", re_prob=0.25)',
    "timm-train-random": "timm: create_transform(224, is_training=True, "
    'interpolation="random", re_prob=0.25)',
    "timm-train-rkrc": "timm: create_transform(224, is_training=True, "
    'train_crop_mode="rkrc", interpolation="random", re_prob=0.25)',
    "timm-train-rkrr": "timm: create_transform(224, is_training=True, "
    'train_crop_mode="rkrr", interpolation="random", re_prob=0.25)',
    "timm-ra": "RandomResizedCrop(224) + flip + timm rand-m9-mstd0.5-inc1 + Normalize",
    "timm-train-ra": "timm: create_transform(224, is_training=True, "
    'auto_augment="rand-m9-mstd0.5-inc1", interpolation="random", re_prob=0.25)',
}
AUGMENT = (
    "ta",
    "ta-plain",
    "jitter",
    "randaug",
    "train-norm",
    "timm-eval",
    "timm-train",
    "timm-train-random",
    "timm-train-rkrc",
    "timm-train-rkrr",
    "timm-ra",
    "timm-train-ra",
)
CROP, RESIZE = 224, 256
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BASELINE, BOUND = "dataloader", "decode-bound"
ANY_PIPELINE = (BOUND,)  # one run of these serves every pipeline
# Display names, in the order of the reports.
LABELS = {
    "dataloader": "DataLoader + ImageFolder (PIL)",
    "dataloader-tvio": "DataLoader + torchvision.io.decode_jpeg",
    "dali": "DALI CPU pipeline",
    "spdl": "SPDL (FFmpeg decode)",
    "ffcv": "FFCV",
    "decode-bound": "decode-only bound (full libjpeg-turbo decode)",
    "ringloader": "ringloader uint8",
    "ringloader-float": "ringloader float32 normalised",
}


def split(name: str) -> tuple[str, Optional[str]]:
    """ "ringloader@old" -> ("ringloader", "old"); "dali" -> ("dali", None)."""
    base, _, label = name.partition("@")
    return base, label or None


def label(name: str) -> str:
    base, build = split(name)
    return LABELS[base] + (f" @{build}" if build else "")


def ordered(names: list[str]) -> list[str]:
    """``names`` in report order: by contender, then as given (builds)."""
    return sorted(names, key=lambda n: list(LABELS).index(split(n)[0]))


def posterize_before_pillow13(img: Any, bits: int, **_: Any) -> Any:
    """timm's posterize as it ran before Pillow 13, which refuses 0 bits
    (timm's rand-m9-mstd0.5-inc1 draws them and its loader stops with a
    ValueError): 0 bits give a black image, as ringloader's op does."""
    from PIL import Image, ImageOps

    if bits >= 8:
        return img
    if bits <= 0:
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits)


def _patch_posterize(transform: Any) -> None:
    """Every timm RandAugment inside ``transform`` (a Compose, nested or
    not) posterizes with :func:`posterize_before_pillow13`."""
    for step in getattr(transform, "transforms", [transform]):
        if hasattr(step, "transforms"):
            _patch_posterize(step)
        for op in getattr(step, "ops", ()):
            if getattr(op.aug_fn, "__name__", "") == "posterize":
                op.aug_fn = posterize_before_pillow13


def augment_recipe(pipeline: str) -> Any:
    """The torchvision (or timm) transform of an AUGMENT pipeline (float32,
    normalised)."""
    import torch
    from torchvision import transforms as T
    from torchvision.transforms import v2

    if pipeline.startswith("timm-"):
        from timm.data import create_transform

        if pipeline == "timm-eval":
            return create_transform(
                CROP, is_training=False, interpolation="bicubic", crop_pct=0.95
            )
        if pipeline == "timm-train-ra":
            # timm's default ImageNet train recipe; its RandAugment's
            # posterize patched as for timm-ra (Pillow 13 refuses 0 bits)
            recipe = create_transform(
                CROP,
                is_training=True,
                auto_augment="rand-m9-mstd0.5-inc1",
                interpolation="random",
                re_prob=0.25,
            )
            _patch_posterize(recipe)
            return recipe
        if pipeline in ("timm-train-rkrc", "timm-train-rkrr"):
            # train_crop_mode: ResizeKeepRatio's random scale and aspect,
            # then a centre or random crop-or-pad with reflected borders
            return create_transform(
                CROP,
                is_training=True,
                train_crop_mode=pipeline[-4:],
                interpolation="random",
                re_prob=0.25,
            )
        interpolation = "random" if pipeline == "timm-train-random" else "bilinear"
        return create_transform(
            CROP, is_training=True, interpolation=interpolation, re_prob=0.25
        )
    if pipeline == "randaug":
        return v2.Compose(
            [
                v2.RandomResizedCrop(CROP),
                v2.RandomHorizontalFlip(),
                v2.RandAugment(),
                v2.ToImage(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(MEAN, STD),
            ]
        )
    if pipeline == "timm-ra":
        # timm's RandAugment with the hparams create_transform gives it for
        # 224 and ImageNet's mean, interpolation="random" (timm installed)
        from timm.data.auto_augment import rand_augment_transform

        mean = tuple(min(255, round(255 * m)) for m in MEAN)
        hparams = dict(translate_const=int(CROP * 0.45), img_mean=mean)
        ra = rand_augment_transform("rand-m9-mstd0.5-inc1", hparams)
        _patch_posterize(ra)
        return T.Compose(
            [
                T.RandomResizedCrop(CROP),
                T.RandomHorizontalFlip(),
                ra,
                T.ToTensor(),
                T.Normalize(MEAN, STD),
            ]
        )
    if pipeline == "jitter":
        return T.Compose(
            [
                T.RandomResizedCrop(CROP),
                T.RandomHorizontalFlip(),
                T.ColorJitter(0.4, 0.4, 0.4),
                T.ToTensor(),
                T.Normalize(MEAN, STD),
            ]
        )
    ops = [T.TrivialAugmentWide()] if pipeline == "ta" else []
    tail = [T.RandomErasing(0.1)] if pipeline == "ta" else []
    size = CROP if pipeline == "train-norm" else 176
    return T.Compose(
        [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
        + ops
        + [T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)]
        + tail
    )


def recipe_steps(module: Any, pipeline: str) -> list:
    """The pipeline's geometric transforms from ``module``: torchvision's
    ``transforms``/``transforms.v2`` or ringloader's, which share the names."""
    if pipeline in AUGMENT:
        raise ValueError(
            f"{pipeline} is an augmentation recipe: only the dataloader and "
            "ringloader contenders run it (augment_recipe)"
        )
    if pipeline == "train":
        return [module.RandomResizedCrop(CROP), module.RandomHorizontalFlip()]
    return [module.Resize(RESIZE), module.CenterCrop(CROP)]


class Contender:
    """One loader under test (see the module's docstring)."""

    packages: tuple[str, ...] = ()  # distributions whose versions are reported
    external = False
    dtype, layout = "uint8", "NCHW"

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.train = spec.pipeline not in ("eval", "timm-eval")
        self.notes: list[str] = []
        self.problems: list[str] = []
        self.extra: dict[str, Any] = {}
        self.loader: Any = None

    def load(self) -> None:
        pass

    def build(self) -> None:
        raise NotImplementedError

    def epoch(self, e: int) -> Iterator[tuple[Any, Any]]:
        return iter(self.loader)

    def counters(self) -> dict[str, float]:
        """Cumulative counters of the loader (ringloader's I/O thread CPU
        time...): the harness reports their growth over the timed epochs
        per image. None by default."""
        return {}

    def batches(self) -> Optional[int]:
        """Batches per epoch, where the loader knows (for progress bars)."""
        try:
            return len(self.loader)
        except TypeError:
            return None

    def close(self) -> None:
        close = getattr(self.loader, "close", None)
        self.loader = None  # DataLoader workers stop with their iterator
        if close is not None:
            close()

    def samples(self) -> list[tuple[str, int]]:
        """(path, label) of the files to load: all, or ``spec.images``
        spread over the folder."""
        _, samples = data.scan_folder(self.spec.data)
        return [samples[i] for i in data.spread(len(samples), self.spec.images)]

    def check(self, images: Any, labels: Any, first: bool) -> Any:
        """Checks a batch (in full for the first of an epoch); returns it
        contiguous, as every contender's is (a copy when it was not: timed)."""
        import torch

        if first:
            augment = self.spec.pipeline in AUGMENT  # float32, normalised
            want = torch.float32 if augment else getattr(torch, self.dtype)
            crop = 176 if self.spec.pipeline in ("ta", "ta-plain") else CROP
            shape = (crop, crop, 3) if self.layout == "NHWC" else (3, crop, crop)
            if images.dtype != want or tuple(images.shape[1:]) != shape:
                raise RuntimeError(
                    f"unexpected batch {images.dtype} {tuple(images.shape)}, "
                    f"want {want} (N, {', '.join(map(str, shape))})"
                )
            if tuple(labels.shape) != (images.shape[0],):
                self.problem(f"labels of shape {tuple(labels.shape)}")
        fmt = torch.channels_last if self.layout == "channels_last" else None
        if not images.is_contiguous(memory_format=fmt or torch.contiguous_format):
            self.problem(
                "batches came out non-contiguous; the harness made them contiguous (timed)"
            )
            images = images.contiguous(memory_format=fmt or torch.contiguous_format)
        return images

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)
