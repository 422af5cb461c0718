"""torchvision v2's ScaleJitter fused (the spec's ``jitter_w``,
``jitter_h``, ``jitter_scale``; core/plan.c draws the size from the plan's
stream with targets/draws.c's rule): the sizes are torchvision's
``make_params`` (20,000 draws, two-sample KS) and the very draw of
``_core.detect_draw_scale_jitter`` for the same key; the pixels are
torchvision's resize at the drawn size within the project's bounds, alone
(images of varying sizes) and as the detection reference's lsj preset
(ScaleJitter, RandomCrop(1024, pad_if_needed, fill) and a flip); boxes
follow the plan (``_core.plan_boxes``) as torchvision's own transforms
move them with the plan's parameters."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

import ringloader
from ringloader import _core
from ringloader.errors import UnsupportedTransform
from ringloader.transforms import compile_transform

from images import write_png_jpeg
from test_boxes import max_diff
from test_detect_draws import N, same_numbers
from test_shortest_size import SEED, close_to, planned_boxes, planned_images

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")

MEAN = [123.0, 117.0, 104.0]  # the detection reference's fill
SIZES = [(30, 40), (50, 20), (64, 64), (17, 33), (120, 90), (9, 13), (200, 31)]
# (name, canvas (h, w), ScaleJitter's options): the lsj preset's defaults,
# and a target that is not square (torchvision reads it as (w, h))
SETTINGS = [
    ("lsj", (480, 640), dict(target_size=(1024, 1024))),
    ("other", (333, 500), dict(target_size=(512, 768), scale_range=(0.8, 1.25))),
]


def lsj(fill=None, target=(1024, 1024), crop=1024, **kw):
    """The reference's lsj steps on a PIL image, ending in a tensor."""
    kw.setdefault("antialias", True)
    return v2.Compose(
        [
            v2.ScaleJitter(target_size=target, **kw),
            v2.RandomCrop(crop, pad_if_needed=True, fill=fill or MEAN),
            v2.RandomHorizontalFlip(),
            v2.PILToTensor(),
        ]
    )


def jitter_alone(**kw):
    return v2.Compose(
        [v2.ScaleJitter(**kw), v2.RandomHorizontalFlip(), v2.PILToTensor()]
    )


def spec_of(transform, varying=False):
    return compile_transform(transform, varying=varying).spec


def resized(p):
    """The size (h, w) the plan resized to: its window's canvas, or its
    output where it has no window."""
    return (p["rh"], p["rw"]) if p["rw"] else (p["vh"], p["vw"])


def crop_params(p, size):
    """RandomCrop(size, pad_if_needed=True)'s make_params, from the plan's
    resized size and window."""
    rh, rw = resized(p)
    ph, pw = max(size - rh, 0), max(size - rw, 0)
    return dict(
        needs_crop=rh + 2 * ph > size or rw + 2 * pw > size,
        top=p["wy"] + ph,
        left=p["wx"] + pw,
        height=size,
        width=size,
        needs_pad=bool(ph or pw),
        padding=[pw, ph, pw, ph],
    )


def torchvisions(transform, p, x, crop=None):
    """x (a PIL image or boxes) through the transform's own torchvision
    objects, with the plan's parameters in place of their draws."""
    jitter, *rest = transform.transforms
    x = jitter.transform(x, {"size": resized(p)})
    if crop is not None:
        x = rest.pop(0).transform(x, crop_params(p, crop))
    if p["flip"]:
        x = rest[0].transform(x, {})
    return x


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_png_jpeg(tmp_path_factory.mktemp("jitter"), SIZES)


# ---- the size drawn ----


@pytest.mark.parametrize("name,canvas,kw", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_sizes_are_torchvisions_make_params(name, canvas, kw):
    spec = spec_of(jitter_alone(**kw), varying=True)
    h, w = canvas
    got = [resized(_core.plan_window(spec, w, h, SEED, 0, k)) for k in range(N)]
    torch.manual_seed(SEED)
    t = v2.ScaleJitter(**kw)
    image = tv_tensors.Image(torch.zeros(1, h, w, dtype=torch.uint8))
    want = [tuple(t.make_params([image])["size"]) for _ in range(N)]
    for k, what in enumerate(["height", "width"]):
        same_numbers([s[k] for s in got], [s[k] for s in want], f"{name}: {what}")
    # each the size of the draw of ScaleJitter's own rule from that key
    for k in range(0, N, 7):
        d = _core.detect_draw_scale_jitter((h, w), seed=SEED, epoch=0, index=k, **kw)
        assert got[k] == tuple(d["size"]), k


def test_same_key_same_size_and_epochs_differ():
    spec = spec_of(lsj())

    def sizes(epoch):
        return [
            resized(_core.plan_window(spec, 640, 480, SEED, epoch, k))
            for k in range(64)
        ]

    first = sizes(0)
    assert sizes(0) == first and len(set(first)) > 32
    assert sizes(1) != first


# ---- the pixels ----


@pytest.mark.parametrize(
    "kw",
    [
        dict(target_size=(1024, 1024)),
        dict(target_size=(48, 64), scale_range=(0.5, 1.5)),
    ],
    ids=["lsj", "other"],
)
def test_pixels_alone_are_torchvisions(files, kw):
    transform = jitter_alone(**kw)
    spec = spec_of(transform, varying=True)
    assert spec["varying"] == 1 and spec["jitter_w"] == kw["target_size"][0]
    flips = set()
    for key, path, pil, im, p in planned_images(files, transform, spec):
        flips.add(p["flip"])
        want = v2.PILToTensor()(torchvisions(transform, p, pil))
        close_to(transform, True, key, path, im, want)
    assert flips == {True, False}


@pytest.mark.parametrize("fill", [None, {tv_tensors.Mask: 0, "others": MEAN}])
def test_lsj_preset_pixels_are_torchvisions(files, fill):
    transform = lsj(fill)
    spec = spec_of(transform)
    assert spec["kind"] == "resize_random_crop" and spec["pad_if_needed"] == 1
    assert (spec["fill_r"], spec["fill_g"], spec["fill_b"]) == (123, 117, 104)
    padded = cropped = 0
    for key, path, pil, im, p in planned_images(files, transform, spec, False):
        params = crop_params(p, 1024)
        padded += params["needs_pad"]
        cropped += params["needs_crop"]
        want = v2.PILToTensor()(torchvisions(transform, p, pil, crop=1024))
        assert want.shape == (3, 1024, 1024)
        close_to(transform, False, key, path, im, want)
    assert padded and cropped  # scales under and over the target's


def test_epochs_draw_anew_and_resume_is_exact(files):
    """A loader at epoch 1 gives each sample the plan's size for epoch 1,
    and one resumed from its state after a batch gives the same bytes."""
    transform = jitter_alone(target_size=(48, 64), scale_range=(0.5, 1.5))
    spec = spec_of(transform, varying=True)
    ds = ringloader.FileList(files, list(range(len(files))), transform=transform)

    def loader():
        return ringloader.Loader(ds, seed=SEED, batch_size=2, num_threads=2)

    def samples(batches):
        return [(int(k), im) for ims, keys in batches for im, k in zip(ims, keys)]

    with loader() as ld:
        ld.set_epoch(1)
        ref = samples(list(ld))
    assert [k for k, _ in ref] == list(range(len(files)))
    moved = 0
    for k, im in ref:
        h, w = Image.open(files[k]).size[::-1]
        p1 = _core.plan_window(spec, w, h, SEED, 1, k)
        assert tuple(im.shape[1:]) == resized(p1), k
        moved += resized(p1) != resized(_core.plan_window(spec, w, h, SEED, 0, k))
    assert moved > 0
    with loader() as ld:
        ld.set_epoch(1)
        it = iter(ld)
        next(it)
        state = ld.state_dict()
    with loader() as fresh:
        fresh.load_state_dict(state)
        rest = samples(list(fresh))
    assert [k for k, _ in rest] == [k for k, _ in ref[2:]]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(rest, ref[2:]))


# ---- boxes ----


@pytest.mark.parametrize("crop", [None, 1024, 40])
def test_boxes_follow_torchvisions_transforms(crop):
    if crop is None:
        transform = jitter_alone(target_size=(48, 64), scale_range=(0.5, 1.5))
    elif crop == 1024:
        transform = lsj(crop=crop)
    else:  # a window larger and smaller than the image
        transform = lsj(target=(50, 36), crop=crop, scale_range=(0.5, 2.0))
    spec = spec_of(transform, varying=crop is None)
    for p, got, size, t in planned_boxes(spec, 9):
        t = torchvisions(transform, p, t, crop=crop)
        assert size == tuple(t.canvas_size)
        want = t.as_subclass(torch.Tensor).double().numpy()
        assert max_diff(got, want) < 1e-6, p


# ---- what is refused ----


def test_alone_needs_a_varying_caller():
    with pytest.raises(UnsupportedTransform, match="ScaleJitter alone"):
        compile_transform(jitter_alone(target_size=(64, 64)))


@pytest.mark.parametrize(
    "kw, why",
    [
        (dict(target_size=(64, 64), scale_range=(2.0, 0.1)), "scale_range"),
        (dict(target_size=(64, 64), scale_range=(0.0, 1.0)), "scale_range"),
        (dict(target_size=(0, 64)), "target_size"),
        (dict(target_size=(64, -3)), "target_size"),
        (dict(target_size=(64, 64), antialias=False), "antialias=False"),
    ],
)
def test_bad_options_are_refused_by_name(kw, why):
    with pytest.raises(UnsupportedTransform, match=why):
        compile_transform(jitter_alone(**kw), varying=True)
    rest = dict(kw)
    target = rest.pop("target_size")
    with pytest.raises(UnsupportedTransform, match=why):
        compile_transform(lsj(target=target, **rest))


@pytest.mark.parametrize(
    "fields",
    [
        dict(jitter_w=64, jitter_h=0),
        dict(jitter_w=64, jitter_h=64, jitter_scale=(2.0, 1.0)),
        dict(jitter_w=64, jitter_h=64, jitter_scale=(float("nan"), 1.0)),
        dict(jitter_w=64, jitter_h=64, resize_short=20),
        dict(jitter_w=64, jitter_h=64, short_sizes=[20]),
    ],
)
def test_bad_fields_are_refused_by_name(fields):
    spec = dict(kind="resize_crop", varying=1, **fields)
    with pytest.raises(ValueError, match="jitter_w, jitter_h, jitter_scale"):
        _core.plan_window(spec, 40, 40, SEED, 0, 0)


def test_an_image_the_jitter_leaves_no_row_is_that_samples_error():
    spec = spec_of(jitter_alone(target_size=(64, 64), scale_range=(0.1, 0.1)), True)
    with pytest.raises(ValueError, match=r"ScaleJitter leaves the 1000x1 image"):
        _core.plan_window(spec, 1000, 1, SEED, 0, 0)
