"""Old import path of :mod:`ringloader.datasets.index`, kept for
``ringloader index`` (``ringloader.cli`` imports ``ringloader.index``)."""

from .datasets.cache import default_cache_dir
from .datasets.index import FolderIndex, IndexedImageFolder, build_index

__all__ = ["FolderIndex", "IndexedImageFolder", "build_index", "default_cache_dir"]
