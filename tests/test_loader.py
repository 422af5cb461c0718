"""Loader semantics against torch.utils.data.DataLoader, ring behaviour and
lifecycle."""

import gc
import hashlib
import os
import shutil
import signal
import textwrap
import threading

import pytest
import torch
from torch.utils.data import DataLoader, SubsetRandomSampler, WeightedRandomSampler

import ringloader
from ringloader import transforms as T

from conftest import thread_count
from images import jpeg_bytes

EVAL = T.Compose([T.Resize(64), T.CenterCrop(56)])


class Indexed:
    """N images whose target is their own index, so labels reveal order."""

    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    paths = []
    for i in range(23):
        p = d / f"{i:02d}.jpg"
        p.write_bytes(jpeg_bytes("baseline", 60 + i, 80, seed=i))
        paths.append(str(p))
    return Indexed(paths)


def order(loader):
    return [labels.tolist() for _, labels in loader]


def torch_order(n, **kw):
    return [b.tolist() for b in DataLoader(range(n), **kw)]


@pytest.mark.parametrize("batch_size", [1, 4, 5, 23, 30])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_and_order_match_dataloader(indexed, batch_size, drop_last):
    ours = ringloader.Loader(
        indexed,
        batch_size=batch_size,
        drop_last=drop_last,
        transform=EVAL,
        num_threads=2,
    )
    ref = torch_order(len(indexed), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(ref)
    assert order(ours) == ref


@pytest.mark.parametrize(
    "make_sampler",
    [
        lambda n: SubsetRandomSampler(
            list(range(0, n, 2)), generator=torch.Generator().manual_seed(3)
        ),
        lambda n: WeightedRandomSampler(
            [1.0] * n, 40, generator=torch.Generator().manual_seed(4)
        ),
        lambda n: list(reversed(range(n))),
    ],
)
def test_any_sampler(indexed, make_sampler):
    ours = ringloader.Loader(
        indexed, batch_size=4, sampler=make_sampler(len(indexed)), transform=EVAL
    )
    ref = torch_order(len(indexed), batch_size=4, sampler=make_sampler(len(indexed)))
    assert len(ours) == len(ref)
    assert order(ours) == ref


def test_batch_sampler(indexed):
    batches = [[3, 1], [0], [22, 5, 7]]
    ours = ringloader.Loader(indexed, batch_sampler=batches, transform=EVAL)
    assert len(ours) == 3
    assert order(ours) == batches
    with pytest.raises(ValueError, match="mutually exclusive"):
        ringloader.Loader(indexed, batch_sampler=batches, batch_size=2, transform=EVAL)
    with pytest.raises(ValueError, match="mutually exclusive"):
        ringloader.Loader(indexed, shuffle=True, sampler=[0, 1], transform=EVAL)


def test_shuffle_depends_only_on_seed_and_epoch(indexed):
    def epoch_order(seed, epoch):
        loader = ringloader.Loader(
            indexed, batch_size=5, shuffle=True, seed=seed, transform=EVAL
        )
        loader.set_epoch(epoch)
        return sum(order(loader), [])

    a = epoch_order(0, 0)
    assert sorted(a) == list(range(len(indexed)))
    assert a != list(range(len(indexed)))
    assert epoch_order(0, 0) == a
    assert epoch_order(0, 1) != a
    assert epoch_order(1, 0) != a
    # Without set_epoch, each iteration moves to the next epoch.
    loader = ringloader.Loader(indexed, batch_size=5, shuffle=True, transform=EVAL)
    first, second = sum(order(loader), []), sum(order(loader), [])
    assert first == a and second == epoch_order(0, 1)


def test_images_are_the_right_images(indexed):
    loader = ringloader.Loader(
        indexed, batch_size=4, shuffle=True, transform=EVAL, num_threads=2, prefetch=3
    )
    single = ringloader.Loader(indexed, batch_size=1, transform=EVAL, num_threads=1)
    by_index = {int(lab): im[0].clone() for im, lab in single}
    for images, labels in loader:
        for im, lab in zip(images, labels):
            assert torch.equal(im, by_index[int(lab)])


def test_kept_batches_are_never_overwritten(indexed):
    loader = ringloader.Loader(indexed, batch_size=3, transform=EVAL, prefetch=2)
    kept = [(im, lb) for im, lb in loader]  # hold every batch of the epoch
    fresh = [(im.clone(), lb) for im, lb in loader]
    for (a, la), (b, lb) in zip(kept, fresh):
        assert torch.equal(la, lb)
        assert torch.equal(a, b)


def test_io_backends_give_identical_bytes(indexed, monkeypatch):
    def digest(**kw):
        loader = ringloader.Loader(indexed, batch_size=4, transform=EVAL, **kw)
        h = hashlib.sha256()
        for images, _ in loader:
            h.update(images.numpy().tobytes())
        return loader.io_backend, h.hexdigest()

    uring = digest(io="io_uring", num_threads=2)
    pread = digest(io="pread", num_threads=3)
    assert pread[0] == "pread"
    assert uring[1] == pread[1]
    monkeypatch.setenv("RINGLOADER_IO", "pread")
    assert digest(num_threads=1) == ("pread", pread[1])


LOW_ULIMIT = """
import hashlib, resource, sys
import ringloader
from ringloader import transforms as T
paths = sys.argv[1:]
class DS:
    samples = [(p, i) for i, p in enumerate(paths)]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
out = []
for io in ("io_uring", "pread"):
    loader = ringloader.Loader(DS, batch_size=len(paths), io=io,
                               transform=T.Compose([T.Resize((16, 16))]))
    images, _ = next(iter(loader))
    out.append(hashlib.sha256(images.numpy().tobytes()).hexdigest())
    loader.close()
print(out[0] == out[1])
"""


def test_batch_larger_than_the_open_file_limit(tmp_path):
    """A batch of 300 files under ulimit -n 128 reads with io_uring as with
    pread (files are opened a ring's share at a time)."""
    import subprocess
    import sys

    if not ringloader._core.io_probe()[0]:
        pytest.skip("io_uring is not available here: " + ringloader._core.io_probe()[1])
    data = jpeg_bytes("baseline", 24, 24)
    paths = []
    for i in range(300):
        p = tmp_path / f"{i:03d}.jpg"
        p.write_bytes(data)
        paths.append(str(p))
    proc = subprocess.run(
        [sys.executable, "-c", LOW_ULIMIT, *paths], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr


def test_io_uring_is_used_when_available(indexed):
    available, reason = ringloader._core.io_probe()
    loader = ringloader.Loader(indexed, transform=EVAL)
    assert loader.io_backend == ("io_uring" if available else "pread"), reason


def test_undecodable_file_raises_naming_it(tmp_path, indexed):
    paths = [p for p, _ in indexed.samples[:6]]
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg" * 3)
    paths[4] = str(bad)
    loader = ringloader.Loader(Indexed(paths), batch_size=2, transform=EVAL)
    it = iter(loader)
    next(it), next(it)  # batches 0 and 1 are fine
    with pytest.raises(ringloader.DecodeError, match="broken.jpg") as e:
        next(it)
    assert e.value.path == str(bad)
    # The loader is usable again for the next epoch.
    with pytest.raises(ringloader.DecodeError):
        order(loader)


def test_missing_and_directory_raise_oserror_with_path(tmp_path, indexed):
    paths = [p for p, _ in indexed.samples[:2]]
    (tmp_path / "dir.jpg").mkdir()
    for name, exc in [("gone.jpg", FileNotFoundError), ("dir.jpg", IsADirectoryError)]:
        loader = ringloader.Loader(
            Indexed(paths + [str(tmp_path / name)]), batch_size=3, transform=EVAL
        )
        with pytest.raises(exc) as e:
            order(loader)
        assert e.value.filename == str(tmp_path / name)


def test_nhwc(indexed):
    a = ringloader.Loader(indexed, batch_size=4, transform=EVAL, layout="NHWC")
    b = ringloader.Loader(indexed, batch_size=4, transform=EVAL, layout="NCHW")
    for (x, _), (y, _) in zip(a, b):
        assert x.shape[1:] == (56, 56, 3) and y.shape[1:] == (3, 56, 56)
        assert torch.equal(x.permute(0, 3, 1, 2), y)


def test_tensors_are_zero_copy_views_of_the_slot(indexed):
    loader = ringloader.Loader(indexed, batch_size=4, transform=EVAL)
    images, _ = next(iter(loader))
    assert images.is_contiguous() and images.dtype == torch.uint8
    assert images.data_ptr() % 4096 == 0  # the slot's aligned buffer


def test_deleting_a_loader_mid_epoch_stops_its_threads(indexed):
    gc.collect()
    before = thread_count()
    loader = ringloader.Loader(indexed, batch_size=2, transform=EVAL, num_threads=3)
    it = iter(loader)
    next(it)
    assert thread_count() >= before + 4  # 3 decode threads + the I/O thread
    del it, loader
    gc.collect()
    assert thread_count() == before


def test_break_close_and_context_manager(indexed):
    gc.collect()
    before = thread_count()
    with ringloader.Loader(indexed, batch_size=2, transform=EVAL) as loader:
        for i, _ in enumerate(loader):
            if i == 2:
                break
        assert order(loader)  # a new epoch after a break works
    assert thread_count() == before
    loader.close()  # idempotent
    assert len(order(loader)) == len(loader)  # and usable again
    loader.close()
    assert thread_count() == before


def test_tensor_outlives_loader(indexed):
    loader = ringloader.Loader(indexed, batch_size=4, transform=EVAL)
    images, _ = next(iter(loader))
    copy = images.clone()
    del loader
    gc.collect()
    assert torch.equal(images, copy)


def test_image_folder_matches_torchvision(folder, tmp_path):
    tvd = pytest.importorskip("torchvision.datasets")
    ours, ref = ringloader.ImageFolder(folder), tvd.ImageFolder(folder)
    assert ours.classes == ref.classes
    assert ours.class_to_idx == ref.class_to_idx
    assert ours.samples == ref.samples
    assert ours.targets == ref.targets
    # Nested folders, odd extensions and non-images.
    root = tmp_path / "nested"
    for rel in ["b/x/1.JPG", "b/0.jpeg", "a/z.png", "a/readme.txt", "c/d/e/f.webp"]:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
    ours, ref = ringloader.ImageFolder(root), tvd.ImageFolder(root, loader=lambda p: p)
    assert ours.samples == ref.samples and ours.classes == ref.classes
    ours = ringloader.ImageFolder(root, extensions=(".png",), allow_empty=True)
    assert [os.path.basename(p) for p, _ in ours.samples] == ["z.png"]
    shutil.rmtree(root / "a")
    (root / "a").mkdir()
    with pytest.raises(FileNotFoundError, match="no valid file"):
        ringloader.ImageFolder(root)


def test_image_folder_getitem(folder):
    ds = ringloader.ImageFolder(folder)
    image, target = ds[0]
    assert image.dtype == torch.uint8 and image.shape[0] == 3
    assert target == ds.targets[0]


BLOCK_TORCHVISION = """
import importlib.abc, sys
class NoTorchvision(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoTorchvision())
"""


def test_works_without_torchvision(indexed):
    """As if torchvision were not installed: import, decode, transform."""
    import subprocess
    import sys

    code = BLOCK_TORCHVISION + textwrap.dedent(
        """
        import ringloader
        from ringloader import transforms as T
        assert "torchvision" not in sys.modules
        class DS:
            samples = [(p, 0) for p in sys.argv[1:]]
        loader = ringloader.Loader(DS, batch_size=2, transform=T.Compose(
            [T.RandomResizedCrop(32), T.RandomHorizontalFlip()]))
        n = sum(len(images) for images, _ in loader)
        assert n == len(DS.samples), n
        print("OK", n)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *(p for p, _ in indexed.samples[:5])],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("OK 5"), proc.stderr


def test_a_superseded_iterator_says_so(indexed):
    """Each iter() starts the next epoch and ends the previous iterator,
    which then raises instead of stopping early without a word."""
    loader = ringloader.Loader(indexed, batch_size=4, transform=EVAL)
    first = iter(loader)
    next(first)
    second = iter(loader)
    with pytest.raises(RuntimeError, match="newer iter"):
        next(first)
    assert sum(len(labels) for _, labels in second) == len(indexed)


def test_user_sampler_keeps_the_epoch_the_user_set(indexed):
    """As with DataLoader, iterating does not touch a sampler's epoch: the
    common DDP idiom sets it on the sampler itself."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(indexed, num_replicas=1, rank=0, shuffle=True)
    sampler.set_epoch(5)
    want = list(sampler)
    loader = ringloader.Loader(
        indexed, batch_size=len(indexed), sampler=sampler, transform=EVAL
    )
    for _ in range(2):  # also after the loader's own epoch moved on
        (labels,) = [y.tolist() for _, y in loader]
        assert labels == want and sampler.epoch == 5


def test_an_epoch_begun_while_another_thread_is_in_next(indexed):
    """iter() while another thread is inside the older epoch's next(): that
    wait is ended (the pipeline it takes from is closed) and the new epoch
    takes from a pipeline of its own, its own batches first."""
    want = ringloader.Loader(indexed, batch_size=2, shuffle=True, transform=EVAL)
    epochs = [[labels.tolist() for _, labels in want] for _ in range(2)]
    loader = ringloader.Loader(
        indexed, batch_size=2, shuffle=True, transform=EVAL, prefetch=3
    )
    first = iter(loader)
    assert next(first)[1].tolist() == epochs[0][0]
    first._running.acquire()  # as if another thread were inside next(first)
    try:
        second = iter(loader)
        assert next(second)[1].tolist() == epochs[1][0]
    finally:
        first._running.release()
    assert [labels.tolist() for _, labels in second] == epochs[1][1:]


def test_an_older_epoch_ending_its_batch_counts_nothing_of_the_newer(folder):
    """A thread inside the older epoch's next(), past taking its batch (in
    target_transform), when a newer iter() begins: the older batch is still
    handed out, and counted in neither epoch's position."""
    inside, go = threading.Event(), threading.Event()

    def hold(label):
        if threading.current_thread().name == "older":
            inside.set()
            go.wait(10)
        return label

    ds = ringloader.ImageFolder(folder, target_transform=hold)
    loader = ringloader.Loader(ds, batch_size=2, transform=EVAL)
    first = iter(loader)
    next(first)
    got = {}
    older = threading.Thread(target=lambda: got.update(b=next(first)), name="older")
    older.start()
    try:
        assert inside.wait(10)
        second = iter(loader)
        next(second)
    finally:
        go.set()
        older.join()
    assert len(got["b"][1]) == 2
    assert loader.state_dict()["batches_yielded"] == 1


def test_iter_from_the_loaders_own_sampler_is_an_error_not_a_hang(indexed):
    """A sampler whose iteration calls iter() on the loader it feeds, as
    a resumed epoch begins (its batches yielded before are replayed under
    the loader's lock): RuntimeError, where waiting for that lock would
    hang."""
    holder = {"calls": 0}

    class Reentrant(torch.utils.data.Sampler):
        def __len__(self):
            return len(indexed)

        def __iter__(self):
            holder["calls"] += 1
            if holder["calls"] > 1:  # not while the state is taken
                iter(holder["loader"])
            return iter(range(len(indexed)))

    loader = ringloader.Loader(
        indexed, batch_size=4, sampler=Reentrant(), transform=EVAL
    )
    holder["loader"] = loader
    it = iter(loader)
    next(it)
    state = loader.state_dict()  # one batch yielded: replayed on resume
    del it
    loader.load_state_dict(state)

    def stuck(signum, frame):
        raise TimeoutError("iter() from the sampler hung")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(30)
    try:
        with pytest.raises(RuntimeError, match="one epoch at a time"):
            next(iter(loader))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
