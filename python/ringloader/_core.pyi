"""Type stub for ringloader._core, the private C extension (csrc/rl_module.c,
csrc/py_pipeline.c). Use the ringloader package rather than this module."""

import os
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, Union, final

from typing_extensions import Buffer, CapsuleType

# What PyUnicode_FSConverter accepts.
_Path = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]

# A transform spec, as ringloader.transforms compiles it: a real dict with
# "kind" ("resize_crop" or "random_crop") and "out_h"/"out_w", plus the
# optional "resize_short", "resize_h", "resize_w" (ints), "flip_p" (float),
# "scale" and "ratio" (2-tuples of floats).
_TransformSpec = Dict[str, Any]

DEFAULT_MAX_PIXELS: int
DEFAULT_MAX_SCANS: int
built_with_liburing: int  # 1 if compiled against liburing, else 0
libjpeg_version: str

class DecodeError(ValueError):
    # Set when the C core raises it; a DecodeError constructed in Python has
    # none of them unless they are assigned.
    path: Optional[str]  # None for decode(), which has no file name
    reason: str  # libjpeg's message
    kind: str  # "corrupt", "truncated", "too_big" or "not_jpeg"
    index: int  # the sample's index, when Pipeline.next() knows it

def decode(
    data: Buffer,
    *,
    max_pixels: int = ...,
    max_scans: int = ...,
    allow_truncated: bool = ...,
) -> Tuple[bytes, int, int]:
    """Full RGB decode: (rgb_bytes, height, width); note height comes first."""

def plan(
    spec: _TransformSpec,
    width: int,
    height: int,
    seed: int,
    epoch: int,
    index: int,
    /,
) -> Tuple[float, float, float, float, bool]:
    """(top, left, height, width, flip): the source box of one sample, as
    floats, as torchvision's get_params would give it."""

def read_bench(
    paths: Iterable[_Path],
    offsets: Optional[Sequence[int]],
    lengths: Optional[Sequence[int]],
    backend: str,
    threads: int,
    batch: int,
    direct: bool = ...,
) -> Tuple[int, float]:
    """The I/O layer alone: (bytes, seconds). backend is "io_uring" or
    "pread"; offsets None reads whole files (lengths is then ignored)."""

def resample_simd(cap: Optional[str] = ..., /) -> str:
    """The resampler's SIMD level, "c", "sse2" or "avx2", after first lowering
    it to at most cap when given (process-wide: call it with no loader
    running)."""

def io_probe() -> Tuple[bool, str]:
    """(io_uring_available, reason_if_not)."""

def cuda_probe() -> Tuple[bool, str, str, int]:
    """(available, message, library, device_count); library is the loaded
    runtime's path, or "" when none was loaded."""

def cuda_malloc(device: int, size: int, /) -> DeviceBuffer: ...
def cuda_stream_create(device: int, /) -> int:
    """A raw CUDA stream handle; it is never destroyed."""

def cuda_stream_sync(device: int, stream: int, /) -> None: ...

@final
class DeviceBuffer:
    """Device memory from cudaMalloc, freed with the object. Not instantiable:
    made by cuda_malloc(). Its buffer is only readable where device memory
    is host memory (the fake runtime)."""

    @property
    def ptr(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class Batch:
    """A batch in a batch slot, exported without copying. Not instantiable:
    made by Pipeline.next(). Each export (DLPack capsule or buffer) holds its
    own reference on the slot, so an exported tensor stays valid after the
    Batch and the Pipeline are gone."""

    @property
    def shape(self) -> Tuple[int, int, int, int]: ...
    @property
    def fallback(self) -> Tuple[int, ...]:
        """Positions of samples that are not JPEG, left for the caller
        (see Pipeline.fill())."""

    @property
    def failed(self) -> Tuple[Tuple[int, Union[DecodeError, OSError]], ...]:
        """(position, exception) of samples that could not be read or
        decoded, left for the caller (skip_errors=True; else empty): the
        exception is what next() would have raised, with .index set."""

    # stream, max_version, dl_device and copy are accepted and ignored.
    def __dlpack__(self, *args: Any, **kwargs: Any) -> CapsuleType: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    # bfloat16 batches export as uint16 ("H") through the buffer protocol.
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class Pipeline:
    def __new__(
        cls,
        transform: _TransformSpec,
        *,
        num_threads: int = ...,
        layout: str = ...,  # "NCHW" or "NHWC"
        seed: int = ...,
        io: str = ...,  # "auto", "io_uring" or "pread"
        max_pixels: int = ...,
        max_scans: int = ...,
        max_file_bytes: int = ...,
        allow_truncated: bool = ...,
        dtype: str = ...,  # "uint8", "float32", "float16" or "bfloat16"
        # Float outputs hold v * mul[c] + add[c]; each a tuple of 3 floats.
        mul: Optional[Tuple[float, float, float]] = ...,
        add: Optional[Tuple[float, float, float]] = ...,
        device: int = ...,  # CUDA device of the GPU path; -1 (default): host
        copy_stream: int = ...,  # cudaStream_t handle of the GPU path's copies
        fallback: bool = ...,  # leave non-JPEG samples to Batch.fallback
        direct_io: bool = ...,  # O_DIRECT reads where the file system allows
        skip_errors: bool = ...,  # leave failed samples to Batch.failed
    ) -> Pipeline: ...
    def submit(
        self,
        paths: Iterable[_Path],
        indices: Iterable[int],
        epoch: int,
        offsets: Optional[Iterable[int]] = ...,
        lengths: Optional[Iterable[int]] = ...,
        *,
        device_buffer: int = ...,
    ) -> None:
        """Queue a batch. lengths is required with offsets. On the GPU path
        the batch is written to device_buffer, a device address the caller
        keeps alive until the batch is returned."""

    def next(
        self, timeout: Optional[float] = ..., *, consumer_stream: int = ...
    ) -> Union[
        Batch,
        Tuple[Tuple[int, ...], Tuple[Tuple[int, Union[DecodeError, OSError]], ...]],
        None,
    ]:
        """The oldest batch, in order, or None when no batch is in flight.
        On the GPU path (device >= 0) the batch is in the device_buffer given
        to submit(), and only (Batch.fallback, Batch.failed) is returned.
        Raises TimeoutError after timeout seconds."""

    def fill(
        self,
        dst: Buffer,
        rgb: Buffer,
        width: int,
        height: int,
        epoch: int,
        index: int,
        /,
    ) -> None:
        """Place an image decoded elsewhere (rgb: width*height*3 bytes) into
        dst, a writable buffer of one sample, with the pipeline's transform."""

    def cancel(self) -> None:
        """Drop every batch in flight."""

    def close(self) -> None:
        """Stop and join every thread; idempotent."""

    def stats(self) -> Dict[str, Union[int, float]]:
        """Cumulative counters: samples, batches, bytes_read, errors,
        inflight, ready, direct_refused (ints); read_seconds, decode_seconds
        (floats)."""

    @property
    def io_backend(self) -> str:
        """'io_uring' or 'pread'; raises RuntimeError once closed."""

    @property
    def io_reason(self) -> str:
        """Why io_uring is not used ("" when it is)."""

    @property
    def inflight(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def pinned_slots(self) -> int: ...
