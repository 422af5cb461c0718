"""ringloader: a DataLoader for JPEG images that decodes in C threads.

Files are read with io_uring, decoded by libjpeg-turbo with the crop and
resize fused into the decode, and written straight into batch buffers that
torch sees without a copy.
"""

from ._core import DecodeError
from .errors import DataWarning, FallbackWarning, FieldError
from .datasets import (
    IMG_EXTENSIONS,
    FileList,
    HFDataset,
    ImageFolder,
    IndexedImageFolder,
    LitData,
    MDS,
    Mix,
    Parquet,
    ShardError,
    TarShards,
    build_index,
)
from .loader import Loader
from .dataloader import DataLoader
from . import transforms
from ._simd import warn_unknown_setting as _warn_unknown_simd

_warn_unknown_simd()  # RINGLOADER_SIMD=avx512 or a typo: said, not ignored

__version__ = "0.1.0"

__all__ = [
    "DataLoader",
    "DataWarning",
    "DecodeError",
    "FallbackWarning",
    "FieldError",
    "FileList",
    "HFDataset",
    "IMG_EXTENSIONS",
    "ImageFolder",
    "IndexedImageFolder",
    "LitData",
    "MDS",
    "Loader",
    "Mix",
    "Parquet",
    "ShardError",
    "TarShards",
    "build_index",
    "transforms",
    "__version__",
]
