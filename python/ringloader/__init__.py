"""ringloader: a DataLoader for JPEG images that decodes in C threads.

Files are read with io_uring, decoded by libjpeg-turbo with the crop and
resize fused into the decode, and written straight into batch buffers that
torch sees without a copy.
"""

from ._core import DecodeError
from .folder import IMG_EXTENSIONS, ImageFolder
from .loader import DataWarning, FallbackWarning, Loader
from .dataloader import DataLoader
from .filelist import FileList
from .index import IndexedImageFolder, build_index
from .shards import ShardError, TarShards
from . import transforms

__version__ = "0.1.0"

__all__ = [
    "DataLoader",
    "DataWarning",
    "DecodeError",
    "FallbackWarning",
    "FileList",
    "IMG_EXTENSIONS",
    "ImageFolder",
    "IndexedImageFolder",
    "Loader",
    "ShardError",
    "TarShards",
    "build_index",
    "transforms",
    "__version__",
]
