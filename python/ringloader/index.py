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
else ``~/.cache/ringloader``. The helpers here (cache directory, atomic
``.npz`` writes, string blobs) are shared by the other dataset modules.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
import tempfile
import time
import zipfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Callable, Union

import numpy as np

from .folder import IMG_EXTENSIONS, find_classes

__all__ = ["FolderIndex", "IndexedImageFolder", "build_index", "default_cache_dir"]

PathLike = Union[str, "os.PathLike[str]"]

# Bumped whenever the layout of the .npz file changes: older files are
# then treated as missing and rebuilt.
FOLDER_INDEX_VERSION = 1


# ---------------------------------------------------------------------------
# Shared helpers


def default_cache_dir(cache_dir: PathLike | None = None) -> str:
    """ringloader's cache directory (index files, the generated benchmark
    data set): ``cache_dir``, else ``$RINGLOADER_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/ringloader``, else ``~/.cache/ringloader``."""
    if cache_dir is not None:
        return os.path.expanduser(os.fspath(cache_dir))
    env = os.environ.get("RINGLOADER_CACHE_DIR")
    if env:
        return os.path.expanduser(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return os.path.join(xdg, "ringloader")


def cache_name(kind: str, ident: str, label: str) -> str:
    """A file name for the index of ``ident`` (an absolute path plus
    options): a readable label and a hash, so distinct datasets never
    share a file."""
    digest = hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:64]
    return f"{kind}-{safe}-{digest[:20]}.npz"


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` atomically (a temporary file in the same
    directory, then a rename), so a reader never sees half a file and
    concurrent writers of the same index do not corrupt it. Raises OSError
    when the directory is not writable; leaves no temporary file behind."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".ringloader-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.chmod(tmp, 0o644)  # readable by the other users of a shared dataset
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load_npz(path: str) -> dict[str, np.ndarray] | None:
    """The arrays of an index file, or None when it is missing, unreadable
    or corrupt (the caller then rebuilds it). Never unpickles."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None


def pack_strings(items: Iterable[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(blob, offsets): the byte strings concatenated into one uint8 array,
    and n + 1 int64 offsets (item i is ``blob[offsets[i]:offsets[i + 1]]``)."""
    blob = bytearray()
    ends = array("q", [0])
    for item in items:
        blob += item
        ends.append(len(blob))
    return np.frombuffer(bytes(blob), dtype=np.uint8), np.frombuffer(
        ends, dtype=np.int64
    )


class StringBlob(Sequence):
    """A read-only sequence of ``str`` kept as one byte blob plus offsets.

    Item i is ``prefix + blob[offsets[i]:offsets[i + 1]]`` decoded with the
    file system encoding (``os.fsdecode`` semantics, so any file name
    round-trips). About 10 bytes per item beyond the text itself, against
    ~60 for a list of ``str``.
    """

    __slots__ = ("_blob", "_n", "_offsets", "_prefix")

    def __init__(self, blob: np.ndarray, offsets: np.ndarray, prefix: str = "") -> None:
        self._blob = memoryview(np.ascontiguousarray(blob, dtype=np.uint8))
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._prefix = prefix
        self._n = len(self._offsets) - 1

    @classmethod
    def from_strings(cls, items: Iterable[str], prefix: str = "") -> StringBlob:
        """Pack ``items`` (paths or any text) into a blob."""
        blob, offsets = pack_strings(os.fsencode(s) for s in items)
        return cls(blob, offsets, prefix)

    @property
    def blob(self) -> np.ndarray:
        return np.frombuffer(self._blob, dtype=np.uint8)

    @property
    def offsets(self) -> np.ndarray:
        return self._offsets

    def __len__(self) -> int:
        return self._n

    def _get(self, i: int) -> str:
        a, b = self._offsets[i], self._offsets[i + 1]
        return self._prefix + os.fsdecode(bytes(self._blob[a:b]))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(self._n))]
        i = int(index)  # numpy integers too
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"index {index} out of range for {self._n} items")
        return self._get(i)

    def __iter__(self) -> Iterator[str]:
        for i in range(self._n):
            yield self._get(i)

    def __repr__(self) -> str:
        return f"<{self._n} strings in a {len(self._blob)}-byte blob>"


class PairView(Sequence):
    """``(names[i], int(values[i]))`` on access, like a list of samples,
    without one tuple per item in memory."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: Sequence[str], values: np.ndarray) -> None:
        self._names = names
        self._values = values

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return (self._names[index], int(self._values[index]))

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for i in range(len(self)):
            yield self[i]


def decode_item(
    path: str,
    data: bytes,
    target: int,
    transform: Callable | None,
    target_transform: Callable | None,
) -> tuple[Any, Any]:
    """(image, target) for inspection, as ``ringloader.ImageFolder``
    indexing gives it: the full image as a uint8 CHW tensor."""
    import torch

    from . import _core

    try:
        rgb, h, w = _core.decode(data)
    except _core.DecodeError as e:
        raise _core.DecodeError(f"cannot decode {path}: {e}") from None
    image = torch.from_numpy(
        np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3).copy()
    ).permute(2, 0, 1)
    if transform is not None:
        image = transform(image)
    out_target: Any = target
    if target_transform is not None:
        out_target = target_transform(target)
    return image, out_target


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
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(classes), unit="class", desc=f"indexing {root}")
        except ImportError:
            bar = None
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
    is installed) while scanning. Raises FileNotFoundError, as ImageFolder
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


class IndexedImageFolder:
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

    def __len__(self) -> int:
        return len(self.targets)

    def ringloader_sources(self) -> Any:
        """Paths (a lazy sequence), int64 targets, zero offsets and the
        recorded sizes as read lengths."""
        from .loader import Sources

        n = len(self.targets)
        return Sources(
            paths=self.paths,
            targets=self.targets,
            offsets=np.broadcast_to(np.int64(0), (n,)),
            lengths=self.sizes,
        )

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """(image, target): the full image as a uint8 CHW tensor."""
        path = self.paths[index]
        with open(path, "rb") as f:
            data = f.read()
        return decode_item(
            path, data, int(self.targets[index]), self.transform, self.target_transform
        )

    def __repr__(self) -> str:
        return (
            f"ringloader.IndexedImageFolder(root={self.root!r}, {len(self)} images, "
            f"{len(self.classes)} classes)"
        )
