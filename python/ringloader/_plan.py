"""A transform split between the C pipeline and Python: the part fused into
the C core's decode (compiled), the tail that runs in Python on each
sample (announced once with a FallbackWarning), the layout the core writes
for it, and running that tail on a batch."""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple, Optional

import torch
from torch.utils.data import default_collate

from .errors import FallbackWarning
from .transforms import Compiled, MultiView, UnsupportedTransform, compile_transform

__all__ = ["TransformPlan", "plan_transform", "plan_views", "run_tail", "tail_samples"]


class TransformPlan(NamedTuple):
    """A transform split between the C pipeline and Python."""

    transform: Any  # as given
    compiled: Compiled  # the fused part, for the C pipeline
    tail: list  # what runs in Python per sample, in order
    c_layout: str  # "NCHW" or "NHWC": the layout the C pipeline writes


class NotOnDevice(ValueError):
    """A transform whose fused part cannot be followed by the device copy
    (a Python tail, an erase in output units); the message says what to
    do instead."""


def plan_views(
    transform: Any, layout: str, cuda: bool, stacklevel: int
) -> list[TransformPlan]:
    """:func:`plan_transform` of each view of a MultiView, or of
    ``transform`` alone as its one view, which may give each sample its own
    size (``Compiled.spec["varying"]``: the loader yields a list)."""
    if not isinstance(transform, MultiView):
        return [plan_transform(transform, layout, cuda, stacklevel + 1, varying=True)]
    return [
        plan_transform(view, layout, cuda, stacklevel + 1, index=i)
        for i, view in enumerate(transform.views)
    ]


def plan_transform(
    transform: Any,
    layout: str,
    cuda: bool,
    stacklevel: int,
    index: Optional[int] = None,
    varying: bool = False,
) -> TransformPlan:
    """Compile ``transform`` for a loader yielding ``layout``. Warns with a
    FallbackWarning (``stacklevel`` as warnings.warn's, counted from the
    caller) when part of it runs in Python; raises UnsupportedTransform, or
    NotOnDevice (a ValueError) when that part would follow a device copy.
    ``index``: the transform is that view of a MultiView (named in what is
    said).
    ``varying``: a transform without a crop may give each sample its own
    size (on the GPU path each sample is its own region of the batch's
    device buffer)."""
    where = "" if index is None else f"view {index}: "
    try:
        compiled = compile_transform(transform, varying)
    except UnsupportedTransform as e:
        raise UnsupportedTransform(where + str(e)) from None
    tail = list(compiled.rest)
    converts = [n for n in compiled.passed if n in ("ToDtype", "ConvertImageDtype")]
    if converts and not tail and not compiled.tensor_out:
        # torch leaves the PIL image as it is there: the uint8 batch the
        # loader would give is not the conversion the steps ask for.
        names = ", ".join(dict.fromkeys(converts))
        raise UnsupportedTransform(
            f"{where}{names} left the PIL image as it was (v2's conversions "
            "act on tensors), so the batch would be uint8: put ToImage() "
            "before them"
        )
    if cuda and any(op == "erase" for op, _ in compiled.spec.get("ops", [])):
        # The C core writes uint8 for the device and the conversion runs on
        # the GPU after the copy: an erase in output units has no place.
        raise NotOnDevice(
            where + "RandomErasing cannot be fused with device='cuda' (the dtype "
            "conversion and Normalize run on the GPU); leave it out of the "
            "transform and apply it to each sample of the batch on the GPU"
        )
    if tail and cuda:
        raise NotOnDevice(
            where
            + "transforms that run in Python per sample ("
            + ", ".join(type(t).__name__ for t in tail)
            + ") cannot follow device='cuda'; apply them to the batch"
        )
    if tail:
        names = ", ".join(type(t).__name__ for t in tail)
        warnings.warn(
            f"ringloader: {where}fused {' + '.join(compiled.fused)} into the C "
            f"decoder; {names} cannot be fused ({compiled.reason}) and runs "
            "in Python per sample (slower)",
            FallbackWarning,
            stacklevel=stacklevel + 1,
        )
    # Samples handed to a Python tail as images are converted from NHWC.
    c_layout = (
        "NHWC"
        if layout in ("NHWC", "channels_last") or (tail and not compiled.tensor_out)
        else "NCHW"
    )
    return TransformPlan(transform, compiled, tail, c_layout)


def run_tail(images: torch.Tensor, plan: TransformPlan) -> Any:
    """The Python tail of ``plan`` on each sample of a host batch, collated
    as DataLoader collates."""
    return default_collate(tail_samples(images, plan))


def tail_samples(images: torch.Tensor, plan: TransformPlan) -> list:
    """What the Python tail of ``plan`` gives for each sample of a host
    batch, in order. torch's ops on one sample run on one thread here: with
    torch's intra-op pool (a thread per core) they would compete with the
    decode threads for the cores."""
    threads = torch.get_num_threads()
    if threads > 1:
        torch.set_num_threads(1)
    try:
        return [_tail_of(images, i, plan) for i in range(images.shape[0])]
    finally:
        if threads > 1:
            torch.set_num_threads(threads)


def typed(image: torch.Tensor, compiled: Compiled) -> Any:
    """A sample's image as the fused steps make it under torch: a
    ``tv_tensors.Image`` after v2's ToImage (a batch's plain tensor else)."""
    if compiled.image != "image":
        return image
    from torchvision import tv_tensors

    return image.as_subclass(tv_tensors.Image)


def _tail_of(images: torch.Tensor, i: int, plan: TransformPlan) -> Any:
    if plan.compiled.tensor_out:
        sample: Any = images[i]
        if plan.c_layout == "NHWC":
            sample = sample.permute(2, 0, 1)
        sample = typed(sample, plan.compiled)
    else:
        from PIL import Image

        sample = Image.fromarray(images[i].numpy())
    for t in plan.tail:
        sample = t(sample)
    return sample
