"""The datasets ringloader reads itself, on one base (:mod:`.base`): an
ImageFolder as torchvision's, the same with a cached index, a list of files,
WebDataset tar shards (local, or over HTTP(S) and S3), Hugging Face
datasets' Arrow files, Parquet files, LitData's optimized chunks and
MosaicML Streaming's MDS shards; and :class:`CocoKeypoints`, COCO's
person keypoints as a torchvision CocoDetection with a v2 target (imported
when asked for: it needs torchvision). None of them imports the loader."""

from typing import Any

from .base import ImageDataset, Remote, Sources
from .filelist import FileList
from .folder import IMG_EXTENSIONS, ImageFolder
from .hf import HFDataset
from .index import IndexedImageFolder, build_index
from .litchunks import LitData
from .mds import MDS
from .mix import Mix
from .parquet import Parquet
from .shards import ShardError, TarShards

__all__ = [
    "CocoKeypoints",
    "FileList",
    "HFDataset",
    "IMG_EXTENSIONS",
    "ImageDataset",
    "ImageFolder",
    "IndexedImageFolder",
    "LitData",
    "MDS",
    "Mix",
    "Parquet",
    "Remote",
    "ShardError",
    "Sources",
    "TarShards",
    "build_index",
]


def __getattr__(name: str) -> Any:
    if name == "CocoKeypoints":  # a torchvision class: imported on use
        from .coco_keypoints import CocoKeypoints

        return CocoKeypoints
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
