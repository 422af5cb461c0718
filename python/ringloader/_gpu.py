"""The GPU path of a Loader: device buffers and streams, and the dtype and
layout conversion that runs on the device (uint8 crosses PCIe)."""

from __future__ import annotations

import copy
from typing import Any

import torch

from . import _core


class Gpu:
    """Device buffers and streams for the GPU path, with a CUDA build of
    torch.

    The copy stream is the C pipeline's own (created non-blocking, destroyed
    with the pipeline), wrapped in a ``torch.cuda.ExternalStream``: never a
    stream of torch's pool, which other code (NCCL) may share. Device memory
    comes from torch's caching allocator: each batch's buffer is allocated
    on the copy stream and records the consumer's stream when handed out,
    as torch's rules for cross-stream use ask.
    """

    def __init__(self, device: torch.device) -> None:
        ok, msg, lib, count = _core.cuda_probe()
        if not ok:
            raise RuntimeError(
                f"device={str(device)!r} needs a CUDA GPU, and none is usable here "
                f"({msg}). Use a machine with an NVIDIA GPU and a CUDA build of "
                "torch, or leave device unset to get batches in host memory."
            )
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"device={str(device)!r} needs a CUDA build of torch that sees "
                f"the GPU (the CUDA runtime {lib} was found, torch.cuda is not "
                "available)"
            )
        self.index = (
            device.index if device.index is not None else torch.cuda.current_device()
        )
        if not 0 <= self.index < count:
            raise RuntimeError(f"CUDA device {self.index} requested, {count} present")
        self.device = torch.device("cuda", self.index)
        self.library = lib
        self._stream: Any = None

    def use_stream(self, handle: int) -> None:
        """The copy stream of the pipeline just made (its cudaStream_t
        handle); its buffers are allocated on it from now on."""
        self._stream = torch.cuda.ExternalStream(handle, device=self.device)

    def alloc(self, nbytes: int) -> tuple[Any, int]:
        """A fresh device buffer for one batch, and its address: the
        allocator the C core calls (with the GIL) at each submit, and in
        next() for a varying batch's spill buffer."""
        with torch.cuda.stream(self._stream):
            t = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return t, int(t.data_ptr())

    def consumer_stream(self) -> int:
        """The handle of the stream the caller's work is queued on."""
        return int(torch.cuda.current_stream(self.device).cuda_stream)

    def tensor(self, batch: Any) -> torch.Tensor:
        """The uint8 tensor of a device batch (a ``_core.Batch`` whose copy
        the consumer's stream already waits for)."""
        # The buffer came from torch's allocator on the copy stream: it is
        # now used on the consumer's, which must finish with it before the
        # allocator reuses it.
        batch.owner.record_stream(torch.cuda.current_stream(self.device))
        return torch.from_dlpack(batch)

    def place(self, target: Any) -> Any:
        """A sample's target with its tensors on the device, as
        ``.to(device)`` puts them (a tv_tensor keeps its kind and
        metadata), in dicts, lists and tuples; anything else as it is."""
        if isinstance(target, torch.Tensor):
            return self.to_device(target)
        if isinstance(target, dict):
            # A copy of the dict's own kind (a defaultdict keeps its
            # default), each value placed.
            out = copy.copy(target)
            for k, v in target.items():
                out[k] = self.place(v)
            return out
        if isinstance(target, (list, tuple)) and not hasattr(target, "_fields"):
            return type(target)(self.place(v) for v in target)
        return target

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        """One tensor of a target on the device, on the consumer's stream
        (small: boxes, labels, masks)."""
        return t.to(self.device)

    def before_compute(self) -> None:
        """Called before torch ops on a fresh batch. They are queued on the
        consumer stream, after the copy: nothing to do."""

    def synchronize(self) -> None:
        """Wait for everything queued on the consumer's stream."""
        torch.cuda.current_stream(self.device).synchronize()

    def convert(self, images: torch.Tensor, layout: str, compiled: Any) -> torch.Tensor:
        """Layout and dtype conversion of a uint8 batch on its device, as
        the compiled transform asks (``compiled.dtype``, ``mul``, ``add``)."""
        return self.convert_samples([images], layout, compiled)[0]

    def convert_samples(
        self, batches: list[torch.Tensor], layout: str, compiled: Any
    ) -> list[torch.Tensor]:
        """:meth:`convert` of each (N, ...) uint8 batch of a list (a batch
        of varying sizes: one a sample), the factors sent to the device
        once."""
        if layout == "channels_last":
            batches = [b.permute(0, 3, 1, 2) for b in batches]
        if compiled.dtype == "uint8" or not batches:
            return batches
        self.before_compute()
        view = (1, 1, 1, 3) if layout == "NHWC" else (1, 3, 1, 1)
        device, dtype = batches[0].device, getattr(torch, compiled.dtype)
        mul = torch.tensor(compiled.mul, dtype=torch.float32, device=device)
        add = torch.tensor(compiled.add, dtype=torch.float32, device=device)
        mul, add = mul.view(view), add.view(view)
        return [torch.addcmul(add, b.to(torch.float32), mul).to(dtype) for b in batches]


# The class open_gpu() makes. ringloader's fake-runtime tests, and only
# they, set a double of theirs here (tests/cuda/fake_gpu.py) before making a
# Loader; users always get Gpu.
gpu_class: type[Gpu] = Gpu


def open_gpu(device: torch.device) -> Gpu:
    """The GPU path of a new Loader on ``device`` (the one place its class
    is chosen)."""
    return gpu_class(device)
