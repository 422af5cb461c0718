"""The GPU path of a Loader: device buffers and streams, and the dtype and
layout conversion that runs on the device (uint8 crosses PCIe)."""

from __future__ import annotations

import os
from typing import Any

import torch

from . import _core


class Gpu:
    """Device buffers and streams for the GPU path.

    With a CUDA build of torch, device memory comes from torch's caching
    allocator and the copy stream is a ``torch.cuda.Stream``, whose handle the
    C threads use; each batch's buffer is allocated on the copy stream and
    records the consumer's stream when handed out, as torch's rules for
    cross-stream use ask. Without torch CUDA but with a runtime loaded from
    ``RINGLOADER_CUDART`` (the tests' fake), buffers come from cudaMalloc
    and the consumer's "stream" is synchronised before the host reads it.
    """

    def __init__(self, device: torch.device) -> None:
        ok, msg, lib, count = _core.cuda_probe()
        if not ok:
            raise RuntimeError(
                f"device={str(device)!r} needs a CUDA GPU, and none is usable here "
                f"({msg}). Use a machine with an NVIDIA GPU and a CUDA build of "
                "torch, or leave device unset to get batches in host memory."
            )
        self.torch_cuda = torch.cuda.is_available() and not os.environ.get(
            "RINGLOADER_CUDART"
        )
        if not self.torch_cuda and not hasattr(_core, "cuda_malloc"):
            raise RuntimeError(
                f"device={str(device)!r} needs a CUDA build of torch "
                "(RINGLOADER_CUDART without one is for ringloader's own tests, "
                "with a test build)"
            )
        if device.index is not None:
            self.index = device.index
        else:
            self.index = torch.cuda.current_device() if self.torch_cuda else 0
        if not 0 <= self.index < count:
            raise RuntimeError(f"CUDA device {self.index} requested, {count} present")
        self.device = torch.device("cuda", self.index)
        self.library = lib
        self._stream: Any = None
        self._consumer = 0

    def start(self) -> int:
        """The copy stream's handle (made once per process)."""
        if self.torch_cuda:
            self._stream = torch.cuda.Stream(device=self.device)
            return int(self._stream.cuda_stream)
        self._stream = _core.cuda_stream_create(self.index)
        self._consumer = _core.cuda_stream_create(self.index)
        return int(self._stream)

    def alloc(self, nbytes: int) -> tuple[Any, int]:
        """A fresh device buffer for one batch, and its address: the
        allocator the C core calls (with the GIL) at each submit."""
        if self.torch_cuda:
            with torch.cuda.stream(self._stream):
                t = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            return t, int(t.data_ptr())
        buf = _core.cuda_malloc(self.index, nbytes)
        return buf, int(buf.ptr)

    def consumer_stream(self) -> int:
        if self.torch_cuda:
            return int(torch.cuda.current_stream(self.device).cuda_stream)
        return int(self._consumer)

    def tensor(self, batch: Any) -> torch.Tensor:
        """The uint8 tensor of a device batch (a ``_core.Batch`` whose copy
        the consumer's stream already waits for)."""
        if self.torch_cuda:
            # The buffer came from torch's allocator on the copy stream: it
            # is now used on the consumer's, which must finish with it
            # before the allocator reuses it.
            batch.owner.record_stream(torch.cuda.current_stream(self.device))
            return torch.from_dlpack(batch)
        # The fake's device memory is host memory, viewed without waiting:
        # like a real device tensor its content is only defined for work
        # ordered after the copy (see synchronize()).
        return torch.frombuffer(batch.owner, dtype=torch.uint8).view(batch.shape)

    def before_compute(self) -> None:
        """Called before torch ops on a fresh batch. On a GPU they are
        queued on the consumer stream, after the copy: nothing to do. The
        fake's "device" tensors are host tensors computed at once, so wait
        for the copy first, as the stream would."""
        if not self.torch_cuda:
            self.synchronize()

    def synchronize(self) -> None:
        """Wait for everything queued on the consumer's stream."""
        if self.torch_cuda:
            torch.cuda.current_stream(self.device).synchronize()
        else:
            _core.cuda_stream_sync(self.index, self._consumer)

    def convert(self, images: torch.Tensor, layout: str, compiled: Any) -> torch.Tensor:
        """Layout and dtype conversion of a uint8 batch on its device, as
        the compiled transform asks (``compiled.dtype``, ``mul``, ``add``)."""
        if layout == "channels_last":
            images = images.permute(0, 3, 1, 2)
        if compiled.dtype == "uint8":
            return images
        self.before_compute()
        view = (1, 1, 1, 3) if layout == "NHWC" else (1, 3, 1, 1)
        mul = torch.tensor(compiled.mul, dtype=torch.float32, device=images.device)
        add = torch.tensor(compiled.add, dtype=torch.float32, device=images.device)
        return torch.addcmul(
            add.view(view), images.to(torch.float32), mul.view(view)
        ).to(getattr(torch, compiled.dtype))
