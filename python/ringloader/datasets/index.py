"""A cached index of an ImageFolder tree, for folders too large to list at
every start.

The first scan of a folder walks it exactly as torchvision's ``ImageFolder``
does (same classes, same sample order) and writes what it found to a
compact ``.npz`` file under the cache directory: the relative paths as one
UTF-8 blob with offsets, one small integer label and one int64 size per
file, and the modification time of every directory it listed. Later uses
stat those directories only and load the arrays back when none changed:
adding, removing or renaming a file changes its directory's mtime, so the
index is rebuilt. Rewriting a file in place does not; after doing that,
rebuild with ``build_index(root, force=True)``.

Nothing per file becomes a Python object until it is asked for: ``paths``
and ``samples`` are sequence views that build one string at a time.

The cache directory is ``cache_dir`` if given, else ``$RINGLOADER_CACHE_DIR``,
else ``~/.cache/ringloader`` (see :mod:`ringloader.datasets.cache`).
"""

from __future__ import annotations

import os
import stat as stat_mod
import time
from array import array
from collections.abc import Sequence
from typing import Callable

import numpy as np

from .base import ImageDataset, PairView, PathLike, Sources
from .cache import (
    StringBlob,
    cache_name,
    default_cache_dir,
    load_npz,
    pack_strings,
    save_npz,
)
from .folder import IMG_EXTENSIONS, find_classes
from .progress import bar as progress_bar

__all__ = ["FolderIndex", "IndexedImageFolder", "build_index", "default_cache_dir"]

# Bumped whenever the layout of the .npz file changes: older files are
# then treated as missing and rebuilt.
FOLDER_INDEX_VERSION = 1


# ---------------------------------------------------------------------------
# The folder index


class FolderIndex:
    """The scanned content of an ImageFolder tree, in compact arrays.

    Attributes:
        root: the root as given (paths are ``root/<relative path>``, the
            strings torchvision's ``ImageFolder`` builds).
        classes: sorted class names.
        paths: a :class:`StringBlob` of the sample paths.
        labels: class index per sample (int16, or int32 past 32767 classes).
        sizes: file size in bytes per sample (-1 where stat failed, e.g. a
            dangling symlink: such a file is read to its end and fails then).
        file: the index file on disk; ``reused``: whether it was loaded
            rather than built by this call.
    """

    def __init__(
        self,
        root: str,
        classes: list[str],
        paths: StringBlob,
        labels: np.ndarray,
        sizes: np.ndarray,
        file: str,
        reused: bool,
    ) -> None:
        self.root = root
        self.classes = classes
        self.paths = paths
        self.labels = labels
        self.sizes = sizes
        self.file = file
        self.reused = reused

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def nbytes(self) -> int:
        """Bytes held by the index arrays."""
        return (
            len(self.paths.blob)
            + self.paths.offsets.nbytes
            + self.labels.nbytes
            + self.sizes.nbytes
        )

    def __repr__(self) -> str:
        state = "loaded" if self.reused else "built"
        return (
            f"FolderIndex({self.root!r}: {len(self)} files, {len(self.classes)} "
            f"classes, {self.nbytes / 1e6:.1f} MB, {state} {self.file})"
        )


def _index_file(
    root_abs: str, extensions: Sequence[str], cache_dir: PathLike | None
) -> str:
    ident = root_abs + "\0" + "\0".join(extensions)
    label = os.path.basename(root_abs.rstrip("/")) or "root"
    return os.path.join(
        default_cache_dir(cache_dir), cache_name("folder", ident, label)
    )


def _dirs_unchanged(root_abs: str, dirs: StringBlob, mtimes: np.ndarray) -> bool:
    """Whether every recorded directory still has its recorded mtime."""
    for i, rel in enumerate(dirs):
        try:
            st = os.stat(os.path.join(root_abs, rel) if rel else root_abs)
        except OSError:
            return False
        if st.st_mtime_ns != int(mtimes[i]):
            return False
    return True


def _load(file: str, root: str, root_abs: str) -> FolderIndex | None:
    z = load_npz(file)
    if z is None:
        return None
    try:
        if int(z["version"]) != FOLDER_INDEX_VERSION:
            return None
        if os.fsdecode(z["root"].tobytes()) != root_abs:
            return None  # a hash collision, or a file copied from elsewhere
        dirs = StringBlob(z["dirs_blob"], z["dirs_offsets"])
        if not _dirs_unchanged(root_abs, dirs, z["dirs_mtime_ns"]):
            return None
        classes = list(StringBlob(z["classes_blob"], z["classes_offsets"]))
        paths = StringBlob(z["paths_blob"], z["paths_offsets"], _prefix(root))
        labels, sizes = z["labels"], z["sizes"]
    except (KeyError, ValueError, TypeError):
        return None
    if not (len(paths) == len(labels) == len(sizes)):
        return None
    return FolderIndex(root, classes, paths, labels, sizes, file, reused=True)


def _prefix(root: str) -> str:
    """What ``os.path.join(root, rel)`` puts before ``rel``."""
    if root == "" or root.endswith("/"):
        return root
    return root + "/"


def _scan_class(
    root_abs: str,
    class_name: str,
    exts: tuple[str, ...],
    dirs_out: list[tuple[str, int]],
) -> list[tuple[str, list[tuple[str, int]]]]:
    """Every directory under one class folder (following symlinks, as
    ``os.walk(followlinks=True)``) with its accepted files and their sizes,
    sorted as torchvision sorts ``os.walk`` output: by directory path, then
    by file name. Directories that cannot be listed are skipped, as
    ``os.walk`` skips them; a directory that is its own ancestor through a
    symlink is not entered again. The mtime of each listed directory, taken before
    listing it, goes to ``dirs_out``."""
    found: list[tuple[str, list[tuple[str, int]]]] = []
    stack: list[tuple[str, frozenset[tuple[int, int]]]] = [(class_name, frozenset())]
    while stack:
        rel, ancestors = stack.pop()
        full = os.path.join(root_abs, rel)
        try:
            st = os.stat(full)
        except OSError:
            continue
        ident = (st.st_dev, st.st_ino)
        if ident in ancestors:
            continue  # a symlink loop: torchvision would walk it forever
        below = ancestors | {ident}
        try:
            it = os.scandir(full)
        except OSError:
            continue
        dirs_out.append((rel, st.st_mtime_ns))
        files: list[tuple[str, int]] = []
        with it:
            for entry in it:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    stack.append((os.path.join(rel, entry.name), below))
                elif entry.name.lower().endswith(exts):
                    try:
                        size = entry.stat().st_size
                    except OSError:
                        size = -1
                    files.append((entry.name, size))
        files.sort()
        found.append((rel, files))
    # os.walk yields os.path.join(top, name) paths; sorting those tuples
    # sorts by the directory path string (so "a b" comes before "a/x").
    found.sort(key=lambda d: d[0])
    return found


def _scan(
    root: str, root_abs: str, extensions: Sequence[str], progress: bool, file: str
) -> FolderIndex:
    exts = tuple(e.lower() for e in extensions)
    root_st = os.stat(root_abs)
    classes, _ = find_classes(root_abs)
    dirs: list[tuple[str, int]] = [("", root_st.st_mtime_ns)]
    rel_paths = bytearray()
    path_ends = array("q", [0])
    labels = array("i")
    sizes = array("q")
    empty: list[str] = []

    bar = None
    if progress:
        bar = progress_bar(len(classes), unit="class", desc=f"indexing {root}")
    try:
        for label, name in enumerate(classes):
            count = 0
            for rel_dir, files in _scan_class(root_abs, name, exts, dirs):
                prefix = os.fsencode(rel_dir) + b"/"
                for fname, size in files:
                    rel_paths += prefix
                    rel_paths += os.fsencode(fname)
                    path_ends.append(len(rel_paths))
                    sizes.append(size)
                count += len(files)
            labels.extend([label] * count)
            if count == 0:
                empty.append(name)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(files=len(sizes), refresh=False)
    finally:
        if bar is not None:
            bar.close()
    if empty:
        raise FileNotFoundError(
            f"Found no valid file for the classes {', '.join(sorted(empty))}. "
            f"Supported extensions are: {', '.join(extensions)}"
        )

    label_dtype = np.int16 if len(classes) <= np.iinfo(np.int16).max else np.int32
    paths_blob = np.frombuffer(bytes(rel_paths), dtype=np.uint8)
    del rel_paths
    paths_offsets = np.frombuffer(path_ends, dtype=np.int64)
    labels_np = np.frombuffer(labels, dtype=np.int32).astype(label_dtype)
    sizes_np = np.frombuffer(sizes, dtype=np.int64)
    classes_blob, classes_offsets = pack_strings(os.fsencode(c) for c in classes)
    dirs_blob, dirs_offsets = pack_strings(os.fsencode(d) for d, _ in dirs)
    arrays = {
        "version": np.int64(FOLDER_INDEX_VERSION),
        "root": np.frombuffer(os.fsencode(root_abs), dtype=np.uint8),
        "created": np.float64(time.time()),
        "classes_blob": classes_blob,
        "classes_offsets": classes_offsets,
        "paths_blob": paths_blob,
        "paths_offsets": paths_offsets,
        "labels": labels_np,
        "sizes": sizes_np,
        "dirs_blob": dirs_blob,
        "dirs_offsets": dirs_offsets,
        "dirs_mtime_ns": np.array([m for _, m in dirs], dtype=np.int64),
    }
    os.makedirs(os.path.dirname(file), exist_ok=True)
    save_npz(file, arrays)
    paths = StringBlob(paths_blob, paths_offsets, _prefix(root))
    return FolderIndex(root, classes, paths, labels_np, sizes_np, file, reused=False)


def build_index(
    root: PathLike,
    cache_dir: PathLike | None = None,
    progress: bool = True,
    extensions: Sequence[str] = IMG_EXTENSIONS,
    force: bool = False,
) -> FolderIndex:
    """The index of the ImageFolder tree at ``root``: loaded from the cache
    directory when every directory's mtime is unchanged since it was
    written, else (or with ``force``) built by scanning the folder and
    written there.

    The scan finds the classes and samples torchvision's ``ImageFolder``
    finds (``extensions`` as its argument of that name), in the same order,
    and records each file's size. ``progress`` shows a tqdm bar (when tqdm
    is installed; on the first rank of a distributed job only) while
    scanning. Raises FileNotFoundError, as ImageFolder
    does, when there is no class folder or a class has no image; OSError
    when the cache directory cannot be written.
    """
    root = os.path.expanduser(os.fspath(root))
    root_abs = os.path.abspath(root)
    if not stat_mod.S_ISDIR(os.stat(root_abs).st_mode):
        raise NotADirectoryError(f"not a folder: {root}")
    extensions = tuple(extensions)
    file = _index_file(root_abs, extensions, cache_dir)
    if not force:
        index = _load(file, root, root_abs)
        if index is not None:
            return index
    return _scan(root, root_abs, extensions, progress, file)


class IndexedImageFolder(ImageDataset):
    """An ImageFolder read through a cached :func:`build_index` index: the
    same ``classes``, ``class_to_idx``, ``samples`` and ``targets`` as
    torchvision's ``ImageFolder`` (``samples`` and ``targets`` as compact
    views), without listing the folder again while it is unchanged.

    Reads are sized exactly from the recorded file sizes. The index is
    checked against directory mtimes only: if files are rewritten in place
    with another size, rebuild it with ``build_index(root, force=True)``.
    """

    def __init__(
        self,
        root: PathLike,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        extensions: Sequence[str] = IMG_EXTENSIONS,
        cache_dir: PathLike | None = None,
        progress: bool = False,
    ) -> None:
        self.root = os.fspath(root)
        self.transform = transform
        self.target_transform = target_transform
        self.extensions = tuple(extensions)
        self.index = build_index(self.root, cache_dir, progress, self.extensions)
        self.classes = self.index.classes
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.targets = self.index.labels.astype(np.int64)
        self.paths = self.index.paths
        self.sizes = self.index.sizes
        self.samples = PairView(self.paths, self.targets)
        self.imgs = self.samples

    def ringloader_sources(self) -> Sources:
        """Paths (a lazy sequence), int64 targets, zero offsets and the
        recorded sizes as read lengths."""
        n = len(self.targets)
        return Sources(
            paths=self.paths,
            targets=self.targets,
            offsets=np.broadcast_to(np.int64(0), (n,)),
            lengths=self.sizes,
        )

    def __repr__(self) -> str:
        return (
            f"ringloader.IndexedImageFolder(root={self.root!r}, {len(self)} images, "
            f"{len(self.classes)} classes)"
        )
