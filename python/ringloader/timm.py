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
  batches as torch's default collate makes them (or the ``collate_fn``),
  in host memory, as timm's loader gives them (``device`` is not used).

With the prefetcher and a CUDA ``device``, the loader itself copies each
batch to the device (``Loader(device=...)``'s path: pinned slots, its own
copy stream, uint8 across PCIe) and the rest runs there: with timm's
default collate the conversion and Normalize of the compiled transform,
then the cast to ``img_dtype`` and timm's RandomErasing per sample; with
``FastCollateMixup`` its mixup/cutmix on the uint8 batch (timm's own draws,
its float32 arithmetic and rounding), then Normalize in ``img_dtype`` and
erasing as timm's PrefetchLoader does them. Another ``collate_fn`` gets
host samples, and timm's PrefetchLoader moves its batches.

The dataset is one of timm's ``create_dataset`` makes over local files:
``ImageDataset`` with its folder reader, or with its tar reader (a .tar of
images, or a folder of .tar files, tars inside tars included), each image
read from its byte range, or with its Hugging Face reader
(``create_dataset("hfds/...")``), read through ``ringloader.HFDataset``
from the Arrow files ``load_dataset`` made (its image and label columns,
its class_map applied). What ringloader cannot do (another reader, an
``IterableImageDataset``, ``num_aug_splits``, scheduled input sizes, TF
preprocessing), it says once (a :class:`FallbackWarning`) and returns
timm's own loader; a transform step it cannot fuse runs in Python, as
``ringloader.DataLoader`` does.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import numpy as np
import torch

from .dataloader import DataLoader
from .datasets.timmdata import TimmImages
from .errors import FallbackWarning

__all__ = ["create_loader", "TimmImages"]

_CUDA = torch.device("cuda")  # timm's default device


class _Wrapped:
    """What timm's scripts read of the loader a wrapper wraps (its length,
    sampler, batch sampler and dataset), passed through."""

    loader: Any

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


class _Collated(_Wrapped):
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


class _OnDevice(_Wrapped):
    """timm's PrefetchLoader for batches normalised (and erased) in C: each
    batch moved to ``device`` and cast to ``img_dtype``. On the GPU path
    (``erasing`` set there) the loader's batches are already on the device,
    converted and normalised by it; timm's RandomErasing runs on them there
    after the cast, as the prefetcher runs it."""

    def __init__(
        self,
        loader: Any,
        device: torch.device,
        img_dtype: torch.dtype,
        erasing: Optional[dict] = None,
    ):
        self.loader, self.device, self.img_dtype = loader, device, img_dtype
        self.erasing = erasing
        self._erase: Any = None

    def __iter__(self):
        for images, targets in self.loader:
            if getattr(self.loader, "_gpu", None) is None:
                images = images.to(self.device, non_blocking=True)
            # (on the GPU path, images.device is the loader's device)
            targets = targets.to(images.device, non_blocking=True)
            images = images.to(self.img_dtype)
            if self.erasing:
                images = self._eraser(images.device)(images)
            yield images, targets

    def _eraser(self, device: torch.device) -> Any:
        if self._erase is None:
            from timm.data.random_erasing import RandomErasing

            self._erase = RandomErasing(device=device, **self.erasing)
        return self._erase

    @property
    def mixup_enabled(self) -> bool:
        return False  # timm's: no FastCollateMixup

    @mixup_enabled.setter
    def mixup_enabled(self, x: bool) -> None:
        pass


class _MixOnDevice(_OnDevice):
    """timm's FastCollateMixup + PrefetchLoader on the GPU path: the
    loader's uint8 batches, on the device, mixed as FastCollateMixup mixes
    its samples (its own parameter draws, so numpy's generator moves as
    under timm; float32 blend rounded half to even; cutmix boxes from
    timm's ``cutmix_bbox_and_lam``; targets from ``mixup_target``), then
    normalised in ``img_dtype`` and erased as timm's PrefetchLoader does."""

    def __init__(
        self,
        loader: Any,
        mixup: Any,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        img_dtype: torch.dtype,
        erasing: Optional[dict],
    ):
        super().__init__(loader, loader.device, img_dtype, erasing)
        self.mixup = mixup
        self.mean = torch.tensor([255 * m for m in mean], dtype=img_dtype)
        self.std = torch.tensor([255 * s for s in std], dtype=img_dtype)

    @property
    def mixup_enabled(self) -> bool:
        return self.mixup is not None and bool(self.mixup.mixup_enabled)

    @mixup_enabled.setter
    def mixup_enabled(self, x: bool) -> None:
        if self.mixup is not None:
            self.mixup.mixup_enabled = x

    def __iter__(self):
        gpu = self.loader._gpu
        for images, targets in self.loader:
            gpu.before_compute()  # (the copy has landed; a no-op on a GPU)
            targets = targets.to(images.device, non_blocking=True)
            if self.mixup is not None:
                images, targets = _mix(self.mixup, images, targets)
            view = (1, -1, 1, 1)
            mean = self.mean.to(images.device).view(view)
            std = self.std.to(images.device).view(view)
            images = images.to(self.img_dtype).sub_(mean).div_(std)
            if self.erasing:
                images = self._eraser(images.device)(images)
            yield images, targets


def _blend(a: torch.Tensor, b: torch.Tensor, lam: Any, rest: Any) -> torch.Tensor:
    """FastCollateMixup's blend of uint8 images: a * lam + b * rest in
    float32 (the weights as its numpy arithmetic rounds them), rounded half
    to even as ``np.rint``."""
    return torch.round(a.float() * float(lam) + b.float() * float(rest)).byte()


def _mix(mixup: Any, images: torch.Tensor, targets: torch.Tensor) -> tuple:
    """FastCollateMixup(batch) for a (B, C, H, W) uint8 batch on any
    device: the images mixed with their mirror in the batch (sample i with
    B - 1 - i) per timm's mode, and the mixed soft targets."""
    from timm.data.mixup import cutmix_bbox_and_lam, mixup_target

    b = len(images)
    if b % 2:
        raise ValueError("Batch size should be even when using this (mixup)")
    box = dict(ratio_minmax=mixup.cutmix_minmax, correct_lam=mixup.correct_lam)
    flip = images.flip(0)
    half = "half" in mixup.mode
    n = b // 2 if half else b
    out = images[:n].clone()
    lam: Any
    if mixup.mode in ("elem", "half"):
        lam, cut = mixup._params_per_elem(n)
        for i in range(n):
            if lam[i] == 1.0:
                continue
            if cut[i]:
                (yl, yh, xl, xh), lam[i] = cutmix_bbox_and_lam(out.shape, lam[i], **box)
                out[i, :, yl:yh, xl:xh] = flip[i, :, yl:yh, xl:xh]
            else:
                out[i] = _blend(images[i], flip[i], lam[i], 1 - lam[i])
        if half:
            lam = np.concatenate((lam, np.ones(n, dtype=lam.dtype)))
        lam = torch.tensor(lam, device=images.device).unsqueeze(1)
    elif mixup.mode == "pair":
        lam, cut = mixup._params_per_elem(b // 2)
        for i in range(b // 2):
            j = b - i - 1
            if lam[i] >= 1.0:
                continue
            if cut[i]:
                (yl, yh, xl, xh), lam[i] = cutmix_bbox_and_lam(out.shape, lam[i], **box)
                out[i, :, yl:yh, xl:xh] = images[j, :, yl:yh, xl:xh]
                out[j, :, yl:yh, xl:xh] = images[i, :, yl:yh, xl:xh]
            else:
                out[i] = _blend(images[i], images[j], lam[i], 1 - lam[i])
                out[j] = _blend(images[j], images[i], lam[i], 1 - lam[i])
        lam = np.concatenate((lam, lam[::-1]))
        lam = torch.tensor(lam, device=images.device).unsqueeze(1)
    else:
        lam, cut = mixup._params_per_batch()
        if lam != 1.0:
            if cut:
                (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(out.shape, lam, **box)
                out[:, :, yl:yh, xl:xh] = flip[:, :, yl:yh, xl:xh]
            else:
                out = _blend(images, flip, lam, 1 - lam)
    soft = mixup_target(
        targets,
        mixup.num_classes,
        lam,
        mixup.label_smoothing,
        getattr(mixup, "multi_label", False),
    )
    return out, soft[:n]


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
    images = None
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
    # On a CUDA device with the prefetcher the loader copies uint8 batches
    # itself: erasing (and mixing) then run on the device (see the doc).
    cuda = use_prefetcher and torch.device(device).type == "cuda"
    mixup = _fast_mixup(collate_fn) if cuda else None
    if cuda and custom_collate and mixup is None:
        cuda = False  # another collate_fn: host samples, timm's PrefetchLoader
    erasing = None
    if cuda and re_prob > 0 and is_training and not no_aug:
        erasing = dict(
            probability=re_prob,
            mode=re_mode,
            max_count=re_count,
            num_splits=re_num_splits,
        )
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
        re_prob=re_prob if in_c and not cuda else 0.0,
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

    def make() -> Any:
        return DataLoader(
            images,
            batch_size=batch_size,
            shuffle=sampler is None and is_training,
            sampler=sampler,
            num_workers=max(1, num_workers),
            pin_memory=pin_memory,
            drop_last=is_training,
        )

    loader: Any = make()
    img_dtype = img_dtype or torch.float32
    if cuda and not hasattr(loader, "_place_on"):
        cuda = False  # torch's DataLoader (said): the host path
    if cuda:
        try:
            # False: images of varying sizes, host lists (moved below).
            cuda = loader._place_on(device)
        except ValueError as e:  # a step runs in Python per sample
            # The loader is left as it was: on the host.
            warnings.warn(
                f"ringloader: host batches, moved to {device} afterwards: {e}",
                FallbackWarning,
                stacklevel=2,
            )
            cuda = False
    if cuda:
        if mixup is not None:
            return _MixOnDevice(
                loader,
                mixup,
                adapt_to_chs(mean, channels),
                adapt_to_chs(std, channels),
                img_dtype,
                erasing,
            )
        if in_c:
            return _OnDevice(loader, loader.device, img_dtype, erasing)
        return _MixOnDevice(  # re_split: timm's prefetcher's normalisation
            loader,
            None,
            adapt_to_chs(mean, channels),
            adapt_to_chs(std, channels),
            img_dtype,
            erasing,
        )
    if custom_collate:
        loader = _Collated(loader, collate_fn)
    if not use_prefetcher:
        return loader
    if in_c:
        return _OnDevice(loader, device, img_dtype, erasing)
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


def _fast_mixup(collate_fn: Any) -> Any:
    """``collate_fn`` if it is timm's FastCollateMixup (mixed on the device
    by :func:`_mix`), else None."""
    if collate_fn is None:
        return None
    from timm.data.mixup import FastCollateMixup

    return collate_fn if type(collate_fn) is FastCollateMixup else None


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
