"""An ImageFolder that matches torchvision's without importing it."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence, Union

from .base import ImageDataset, read_file
from .targets import as_targets, item

# The image formats a data set's files may be in, one list for folders and
# shards: as a tar sample's keys, in the order they are tried for its image
# (WebDataset's extensions); as file extensions, the set torchvision's
# ImageFolder accepts (its IMG_EXTENSIONS, in another order).
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "tif", "tiff")
IMG_EXTENSIONS = tuple("." + key for key in IMAGE_KEYS)


def find_classes(
    directory: Union[str, os.PathLike],
) -> tuple[list[str], dict[str, int]]:
    """Class folders of `directory`, sorted, and their indices."""
    classes = sorted(e.name for e in os.scandir(directory) if e.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {name: i for i, name in enumerate(classes)}


def make_dataset(
    directory: Union[str, os.PathLike],
    class_to_idx: dict[str, int],
    extensions: Optional[Sequence[str]] = None,
    is_valid_file: Optional[Callable[[str], bool]] = None,
    allow_empty: bool = False,
) -> list[tuple[str, int]]:
    """(path, class index) for every accepted file, in torchvision's order:
    classes by name, then os.walk order with sorted directories and names."""
    directory = os.path.expanduser(os.fspath(directory))
    if (extensions is None) == (is_valid_file is None):
        raise ValueError(
            "Both extensions and is_valid_file cannot be None or not None at "
            "the same time"
        )
    if extensions is not None:
        exts = tuple(e.lower() for e in extensions)

        def is_valid_file(path: str) -> bool:  # noqa: F811
            return path.lower().endswith(exts)

    instances = []
    available = set()
    for target_class in sorted(class_to_idx):
        class_index = class_to_idx[target_class]
        target_dir = os.path.join(directory, target_class)
        if not os.path.isdir(target_dir):
            continue
        for root, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(root, fname)
                if is_valid_file(path):
                    instances.append((path, class_index))
                    available.add(target_class)
    empty = set(class_to_idx) - available
    if empty and not allow_empty:
        msg = f"Found no valid file for the classes {', '.join(sorted(empty))}. "
        if extensions is not None:
            msg += f"Supported extensions are: {', '.join(extensions)}"
        raise FileNotFoundError(msg)
    return instances


class ImageFolder(ImageDataset):
    """A folder of images, one sub-folder per class, as torchvision's
    ``ImageFolder``: same class discovery and order, same ``classes``,
    ``class_to_idx``, ``samples`` and ``targets``.

    ``targets``, when given, replaces the class indices: one target per
    sample in ``samples`` order (``make_dataset``'s), as an array (floats,
    multi-hot rows, soft labels) or a sequence of per-sample values
    (tuples included); ``samples`` then pairs each path with its target and
    ``targets`` is that array (:mod:`ringloader.datasets.targets` says how
    each kind is batched: as torch's ``default_collate`` would).

    Indexing it decodes one image with ringloader's decoder (for inspection);
    loading batches is the job of :class:`ringloader.Loader`.
    """

    def __init__(
        self,
        root: Union[str, os.PathLike],
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
        extensions: Optional[Sequence[str]] = IMG_EXTENSIONS,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
        *,
        targets: Any = None,
    ) -> None:
        self.root = os.fspath(root)
        self.transform = transform
        self.target_transform = target_transform
        if is_valid_file is not None:
            extensions = None
        self.extensions = extensions
        self.classes, self.class_to_idx = find_classes(self.root)
        self.samples = make_dataset(
            self.root, self.class_to_idx, extensions, is_valid_file, allow_empty
        )
        if targets is None:
            self.targets: Any = [s[1] for s in self.samples]
        else:
            self.targets = as_targets(targets, len(self.samples), "ImageFolder targets")
            self.samples = [
                (path, item(self.targets, i))
                for i, (path, _) in enumerate(self.samples)
            ]
        self.imgs = self.samples

    def __len__(self) -> int:
        return len(self.samples)

    def _sample(self, index: int) -> tuple[str, bytes, Any]:
        path, target = self.samples[index]
        return path, read_file(path), target

    def __repr__(self) -> str:
        return (
            f"ringloader.ImageFolder(root={self.root!r}, "
            f"{len(self.samples)} images, {len(self.classes)} classes)"
        )
