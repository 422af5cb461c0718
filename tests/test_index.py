"""The cached ImageFolder index: same samples as torchvision's ImageFolder,
reused while the folder is unchanged, rebuilt when it changes."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest
import ringloader
import torch
from images import jpeg_bytes
from ringloader import transforms as T
from ringloader.datasets.cache import StringBlob
from ringloader.datasets.index import IndexedImageFolder, build_index
from subproc import run_python

torchvision = pytest.importorskip("torchvision")

EVAL = T.Compose([T.Resize(64), T.CenterCrop(56)])


def _tree(root) -> str:
    """A folder whose walk order is easy to get wrong: nested folders,
    names that sort around "/", upper-case extensions, non-images, a
    symlinked folder and a symlink loop."""
    files = {
        "cat/a.jpg": 1,
        "cat/b.JPEG": 2,
        "cat/notes.txt": 0,
        "cat/sub/z.jpg": 3,
        "cat/sub b/y.jpg": 4,
        "cat/sub/deeper/x.jpeg": 5,
        "cat/sub-c/w.png": 6,
        "dog/é.jpg": 7,
        "dog/10.jpg": 8,
        "dog/9.jpg": 9,
        "dog/.hidden.jpg": 10,
        "emu/only.webp": 11,
        "fox/f.jpg": 12,
    }
    for rel, seed in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(jpeg_bytes("baseline", 40 + seed, 50, seed) if seed else b"text")
    os.symlink(os.path.join(root, "fox"), os.path.join(root, "dog", "linked"))
    os.symlink(
        os.path.join(root, "cat", "sub"), os.path.join(root, "cat", "sub", "loop")
    )
    with open(os.path.join(root, "stray.jpg"), "wb") as f:  # not in a class
        f.write(b"x")
    return str(root)


@pytest.fixture
def tree(tmp_path):
    return _tree(tmp_path / "data")


def test_same_samples_as_torchvision(tree, tmp_path):
    loop = os.path.join(tree, "cat", "sub", "loop")
    os.unlink(loop)  # torchvision walks symlink loops forever
    ref = torchvision.datasets.ImageFolder(tree)
    ours = IndexedImageFolder(tree, cache_dir=tmp_path / "cache")
    assert ours.classes == ref.classes
    assert ours.class_to_idx == ref.class_to_idx
    assert list(ours.samples) == ref.samples
    assert ours.targets.tolist() == ref.targets
    assert len(ours) == len(ref)
    assert ours.samples[3] == ref.samples[3]
    assert ours.samples[-1] == ref.samples[-1]
    assert ours.samples[1:4] == ref.samples[1:4]
    assert list(ours.paths) == [p for p, _ in ref.samples]
    assert ours.sizes.tolist() == [os.path.getsize(p) for p, _ in ref.samples]


def test_symlink_loop_is_not_entered(tree, tmp_path):
    ours = IndexedImageFolder(tree, cache_dir=tmp_path / "cache")
    os.unlink(os.path.join(tree, "cat", "sub", "loop"))
    # torchvision would walk the loop until the path is too long; without
    # it, both agree.
    assert list(ours.samples) == torchvision.datasets.ImageFolder(tree).samples


@pytest.mark.parametrize("relative", [False, True])
def test_paths_as_torchvision_builds_them(tree, tmp_path, monkeypatch, relative):
    os.unlink(os.path.join(tree, "cat", "sub", "loop"))
    root = tree + "/"
    if relative:
        monkeypatch.chdir(os.path.dirname(tree))
        root = os.path.basename(tree)
    ref = torchvision.datasets.ImageFolder(root)
    assert (
        list(IndexedImageFolder(root, cache_dir=tmp_path / "c").samples) == ref.samples
    )


def test_extensions(tree, tmp_path):
    os.unlink(os.path.join(tree, "cat", "sub", "loop"))
    exts = (".txt", ".jpg", ".webp")
    ref = torchvision.datasets.DatasetFolder(tree, loader=open, extensions=exts)
    ours = IndexedImageFolder(tree, extensions=exts, cache_dir=tmp_path)
    assert list(ours.samples) == ref.samples
    assert any(p.endswith("notes.txt") for p in ours.paths)


def test_one_list_of_image_formats_torchvisions_extensions():
    """Folders and shards read one list of formats; as extensions it is
    the set torchvision's ImageFolder accepts."""
    from ringloader.datasets import folder, shards
    from torchvision.datasets.folder import IMG_EXTENSIONS

    assert set(folder.IMG_EXTENSIONS) == set(IMG_EXTENSIONS)
    assert folder.IMG_EXTENSIONS == tuple("." + k for k in shards.IMAGE_KEYS)


def test_empty_class_and_no_class(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="classes a"):
        build_index(tmp_path, cache_dir=tmp_path / "c", progress=False)
    with pytest.raises(FileNotFoundError):
        build_index(tmp_path / "a", cache_dir=tmp_path / "c", progress=False)


class _CountingScandir:
    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, *a, **k):
        self.calls += 1
        return self.real(*a, **k)


def test_cache_is_reused(tree, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = build_index(tree, cache_dir=cache, progress=False)
    assert not first.reused
    assert os.path.dirname(first.file) == str(cache)
    written = os.stat(first.file).st_mtime_ns
    with np.load(first.file, allow_pickle=False) as z:  # never pickled
        assert z["paths_blob"].dtype == np.uint8
        assert z["labels"].dtype == np.int16
        assert z["sizes"].dtype == np.int64
    counter = _CountingScandir(os.scandir)
    monkeypatch.setattr(os, "scandir", counter)
    again = IndexedImageFolder(tree, cache_dir=cache)
    assert counter.calls == 0
    assert again.index.reused and again.index.file == first.file
    assert os.stat(first.file).st_mtime_ns == written
    assert list(again.paths) == list(first.paths)
    assert np.array_equal(again.sizes, first.sizes)
    # The environment variable picks the cache directory too.
    monkeypatch.setenv("RINGLOADER_CACHE_DIR", str(cache))
    assert build_index(tree, progress=False).reused


@pytest.mark.parametrize("change", ["add", "remove", "add_nested", "add_class"])
def test_cache_invalidated_when_the_folder_changes(tree, tmp_path, change):
    cache = tmp_path / "cache"
    before = IndexedImageFolder(tree, cache_dir=cache)
    time.sleep(0.02)  # past the file system's timestamp granularity
    if change == "add":
        shutil.copy(
            os.path.join(tree, "cat", "a.jpg"), os.path.join(tree, "cat", "new.jpg")
        )
    elif change == "remove":
        os.unlink(os.path.join(tree, "dog", "9.jpg"))
    elif change == "add_nested":
        shutil.copy(
            os.path.join(tree, "cat", "a.jpg"),
            os.path.join(tree, "cat", "sub", "deeper", "new.jpg"),
        )
    else:
        os.makedirs(os.path.join(tree, "gnu"))
        shutil.copy(
            os.path.join(tree, "cat", "a.jpg"), os.path.join(tree, "gnu", "g.jpg")
        )
    after = IndexedImageFolder(tree, cache_dir=cache)
    assert not after.index.reused
    assert len(after) == len(before) + (-1 if change == "remove" else 1)
    if change == "add_class":
        assert after.classes == before.classes + ["gnu"]
    assert IndexedImageFolder(tree, cache_dir=cache).index.reused


def test_force_rebuilds(tree, tmp_path):
    build_index(tree, cache_dir=tmp_path, progress=False)
    assert not build_index(tree, cache_dir=tmp_path, progress=False, force=True).reused


def test_corrupt_index_is_rebuilt(tree, tmp_path):
    index = build_index(tree, cache_dir=tmp_path, progress=False)
    with open(index.file, "r+b") as f:
        f.truncate(100)
    again = build_index(tree, cache_dir=tmp_path, progress=False)
    assert not again.reused and len(again) == len(index)


def test_progress_bar(tree, tmp_path, capsys):
    pytest.importorskip("tqdm")
    build_index(tree, cache_dir=tmp_path, progress=True)
    assert "indexing" in capsys.readouterr().err


def test_loader_batches_match_image_folder(folder, tmp_path):
    ours = IndexedImageFolder(folder, cache_dir=tmp_path)
    src = ours.ringloader_sources()
    assert isinstance(src.paths[0], str) and len(src.paths) == len(ours)
    assert src.offsets.tolist() == [0] * len(ours)
    assert src.lengths.tolist() == [os.path.getsize(p) for p in src.paths]
    ref = ringloader.ImageFolder(folder)
    for shuffle in (False, True):
        a = ringloader.Loader(
            ours, batch_size=5, transform=EVAL, shuffle=shuffle, seed=1, num_threads=2
        )
        b = ringloader.Loader(
            ref, batch_size=5, transform=EVAL, shuffle=shuffle, seed=1, num_threads=2
        )
        for (xa, ya), (xb, yb) in zip(a, b, strict=True):
            assert torch.equal(ya, yb)
            assert torch.equal(xa, xb)
        a.close()
        b.close()


def test_getitem_decodes(folder, tmp_path):
    ours = IndexedImageFolder(folder, cache_dir=tmp_path)
    image, target = ours[0]
    ref_image, ref_target = ringloader.ImageFolder(folder)[0]
    assert target == ref_target and torch.equal(image, ref_image)


def test_string_blob():
    items = ["a", "", "ü/é", "x" * 300]
    blob = StringBlob.from_strings(items, prefix="r/")
    assert list(blob) == ["r/" + s for s in items]
    assert blob[-1] == "r/" + items[-1] and blob[np.int64(2)] == "r/ü/é"
    assert blob[1:3] == ["r/", "r/ü/é"]
    with pytest.raises(IndexError):
        blob[4]


def test_index_files_are_read_safely_from_many_threads():
    # Remote shards are indexed by a pool of threads. On CPython before
    # 3.11.8 / 3.12.2, numpy's header parse (ast.literal_eval) in two threads
    # at once failed with "SystemError: AST constructor recursion depth
    # mismatch" when a garbage collection ran Python code in between. The
    # child makes that interleaving likely: collections often, a finalizer
    # that runs Python code, and a tiny switch interval.
    code = """
import gc, io, sys, threading
import numpy as np
from ringloader.datasets.cache import read_npz

class Finalized:
    def __del__(self):
        sum(range(200))

def collect(phase, info):
    for _ in range(3):
        x = Finalized()
        x.cycle = x

gc.callbacks.append(collect)
gc.set_threshold(50)
sys.setswitchinterval(1e-6)
buf = io.BytesIO()
np.savez(buf, a=np.arange(3), b=np.int64(5), c=np.zeros((2, 3)))
data = buf.getvalue()
errors = []

def read():
    for _ in range(1500):
        try:
            z = read_npz(io.BytesIO(data))
            assert int(z["b"]) == 5 and z["c"].shape == (2, 3)
        except Exception as e:
            errors.append(repr(e))

threads = [threading.Thread(target=read) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(errors), errors[:1])
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "0", proc.stdout
