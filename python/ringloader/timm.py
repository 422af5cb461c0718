"""timm's ``create_loader``, with ringloader inside: change

    from timm.data import create_loader

to ``from ringloader.timm import create_loader`` in timm's ``train.py`` or
``validate.py`` and keep everything else.

:func:`create_loader` takes timm's arguments and gives what timm's loader
gives: the transform timm's ``create_transform`` makes from them (the very
objects, compiled by ``ringloader.adapt.timm``), the same samplers
(``DistributedSampler``, ``RepeatAugSampler``, ``OrderedDistributedSampler``),
shuffling and ``drop_last`` for training, and with ``use_prefetcher``
normalised ``img_dtype`` batches on ``device`` with random erasing.

How it runs, by case:

- ``use_prefetcher`` with timm's default collate: the transform is built as
  timm builds it without the prefetcher (MaybeToTensor, Normalize,
  RandomErasing per sample: what the prefetcher does to each sample of a
  batch), so normalisation and erasing run in C; the batch is then moved to
  ``device`` and cast to ``img_dtype``. The values are the prefetcher's
  within float rounding (it normalises in ``img_dtype``, we in float32).
- ``use_prefetcher`` with a ``collate_fn`` (``FastCollateMixup``), or with
  ``re_split``: the C pipeline gives timm's uint8 samples, the
  ``collate_fn`` mixes them as timm's loader does, and timm's own
  ``PrefetchLoader`` normalises and erases on the device.
- without the prefetcher: the transform with MaybeToTensor and Normalize,
  batches as torch's default collate makes them (or the ``collate_fn``).

The dataset is one of timm's ``create_dataset`` makes over local files:
``ImageDataset`` with its folder reader, or with its tar reader (a .tar of
images, or a folder of .tar files, tars inside tars included), each image
read from its byte range. What ringloader cannot do (another reader, an
``IterableImageDataset``, ``num_aug_splits``, scheduled input sizes, TF
preprocessing), it says once (a :class:`FallbackWarning`) and returns
timm's own loader; a transform step it cannot fuse runs in Python, as
``ringloader.DataLoader`` does.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Optional

import numpy as np
import torch

from .dataloader import DataLoader
from .datasets.base import ImageDataset, Sources
from .errors import FallbackWarning

__all__ = ["create_loader", "TimmImages"]

_CUDA = torch.device("cuda")  # timm's default device


class TimmImages(ImageDataset):
    """timm's ``ImageDataset`` over local files, read by the C pipeline:
    its reader's files (folder reader) or byte ranges of its tar files (tar
    reader), its targets, and ``transform``/``target_transform`` as set
    here. Indexed, it gives what timm's dataset gives with this transform.
    Raises ValueError naming what it cannot read."""

    def __init__(self, dataset: Any, transform: Optional[Callable] = None) -> None:
        self.dataset = dataset
        self.transform = transform
        self.target_transform = getattr(dataset, "target_transform", None)
        if getattr(dataset, "load_bytes", False):
            raise ValueError("the dataset gives bytes (load_bytes=True)")
        if getattr(dataset, "input_img_mode", "RGB") != "RGB":
            raise ValueError(f"input_img_mode={dataset.input_img_mode!r}, not 'RGB'")
        if getattr(dataset, "additional_features", None):
            raise ValueError("the dataset gives additional features")
        self._sources = _sources_of(dataset.reader)

    def ringloader_sources(self) -> Sources:
        return self._sources

    def __len__(self) -> int:
        return len(self._sources)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        self.dataset.transform = self.transform
        return self.dataset[index]


def _sources_of(reader: Any) -> Sources:
    kind = type(reader).__name__
    if kind == "ReaderImageFolder":
        paths = [os.path.abspath(p) for p, _ in reader.samples]
        targets = [t for _, t in reader.samples]
        return Sources(paths=paths, targets=_targets(targets))
    if kind == "ReaderImageInTar":
        paths, offsets, lengths = [], [], []
        for sample, parent, child in reader.samples:
            path = os.path.join(reader.root, parent) if parent else reader.root
            start = child.offset_data if child is not None else 0
            if not sample.isreg() or (child is not None and not child.isreg()):
                raise ValueError(f"{path}: {sample.name} is not a plain file")
            paths.append(os.path.abspath(path))
            offsets.append(start + sample.offset_data)
            lengths.append(sample.size)
        return Sources(
            paths=paths,
            targets=_targets(reader.targets),
            offsets=np.asarray(offsets, dtype=np.int64),
            lengths=np.asarray(lengths, dtype=np.int64),
        )
    raise ValueError(f"timm's {kind} is not read by ringloader")


def _targets(targets: Any) -> np.ndarray:
    out = np.asarray([-1 if t is None else t for t in targets])
    if len(out) and not np.issubdtype(out.dtype, np.integer):
        raise ValueError(f"targets of {out.dtype}, not class indices")
    return out.astype(np.int64)


class _Collated:
    """A loader's uint8 batches given to a timm ``collate_fn``
    (FastCollateMixup) as the list of (CHW uint8 array, target) samples
    timm's loader gives it."""

    def __init__(self, loader: Any, collate_fn: Callable) -> None:
        self.loader, self.collate_fn = loader, collate_fn

    def __iter__(self):
        for images, targets in self.loader:
            arrays = images.numpy()
            yield self.collate_fn(
                [(arrays[i], int(targets[i])) for i in range(len(arrays))]
            )

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def sampler(self) -> Any:
        return self.loader.sampler

    @property
    def batch_sampler(self) -> Any:
        return self.loader.batch_sampler

    @property
    def dataset(self) -> Any:
        return self.loader.dataset


class _OnDevice:
    """timm's PrefetchLoader for batches normalised (and erased) in C: each
    batch moved to ``device`` and cast to ``img_dtype``."""

    def __init__(self, loader: Any, device: torch.device, img_dtype: torch.dtype):
        self.loader, self.device, self.img_dtype = loader, device, img_dtype

    def __iter__(self):
        for images, targets in self.loader:
            images = images.to(self.device, non_blocking=True)
            yield images.to(self.img_dtype), targets.to(self.device, non_blocking=True)

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def sampler(self) -> Any:
        return self.loader.sampler

    @property
    def batch_sampler(self) -> Any:
        return self.loader.batch_sampler

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    @property
    def mixup_enabled(self) -> bool:
        return False  # timm's: no FastCollateMixup

    @mixup_enabled.setter
    def mixup_enabled(self, x: bool) -> None:
        pass


def _fallback(reason: str, **kwargs: Any) -> Any:
    from timm.data import create_loader as timm_create_loader

    warnings.warn(
        f"ringloader: using timm's create_loader because {reason}",
        FallbackWarning,
        stacklevel=3,
    )
    return timm_create_loader(**kwargs)


def create_loader(
    dataset: Any,
    input_size: Any,
    batch_size: int,
    is_training: bool = False,
    no_aug: bool = False,
    re_prob: float = 0.0,
    re_mode: str = "const",
    re_count: int = 1,
    re_split: bool = False,
    train_crop_mode: Optional[str] = None,
    scale: Optional[tuple[float, float]] = None,
    ratio: Optional[tuple[float, float]] = None,
    hflip: float = 0.5,
    vflip: float = 0.0,
    color_jitter: Any = 0.4,
    color_jitter_prob: Optional[float] = None,
    grayscale_prob: float = 0.0,
    gaussian_blur_prob: float = 0.0,
    auto_augment: Optional[str] = None,
    num_aug_repeats: int = 0,
    num_aug_splits: int = 0,
    interpolation: str = "bilinear",
    mean: tuple[float, ...] = (0.485, 0.456, 0.406),
    std: tuple[float, ...] = (0.229, 0.224, 0.225),
    num_workers: int = 1,
    distributed: bool = False,
    crop_pct: Optional[float] = None,
    crop_mode: Optional[str] = None,
    crop_border_pixels: Optional[int] = None,
    collate_fn: Optional[Callable] = None,
    pin_memory: bool = False,
    fp16: bool = False,
    img_dtype: torch.dtype = torch.float32,
    device: torch.device = _CUDA,
    use_prefetcher: bool = True,
    use_multi_epochs_loader: bool = False,
    persistent_workers: bool = True,
    worker_seeding: Any = "all",
    tf_preprocessing: bool = False,
    **scheduled: Any,
) -> Any:
    """timm's ``timm.data.create_loader`` (same arguments, same result; see
    the module's doc), loading with ringloader's C pipeline."""
    from timm.data import create_transform
    from timm.data.distributed_sampler import (
        OrderedDistributedSampler,
        RepeatAugSampler,
    )
    from timm.data.loader import PrefetchLoader, adapt_to_chs, fast_collate

    args = dict(locals())
    for name in ("create_transform", "OrderedDistributedSampler", "RepeatAugSampler"):
        args.pop(name)
    for name in ("PrefetchLoader", "adapt_to_chs", "fast_collate", "scheduled"):
        args.pop(name)
    args.update(scheduled)
    why = _unsupported(num_aug_splits, tf_preprocessing, scheduled)
    try:
        images = TimmImages(dataset) if why is None else None
    except (ValueError, AttributeError) as e:
        why = f"{type(dataset).__name__}: {e}"
    if images is None:
        return _fallback(why, **args)
    if callable(worker_seeding):
        warnings.warn(
            "ringloader: worker_seeding is not called: there are no worker "
            "processes, and the random draws are keyed by (seed, epoch, sample) "
            "in C, not by Python's or numpy's generators",
            FallbackWarning,
            stacklevel=2,
        )
    re_num_splits = (num_aug_splits or 2) if re_split else 0
    channels = (
        input_size[0]
        if isinstance(input_size, (tuple, list)) and len(input_size) == 3
        else len(mean)
    )
    if fp16:
        img_dtype = torch.float16
    custom_collate = collate_fn is not None and collate_fn is not fast_collate
    # In C: normalisation and erasing, unless timm's prefetcher must do them
    # after a collate_fn (mixup mixes the uint8 samples) or per batch split.
    in_c = not use_prefetcher or not (custom_collate or re_num_splits > 1)
    transform = create_transform(
        input_size,
        is_training=is_training,
        no_aug=no_aug,
        train_crop_mode=train_crop_mode,
        scale=scale,
        ratio=ratio,
        hflip=hflip,
        vflip=vflip,
        color_jitter=color_jitter,
        color_jitter_prob=color_jitter_prob,
        grayscale_prob=grayscale_prob,
        gaussian_blur_prob=gaussian_blur_prob,
        auto_augment=auto_augment,
        interpolation=interpolation,
        mean=mean,
        std=std,
        crop_pct=crop_pct,
        crop_mode=crop_mode,
        crop_border_pixels=crop_border_pixels,
        re_prob=re_prob if in_c else 0.0,
        re_mode=re_mode,
        re_count=re_count,
        re_num_splits=re_num_splits,
        use_prefetcher=not in_c,
    )
    dataset.transform = images.transform = transform

    sampler = None
    if distributed:
        if is_training and num_aug_repeats:
            sampler = RepeatAugSampler(images, num_repeats=num_aug_repeats)
        elif is_training:
            sampler = torch.utils.data.distributed.DistributedSampler(images)
        else:
            sampler = OrderedDistributedSampler(images)
    elif num_aug_repeats:
        raise AssertionError(
            "RepeatAugment not currently supported in non-distributed use"
        )
    loader: Any = DataLoader(
        images,
        batch_size=batch_size,
        shuffle=sampler is None and is_training,
        sampler=sampler,
        num_workers=max(1, num_workers),
        pin_memory=pin_memory,
        drop_last=is_training,
    )
    if custom_collate:
        loader = _Collated(loader, collate_fn)
    if not use_prefetcher:
        return loader
    if in_c:
        return _OnDevice(loader, device, img_dtype or torch.float32)
    return PrefetchLoader(
        loader,
        mean=adapt_to_chs(mean, channels),
        std=adapt_to_chs(std, channels),
        channels=channels,
        device=device,
        img_dtype=img_dtype,
        re_prob=re_prob if is_training and not no_aug else 0.0,
        re_mode=re_mode,
        re_count=re_count,
        re_num_splits=re_num_splits,
    )


def _unsupported(
    num_aug_splits: int, tf_preprocessing: bool, scheduled: dict
) -> Optional[str]:
    """Why ringloader cannot stand in for timm's loader here, or None."""
    if scheduled.get("input_size_choices") is not None:
        return "input_size_choices (scheduled input sizes) is set"
    unknown = set(scheduled) - {
        "input_size_choices",
        "batch_size_choices",
        "batch_choice_weights",
        "batch_choice_seed",
        "batch_choice_schedule",
        "batch_schedule_epochs",
        "batch_schedule_spread",
        "batch_schedule_random_mix",
        "num_batches",
    }
    if unknown:
        raise TypeError(f"create_loader() got unexpected arguments {sorted(unknown)}")
    if num_aug_splits > 0:
        return f"num_aug_splits={num_aug_splits} (AugMix splits) is set"
    if tf_preprocessing:
        return "tf_preprocessing is set"
    return None
