"""Several views of one decoded image (ringloader.transforms.MultiView).

- each view equals torchvision's output for that view given the same
  parameters (its box and flip from ``_core.plan(..., view)``, its ops'
  draws from ``_core.augment_draw(..., view)``), within the README's
  tolerances: 1 LSB where no DCT scale applies, 35 dB where one does;
- one read and one decode per sample, whatever the number of views;
- each view's randomness is its own, view 0's that of a one-view loader;
- bit-identical across thread counts and I/O backends; exact resume;
- a view ringloader cannot fuse finishes in Python, said with its view;
  a multi-crop class that is not a MultiView falls back to torch's
  DataLoader, said why: never silently different;
- the same MultiView under torch's DataLoader gives the same structure;
- on the device path (the fake CUDA runtime) each view is a device tensor
  equal to the host path's.
"""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch
from PIL import Image
from torchvision import datasets as tvd
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import ringloader
from ringloader import _core
from ringloader.transforms import MultiView, compile_views

import rounding
from images import psnr, write_folder

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "cuda"))
from test_cuda_fake import data, fake, run  # noqa: E402,F401  (fixtures)

SEED = 3
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def global_view(size=64):
    return v2.Compose(
        [
            v2.RandomResizedCrop(size, scale=(0.4, 1.0)),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )


def local_view(size=32, jitter=True):
    ops = [v2.ColorJitter(0.4, 0.4, 0.2, 0.1)] if jitter else []
    return v2.Compose(
        [v2.RandomResizedCrop(size, scale=(0.05, 0.4)), v2.RandomHorizontalFlip()]
        + ops
        + [v2.ToImage()]
    )


def dino(n_local=4):
    return MultiView(global_view(), global_view(), *[local_view()] * n_local)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_folder(str(tmp_path_factory.mktemp("views")), n_per_class=4)


def loader(root, tf, **kw):
    kw.setdefault("seed", SEED)
    kw.setdefault("batch_size", 5)
    return ringloader.Loader(tvd.ImageFolder(root), transform=tf, **kw)


def epoch(ld) -> list[torch.Tensor]:
    """Every view of the first epoch, each concatenated over the batches."""
    with ld:
        batches = [views for views, _ in ld]
    return [torch.cat([b[v] for b in batches]) for v in range(len(batches[0]))]


def test_batches_are_lists_of_views_of_their_own_size_and_dtype(root):
    views = epoch(loader(root, dino(3)))
    assert [tuple(v.shape) for v in views] == [(12, 3, 64, 64)] * 2 + [
        (12, 3, 32, 32)
    ] * 3
    assert [v.dtype for v in views] == [torch.float32] * 2 + [torch.uint8] * 3
    assert all(v.is_contiguous() for v in views)


def test_one_read_and_one_decode_per_sample_whatever_the_views(root):
    for n_local in (0, 8):
        ld = loader(root, dino(n_local))
        with ld:
            for _ in ld:
                pass
            stats = ld.stats()
        files = [p for p, _ in tvd.ImageFolder(root).samples]
        assert stats["samples_decoded"] == stats["decodes"] == len(files)
        assert stats["views"] == len(files) * (2 + n_local)
        assert stats["bytes_read"] == sum(os.path.getsize(p) for p in files)


def geometry_reference(path, spec, key, view):
    """torchvision's crop-then-resize and flip of the box ringloader draws
    for that view of that sample, on the whole decoded image."""
    img = Image.open(path).convert("RGB")
    w, h = img.size
    top, left, ch, cw, flip = _core.plan(spec, w, h, SEED, 0, key, view)
    size = [spec["out_h"], spec["out_w"]]
    out = F.resized_crop(
        F.pil_to_tensor(img),
        int(top),
        int(left),
        int(ch),
        int(cw),
        size,
        antialias=True,
    )
    scale = _core.dct_scale(spec, w, h, SEED, 0, key, view)
    return (F.horizontal_flip(out) if flip else out), scale, (w, h)


def test_each_view_equals_torchvision_given_its_box_and_flip(root):
    """uint8 views of different sizes: 1 LSB where no view needs a DCT
    scale (the decode is the finest any view needs), 35 dB where one
    does; each view's box is its own draw."""
    tf = MultiView(
        v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip()]),
        local_view(24, jitter=False),
    )
    got = epoch(loader(root, tf, layout="NCHW"))
    specs = [c.spec for c in compile_views(tf)]
    files = [p for p, _ in tvd.ImageFolder(root).samples]
    exact = 0
    for key, path in enumerate(files):
        refs = [geometry_reference(path, s, key, v) for v, s in enumerate(specs)]
        finest = max(scale for _, scale, _ in refs)
        for v, (ref, _, _) in enumerate(refs):
            ours = got[v][key]
            if finest == 8:
                exact += 1
                diff = (ours.int() - ref.int()).abs().max().item()
                assert diff <= 1, f"sample {key} view {v}: {diff} LSB"
            else:
                assert psnr(ours.numpy(), ref.numpy()) >= 35, (key, v)
    assert exact > 0


def test_a_view_with_ops_equals_torchvision_with_its_drawn_parameters(root):
    """ColorJitter on view 1 equals torchvision's adjust_* in the order and
    factors view 1 draws, applied to the same view without it (torch's add
    with alpha rounded as ours where a forced SIMD or ATen level makes the
    two differ: rounding.py)."""
    plain = epoch(loader(root, MultiView(global_view(), local_view(jitter=False))))
    ours = epoch(loader(root, MultiView(global_view(), local_view())))
    assert torch.equal(plain[0], ours[0])  # view 0 unchanged by view 1's ops
    ops = compile_views(local_view())[0].spec["ops"]
    fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
    changed = 0
    for key in range(len(plain[1])):
        p = _core.augment_draw(ops, 32, 32, SEED, 0, key, 1)[0]
        assert p != _core.augment_draw(ops, 32, 32, SEED, 0, key, 0)[0]
        ref = plain[1][key]
        with rounding.reference():  # torch's add rounded as ours (rounding.py)
            for fn_id in p[:4]:
                ref = fns[int(fn_id)](ref, p[4 + int(fn_id)])
        diff = (ours[1][key].int() - ref.int()).abs().max().item()
        assert diff <= 1, f"sample {key}: {diff} LSB"
        changed += not torch.equal(ours[1][key], plain[1][key])
    assert changed > 0


def test_view_zero_is_a_one_view_loaders_and_each_view_draws_its_own(root):
    """View 0 draws what a one-view loader draws: the same bytes where the
    other views need no finer DCT scale than it does, 35 dB where they
    do (the decode is the finest any view needs)."""
    tf = local_view(40, jitter=False)
    with loader(root, tf) as ld:
        one = torch.cat([images for images, _ in ld])  # tensors, not lists
    views = epoch(loader(root, MultiView(*[tf] * 3)))
    spec = compile_views(tf)[0].spec
    same_scale = 0
    for key, (path, _) in enumerate(tvd.ImageFolder(root).samples):
        w, h = Image.open(path).size
        scales = [_core.dct_scale(spec, w, h, SEED, 0, key, v) for v in range(3)]
        if max(scales) == scales[0]:
            same_scale += 1
            assert torch.equal(views[0][key], one[key]), key
        else:
            assert psnr(views[0][key].numpy(), one[key].numpy()) >= 35, key
    assert same_scale > 0
    for a in range(3):
        for b in range(a + 1, 3):
            same = sum(torch.equal(x, y) for x, y in zip(views[a], views[b]))
            assert same < len(one) // 2, (a, b, same)


@pytest.mark.parametrize("threads,io", [(1, "pread"), (3, "io_uring"), (2, "auto")])
def test_views_are_bit_identical_across_threads_and_io(root, threads, io):
    ref = epoch(loader(root, dino(3), num_threads=1, io="pread"))
    got = epoch(loader(root, dino(3), num_threads=threads, io=io))
    assert all(torch.equal(a, b) for a, b in zip(ref, got))


def test_resume_with_views_is_exact(root):
    full = loader(root, dino(2), batch_size=3, shuffle=True)
    full.set_epoch(2)
    with full:
        want = [views for views, _ in full]
    part = loader(root, dino(2), batch_size=3, shuffle=True)
    part.set_epoch(2)
    it = iter(part)
    next(it)
    next(it)
    state = part.state_dict()
    part.close()
    resumed = loader(root, dino(2), batch_size=3, shuffle=True, seed=99)
    resumed.load_state_dict(state)
    with resumed:
        rest = [views for views, _ in resumed]
    assert len(rest) == len(want) - 2
    for a, b in zip(want[2:], rest):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_a_replaced_sample_fills_every_view(root, tmp_path):
    """on_error="skip": the replacement is decoded once and written to
    each view, in its own randomness."""
    import shutil

    folder = tmp_path / "bad"
    shutil.copytree(root, folder)
    victim = tvd.ImageFolder(str(folder)).samples[4][0]
    with open(victim, "r+b") as f:
        f.truncate(300)
    tf = MultiView(global_view(), local_view(), local_view())
    with pytest.warns(ringloader.DataWarning, match="skipped"):
        views = epoch(loader(str(folder), tf, on_error="skip"))
    good = epoch(loader(root, tf))
    assert [v.shape for v in views] == [v.shape for v in good]
    for v in range(3):  # the other samples are untouched by the skip
        assert torch.equal(views[v][:4], good[v][:4])
        assert torch.equal(views[v][5:], good[v][5:])
        assert not torch.equal(views[v][4], good[v][4])


class Invert:
    """A transform ringloader does not know (a user's own class)."""

    def __call__(self, img):
        return 255 - img


def test_a_view_that_cannot_be_fused_runs_in_python_and_says_which(root):
    unfused = v2.Compose(
        [v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.ToImage(), Invert()]
    )
    with pytest.warns(ringloader.FallbackWarning, match="view 1:.*Invert"):
        got = epoch(loader(root, MultiView(global_view(), unfused)))
    prefix = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip()])
    plain = epoch(loader(root, MultiView(global_view(), prefix)))
    assert torch.equal(got[0], plain[0])
    assert torch.equal(got[1], 255 - plain[1])


class TwoCrops:
    """A multi-crop class of a user's (not a MultiView)."""

    def __init__(self, t):
        self.t = t

    def __call__(self, img):
        return [self.t(img), self.t(img)]


def test_a_multi_crop_class_that_is_not_a_multiview_falls_back(root):
    ds = tvd.ImageFolder(root, transform=TwoCrops(local_view()))
    with pytest.warns(ringloader.FallbackWarning, match="TwoCrops"):
        ld = ringloader.DataLoader(ds, batch_size=4)
    assert not isinstance(ld, ringloader.Loader)


def test_the_same_multiview_works_under_torch_dataloader(root):
    tf = dino(2)
    img = Image.open(tvd.ImageFolder(root).samples[0][0]).convert("RGB")
    out = tf(img)
    assert [tuple(o.shape) for o in out] == [(3, 64, 64)] * 2 + [(3, 32, 32)] * 2
    ds = tvd.ImageFolder(root, transform=tf)
    torch_views, _ = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ld = ringloader.DataLoader(ds, batch_size=4)
    assert isinstance(ld, ringloader.DataLoader)
    ours, _ = next(iter(ld))
    assert [(t.shape, t.dtype) for t in torch_views] == [
        (t.shape, t.dtype) for t in ours
    ]


def test_multiview_arguments_are_checked():
    with pytest.raises(ValueError, match="views"):
        MultiView()
    with pytest.raises(ValueError, match="views"):
        MultiView(*[local_view()] * (_core.MAX_VIEWS + 1))
    assert len(MultiView([local_view(), local_view()]).views) == 2
    with pytest.raises(ringloader.transforms.UnsupportedTransform, match="view 1"):
        compile_views(MultiView(local_view(), v2.Compose([v2.ToImage()])))


def test_views_on_the_device_equal_the_host_path(fake, data):  # noqa: F811
    r = run(
        fake,
        data,
        """
    from torchvision.transforms import v2
    g = v2.Compose([v2.RandomResizedCrop(40), v2.RandomHorizontalFlip(),
                    v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize([0.5] * 3, [0.25] * 3)])
    l = v2.Compose([v2.RandomResizedCrop(24, scale=(0.05, 0.4)),
                    v2.ColorJitter(0.4, 0.4), v2.ToImage()])
    mv = T.MultiView(g, l, l)
    cpu = [v for v, _ in ringloader.Loader(ds, batch_size=5, transform=mv, seed=1)]
    gpu = ringloader.Loader(ds, batch_size=5, transform=mv, seed=1,
                            device="cuda", num_threads=2, prefetch=3)
    err, bad, shapes = 0.0, 0, True
    for (b, _), a in zip(gpu, cpu):
        gpu._gpu.synchronize()
        err = max(err, (a[0] - b[0]).abs().max().item())
        bad += not all(torch.equal(x, y.clone()) for x, y in zip(a[1:], b[1:]))
        shapes = shapes and [(x.shape, x.dtype) for x in a] == [
            (y.shape, y.dtype) for y in b]
    n = len(cpu)
    gpu.close()
    del b  # the last batch's views hold its device buffer
    report(err=err, bad=bad, shapes=shapes, batches=n)
    """,
    )
    assert r["bad"] == 0 and r["shapes"] and r["err"] < 1e-5, r
    assert r["violations"] == 0 and r["copies"] == r["batches"], r
    assert r["host"] == 0 and r["dev"] == 0, r
