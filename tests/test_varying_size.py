"""Images of varying sizes through the C pipeline: a transform without a
crop (torchvision's detection presets: flips and conversions alone, or a
shorter-side Resize) gives each sample its own size, placed in its batch's
arena (core/pipeline.h's arena_bytes, its bound exact) or, past it, in a
buffer of its own (counted in stats()["past_arena"]), and yielded as a
list of (C, h_i, w_i) tensors."""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import ringloader
from ringloader import _core
from ringloader._plan import plan_transform
from ringloader.errors import DataWarning, FallbackWarning, UnsupportedTransform
from ringloader.transforms import MultiView, compile_transform

from conftest import thread_count
from images import jpeg_bytes, psnr, write_png_jpeg

tv = pytest.importorskip("torchvision.transforms")
v2 = pytest.importorskip("torchvision.transforms.v2")

SEED = 5
# (h, w) of each file: many sizes, portrait and landscape, one large
SIZES = [(30, 40), (50, 20), (64, 64), (17, 33), (120, 90), (41, 77), (9, 13)]
SIZES += [(260, 300), (33, 35), (70, 21), (48, 48), (25, 60)]

HFLIP = v2.Compose(
    [v2.ToImage(), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)]
)
HFLIP_V1 = tv.Compose([tv.RandomHorizontalFlip(), tv.ToTensor()])
SHORT = tv.Compose([tv.Resize(24), tv.PILToTensor()])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """PNGs (decoded exactly) and JPEGs, one of each size in turn."""
    return write_png_jpeg(tmp_path_factory.mktemp("varying"), SIZES)


def file_list(paths, transform):
    return ringloader.FileList(paths, list(range(len(paths))), transform=transform)


def decoded(path) -> torch.Tensor:
    """The file's pixels as PIL decodes them, (3, h, w) uint8."""
    rgb = np.asarray(Image.open(path).convert("RGB"))
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1)


def flipped(transform, w, h, key) -> bool:
    """The flip the loader's plan draws for sample key of epoch 0."""
    spec = compile_transform(transform, varying=True).spec
    return bool(_core.plan(spec, w, h, SEED, 0, key)[4])


def load(paths, transform, **kw):
    """Every batch of one epoch: (images, labels) each."""
    kw.setdefault("batch_size", 5)
    kw.setdefault("num_threads", 2)
    with ringloader.Loader(file_list(paths, transform), seed=SEED, **kw) as ld:
        return list(ld)


def flat(batches):
    return [im for images, _ in batches for im in images]


# ---- the compiler ----


@pytest.mark.parametrize("transform", [HFLIP, HFLIP_V1, SHORT, None])
def test_no_crop_compiles_to_a_varying_spec(transform):
    spec = compile_transform(transform, varying=True).spec
    assert spec["varying"] == 1 and "out_h" not in spec
    # Without a caller that takes varying sizes it is refused, as before.
    with pytest.raises(UnsupportedTransform):
        compile_transform(transform)


@pytest.mark.parametrize(
    "transform",
    [
        tv.Compose([tv.Resize(256), tv.CenterCrop(224), tv.ToTensor()]),
        tv.Compose([tv.RandomResizedCrop(32), tv.RandomHorizontalFlip()]),
        tv.Compose([tv.Resize((40, 50)), tv.RandomVerticalFlip(), tv.ToTensor()]),
        v2.Compose([v2.RandomCrop(24, padding=4), v2.ToImage()]),
    ],
)
def test_fixed_sizes_compile_as_before(transform):
    fixed = compile_transform(transform)
    taken = compile_transform(transform, varying=True)
    assert taken.spec == fixed.spec and "varying" not in taken.spec
    assert (taken.dtype, taken.mul, taken.add) == (fixed.dtype, fixed.mul, fixed.add)


@pytest.mark.parametrize(
    "transform, why",
    [
        # ops draw on each sample's size (test_varying_ops.py), but a
        # policy's magnitudes are pixels of one size
        (tv.Compose([tv.Resize(64), tv.RandAugment()]), "depend on the image size"),
        (v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(), v2.Resize(8)]), "after"),
        (tv.Compose([tv.RandomHorizontalFlip(), tv.Resize(8)]), "not fused after"),
        (tv.Compose([tv.ToTensor(), tv.Lambda(lambda x: x)]), "fused only whole"),
    ],
)
def test_what_needs_one_size_still_refuses(transform, why):
    with pytest.raises(UnsupportedTransform, match=why):
        compile_transform(transform, varying=True)


def test_multiview_refuses_varying_sizes_and_a_device_takes_them():
    with pytest.raises(UnsupportedTransform, match="varying sizes"):
        ringloader.Loader(file_list(["x"], None), transform=MultiView(tv.Resize(8)))
    # On the GPU path each sample is its own region of the device buffer
    # (tests/test_detect_gpu.py runs it on the fake CUDA runtime).
    plan = plan_transform(HFLIP, "NCHW", cuda=True, stacklevel=1, varying=True)
    assert plan.compiled.spec["varying"] == 1 and not plan.tail


def test_core_refuses_a_varying_view_beside_another():
    spec = {"kind": "resize_crop", "varying": 1}
    fixed = tv.Compose([tv.Resize((8, 8)), tv.RandomInvert()])
    fixed = compile_transform(fixed).spec
    ops = dict(spec, ops=fixed["ops"])
    for views in ([spec, fixed], [ops, ops]):
        views = [(v, "uint8", None, None, "NCHW") for v in views]
        with pytest.raises(ValueError, match="a varying output size is one view"):
            _core.Pipeline(views, paths=["x"])
    # one varying view with ops is taken (test_varying_ops.py)
    _core.Pipeline([(ops, "uint8", None, None, "NCHW")], paths=["x"]).close()
    with pytest.raises(ValueError, match="varying"):
        _core.Pipeline(dict(spec, out_h=8, out_w=8), paths=["x"])


def test_flip_is_a_fair_draw_per_sample():
    from scipy import stats

    spec = compile_transform(HFLIP, varying=True).spec
    n = 20000
    flips = sum(bool(_core.plan(spec, 40, 30, SEED, 0, k)[4]) for k in range(n))
    assert stats.binomtest(flips, n, 0.5).pvalue > 0.01


# ---- the loader ----


def test_sizes_and_pixels_are_the_files_with_the_plans_flip(files):
    batches = load(files, HFLIP, batch_size=5)
    assert [len(images) for images, _ in batches] == [5, 5, 2]
    labels = torch.cat([labels for _, labels in batches])
    assert labels.tolist() == list(range(len(files)))
    seen = set()
    for i, (path, im) in enumerate(zip(files, flat(batches))):
        ref = decoded(path)
        assert im.shape == ref.shape and im.dtype == torch.float32
        flip = flipped(HFLIP, ref.shape[2], ref.shape[1], i)
        seen.add(flip)
        ref = v2.ToDtype(torch.float32, scale=True)(ref.flip(-1) if flip else ref)
        # PNGs exactly; JPEGs within 1 LSB (libjpeg's build against PIL's)
        tol = 0 if path.endswith(".png") else 1 / 255 + 1e-6
        assert (im - ref).abs().max().item() <= tol, (i, path)
    assert seen == {True, False}


def test_v1_flip_and_to_tensor(files):
    images = flat(load(files, HFLIP_V1, batch_size=4))
    for i, (path, im) in enumerate(zip(files, images)):
        ref = decoded(path)
        if flipped(HFLIP_V1, ref.shape[2], ref.shape[1], i):
            ref = ref.flip(-1)
        want = tv.ToTensor()(Image.fromarray(ref.permute(1, 2, 0).numpy()))
        tol = 1e-6 if path.endswith(".png") else 1 / 255 + 1e-6
        assert (im - want).abs().max().item() <= tol, path


def test_shorter_side_resize_sizes_and_pixels(files):
    images = flat(load(files, SHORT, batch_size=6))
    for path, im in zip(files, images):
        want = SHORT(Image.open(path).convert("RGB"))
        assert im.shape == want.shape and im.dtype == torch.uint8
        # bilinear: within 1 LSB of Pillow's (the fidelity tests' bound)
        diff = (im.int() - want.int()).abs().max().item()
        assert diff <= 1, (path, diff)


def test_large_downscale_keeps_the_fidelity_promise(tmp_path):
    path = tmp_path / "big.jpg"
    path.write_bytes(jpeg_bytes("baseline", 900, 1300, seed=2))
    t = tv.Compose([tv.Resize(200), tv.PILToTensor()])  # DCT-scaled: 4.5x
    ((images, _),) = load([str(path)], t, batch_size=1)
    want = t(Image.open(path).convert("RGB"))
    assert images[0].shape == want.shape == (3, 200, 288)
    assert psnr(images[0].numpy(), want.numpy()) >= 35


def test_threads_layouts_and_tiny_arena_give_the_same_images(files):
    base = flat(load(files, HFLIP, num_threads=1))
    # An arena too small for most samples (one is 260x300 float32, 936 kB):
    # those get buffers of their own, the same bytes.
    for kw in (dict(num_threads=2), dict(arena_bytes=20000, num_threads=2)):
        other = flat(load(files, HFLIP, **kw))
        assert all(torch.equal(a, b) for a, b in zip(base, other)), kw
    nhwc = flat(load(files, HFLIP, layout="NHWC"))
    assert all(torch.equal(a, b.permute(2, 0, 1)) for a, b in zip(base, nhwc))
    last = flat(load(files, HFLIP, layout="channels_last"))
    assert all(torch.equal(a, b) for a, b in zip(base, last))


def test_one_sample_larger_than_the_arena(files):
    big = files[7]  # 260 x 300
    paths = [files[0], big, files[1]]
    ((images, labels),) = load(paths, SHORT, batch_size=3, arena_bytes=1)
    assert labels.tolist() == [0, 1, 2]
    for path, im in zip(paths, images):
        assert torch.equal(im, flat(load([path], SHORT, batch_size=1))[0])


def test_images_outlive_the_loader(files):
    loader = ringloader.Loader(file_list(files, SHORT), batch_size=4, seed=SEED)
    images, _ = next(iter(loader))
    copies = [im.clone() for im in images]
    loader.close()
    del loader
    gc.collect()
    for _ in range(3):  # memory freed meanwhile would be reused here
        load(files, SHORT, batch_size=4)
    assert all(torch.equal(a, b) for a, b in zip(images, copies))


# ---- the arena's bound ----

UINT8 = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip()])  # the file's size
# files[0] twice: 30x40 uint8, 3600 bytes each, the second at 3648 (64-byte
# aligned). Both fit in 7248 bytes; in 7247 the second does not, though the
# slot under the arena is rounded up to pages (8192 bytes).
BOUNDS = [(7248, 0), (7247, 1), (3600, 1), (3599, 2)]


def test_the_arena_ends_at_arena_bytes(files):
    paths = [files[0], files[0]]
    want = flat(load(paths, UINT8, batch_size=2))
    for arena, past in BOUNDS:
        loader = ringloader.Loader(
            file_list(paths, UINT8), batch_size=2, seed=SEED, arena_bytes=arena
        )
        with loader:
            ((images, _),) = list(loader)
            assert loader.stats()["past_arena"] == past, arena
        assert all(torch.equal(a, b) for a, b in zip(want, images)), arena


def test_past_arena_counts_the_samples_past_it(files):
    for kw, past in ((dict(), 0), (dict(arena_bytes=1), len(files))):
        loader = ringloader.Loader(
            file_list(files, HFLIP), batch_size=5, seed=SEED, num_threads=2, **kw
        )
        with loader:
            assert len(flat(loader)) == len(files)
            assert loader.stats()["past_arena"] == past, kw
            assert len(flat(loader)) == len(files)  # counted every epoch
            assert loader.stats()["past_arena"] == 2 * past, kw


BOUNDS_ON_A_DEVICE = """
import gc, sys, torch, ringloader
from torchvision.transforms import v2
sys.path.insert(0, "cuda")
import fake_gpu
fake_gpu.install()
paths = sys.argv[1:]
t = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip()])
out = {}
for arena in (7248, 7247):
    def loader(**kw):
        files = ringloader.FileList(paths, [0, 1], transform=t)
        return ringloader.Loader(files, batch_size=2, seed=5, arena_bytes=arena, **kw)
    with loader() as ld:
        ((host, _),) = list(ld)
    with loader(device="cuda") as ld:
        ((gpu, _),) = list(ld)
        ld._gpu.synchronize()
        same = all(torch.equal(a, b) for a, b in zip(host, gpu))
        out[arena] = [ld.stats()["past_arena"], same]
    del gpu
gc.collect()
fake_gpu.report(out=out)
"""


def test_on_a_device_the_arena_copy_stays_in_its_buffer(files, tmp_path):
    """On a device the arena's reserved bytes are copied into a buffer of
    arena_bytes (fake CUDA runtime, tests/cuda): a sample the page-rounded
    slot had room for but arena_bytes has not goes through the spill
    buffer, and no copy reaches past the arena's buffer."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda"))
    import fake_gpu

    fake = fake_gpu.build(str(tmp_path / "fake_cudart.so"))
    r = fake_gpu.run_script(
        fake, BOUNDS_ON_A_DEVICE, [files[0], files[0]], FAKE_CUDA_ALLOW_PAGEABLE=1
    )
    assert r["violations"] == 0, r
    assert r["out"] == {"7248": [0, True], "7247": [1, True]}, r
    assert r["host"] == r["dev"] == r["events"] == 0, r


# ---- errors ----


@pytest.fixture()
def with_bad(files, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")
    return files[:3] + [str(bad)] + files[3:6]


def test_skip_keeps_the_batchs_length(with_bad, files):
    with pytest.warns(DataWarning, match="bad.jpg"):
        batches = load(with_bad, HFLIP, batch_size=4, on_error="skip")
    assert [len(images) for images, _ in batches] == [4, 3]
    images, labels = batches[0]
    # the failed sample is replaced by the next one of the list
    assert labels.tolist() == [0, 1, 2, 4]
    assert images[3].shape == decoded(with_bad[4]).shape


def test_raise_names_the_file_and_the_loader_goes_on(with_bad):
    loader = ringloader.Loader(
        file_list(with_bad, HFLIP), batch_size=4, seed=SEED, num_threads=2
    )
    with pytest.raises(ringloader.DecodeError, match="bad.jpg"):
        list(loader)
    loader.close()
    good = ringloader.Loader(
        file_list(with_bad[:3], HFLIP), batch_size=4, seed=SEED, num_threads=2
    )
    assert [len(im) for im, _ in good] == [3]
    good.close()


# ---- lifecycle and resume ----


def test_close_mid_epoch_releases_everything(files):
    load(files, HFLIP)  # lazily made process-wide state first
    gc.collect()
    base = (thread_count(), len(os.listdir("/proc/self/fd")))
    loader = ringloader.Loader(
        file_list(files * 4, HFLIP), batch_size=3, num_threads=3, prefetch=4
    )
    it = iter(loader)
    kept = next(it)
    assert thread_count() > base[0]
    loader.close()
    del it, loader
    gc.collect()
    assert (thread_count(), len(os.listdir("/proc/self/fd"))) == base
    assert len(kept[0]) == 3 and kept[0][0].shape == decoded(files[0]).shape


def test_resume_mid_epoch_is_exact(files):
    kw = dict(batch_size=3, shuffle=True, seed=SEED, num_threads=2)
    whole = list(ringloader.Loader(file_list(files, HFLIP), **kw))
    first = ringloader.Loader(file_list(files, HFLIP), **kw)
    it = iter(first)
    next(it)
    next(it)
    state = first.state_dict()
    first.close()
    again = ringloader.Loader(file_list(files, HFLIP), **kw)
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == len(whole) - 2
    for (a, la), (b, lb) in zip(whole[2:], rest):
        assert torch.equal(la, lb)
        assert all(torch.equal(x, y) for x, y in zip(a, b))


# ---- the front door ----


def test_dataloader_with_a_collate_fn_matches_torch(files):
    # p=1: both flip every image, so torch's draws need not match ours
    t = v2.Compose(
        [
            v2.ToImage(),
            v2.RandomHorizontalFlip(1.0),
            v2.ToDtype(torch.float32, scale=True),
        ]
    )

    def collate(batch):
        return tuple(zip(*batch))

    pngs = files[::2]
    ours = ringloader.DataLoader(
        file_list(pngs, t), batch_size=4, collate_fn=collate, num_workers=2
    )
    assert isinstance(ours, ringloader.DataLoader)
    theirs = torch.utils.data.DataLoader(
        TorchFiles(pngs, t), batch_size=4, collate_fn=collate
    )
    got, want = list(ours), list(theirs)
    assert len(got) == len(want) == 2
    for (ga, gl), (wa, wl) in zip(got, want):
        assert tuple(gl) == tuple(wl)
        assert all(torch.equal(a, b) for a, b in zip(ga, wa))


class TorchFiles(torch.utils.data.Dataset):
    def __init__(self, paths, transform):
        self.paths, self.transform = paths, transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.transform(Image.open(self.paths[i]).convert("RGB")), i


def test_dataloader_without_a_collate_fn_falls_back(files):
    with pytest.warns(FallbackWarning, match="varying sizes"):
        dl = ringloader.DataLoader(file_list(files, HFLIP), batch_size=2)
    assert not isinstance(dl, ringloader.DataLoader)


def test_concat_of_datasets_with_equal_transforms(files):
    def hflip():  # a new Compose per dataset, as a recipe builds them
        return v2.Compose(
            [v2.ToImage(), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32)]
        )

    a = ringloader.FileList(files[:4], [0, 1, 2, 3], transform=hflip())
    b = ringloader.FileList(files[4:6], [4, 5], transform=hflip())
    data = torch.utils.data.ConcatDataset([a, b])
    with ringloader.Loader(data, batch_size=6, seed=SEED) as loader:
        ((images, labels),) = list(loader)
    assert labels.tolist() == list(range(6))
    assert [im.shape for im in images] == [decoded(p).shape for p in files[:6]]


def test_placing_on_a_gpu_leaves_varying_sizes_on_the_host(files, monkeypatch):
    # Accelerate's prepare() places a ringloader.DataLoader on its device
    # (_frameworks.py): images of varying sizes stay host lists, which its
    # send_to_device moves; the loader is not left half-changed.
    import ringloader.dataloader as dl_module

    monkeypatch.setattr(dl_module, "open_gpu", lambda device: object())
    dl = ringloader.DataLoader(
        file_list(files[:4], SHORT), batch_size=2, collate_fn=lambda b: tuple(zip(*b))
    )
    assert isinstance(dl, ringloader.DataLoader)
    assert dl._place_on("cuda:0") is False
    assert dl.device.type == "cpu" and dl._gpu is None
    images, labels = next(iter(dl))
    assert labels == (0, 1)
    assert [im.shape[0] for im in images] == [3, 3]
    assert all(im.device.type == "cpu" and 24 in im.shape[1:] for im in images)


def test_a_refused_placement_leaves_the_loader_as_it_was(files, monkeypatch):
    import ringloader.dataloader as dl_module

    monkeypatch.setattr(dl_module, "open_gpu", lambda device: object())
    t = tv.Compose([tv.Resize((16, 16)), tv.ToTensor(), tv.RandomErasing(1.0)])
    dl = ringloader.DataLoader(file_list(files[:4], t), batch_size=2)
    assert isinstance(dl, ringloader.DataLoader)
    with pytest.raises(ValueError, match="RandomErasing"):
        dl._place_on("cuda:0")
    assert dl.device.type == "cpu" and dl._gpu is None
    images, labels = next(iter(dl))
    assert images.shape == (2, 3, 16, 16) and images.device.type == "cpu"


@pytest.mark.parametrize("transform", [None, tv.Resize(24)])
def test_pil_images_of_varying_sizes_are_told_to_end_in_tensors(files, transform):
    with pytest.warns(FallbackWarning, match=r"end the transform with PILToTensor"):
        dl = ringloader.DataLoader(file_list(files[:2], transform), batch_size=2)
    assert not isinstance(dl, ringloader.DataLoader)
    with pytest.warns(FallbackWarning, match=r"ends in a PIL image \(end the trans"):
        ringloader.DataLoader(
            file_list(files[:2], transform), batch_size=2, collate_fn=list
        )


@pytest.mark.parametrize(
    "value, error",
    [
        (True, TypeError),
        (1.5, TypeError),
        ("64", TypeError),
        (0, ValueError),
        (-1, ValueError),
        (2**40 + 1, ValueError),
        (2**64 + 5, ValueError),  # would wrap to 5
    ],
)
def test_arena_bytes_out_of_range_is_refused_by_name(files, value, error):
    with pytest.raises(error, match="arena_bytes"):
        ringloader.Loader(file_list(files[:1], SHORT), arena_bytes=value)
    spec = {"kind": "resize_crop", "varying": 1}
    if value is True or value != 0:  # (0: the core's default)
        with pytest.raises(error, match="arena_bytes"):
            _core.Pipeline(spec, paths=files[:1], arena_bytes=value)


def test_arena_bytes_at_the_bounds_is_taken(files):
    for value in (2**40, np.int64(64)):
        with ringloader.Loader(file_list(files[:1], SHORT), arena_bytes=value) as ld:
            assert ld.arena_bytes == value and type(ld.arena_bytes) is int
    assert len(load(files[:3], SHORT, arena_bytes=1)[0][0]) == 3


def test_a_varying_batch_exports_only_its_samples(files):
    pipe = _core.Pipeline({"kind": "resize_crop", "varying": 1}, paths=files[:3])
    pipe.submit(np.arange(3, dtype=np.int64), np.arange(3, dtype=np.int64), 0)
    batch = pipe.next()
    with pytest.raises(BufferError, match="varying sizes.*samples"):
        torch.from_dlpack(batch)
    with pytest.raises(BufferError, match="varying sizes.*samples"):
        memoryview(batch)
    got = [torch.from_dlpack(s) for s in batch.samples]
    assert [tuple(t.shape) for t in got] == [(3, h, w) for h, w in SIZES[:3]]
    assert torch.equal(got[0], decoded(files[0]))  # a PNG: exact
    del batch, got
    pipe.close()
