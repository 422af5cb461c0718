"""What the C pipeline hands to Python about samples, and what is said
about them.

- Samples that are not JPEG, PNG or WebP (which the C core decodes
  itself, whatever their names) are decoded with Pillow (BMP, TIFF,
  GIF, AVIF...), called by the C core's decode threads on the bytes they
  read, then placed with the same fused transform by the core.
- With ``on_error="skip"``, the core replaces a sample that cannot be read
  or decoded by the next readable one of its own dataset (a part of a Mix
  or ConcatDataset), in dataset order; this module names the sample and
  says so.
- Each of these is announced once (:class:`FallbackWarning`,
  :class:`DataWarning`), as are truncated files decoded with
  ``allow_truncated=True`` and files read through the page cache because
  the file system refused ``O_DIRECT``.

(Transforms after the fusable prefix, the "tail", are planned and run by
:mod:`._plan`.)

Warnings about a sample point at the training loop's line: the frames
between are :meth:`Fallback.note`, the loader's epoch generator and
``EpochIterator.__next__`` (stacklevel 4).
"""

from __future__ import annotations

import io
import logging
import warnings
from typing import Any, Optional, Sequence

from ._keys import index_of
from ._pipeline import Pipeline, Taken
from .datasets.base import Sources
from .errors import DataWarning, FallbackWarning

log = logging.getLogger("ringloader")

__all__ = ["Fallback"]


class Fallback:
    """What the C pipeline of one loader hands to Python: the decoding of
    files that are not JPEG, PNG or WebP (the C core calls :meth:`decode` on its decode
    threads, with the bytes its source already read), and the naming and
    announcing of samples it decoded that way or replaced
    (``on_error="skip"``: the core's own policy)."""

    def __init__(self, dataset: Any, allow_truncated: bool) -> None:
        self.dataset = dataset
        self.allow_truncated = allow_truncated
        self._announced_fallback = False
        self._announced_skip = False
        self._announced_truncated = False
        self._announced_direct = False

    def decode(
        self, data: memoryview, max_pixels: int
    ) -> tuple[Optional[bytes], int, int]:
        """Decode bytes that are not JPEG, PNG or WebP with Pillow: (rgb, width, height).
        Called by the C core's decode threads (holding the GIL); ``data``
        is valid only during the call. An image over ``max_pixels`` is not
        decoded: Pillow reads only its header to open it, and (None, width,
        height) lets the core refuse it from its size, as it refuses a JPEG.
        Raises ValueError with the reason, which the core reports as a
        DecodeError naming the file."""
        try:
            from PIL import Image
        except ImportError:
            raise ValueError(
                "not a JPEG, PNG or WebP; install Pillow to read other formats"
            ) from None
        buf = io.BytesIO(data)
        try:
            with Image.open(buf) as im:
                w, h = im.size
                if w * h > max_pixels:
                    return None, w, h
                im.draft(None, None)
                rgb = im.convert("RGB")
        except Exception as e:
            # Pillow names its file object ("<_io.BytesIO object at 0x...>"):
            # the core names the file instead.
            reason = str(e).replace(f" {buf!r}", "").replace(repr(buf), "it")
            raise ValueError(
                f"not a JPEG, PNG or WebP, and Pillow cannot read it either ({reason})"
            ) from None
        w, h = rgb.size
        return rgb.tobytes(), w, h

    def name_sample(self, error: BaseException) -> None:
        """Name the failing sample as the dataset knows it (for a tar shard:
        the member and its byte range), not only by its file. The C core
        sets ``index``, the sample's dataset index."""
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

    def note(self, taken: Taken, src: Sources) -> None:
        """Name and announce (once each) the samples of a taken batch that
        were decoded by Pillow or replaced; log each replacement."""
        self.note_fallback(taken.fallback, taken.idx, src, stacklevel=5)
        for pos, error in taken.replaced:
            self.name_sample(error)
            j = taken.idx[pos]
            log.info(
                "ringloader: skipped %s (%s); replaced by %s",
                src.paths[getattr(error, "index", j)],
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
                    stacklevel=4,  # the training loop (see the module's doc)
                )

    def note_fallback(
        self, positions: Sequence[int], idx: list[int], src: Sources, stacklevel: int
    ) -> None:
        """Announce once that samples at ``positions`` of the batch ``idx``
        were decoded by Pillow (also for a batch that then failed)."""
        if positions and not self._announced_fallback:
            self._announced_fallback = True
            i = idx[positions[0]]
            path = src.paths[i]
            warnings.warn(
                f"ringloader: {path} is {_format_of(src, i)}, not JPEG, PNG or WebP: such files "
                "are decoded with Pillow (slower) and counted in "
                "stats()['fallback_decodes']",
                FallbackWarning,
                stacklevel=stacklevel,  # the training loop (see the module's doc)
            )

    def announce_truncated(self, pipe: Pipeline) -> None:
        """Say once that truncated files were decoded (allow_truncated)."""
        if self._announced_truncated or not self.allow_truncated:
            return
        n = pipe.stats()["truncated"]
        if n:
            self._announced_truncated = True
            warnings.warn(
                f"ringloader: decoded {n} truncated file(s) (allow_truncated=True: "
                "their missing rows are grey in a JPEG, black in a PNG or WebP); "
                "counted in stats()['truncated']",
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


def _format_of(src: Sources, i: int) -> str:
    """The format Pillow names for sample i ("PNG"...), from its first
    64 KiB: read once per loader, for the announcement only."""
    try:
        from PIL import Image

        with open(src.paths[i], "rb") as f:
            size = 1 << 16
            if src.offsets is not None:
                f.seek(int(src.offsets[i]))
                length = int(src.lengths[i])  # type: ignore[index]
                size = min(size, length) if length >= 0 else size
            with Image.open(io.BytesIO(f.read(size))) as im:
                return im.format or "not JPEG"
    except Exception:  # only a courtesy for the message
        return "not JPEG"
