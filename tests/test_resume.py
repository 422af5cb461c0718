"""Exact resume: stop after k batches, save state_dict() with torch.save,
restore it into a fresh Loader in a new process, and get batches that are
SHA-256-identical to those of an uninterrupted run (random crops and flips
included), then the following epoch."""

from __future__ import annotations

import json

import numpy as np
import pytest


from images import jpeg_bytes
from subproc import run_python

N = 18
BATCH = 4  # 5 batches: 4, 4, 4, 4, 2
SEED = 3

# Everything both the test and its child processes build, by case name.
COMMON = r"""
import hashlib, json, os, sys
import numpy as np
import torch
import ringloader
from ringloader import transforms as T

class Files:
    def __init__(self, root):
        names = sorted(os.listdir(root))
        self.samples = [(os.path.join(root, n), i) for i, n in enumerate(names)]
    def __len__(self):
        return len(self.samples)

CASES = {
    # name: (Loader keyword arguments, epochs fully run first, batches then)
    "k2":        (dict(shuffle=True), 0, 2),
    "k0":        (dict(shuffle=True), 0, 0),
    "klen-break": (dict(shuffle=True), 0, 5),   # stopped on the last batch
    "klen-done": (dict(shuffle=True), 0, None),  # the loop ran to its end
    "epoch1-k3": (dict(shuffle=True), 1, 3),
    "rank1-k1":  (dict(shuffle=True, rank=1, world_size=2), 0, 1),
    "rank1-drop-k1": (dict(shuffle=True, drop_last=True, rank=1, world_size=2), 0, 1),
    "plain-k3":  (dict(shuffle=False), 0, 3),
    # augmentation ops in C, drawn per sample, and RandomErasing's noise
    "ops-k2":    (dict(shuffle=True, ops=True), 0, 2),
    "ops-epoch1-k3": (dict(shuffle=True, ops=True), 1, 3),
    # timm's RandAugment and AugMix in C (csrc/augment/timm.c)
    "timm-k2":   (dict(shuffle=True, timm=True), 0, 2),
}

def make(root, case, threads):
    kwargs = dict(CASES[case][0])
    tf = [T.RandomResizedCrop(32), T.RandomHorizontalFlip()]
    if kwargs.pop("ops", False):
        from torchvision.transforms import v2
        tf += [v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.TrivialAugmentWide(),
               v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
               v2.RandomErasing(0.5, value="random")]
    if kwargs.pop("timm", False):
        from timm.data import auto_augment as aa
        hp = dict(translate_const=14, img_mean=(124, 116, 104))
        tf += [aa.rand_augment_transform("rand-m9-mstd0.5-inc1", dict(hp)),
               aa.augment_and_mix_transform("augmix-m3-w2-d2", dict(hp))]
    return ringloader.Loader(
        Files(root), batch_size=4, seed=3, num_threads=threads,
        transform=T.Compose(tf), **kwargs)

def digest(images, labels):
    h = hashlib.sha256(images.contiguous().numpy().tobytes())
    h.update(labels.numpy().astype("<i8").tobytes())
    return h.hexdigest()

def epoch(loader, stop=None):
    out = []
    for images, labels in loader:
        out.append(digest(images, labels))
        if stop is not None and len(out) == stop:
            break
    return out
"""

STOP = (
    COMMON
    + r"""
root, out = sys.argv[1], sys.argv[2]
seen = {}
for case, (kwargs, full, k) in CASES.items():
    loader = make(root, case, threads=2)
    hashes = [epoch(loader) for _ in range(full)]
    if k != 0:
        hashes.append(epoch(loader, stop=k))
    torch.save({"loader": loader.state_dict()}, os.path.join(out, case + ".pt"))
    seen[case] = hashes
    loader.close()
print(json.dumps(seen))
"""
)

RESUME = (
    COMMON
    + r"""
root, out = sys.argv[1], sys.argv[2]
got = {}
for case in CASES:
    loader = make(root, case, threads=1)   # another thread count on purpose
    loader.load_state_dict(torch.load(os.path.join(out, case + ".pt"))["loader"])
    got[case] = {"epoch": loader.epoch, "hashes": [epoch(loader), epoch(loader)]}
    loader.close()
print(json.dumps(got))
"""
)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    rng = np.random.default_rng(1)
    for i in range(N):
        h, w = (int(v) for v in rng.integers(48, 160, 2))
        (d / f"{i:02d}.jpg").write_bytes(jpeg_bytes("baseline", h, w, seed=i))
    return str(d)


def namespace() -> dict:
    ns: dict = {}
    exec(COMMON, ns)
    return ns


@pytest.fixture(scope="module")
def reference(root):
    """Uninterrupted runs, in this process: case -> hashes of epochs 0..2."""
    ns = namespace()
    ref = {}
    for case in ns["CASES"]:
        with ns["make"](root, case, threads=2) as loader:
            ref[case] = [ns["epoch"](loader) for _ in range(3)]
    return ref


@pytest.fixture(scope="module")
def runs(root, tmp_path_factory):
    """(what the stopped process saw, what the restored process yielded)."""
    out = str(tmp_path_factory.mktemp("states"))
    stop = run_python(STOP, root, out, timeout=120)
    assert stop.returncode == 0, stop.stderr[-4000:]
    resume = run_python(RESUME, root, out, timeout=120)
    assert resume.returncode == 0, resume.stderr[-4000:]
    return json.loads(stop.stdout), json.loads(resume.stdout)


@pytest.mark.parametrize("case", list(namespace()["CASES"]))
def test_resume_is_bit_identical(reference, runs, case):
    cases = namespace()["CASES"]
    _, full, k = cases[case]
    seen, resumed = runs[0][case], runs[1][case]
    ref = reference[case]
    # The stopped process saw the same prefix as the uninterrupted run.
    assert seen == [
        ref[e] if e < full or k is None else ref[e][:k] for e in range(len(seen))
    ]
    assert len(set(ref[0])) == len(ref[0]), "batches should all differ"
    if k is None or k == len(ref[full]):
        start, rest = full + 1, ref[full + 1]  # next epoch, from its start
    else:
        start, rest = full, ref[full][k:]
    assert resumed["epoch"] == start
    assert resumed["hashes"][0] == rest
    assert resumed["hashes"][1] == ref[start + 1]
    if case != "plain-k3":
        assert ref[0] != ref[1], "epochs should differ"


def test_state_dict_contents(root):
    ns = namespace()
    with ns["make"](root, "rank1-k1", threads=1) as loader:
        next(iter(loader))
        state = loader.state_dict()
    assert state["epoch"] == 0 and state["batches_yielded"] == 1
    assert state["seed"] == SEED and state["rank"] == 1 and state["world_size"] == 2
    with pytest.raises(ValueError, match="version"):
        loader.load_state_dict(dict(state, version=99))


def test_state_at_epoch_start_after_set_epoch(root):
    ns = namespace()
    with ns["make"](root, "k2", threads=1) as loader:
        first = [ns["epoch"](loader) for _ in range(2)]  # epochs 0 and 1
    with ns["make"](root, "k2", threads=1) as loader:
        ns["epoch"](loader)  # epoch 0
        loader.set_epoch(1)  # checkpoint here
        state = loader.state_dict()
    with ns["make"](root, "k2", threads=1) as fresh:
        fresh.load_state_dict(state)
        assert fresh.epoch == 1
        assert ns["epoch"](fresh) == first[1]


def small_files(root, n):
    """A dataset class with ``samples``: n small JPEGs, each its own class."""

    class Files:
        samples = []

    for i in range(n):
        p = root / f"{i:02d}.jpg"
        p.write_bytes(jpeg_bytes("baseline", 40, 48, seed=i))
        Files.samples.append((str(p), i))
    return Files


def test_stateful_sampler_resumes_without_skipping_twice(tmp_path):
    """A sampler with its own state_dict (it counts what it has handed out,
    prefetched batches included) is saved as it was at the epoch's start,
    so restoring it and skipping the yielded batches lands on the next
    unseen batch."""
    import ringloader
    from ringloader import transforms as T
    from torch.utils.data import Sampler

    class Counting(Sampler):
        def __init__(self, n):
            self.n, self.pos = n, 0

        def __iter__(self):
            while self.pos < self.n:
                self.pos += 1
                yield self.pos - 1
            self.pos = 0

        def __len__(self):
            return self.n

        def state_dict(self):
            return {"pos": self.pos}

        def load_state_dict(self, state):
            self.pos = state["pos"]

    Files = small_files(tmp_path, 12)

    def make():
        return ringloader.Loader(
            Files,
            batch_size=2,
            prefetch=3,
            sampler=Counting(12),
            transform=T.Compose([T.Resize((16, 16))]),
        )

    first = make()
    it = iter(first)
    seen = [next(it)[1].tolist() for _ in range(2)]
    state = first.state_dict()
    first.close()
    assert seen == [[0, 1], [2, 3]]
    resumed = make()
    resumed.load_state_dict(state)
    rest = [labels.tolist() for _, labels in resumed]
    assert rest == [[4, 5], [6, 7], [8, 9], [10, 11]]


def test_state_taken_before_an_epochs_first_batch(tmp_path):
    """state_dict() between iter() and the first next() of epoch 1: a
    sampler with its own state is saved as epoch 1 will find it, not as
    epoch 0 began, so the resumed loader gives epoch 1."""
    import torch
    from torch.utils.data import Sampler

    import ringloader
    from ringloader import transforms as T

    class Drawing(Sampler):
        def __init__(self, n):
            self.n, self.g = n, torch.Generator().manual_seed(1)

        def __len__(self):
            return self.n

        def __iter__(self):
            return iter(torch.randperm(self.n, generator=self.g).tolist())

        def state_dict(self):
            return {"g": self.g.get_state()}

        def load_state_dict(self, state):
            self.g.set_state(state["g"])

    Files = small_files(tmp_path, 10)

    def make():
        return ringloader.Loader(
            Files, batch_size=4, sampler=Drawing(10), transform=T.Resize((16, 16))
        )

    loader = make()
    [labels.tolist() for _, labels in loader]  # epoch 0
    it = iter(loader)
    state = loader.state_dict()
    epoch1 = [labels.tolist() for _, labels in it]
    resumed = make()
    resumed.load_state_dict(state)
    assert [labels.tolist() for _, labels in resumed] == epoch1


def test_the_samplers_epoch_saved_before_an_epochs_first_batch(tmp_path):
    """sampler.set_epoch(1) (as scripts call it on a DistributedSampler),
    iter(), then state_dict() before the first batch: the samplers' epoch
    saved is 1, so the resumed loader gives epoch 1's order."""
    from torch.utils.data import DistributedSampler

    import ringloader
    from ringloader import transforms as T

    Files = small_files(tmp_path, 8)

    def make():
        sampler = DistributedSampler(range(8), num_replicas=1, rank=0, seed=3)
        loader = ringloader.Loader(
            Files, batch_size=4, sampler=sampler, transform=T.Resize((16, 16))
        )
        return loader, sampler

    loader, sampler = make()
    [labels.tolist() for _, labels in loader]  # epoch 0
    sampler.set_epoch(1)
    it = iter(loader)
    state = loader.state_dict()
    epoch1 = [labels.tolist() for _, labels in it]
    resumed, _ = make()
    resumed.load_state_dict(state)
    assert [labels.tolist() for _, labels in resumed] == epoch1


def test_state_saved_again_before_the_first_batch_after_a_resume(tmp_path):
    """load_state_dict(), then state_dict() before any batch (a job resumed
    and stopped again at once): the same position, not the epoch's start."""
    import ringloader
    from ringloader import transforms as T

    Files = small_files(tmp_path, 8)

    def make():
        return ringloader.Loader(Files, batch_size=2, transform=T.Resize((16, 16)))

    loader = make()
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    again = make()
    again.load_state_dict(state)
    resaved = again.state_dict()
    assert resaved["batches_yielded"] == state["batches_yielded"] == 2
    last = make()
    last.load_state_dict(resaved)
    assert [labels.tolist() for _, labels in last] == [[4, 5], [6, 7]]
