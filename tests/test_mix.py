"""ringloader.Mix: datasets mixed by weight into epochs of a given length,
read by one pipeline: each source's share of the draws is its weight's,
the batches are a function of (seed, epoch) alone (thread count,
resuming), DDP ranks get disjoint draws, and open_clip's resampled mode
over tar shards."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
import ringloader
from batches import assert_same
import torch
from images import jpeg_bytes, write_jpegs
from ringloader import transforms as T
from scipy.stats import chisquare

TINY = T.Compose([T.Resize(8), T.CenterCrop(8)])
TRAIN = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip()])
SIZES = (30, 50, 20)  # samples of each source


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Three FileLists of small JPEGs (real files), labelled
    source * 1000 + index, so a label tells the sample drawn."""
    root = tmp_path_factory.mktemp("mix")
    out = []
    for s, n in enumerate(SIZES):
        paths = []
        for i in range(n):
            p = root / f"s{s}_{i:03d}.jpg"
            p.write_bytes(jpeg_bytes("baseline", 20 + i % 7, 24 + s, seed=s * 100 + i))
            paths.append(str(p))
        out.append(ringloader.FileList(paths, s * 1000 + np.arange(n)))
    return out


def _labels(loader) -> np.ndarray:
    out = np.concatenate([y.numpy() for _, y in loader])
    loader.close()
    return out


def _run(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = [(x.clone(), y.clone()) for x, y in loader]
    loader.close()
    return out


@pytest.mark.parametrize("replacement", [True, False])
def test_shares_match_the_weights(sources, replacement):
    weights = [0.5, 0.3, 0.2]
    mix = ringloader.Mix(
        sources, weights, samples_per_epoch=20_000, replacement=replacement
    )
    assert len(mix) == 20_000
    loader = ringloader.Loader(
        mix, batch_size=500, transform=TINY, num_threads=2, seed=7
    )
    labels = _labels(loader)
    assert len(labels) == 20_000
    counts = np.bincount(labels // 1000, minlength=3)
    expected = np.array(weights) * 20_000
    assert chisquare(counts, expected).pvalue > 0.01
    # Mixed through the epoch, not source after source: the first 2,000
    # draws, and each batch, hold the sources in their shares too.
    head = np.bincount(labels[:2000] // 1000, minlength=3)
    assert chisquare(head, np.array(weights) * 2000).pvalue > 0.01
    for b in range(0, 20_000, 500):
        assert len(np.unique(labels[b : b + 500] // 1000)) == 3
    # Every sample of a source is drawn (about) equally often.
    for s, n in enumerate(SIZES):
        per = np.bincount(labels[labels // 1000 == s] % 1000, minlength=n)
        if replacement:
            assert chisquare(per).pvalue > 0.01
        else:  # each comes once before any comes twice
            assert per.max() - per.min() <= 1


def test_without_replacement_goes_through_each_source_across_epochs(sources):
    """An epoch shorter than a source covers a new part of it each time:
    every sample comes once before any comes twice."""
    mix = ringloader.Mix(sources, [1, 1, 1], samples_per_epoch=30, replacement=False)
    loader = ringloader.Loader(mix, batch_size=7, transform=TINY, num_threads=2)
    seen = []
    for epoch in range(5):  # 50 draws of source 1 (50 samples)
        loader.set_epoch(epoch)
        seen.append(_labels(loader))
    seen = np.concatenate(seen)
    one = np.sort(seen[seen // 1000 == 1] % 1000)
    assert one.tolist() == list(range(50))
    two = seen[seen // 1000 == 2] % 1000  # 50 draws of 20 samples
    assert np.bincount(two[:40], minlength=20).tolist() == [2] * 20


def test_same_batches_whatever_the_threads_and_epochs_differ(sources):
    mix = ringloader.Mix(sources, [0.2, 0.5, 0.3], samples_per_epoch=96)
    runs = [
        _run(
            ringloader.Loader(
                mix, batch_size=16, transform=TRAIN, num_threads=t, seed=3
            )
        )
        for t in (1, 2, 4)
    ]
    assert_same(runs[0], runs[1])
    assert_same(runs[0], runs[2])
    loader = ringloader.Loader(
        mix, batch_size=16, transform=TRAIN, num_threads=2, seed=3
    )
    loader.set_epoch(1)
    other = _run(loader)
    assert not torch.equal(other[0][1], runs[0][0][1])


def test_exact_resume(sources):
    mix = ringloader.Mix(sources, [0.6, 0.2, 0.2], samples_per_epoch=80)

    def make():
        return ringloader.Loader(
            mix, batch_size=8, transform=TRAIN, num_threads=2, seed=5
        )

    whole = make()
    whole.set_epoch(2)
    reference = _run(whole)
    first = make()
    first.set_epoch(2)
    it = iter(first)
    for _ in range(4):
        next(it)
    state = first.state_dict()
    first.close()
    resumed = make()
    resumed.load_state_dict(state)
    assert_same(_run(resumed), reference[4:])


def test_resuming_with_another_mix_seed_is_refused(sources):
    """A state names the seed of the Mix it was taken with: a Mix of
    another seed draws other epochs, so resuming it would silently read
    other samples."""
    loader = ringloader.Loader(
        ringloader.Mix(sources, samples_per_epoch=40, seed=7),
        batch_size=8,
        transform=TINY,
    )
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    loader.close()
    assert state["mix_seed"] == 7
    other = ringloader.Mix(sources, samples_per_epoch=40, seed=8)
    assert "seed=8" in repr(other)
    with ringloader.Loader(other, batch_size=8, transform=TINY) as resumed:
        with pytest.raises(ValueError, match=r"Mix\(seed=7\).*seed=8.*seed=7"):
            resumed.load_state_dict(state)
    same = ringloader.Mix(sources, samples_per_epoch=40, seed=7)
    with ringloader.Loader(same, batch_size=8, transform=TINY) as resumed:
        resumed.load_state_dict(state)
        assert len(list(resumed)) == 4  # the epoch's 5 batches but the first


def test_ddp_ranks_take_disjoint_draws(sources):
    mix = ringloader.Mix(sources, [0.5, 0.25, 0.25], samples_per_epoch=90, seed=11)
    order = mix.ringloader_order(11, 0)
    labels = np.concatenate([s.targets for s in sources])
    world = 3
    parts = []
    for rank in range(world):
        loader = ringloader.Loader(
            mix,
            batch_size=10,
            transform=TINY,
            num_threads=2,
            seed=11,
            distributed=True,
            rank=rank,
            world_size=world,
        )
        parts.append(_labels(loader))
        # Rank r takes the epoch's draws r, r + 3, ... (DistributedSampler
        # over the draws, without shuffle here).
        assert parts[-1].tolist() == labels[order[rank::world]].tolist()
    assert sum(len(p) for p in parts) == 90
    # Without replacement, over one pass of the sources, no sample twice.
    mix = ringloader.Mix(sources, samples_per_epoch=100, replacement=False)
    parts = []
    for rank in range(4):
        loader = ringloader.Loader(
            mix,
            batch_size=10,
            transform=TINY,
            num_threads=2,
            shuffle=True,
            distributed=True,
            rank=rank,
            world_size=4,
        )
        parts.append(set(_labels(loader).tolist()))
    for a in range(4):
        for b in range(a + 1, 4):
            assert not parts[a] & parts[b]
    assert set().union(*parts) == set(labels.tolist())


def rank_positions(n: int, seed: int, epoch: int, rank: int, world: int) -> list:
    """The positions of the epoch's draws that distributed=True gives
    ``rank``: its share of the loader's built-in shuffle of them, as
    DistributedSampler shares out a permutation."""
    from ringloader._sampling import EpochOrder

    order = EpochOrder(n, seed, epoch, "shuffle", rank, world)
    return order.indices(np.arange(order.num_samples)).tolist()


def test_a_draw_is_augmented_alike_on_any_rank(sources):
    """With replacement a sample comes several times in an epoch, on one
    rank or on several: each draw's random crop and flip are those one
    process reading the whole epoch gives it (its key counts the sample's
    draws in the epoch's order, not in what a rank reads), so a sample on
    two ranks is not augmented twice alike. Before, each rank counted from
    0: 22 of the 31 draws of repeated samples differed from one process's,
    and 11 pairs of a sample's draws on the two ranks were identical."""
    mix = ringloader.Mix(sources, [0.2, 0.3, 0.5], samples_per_epoch=60)

    def read(**kw):
        loader = ringloader.Loader(
            mix, batch_size=6, transform=TRAIN, num_threads=2, seed=2, **kw
        )
        loader.set_epoch(1)
        out = _run(loader)
        return torch.cat([x for x, _ in out]), torch.cat([y for _, y in out])

    images, labels = read()
    repeats = [p for p in range(60) if (labels == labels[p]).sum() > 1]
    assert len(repeats) >= 10
    for rank in range(2):
        x, y = read(shuffle=True, distributed=True, rank=rank, world_size=2)
        where = rank_positions(60, 2, 1, rank, 2)
        assert torch.equal(y, labels[where]) and torch.equal(x, images[where])
    # The draws of one sample are augmented each its own way.
    for p in repeats:
        q = [r for r in repeats if r != p and labels[r] == labels[p]]
        assert not any(torch.equal(images[p], images[r]) for r in q)


def test_a_framework_sampler_picks_draws(sources):
    """Lightning's DistributedSampler (and any sampler) indexes the Mix's
    draws: ringloader.DataLoader reads the samples drawn there."""
    from torch.utils.data import DistributedSampler

    mix = ringloader.Mix(sources, [0.5, 0.5, 0], samples_per_epoch=40, transform=TINY)
    order = mix.ringloader_order(0, 0)
    labels = np.concatenate([s.targets for s in sources])
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(mix, num_replicas=2, rank=rank, seed=1)
        loader = ringloader.DataLoader(
            mix,
            batch_size=5,
            sampler=sampler,
            generator=torch.Generator().manual_seed(0),
        )
        loader.seed = 0
        got = _labels(loader)
        assert got.tolist() == labels[order[list(sampler)]].tolist()
        seen.append(got)
    assert sorted(np.concatenate(seen).tolist()) == sorted(labels[order].tolist())
    assert not (np.concatenate(seen) // 1000 == 2).any()  # weight 0


def _ranks(mix, make_sampler, seeds=(0, 0), epoch=None) -> list[np.ndarray]:
    """Each of 2 ranks' labels from ringloader.DataLoader with the
    sampler make_sampler(rank), torch seeded with seeds[rank] (the
    loader's seed); ``epoch``: given to the sampler alone."""
    out = []
    for rank in range(2):
        torch.manual_seed(seeds[rank])
        sampler = make_sampler(rank)
        if epoch is not None:
            sampler.set_epoch(epoch)
        out.append(_labels(ringloader.DataLoader(mix, batch_size=5, sampler=sampler)))
    return out


def test_ranks_seeding_torch_apart_draw_one_epoch(sources):
    """Ranks that seed torch with seed + rank (timm's train.py,
    Accelerate's set_seed(device_specific=True)) give ringloader.DataLoader
    different seeds; the Mix draws with its own (Mix(seed=)), so the ranks
    split one epoch's draws, those torch's DataLoader reads. Before, each
    rank drew the epoch of its own seed: 39 of 40 draws not the epoch's."""
    from torch.utils.data import DistributedSampler

    mix = ringloader.Mix(sources, samples_per_epoch=40, transform=TINY, seed=9)
    labels = np.concatenate([s.targets for s in sources])
    want = labels[mix.ringloader_order(9, 0)]
    plain = ringloader.Mix(sources, samples_per_epoch=40, seed=9)  # as torch's
    torch_reads = np.array([plain[i][1] for i in range(40)])
    assert want.tolist() == torch_reads.tolist()

    def sampler(rank):
        return DistributedSampler(mix, num_replicas=2, rank=rank, seed=4)

    got = _ranks(mix, sampler, seeds=(100, 101))
    where = [list(sampler(rank)) for rank in range(2)]
    wrong = sum(int((got[r] != want[where[r]]).sum()) for r in range(2))
    assert wrong == 0, f"{wrong} of 40 draws not the epoch's"
    # Another Mix seed, other draws.
    other = ringloader.Mix(sources, samples_per_epoch=40, transform=TINY, seed=10)
    assert _ranks(other, sampler, seeds=(100, 101))[0].tolist() != got[0].tolist()


def test_a_samplers_epoch_picks_the_draws(sources):
    """A fresh loader where only the sampler's set_epoch(3) is called (a
    script restarted at epoch 3): the Mix draws epoch 3 at the sampler's
    epoch-3 positions, as torch's DataLoader does after mix.set_epoch(3);
    the loader's state_dict mid-epoch resumes them in a new loader whose
    sampler nobody set. Before, it read epoch 0's draws: 40 of 40 not
    epoch 3's."""
    from torch.utils.data import DistributedSampler

    mix = ringloader.Mix(sources, samples_per_epoch=40, transform=TINY)
    labels = np.concatenate([s.targets for s in sources])
    want = labels[mix.ringloader_order(0, 3)]

    def sampler(rank):
        return DistributedSampler(mix, num_replicas=2, rank=rank, seed=4)

    got = _ranks(mix, sampler, epoch=3)
    wrong = 0
    for rank in range(2):
        s = sampler(rank)
        s.set_epoch(3)
        wrong += int((got[rank] != want[list(s)]).sum())
    assert wrong == 0, f"{wrong} of 40 draws not epoch 3's"
    s = sampler(0)
    s.set_epoch(3)
    first = ringloader.DataLoader(mix, batch_size=5, sampler=s)
    it = iter(first)
    head = [next(it)[1] for _ in range(2)]
    state = first.state_dict()
    first.close()
    resumed = ringloader.DataLoader(mix, batch_size=5, sampler=sampler(0))
    resumed.load_state_dict(state)
    rest = _labels(resumed)
    assert torch.cat(head).tolist() + rest.tolist() == got[0].tolist()
    # Loader.set_epoch(2) reaches the sampler a batch sampler batches: its
    # positions and the Mix's draws are epoch 2's.
    s = sampler(1)
    batches = torch.utils.data.BatchSampler(s, 5, drop_last=False)
    loader = ringloader.Loader(mix, batch_sampler=batches, num_threads=2)
    loader.set_epoch(2)
    assert s.epoch == 2
    want = labels[mix.ringloader_order(0, 2)][list(s)]
    assert _labels(loader).tolist() == want.tolist()


def _shard(path, start: int, n: int) -> None:
    with tarfile.open(path, "w") as tf:
        for i in range(start, start + n):
            for name, body in (
                (f"k{i:04d}.jpg", jpeg_bytes("baseline", 24, 30, seed=i)),
                (f"k{i:04d}.cls", str(i).encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))


def test_resampled_shards(tmp_path):
    """open_clip's resampled mode: epochs of a chosen length drawn with
    replacement from shards, each epoch its own draws, in one pipeline."""
    for s in range(3):
        _shard(tmp_path / f"train-{s}.tar", s * 10, 10)
    shards = ringloader.TarShards(str(tmp_path / "train-{0..2}.tar"), transform=TINY)
    mix = ringloader.Mix([shards], samples_per_epoch=64)
    loader = ringloader.Loader(mix, batch_size=16, num_threads=2)
    epochs = [_labels(loader) for _ in range(2)]  # epoch 0, then epoch 1
    for labels in epochs:
        assert len(labels) == 64 and set(labels.tolist()) <= set(range(30))
        assert len(set(labels.tolist())) < 64  # with replacement: repeats
    assert epochs[0].tolist() != epochs[1].tolist()
    # The images are the shards' own: a draw's pixels are its sample's.
    plain = ringloader.Loader(shards, batch_size=30, num_threads=2)
    ((ref, ref_labels),) = list(plain)
    plain.close()
    loader.set_epoch(0)
    x, y = next(iter(loader))
    for img, label in zip(x, y.tolist()):
        assert torch.equal(img, ref[ref_labels.tolist().index(label)])
    loader.close()


def test_remote_sources_share_one_pipeline(tmp_path):
    """Two sets of shards served by nginx, mixed: one C source fetches
    both (range GETs to each), and the batches are the local Mix's."""
    from rlbench.servers import Nginx, find_nginx

    if find_nginx() is None:
        pytest.fail("nginx is missing: apt-get install nginx (CI installs it)")
    for name, start in (("a", 0), ("b", 100)):
        (tmp_path / name).mkdir()
        for s in range(2):
            _shard(tmp_path / name / f"{s}.tar", start + s * 8, 8)
    local = [
        ringloader.TarShards(str(tmp_path / n / "{0..1}.tar"), transform=TINY)
        for n in "ab"
    ]
    with Nginx(tmp_path, access_log=True) as server:
        remote = [
            ringloader.TarShards(
                f"{server.url}/{n}/{{0..1}}.tar", transform=TINY, cache_dir=tmp_path
            )
            for n in "ab"
        ]
        mixes = [
            ringloader.Mix(ds, [0.75, 0.25], samples_per_epoch=48)
            for ds in (local, remote)
        ]
        server.clear_requests()
        runs_loader = ringloader.Loader(
            mixes[1], batch_size=16, num_threads=2, shuffle="runs"
        )
        assert len(_run(runs_loader)) == 3
        # Runs of 16 wrap in 16-sample sources: at most two GETs a run.
        in_runs = [r for r in server.requests() if r[0] == "GET" and r[3]]
        assert len(in_runs) <= 6
        runs = []
        server.clear_requests()
        for mix in mixes:
            loader = ringloader.Loader(mix, batch_size=12, num_threads=2, seed=4)
            runs.append([(x.clone(), y.clone()) for x, y in loader])
            requests = loader.stats()["http_requests"]
            loader.close()
        assert_same(runs[0], runs[1])
        # A GET per sample at most (batches' neighbours share one), to
        # both sets of shards, from the one pipeline.
        assert 4 <= requests <= 48
        ranged = [r for r in server.requests() if r[0] == "GET" and r[3]]
        assert len(ranged) == requests
        assert {r[1].split("/")[1] for r in ranged} == {"a", "b"}
    labels = torch.cat([y for _, y in runs[1]]).numpy()
    assert np.bincount(labels >= 100).tolist() == [36, 12]


def test_runs_of_neighbours_for_remote_shards(sources, tmp_path):
    """shuffle="runs": a Mix draws runs of 16 neighbours of one source
    (a shard's neighbours come in one range GET), the shares still the
    weights', each rank a contiguous part of the draws."""
    mix = ringloader.Mix(sources, [0.5, 0.3, 0.2], samples_per_epoch=20_000)
    loader = ringloader.Loader(
        mix, batch_size=500, transform=TINY, num_threads=2, shuffle="runs"
    )
    labels = _labels(loader)
    counts = np.bincount(labels // 1000, minlength=3)
    assert chisquare(counts, np.array([0.5, 0.3, 0.2]) * 20_000).pvalue > 0.01
    runs = labels.reshape(-1, 16)
    assert (runs // 1000 == runs[:, :1] // 1000).all()  # one source a run
    step = np.diff(runs % 1000, axis=1)
    sizes = np.array(SIZES)[runs[:, :1] // 1000]
    assert ((step == 1) | (step == 1 - sizes)).all()  # neighbours (wrapping)
    order = mix.ringloader_order(0, 0, 16)
    ids = np.concatenate([s.targets for s in sources])
    for rank in range(2):
        loader = ringloader.Loader(
            mix,
            batch_size=500,
            transform=TINY,
            num_threads=2,
            shuffle="runs",
            distributed=True,
            rank=rank,
            world_size=2,
        )
        part = _labels(loader)
        assert part.tolist() == ids[order[rank * 10_000 : (rank + 1) * 10_000]].tolist()


def test_refusals(sources, tmp_path, folder):
    with pytest.raises(ValueError, match="one weight per dataset"):
        ringloader.Mix(sources, [1, 2])
    with pytest.raises(ValueError, match="weights must be"):
        ringloader.Mix(sources, [1, -1, 1])
    with pytest.raises(ValueError, match="samples_per_epoch"):
        ringloader.Mix(sources, samples_per_epoch=0)
    with pytest.raises(ValueError, match="another Mix"):
        ringloader.Mix([ringloader.Mix(sources), sources[0]])
    remote = ringloader.FileList(["http://127.0.0.1:9/a.jpg"], [0])
    with pytest.raises(ValueError, match=r"datasets \[0\] are local.*\[1\] are remote"):
        ringloader.Mix([sources[0], remote])
    a = ringloader.ImageFolder(folder, transform=TINY)
    b = ringloader.ImageFolder(folder, transform=TRAIN)
    with pytest.raises(ValueError, match=r"different transforms.*Mix\(transform="):
        ringloader.Mix([a, b])
    mixed = ringloader.Mix([a, b], transform=TINY)  # one transform given
    assert len(_labels(ringloader.Loader(mixed, batch_size=6, num_threads=2))) == 36
    # Indexing a Mix gives draw i's sample, with the Mix's own transform.
    from torchvision import transforms as TV

    small = TV.Compose([TV.Resize(8), TV.CenterCrop(8), TV.PILToTensor()])
    mixed = ringloader.Mix([a, b], target_transform=lambda t: t + 10, transform=small)
    mixed.set_epoch(3)
    image, target = mixed[5]
    ident = int(mixed.ringloader_order(0, 3)[5])
    assert image.shape == (3, 8, 8) and target == a.targets[ident % 18] + 10
    subset = torch.utils.data.Subset(ringloader.Mix(sources), [0, 1])
    with pytest.raises(TypeError, match="cannot be part of a Subset"):
        ringloader.Loader(subset, batch_size=2)


# ---- on_error="skip": a failed draw is replaced within its own source ----


@pytest.fixture(scope="module")
def one_bad(tmp_path_factory):
    """Sources A and B of ten JPEGs each (labels 0..9 and 1000..1009), A's
    last file unreadable, and Z, two JPEGs (2000, 2001) for a weight 0."""
    root = tmp_path_factory.mktemp("mix_bad")

    def files(name, n, label, bad=-1):
        paths = write_jpegs(root, name, n, seed=label, bad=bad)
        return ringloader.FileList(paths, label + np.arange(n))

    return files("a", 10, 0, bad=9), files("b", 10, 1000), files("z", 2, 2000)


FIXED = T.Compose([T.Resize((12, 10))])  # no randomness: pixels tell a sample


def _within_a(mix, epoch):
    """The labels of the epoch's draws, A's bad sample 9 replaced as it is
    within A: by A's first (the next of A, wrapping)."""
    table = np.concatenate([d.targets for d in mix.datasets])
    labels = table[mix.ringloader_order(mix.seed, epoch)]
    return np.where(labels == 9, 0, labels)


def test_skip_replaces_a_draw_within_its_source(one_bad):
    """The issue's experiment: A and B at 0.5/0.5, 400 draws, one
    unreadable file among A's ten. Each source's share is exactly its
    weight's, as if the bad file were replaced within A; the replacement
    is A's sample, label and pixels. Before, the bad file, A's last, was
    replaced by the table's next id, B's first: A 183, B 217."""
    a, b, _ = one_bad
    mix = ringloader.Mix([a, b], [0.5, 0.5], samples_per_epoch=400)
    loader = ringloader.Loader(
        mix, batch_size=40, transform=FIXED, num_threads=2, on_error="skip"
    )
    out = [(x.clone(), y) for x, y in loader]
    skipped = loader.stats()["skipped"]
    loader.close()
    images = torch.cat([x for x, _ in out])
    labels = torch.cat([y for _, y in out]).numpy()
    assert np.bincount(labels // 1000).tolist() == [200, 200]
    want = _within_a(mix, 0)
    assert labels.tolist() == want.tolist()
    order = mix.ringloader_order(mix.seed, 0)
    bad = np.flatnonzero(order == 9)
    assert len(bad) > 0 and skipped == len(bad)
    first = np.flatnonzero(order == 0)[0]  # a draw of A's first itself
    for pos in bad:
        assert torch.equal(images[pos], images[first])


def test_skip_never_reaches_a_weight_0_source(one_bad):
    """Z, weight 0, follows A in the table: A's last is replaced within A,
    never by Z's first. Before, Z's first came in A's place."""
    a, b, z = one_bad
    mix = ringloader.Mix([a, z, b], [0.5, 0.0, 0.5], samples_per_epoch=400)
    labels = _labels(
        ringloader.Loader(
            mix, batch_size=40, transform=FIXED, num_threads=2, on_error="skip"
        )
    )
    assert not (labels // 1000 == 2).any()
    assert labels.tolist() == _within_a(mix, 0).tolist()


def test_skip_within_a_source_is_alike_with_any_threads_and_rank(one_bad):
    """Replacements are a function of the data: 1, 2 and 3 threads give the
    same batches, and each DDP rank (distributed=True over the draws)
    gets exactly its positions of the one-process epoch, replacements
    included, so ranks replace alike (2-process runs: test_mix_ddp.py)."""
    a, b, _ = one_bad
    mix = ringloader.Mix([a, b], [0.5, 0.5], samples_per_epoch=120)

    def read(threads, **kw):
        loader = ringloader.Loader(
            mix,
            batch_size=12,
            transform=TRAIN,
            num_threads=threads,
            seed=4,
            on_error="skip",
            **kw,
        )
        loader.set_epoch(1)
        out = _run(loader)
        return torch.cat([x for x, _ in out]), torch.cat([y for _, y in out])

    images, labels = read(1)
    assert labels.tolist() == _within_a(mix, 1).tolist()
    for threads in (2, 3):
        x, y = read(threads)
        assert torch.equal(y, labels) and torch.equal(x, images)
    for rank in range(2):
        x, y = read(2, shuffle=True, distributed=True, rank=rank, world_size=2)
        where = rank_positions(120, 4, 1, rank, 2)
        assert torch.equal(y, labels[where]) and torch.equal(x, images[where])
