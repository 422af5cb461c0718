"""What the C pipeline leaves to Python, and what is said about it.

- Samples that are not JPEG (a PNG named .JPEG, WebP, BMP...) are decoded
  with Pillow and placed in their batch with the same fused transform.
- With ``on_error="skip"``, a sample that cannot be read or decoded is
  replaced by the next readable one in dataset order.
- Transforms after the fusable prefix (the "tail") run in Python on each
  sample.
- Each of these is announced once (:class:`FallbackWarning`,
  :class:`DataWarning`), as are truncated JPEGs decoded with
  ``allow_truncated=True`` and files read through the page cache because
  the file system refused ``O_DIRECT``.

Warnings about a sample point at the training loop's line: the frames
between are two of this module's methods, the loader's epoch generator and
``EpochIterator.__next__`` (stacklevel 5).
"""

from __future__ import annotations

import io
import logging
import warnings
from typing import Any, NamedTuple, Optional

import torch
from torch.utils.data import default_collate

from . import _core
from ._epoch import Keys, index_of
from ._gpu import Gpu
from ._pipeline import Pipeline, Taken
from .datasets.base import Sources
from .errors import DataWarning, FallbackWarning
from .transforms import Compiled, compile_transform

log = logging.getLogger("ringloader")

__all__ = ["Fallback", "TransformPlan", "plan_transform", "run_tail"]


class TransformPlan(NamedTuple):
    """A transform split between the C pipeline and Python."""

    transform: Any  # as given
    compiled: Compiled  # the fused part, for the C pipeline
    tail: list  # what runs in Python per sample, in order
    c_layout: str  # "NCHW" or "NHWC": the layout the C pipeline writes


def plan_transform(
    transform: Any, layout: str, cuda: bool, stacklevel: int
) -> TransformPlan:
    """Compile ``transform`` for a loader yielding ``layout``. Warns with a
    FallbackWarning (``stacklevel`` as warnings.warn's, counted from the
    caller) when part of it runs in Python; raises UnsupportedTransform, or
    ValueError when that part would follow a device copy."""
    compiled = compile_transform(transform)
    tail = list(compiled.rest)
    if tail and cuda:
        raise ValueError(
            "transforms that run in Python per sample ("
            + ", ".join(type(t).__name__ for t in tail)
            + ") cannot follow device='cuda'; apply them to the batch"
        )
    if tail:
        names = ", ".join(type(t).__name__ for t in tail)
        warnings.warn(
            f"ringloader: fused {' + '.join(compiled.fused)} into the C "
            f"decoder; {names} cannot be fused and runs in Python per sample "
            "(slower)",
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


def run_tail(images: torch.Tensor, plan: TransformPlan) -> torch.Tensor:
    """The Python tail of ``plan`` on each sample of a host batch, collated
    as DataLoader collates."""
    out = []
    for i in range(images.shape[0]):
        if plan.compiled.tensor_out:
            sample: Any = images[i]
            if plan.c_layout == "NHWC":
                sample = sample.permute(2, 0, 1)
        else:
            from PIL import Image

            sample = Image.fromarray(images[i].numpy())
        for t in plan.tail:
            sample = t(sample)
        out.append(sample)
    return default_collate(out)


class Fallback:
    """The samples of one loader that its C pipeline leaves to Python,
    their counts, and the announcements made once per loader."""

    def __init__(
        self,
        dataset: Any,
        gpu: Optional[Gpu],
        on_error: str,
        max_consecutive_errors: int,
        max_pixels: int,
        allow_truncated: bool,
    ) -> None:
        self.dataset = dataset
        self.gpu = gpu
        self.on_error = on_error
        self.max_consecutive_errors = max_consecutive_errors
        self.max_pixels = max_pixels
        self.allow_truncated = allow_truncated
        self.fallback_decodes = 0  # non-JPEG samples decoded with Pillow
        self.skipped = 0  # failed samples replaced (on_error="skip")
        self._announced_fallback = False
        self._announced_skip = False
        self._announced_truncated = False
        self._announced_direct = False

    def name_sample(self, error: BaseException) -> None:
        """Name the failing sample as the dataset knows it (for a tar shard:
        the member and its byte range), not only by its file. An ``index``
        set by C is a random key: it becomes the dataset index."""
        describe = getattr(self.dataset, "describe", None)
        index = getattr(error, "index", None)
        if index is not None:
            index = error.index = index_of(index)  # type: ignore[attr-defined]
        if describe is None or index is None:
            return
        try:
            where = describe(index)
        except Exception:  # a description is a courtesy, never a new error
            return
        if isinstance(error, OSError):
            error.strerror = f"{error.strerror} (sample {where})"
        elif error.args:
            error.args = (f"{error.args[0]} (sample {where})",) + error.args[1:]
        error.sample = where  # type: ignore[attr-defined]

    def repair(
        self, pipe: Pipeline, taken: Taken, src: Sources, epoch: int, keys: Keys
    ) -> list[int]:
        """Complete a taken batch: decode and place the samples left to
        Python, replace the failed ones (on_error="skip"). Returns the
        batch's dataset indices, replacements included; raises the error of
        a sample that cannot be loaded otherwise."""
        idx = taken.idx
        if taken.fallback or taken.failed:
            failed = list(taken.failed)
            if taken.fallback:
                failed += self._fill_others(pipe, taken, src, epoch)
            if failed:
                idx = self._replace_failed(
                    pipe, taken.raw, src, idx, failed, epoch, keys
                )
        return idx

    def _fill_others(
        self, pipe: Pipeline, taken: Taken, src: Sources, epoch: int
    ) -> list:
        """Decode the samples that are not JPEG with Pillow and place them
        with the same fused transform. Returns the (position, error) of
        those Pillow cannot read either when on_error="skip" (else raises)."""
        failed = []
        for pos in taken.fallback:
            i = taken.idx[pos]
            try:
                rgb, w, h, kind = self._decode_other(src, i, _read_sample(src, i))
            except _core.DecodeError as e:
                if self.on_error != "skip":
                    raise
                failed.append((pos, e))
                continue
            self._place(pipe, taken.raw, pos, rgb, w, h, epoch, taken.keys[pos])
            self.fallback_decodes += 1
            if not self._announced_fallback:
                self._announced_fallback = True
                warnings.warn(
                    f"ringloader: {src.paths[i]} is {kind}, not JPEG: such files "
                    "are decoded with Pillow (slower) and counted in "
                    "stats()['fallback_decodes']",
                    FallbackWarning,
                    stacklevel=5,  # the training loop (see the module's doc)
                )
        return failed

    def _replace_failed(
        self,
        pipe: Pipeline,
        raw: torch.Tensor,
        src: Sources,
        idx: list,
        failed: list,
        epoch: int,
        keys: Keys,
    ) -> list:
        """on_error="skip": put the next readable sample (in dataset order)
        in the place of each failed one. Returns the batch's indices with
        the replacements; raises the original error after
        max_consecutive_errors failures in a row."""
        idx = list(idx)
        n = len(src.paths)
        for pos, error in failed:
            i = idx[pos]
            self.name_sample(error)
            for k in range(1, self.max_consecutive_errors):
                j = (i + k) % n
                try:
                    data = _read_sample(src, j)
                    if data[:3] == b"\xff\xd8\xff":
                        rgb, h, w = _core.decode(
                            data,
                            max_pixels=self.max_pixels,
                            allow_truncated=self.allow_truncated,
                        )
                    else:
                        rgb, w, h, _ = self._decode_other(src, j, data)
                except (_core.DecodeError, OSError):
                    continue
                self._place(pipe, raw, pos, rgb, w, h, epoch, keys.replacement(j))
                break
            else:
                if error.args:
                    tail = (
                        f" (on_error='skip': the {self.max_consecutive_errors - 1}"
                        " samples after it failed too)"
                    )
                    if isinstance(error, OSError):
                        error.strerror = f"{error.strerror}{tail}"
                    else:
                        error.args = (f"{error.args[0]}{tail}",) + error.args[1:]
                raise error
            idx[pos] = j
            self.skipped += 1
            log.info(
                "ringloader: skipped %s (%s); replaced by %s",
                src.paths[i],
                error,
                src.paths[j],
            )
            if not self._announced_skip:
                self._announced_skip = True
                warnings.warn(
                    f"ringloader: skipped a sample that cannot be loaded ({error}); "
                    f"replaced by {src.paths[j]} (on_error='skip'). Further skips "
                    "are counted in stats()['skipped'] and logged at INFO level.",
                    DataWarning,
                    stacklevel=5,  # the training loop (see the module's doc)
                )
        return idx

    def _place(
        self,
        pipe: Pipeline,
        raw: torch.Tensor,
        pos: int,
        rgb: bytes,
        w: int,
        h: int,
        epoch: int,
        key: int,
    ) -> None:
        """Place an image decoded outside the C pipeline at position pos of
        the batch, with the same fused transform and the randomness of key."""
        if self.gpu is None:
            pipe.fill(raw[pos].view(torch.uint8).numpy(), rgb, w, h, epoch, key)
        else:
            host = torch.empty(raw[pos].numel(), dtype=torch.uint8)
            pipe.fill(host.numpy(), rgb, w, h, epoch, key)
            self.gpu.before_compute()
            raw[pos].copy_(host.view(raw[pos].shape).to(raw.device))

    def _decode_other(
        self, src: Sources, i: int, data: bytes
    ) -> tuple[bytes, int, int, str]:
        """Decode sample i, not a JPEG, with Pillow: (rgb, w, h, format)."""
        path = src.paths[i]
        try:
            from PIL import Image
        except ImportError:
            raise _core.DecodeError(
                f"cannot decode {path}: not a JPEG; install Pillow to read "
                "other formats"
            ) from None
        try:
            with Image.open(io.BytesIO(data)) as im:
                kind = im.format or "not JPEG"
                im.draft(None, None)
                rgb = im.convert("RGB")
        except Exception as e:
            err = _core.DecodeError(
                f"cannot decode {path}: not a JPEG, and "
                f"Pillow cannot read it either ({e})"
            )
            err.path, err.reason, err.kind = path, str(e), "not_jpeg"
            err.index = i
            self.name_sample(err)
            raise err from None
        w, h = rgb.size
        return rgb.tobytes(), w, h, kind

    def announce_truncated(self, pipe: Pipeline) -> None:
        """Say once that truncated JPEGs were decoded (allow_truncated)."""
        if self._announced_truncated or not self.allow_truncated:
            return
        n = pipe.stats()["truncated"]
        if n:
            self._announced_truncated = True
            warnings.warn(
                f"ringloader: decoded {n} truncated JPEG(s) (allow_truncated=True: "
                "their missing rows are grey); counted in stats()['truncated']",
                DataWarning,
                # EpochIterator.__next__, as before the split (4 would be
                # the training loop, as for the other warnings here).
                stacklevel=3,
            )

    def announce_direct(self, pipe: Pipeline, src: Sources, idx: list) -> None:
        """Say once that O_DIRECT was refused and files are read through
        the page cache (naming the first file of this batch)."""
        if self._announced_direct:
            return
        if pipe.stats()["direct_refused"]:
            self._announced_direct = True
            log.warning(
                "ringloader: the file system refuses O_DIRECT for "
                "%s; reading it (and others like it) through the "
                "page cache",
                src.paths[idx[0]],
            )


def _read_sample(src: Sources, i: int) -> bytes:
    """The bytes of sample i: its file, or its byte range of a shard."""
    with open(src.paths[i], "rb") as f:
        if src.offsets is not None:
            f.seek(int(src.offsets[i]))
            return f.read(int(src.lengths[i]))  # type: ignore[index]
        return f.read()
