"""A detection or segmentation dataset whose transforms the training
script replaces after the loader was made (a schedule of sizes, an
augmentation switched off for the last epochs), as torch's DataLoader
follows it: an epoch whose transforms ringloader does not run natively is
read by torch's DataLoader, with a FallbackWarning naming the step, in the
loader's own order (shuffled, sharded over ranks), each item what indexing
the dataset gives; once the transforms are native again the next epoch is
read natively, equal to a loader that never left them. Replaced within an
epoch, the epoch goes on as it began."""

from __future__ import annotations

import itertools
import signal
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import Subset, default_collate
from torchvision import datasets
from torchvision import transforms as T
from torchvision.transforms import v2

import ringloader
from ringloader.errors import UnsupportedTransform

import reference_pairs as R
from detection_data import write_coco, write_voc
from test_segment_pairs import Jitter

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)

NATIVE = v2.Compose([v2.ToImage(), v2.Resize((24, 20)), v2.RandomHorizontalFlip()])
# A step ringloader does not follow on the targets (and no draws: each
# item is what indexing the dataset gives again).
OTHER = v2.Compose([v2.ToImage(), v2.Resize((24, 20)), v2.Lambda(lambda x: x)])
KW = dict(batch_size=3, num_workers=2, seed=7)


def collate_fn(batch):
    return tuple(zip(*batch))


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    return write_coco(tmp_path_factory.mktemp("coco"), 14, seed=3)


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return write_voc(tmp_path_factory.mktemp("voc"), 10, seed=3)


def wrapped_coco(coco, transforms):
    ds = datasets.CocoDetection(*coco, transforms=transforms)
    return datasets.wrap_dataset_for_transforms_v2(
        ds, target_keys=["boxes", "labels", "image_id"]
    )


def epoch(loader, fallback, names="Lambda"):
    """One epoch's batches, and that it warned (FallbackWarning) exactly
    where ``fallback`` says it should, naming the replaced step."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        batches = list(loader)
    said = [w for w in seen if issubclass(w.category, ringloader.FallbackWarning)]
    if fallback:
        assert len(said) == 1, [str(w.message) for w in said]
        message = str(said[0].message)
        assert "this epoch is read by torch.utils.data.DataLoader" in message
        assert names in message, message
        assert said[0].filename == __file__  # the user's loop
    else:
        assert not said, [str(w.message) for w in said]
    return batches


def ids(batches):
    return [int(t["image_id"]) for _, targets in batches for t in targets]


def same(ours, ref):
    """Items (or batches) equal: tensors of one type, dtype and value."""
    assert type(ours) is type(ref)
    if isinstance(ref, torch.Tensor):
        assert ours.dtype == ref.dtype and torch.equal(ours, ref)
    elif isinstance(ref, dict):
        assert ours.keys() == ref.keys()
        for key in ref:
            same(ours[key], ref[key])
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            same(a, b)
    else:
        assert ours == ref


def as_indexed(batches, ds):
    """Segmentation batches (in order) are what indexing ``ds`` gives."""
    pairs = [pair for images, masks in batches for pair in zip(images, masks)]
    same(pairs, [ds[i] for i in range(len(ds))])


@pytest.mark.parametrize(
    "shard", [{}, dict(distributed=True, rank=1, world_size=2)], ids=["one", "rank-1"]
)
def test_a_detection_epoch_with_other_transforms_is_torchs_in_the_same_order(
    coco, shard
):
    kw = dict(KW, shuffle=True, collate_fn=collate_fn, **shard)
    ds = wrapped_coco(coco, NATIVE)
    loader = ringloader.DataLoader(ds, **kw)
    assert isinstance(loader, ringloader.DataLoader)
    never = ringloader.DataLoader(wrapped_coco(coco, NATIVE), **kw)
    want = [epoch(never, fallback=False) for _ in range(3)]

    same(epoch(loader, fallback=False), want[0])
    ds.transforms = OTHER
    got = epoch(loader, fallback=True)
    assert ids(got) == ids(want[1])  # the loader's order and shard
    by_id = {int(ds[i][1]["image_id"]): i for i in range(len(ds))}
    for images, targets in got:
        items = [ds[by_id[int(t["image_id"])]] for t in targets]
        same((images, targets), collate_fn(items))  # what indexing gives
    ds.transforms = NATIVE
    same(epoch(loader, fallback=False), want[2])


def test_a_segmentation_epoch_with_other_transforms_is_torchs(voc):
    def make(transforms):
        ds = datasets.VOCSegmentation(voc, "2012", "train", transforms=transforms)
        return datasets.wrap_dataset_for_transforms_v2(ds)

    ds = make(NATIVE)
    loader = ringloader.DataLoader(ds, collate_fn=collate_fn, **KW)
    never = ringloader.DataLoader(make(NATIVE), collate_fn=collate_fn, **KW)
    want = [epoch(never, fallback=False) for _ in range(3)]
    same(epoch(loader, fallback=False), want[0])
    ds.transforms = OTHER
    as_indexed(epoch(loader, fallback=True), ds)
    ds.transforms = NATIVE
    same(epoch(loader, fallback=False), want[2])


def test_the_segmentation_references_preset_replaced(voc):
    """The reference's own v1 classes on an unwrapped VOCSegmentation, its
    eval preset replaced by one with a step of the user's own."""
    preset = R.eval_preset(24)
    other = R.Preset([*preset.transforms.transforms, Jitter()])
    ds = datasets.VOCSegmentation(voc, "2012", "train", transforms=preset)
    loader = ringloader.DataLoader(
        ds, batch_size=2, num_workers=2, collate_fn=collate_fn
    )
    assert isinstance(loader, ringloader.DataLoader)
    first = epoch(loader, fallback=False)
    ds.transforms = other
    as_indexed(epoch(loader, fallback=True, names="Jitter"), ds)
    ds.transforms = preset
    same(epoch(loader, fallback=False), first)  # the eval preset draws nothing


def test_transforms_replaced_within_an_epoch_apply_from_the_next(coco):
    ds = wrapped_coco(coco, NATIVE)
    loader = ringloader.DataLoader(ds, collate_fn=collate_fn, **KW)
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", ringloader.FallbackWarning)
        for images, _ in loader:
            seen += len(images)
            ds.transforms = OTHER  # the epoch goes on as it began
    assert seen == len(ds)
    got = epoch(loader, fallback=True)
    assert sum(len(images) for images, _ in got) == len(ds)


class Keep:
    """A step of the user's own (not fused): the image as it is."""

    def __call__(self, image):
        return image


FIXED = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


def test_a_classification_transform_replaced_by_one_not_fused(folder):
    """A transform the C pipeline does not compile (a step of the user's
    own first): that epoch is torch's DataLoader's, each batch what
    indexing the dataset gives; a fused one again: natively again."""
    ds = datasets.ImageFolder(folder, transform=FIXED)
    loader = ringloader.DataLoader(ds, batch_size=4, num_workers=2)
    first = epoch(loader, fallback=False)
    ds.transform = T.Compose([Keep(), *FIXED.transforms])
    got = epoch(loader, fallback=True, names="Keep")
    want = [ds[i] for i in range(len(ds))]
    same(got, [default_collate(want[k : k + 4]) for k in range(0, len(ds), 4)])
    ds.transform = FIXED
    same(epoch(loader, fallback=False), first)


def test_a_transform_replaced_by_one_ending_in_a_pil_image(folder):
    """v2's ToDtype without ToImage leaves the PIL image as it is under
    torch: that epoch is torch's DataLoader's, whose default collate
    refuses PIL images (the loader made with it falls back the same way);
    ringloader.Loader refuses it, saying to put ToImage() first, rather
    than giving uint8 batches."""
    pil = v2.Compose([v2.CenterCrop(32), v2.ToDtype(torch.float32, scale=True)])
    ds = datasets.ImageFolder(folder, transform=FIXED)
    loader = ringloader.DataLoader(
        ds, batch_size=4
    )  # (torch's workers: 10 s to end after an error)
    ds.transform = pil
    with pytest.warns(ringloader.FallbackWarning, match="ToDtype left the PIL"):
        with pytest.raises(TypeError, match="PIL"):
            list(loader)
    with pytest.raises(UnsupportedTransform, match=r"put ToImage\(\)"):
        ringloader.Loader(ringloader.ImageFolder(folder), batch_size=4, transform=pil)
    # ToPureTensor alone asks for no conversion: uint8, as with ToImage
    pure = v2.Compose([v2.Resize(40), v2.CenterCrop(32), v2.ToPureTensor()])
    images, _ = next(
        iter(ringloader.Loader(ringloader.ImageFolder(folder), 4, transform=pure))
    )
    assert images.dtype == torch.uint8


class Endless(torch.utils.data.Sampler):
    """An iteration-based batch sampler (as detectron2's): it never ends."""

    def __init__(self, n, size):
        self.n, self.size = n, size

    def __iter__(self):
        rng = np.random.default_rng(0)
        while True:
            yield rng.integers(0, self.n, self.size).tolist()


def _stuck(signum, frame):
    raise TimeoutError("the epoch did not start in 60 s")


def test_an_endless_batch_sampler_is_drawn_as_batches_are_taken(coco):
    """(An epoch that drew its whole order first would never start: an
    alarm ends the test then.)"""
    previous = signal.signal(signal.SIGALRM, _stuck)
    signal.alarm(60)
    try:
        _endless(coco)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _endless(coco):
    ds = wrapped_coco(coco, NATIVE)
    sampler = Endless(len(ds), 3)
    loader = ringloader.DataLoader(
        ds, batch_sampler=sampler, num_workers=2, collate_fn=collate_fn
    )
    native = ids(itertools.islice(loader, 3))
    ds.transforms = OTHER
    with pytest.warns(ringloader.FallbackWarning, match="this epoch is read by"):
        assert ids(itertools.islice(loader, 3)) == native  # the sampler's order


def test_a_subset_replaced_with_its_transforms_is_read_whole(coco):
    """The Subset's indices and the dataset's transforms replaced at once:
    the epoch torch's DataLoader reads has the new Subset's length, and so
    has the next native one."""
    ds = wrapped_coco(coco, NATIVE)
    part = Subset(ds, list(range(7)))
    loader = ringloader.DataLoader(part, batch_size=3, collate_fn=collate_fn)
    assert len(ids(epoch(loader, fallback=False))) == 7
    part.indices = list(range(len(ds)))
    ds.transforms = OTHER
    assert len(ids(epoch(loader, fallback=True))) == len(ds)
    ds.transforms = NATIVE
    assert len(ids(epoch(loader, fallback=False))) == len(ds)


def test_an_epoch_read_by_torch_draws_as_torchs_and_is_counted(coco):
    """One draw from torch's generator an epoch, as torch's DataLoader
    takes (its workers' base seed), not two; stats() counts the epoch."""
    ds = wrapped_coco(coco, OTHER)
    theirs = torch.utils.data.DataLoader(ds, batch_size=3, collate_fn=collate_fn)
    ds.transforms = NATIVE
    ours = ringloader.DataLoader(ds, batch_size=3, collate_fn=collate_fn)
    ds.transforms = OTHER
    after = []
    for loader in (theirs, ours):
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ringloader.FallbackWarning)
            list(loader)
        after.append(torch.randint(0, 10**9, ()).item())
    assert after[0] == after[1]
    assert ours.stats()["images_per_second"] > 0  # (0 on a fresh loader)


def test_a_python_step_in_a_replaced_transform_is_said_at_the_users_line(folder):
    ds = datasets.ImageFolder(folder, transform=FIXED)
    for loader in (
        ringloader.DataLoader(ds, batch_size=4),
        ringloader.Loader(ringloader.ImageFolder(folder, transform=FIXED), 4),
    ):
        data = getattr(loader, "dataset", None)
        data.transform = T.Compose([*FIXED.transforms, T.Lambda(lambda x: x)])
        with pytest.warns(ringloader.FallbackWarning, match="runs in Python") as said:
            iter(loader)
        assert [w.filename for w in said if "runs in Python" in str(w.message)] == [
            __file__
        ]


def test_an_epoch_read_by_torch_resumes_where_it_stopped(folder):
    """state_dict() in an epoch read by torch's DataLoader, with a sampler
    sharing the loader's generator (drawn after torch's base seed, as
    under torch): the resumed loader gives the rest of that epoch."""
    other = T.Compose([Keep(), *FIXED.transforms])

    def make():
        ds = datasets.ImageFolder(folder, transform=FIXED)
        g = torch.Generator()
        sampler = torch.utils.data.RandomSampler(ds, generator=g)
        loader = ringloader.DataLoader(ds, batch_size=2, sampler=sampler, generator=g)
        ds.transform = other
        return loader, g

    def sums(batches):
        return [[round(float(x.sum()), 3) for x in images] for images, _ in batches]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ringloader.FallbackWarning)
        loader, g = make()
        g.manual_seed(0)
        whole = sums(loader)
        loader, g = make()
        g.manual_seed(0)
        it = iter(loader)
        first = sums(next(it) for _ in range(2))
        state = loader.state_dict()
        del it
        again, g = make()
        again.load_state_dict(state)
        g.manual_seed(0)
        rest = sums(again)
    assert first == whole[:2] and first + rest == whole


def test_a_transform_taken_while_the_samples_fail_is_not_lost(folder):
    """The transform replaced and the samples list broken at once: iter()
    raises on the samples, and once they are back the new transform is
    the one run (the pipeline made for the old one was closed)."""
    ds = datasets.ImageFolder(folder, transform=FIXED)
    loader = ringloader.DataLoader(ds, batch_size=4)
    assert next(iter(loader))[0].shape[-1] == 32
    samples = ds.samples
    ds.transform = T.Compose([T.Resize(56), T.CenterCrop(48), T.ToTensor()])
    ds.samples = None
    with pytest.raises(TypeError):
        iter(loader)
    ds.samples = samples
    assert next(iter(loader))[0].shape[-1] == 48 == ds[0][0].shape[-1]
