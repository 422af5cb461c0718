"""torchvision's composition classes (RandomApply, RandomChoice, RandomOrder,
transforms and transforms.v2, nested, with a Compose inside) as groups of
the C augment chain (csrc/augment/group.c):

- given the decisions and the parameters the chain draws
  (_core.augment_draw), its pixels equal torchvision's ops run as the
  composition says, within each op's tolerance (test_augment_color.py's);
- which children run, and in what order, follow torchvision's own classes
  over 20,000 draws (chi-square against their forward, run with recording
  children);
- in the loader, samples are bit-identical across thread counts and I/O
  backends, and equal torchvision given the drawn parameters;
- a composition holding something that cannot be fused runs whole in
  Python, named with the reason in the FallbackWarning.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import datasets as tvd
from torchvision import transforms as T
from torchvision.transforms import v2

import ringloader
from ringloader import _core
from ringloader.adapt import torchvision_ops
from ringloader.transforms import compile_transform

import rounding
from draws import same_categories
from images import jpeg_bytes, psnr, write_folder
from test_augment_color import TOLERANCE, torchvision_apply

SEED = 11
H, W = 41, 57


# ---- the reference: torchvision's ops, run as the groups decided ----


def _run(fns, img):
    for fn in fns:
        img = fn(img)
    return img


def _subchains(t, elements, leaf):
    """The sub-chains t compiles to (as torchvision_ops.ops_of makes them, children
    before their group), each a function that runs t's leaves as the drawn
    decisions say: leaf(transform, op, args, params) makes a leaf's
    function. elements iterates over the chain's (op, args, params)."""
    name = type(t).__name__
    if name == "Compose":
        return [f for c in t.transforms for f in _subchains(c, elements, leaf)]
    if name == "RandomApply":
        kids = [f for c in t.transforms for f in _subchains(c, elements, leaf)]
        op, args, params = next(elements)
        assert op == "random_apply"
        run = params[0] < args[1]  # torch.rand(1) < p
        return [lambda img: _run(kids, img) if run else img]
    if name in ("RandomChoice", "RandomOrder"):
        kids = [_one(c, elements, leaf) for c in t.transforms]
        op, args, params = next(elements)
        if op == "random_choice":
            picked = [kids[int(params[0])]]
        else:
            assert op == "random_order"
            order = [int(i) for i in params[: len(kids)]]
            assert sorted(order) == list(range(len(kids)))
            picked = [kids[i] for i in order]
        return [lambda img: _run(picked, img)]
    return [leaf(t, *next(elements))]


def _one(t, elements, leaf):
    """t as one child of a RandomChoice or RandomOrder (a Compose of
    several is a group of its own)."""
    kids = _subchains(t, elements, leaf)
    if len(kids) > 1:
        assert next(elements)[0] == "compose"
    return lambda img: _run(kids, img)


def walk(t, ops, params, leaf, img):
    """Runs composition t's leaves on img as the chain's draws say."""
    elements = iter([(op, args, p) for (op, args), p in zip(ops, params)])
    fns = _subchains(t, elements, leaf)
    assert next(elements, None) is None
    return _run(fns, img)


def _torchvision_leaf(t, op, args, params):
    return lambda img: torchvision_apply(op, args, t, params, img)


def reference(t, ops, params, chw):
    """torchvision's result for composition t on chw given the chain's
    draws."""
    with rounding.reference():
        return walk(t, ops, params, _torchvision_leaf, chw)


def ours(ops, hwc, key):
    h, w, _ = hwc.shape
    out = _core.augment(hwc.tobytes(), h, w, ops, SEED, 0, key)
    return np.frombuffer(out, np.uint8).reshape(h, w, 3)


def _photo(seed=3):
    rgb, h, w = _core.decode(jpeg_bytes("s420", H, W, seed))
    return np.frombuffer(rgb, np.uint8).reshape(h, w, 3)


def jitter():
    return v2.ColorJitter(0.4, 0.4, 0.2, 0.1)


# (name, the composition; v2 leaves: the reference runs their .transform)
CASES = [
    ("simclr jitter", v2.RandomApply([jitter()], p=0.8)),
    (
        "apply of several",
        T.RandomApply([v2.RandomSolarize(100, 1.0), v2.RandomInvert(0.6)], p=0.5),
    ),
    (
        "choice",
        v2.RandomChoice(
            [v2.RandomEqualize(1.0), jitter(), v2.RandomPosterize(3, 1.0)],
            p=[1, 2, 3],
        ),
    ),
    ("v1 choice", T.RandomChoice([v2.RandomInvert(1.0), v2.Grayscale(3)])),
    (
        "order",
        v2.RandomOrder(
            [
                v2.RandomSolarize(128, 0.7),
                v2.RandomInvert(0.5),
                jitter(),
                v2.RandomAutocontrast(0.6),
            ]
        ),
    ),
    (
        "nested",
        v2.RandomChoice(
            [
                v2.RandomApply([jitter(), v2.RandomGrayscale(0.5)], p=0.7),
                T.RandomOrder(
                    [
                        v2.Compose([v2.RandomEqualize(1.0), v2.RandomInvert(0.5)]),
                        v2.RandomAdjustSharpness(2.0, 0.8),
                    ]
                ),
                v2.Compose([v2.RandomPosterize(4, 1.0), v2.RandomSolarize(90, 0.5)]),
            ]
        ),
    ),
    ("blur", v2.RandomApply([v2.GaussianBlur(5, (0.1, 2.0))], p=0.5)),
]


def _bound(ops):
    """The worst tolerance of the chain's ops: a blur's 1 LSB is the only
    one, and the cases put no op after it to grow it."""
    return max(TOLERANCE.get(op, 0) for op, _ in ops)


@pytest.mark.parametrize("name, t", CASES, ids=[c[0] for c in CASES])
def test_composition_equals_torchvision_given_the_draws(name, t):
    img = _photo()
    chw = torch.from_numpy(img.copy()).permute(2, 0, 1)
    ops = torchvision_ops.ops_of(t, H, W)
    seen = set()
    for key in range(40):
        params = _core.augment_draw(ops, H, W, SEED, 0, key)
        want = reference(t, ops, params, chw.clone()).permute(1, 2, 0).numpy()
        got = ours(ops, img, key)
        diff = int(np.abs(got.astype(int) - want).max())
        assert diff <= _bound(ops), (name, key, diff, psnr(got, want))
        seen.add(got.tobytes())
    assert len(seen) > 1, "the decisions change with the key"


def test_groups_hold_the_elements_before_them():
    """The chain is written children first: each group takes the sub-chains
    right before it, and an op after a group is no child of it."""
    ops = torchvision_ops.ops_of(v2.RandomApply([v2.Grayscale(3)], p=0.5), H, W)
    ops += torchvision_ops.ops_of(v2.RandomInvert(1.0), H, W)
    assert [op for op, _ in ops] == ["grayscale", "random_apply", "invert"]
    img = _photo()
    gray = ours([("grayscale", [1.0])], img, 0)
    applied = []
    for key in range(20):
        applied.append(_core.augment_draw(ops, H, W, SEED, 0, key)[1][0] < 0.5)
        want = gray if applied[-1] else img
        assert np.array_equal(ours(ops, img, key), 255 - want)
    assert 0 < sum(applied) < 20
    one_more = ops[:2] + [("random_apply", [3.0, 0.5])]
    with pytest.raises(ValueError, match="random_apply: 3 children"):
        _core.augment_draw(one_more, H, W, 0, 0, 0)


@pytest.mark.parametrize(
    "ops, word",
    [
        ([("invert", [1.0]), ("random_apply", [0.0, 0.5])], "children"),
        ([("invert", [1.0]), ("random_apply", [1.5, 0.5])], "children"),
        ([("invert", [1.0]), ("random_apply", [1.0, 1.5])], "p must be"),
        ([("invert", [1.0]), ("random_order", [2.0])], "2 children"),
        ([("invert", [1.0]), ("random_choice", [1.0, -1.0] + [0.0] * 15)], "weight"),
        (
            [("invert", [1.0]), ("random_choice", [1.0, 0.0, 1.0] + [0.0] * 14)],
            "weight",
        ),
        ([("invert", [1.0]), ("random_choice", [1.0] + [0.0] * 16)], "sum to 0"),
        (
            [("erase", torchvision_ops.erase_of(v2.RandomErasing(), "float32")[1])]
            + [("random_apply", [1.0, 0.5])],
            "output op",
        ),
    ],
)
def test_malformed_groups_are_refused(ops, word):
    with pytest.raises(ValueError, match=word):
        _core.augment_draw(ops, H, W, 0, 0, 0)


def test_v1_and_v2_classes_make_the_same_chain():
    def build(M):
        return M.RandomChoice(
            [
                M.RandomApply([M.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                M.RandomOrder([M.RandomInvert(), M.Compose([M.RandomEqualize()])]),
            ],
            p=[3, 1],
        )

    one, two = (
        torchvision_ops.ops_of(build(T), H, W),
        torchvision_ops.ops_of(build(v2), H, W),
    )
    assert [op for op, _ in one] == [op for op, _ in two]
    assert np.allclose([a for _, x in one for a in x], [a for _, x in two for a in x])
    # transforms' RandomApply([]) and RandomOrder([]) do nothing
    assert torchvision_ops.ops_of(T.RandomApply([], p=0.5), H, W) == []
    assert torchvision_ops.ops_of(T.RandomOrder([]), H, W) == []


# ---- the decisions' distributions against torchvision's classes ----

N = 20000


def _structures(M):
    """(name, a function of a leaf maker that builds the composition) for
    the transforms or v2 classes M; leaf(letter) makes leaf `letter`."""
    return {
        "apply p=0.8": lambda leaf: M.RandomApply([leaf("a")], p=0.8),
        "apply two p=0.3": lambda leaf: M.RandomApply([leaf("a"), leaf("b")], p=0.3),
        "choice": lambda leaf: M.RandomChoice([leaf("a"), leaf("b"), leaf("c")]),
        "choice p": lambda leaf: M.RandomChoice(
            [leaf("a"), leaf("b"), leaf("c")], p=[0.5, 0.3, 0.2]
        ),
        "order of four": lambda leaf: M.RandomOrder(
            [leaf("a"), leaf("b"), leaf("c"), leaf("d")]
        ),
        "nested": lambda leaf: M.RandomChoice(
            [
                M.RandomApply([leaf("a"), leaf("b")], p=0.6),
                M.RandomOrder([leaf("c"), M.Compose([leaf("d"), leaf("a")])]),
            ],
            p=[1, 3],
        ),
    }


STRUCTURES = [(M, name) for M in (T, v2) for name in _structures(M)]


def our_runs(build, seed=SEED):
    """The leaves the chain runs, in order, for N keys: the composition
    made of ops (an invert per letter), walked as the draws decide."""
    letters = {}

    def leaf(letter):
        op = v2.RandomInvert(1.0)
        letters[id(op)] = letter
        return op

    t = build(leaf)
    ops = torchvision_ops.ops_of(t, 8, 8)

    def record(t, op, args, params):
        return lambda log: log + (letters[id(t)],)

    return [
        walk(t, ops, _core.augment_draw(ops, 8, 8, seed, 1, key), record, ())
        for key in range(N)
    ]


def their_runs(build):
    """The leaves torchvision's own classes run, in order, over N calls:
    each leaf a callable that records its letter."""
    log = []

    def leaf(letter):
        return lambda x: log.append(letter) or x

    t = build(leaf)
    torch.manual_seed(SEED)
    runs = []
    for _ in range(N):
        log.clear()
        t(torch.zeros(1))
        runs.append(tuple(log))
    return runs


@pytest.mark.sweep
@pytest.mark.parametrize(
    "M, name",
    STRUCTURES,
    ids=[f"{M.__name__.split('.')[-1]} {n}" for M, n in STRUCTURES],
)
def test_decisions_follow_torchvisions_distribution(M, name):
    """Which children run, and in what order: our draws against torchvision's
    own forward (random.choices and random.shuffle for transforms' classes,
    torch's generator for v2's), chi-square p > 0.01."""
    import random

    random.seed(SEED)
    build = _structures(M)[name]
    mine, theirs = our_runs(build), their_runs(build)
    cats = set(theirs)
    assert set(mine) == cats
    same_categories(mine, theirs, f"{M.__name__} {name}")
    if name == "order of four":
        assert len(cats) == 24


def test_the_distribution_test_tells_a_different_p_apart():
    """RandomApply(p=0.8) against torchvision's p=0.78: told apart."""
    mine = our_runs(_structures(v2)["apply p=0.8"])
    theirs = their_runs(lambda leaf: v2.RandomApply([leaf("a")], p=0.78))
    with pytest.raises(AssertionError):
        same_categories(mine, theirs, "p 0.8 vs 0.78")


# ---- in the loader ----

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def ssl_view(size=48):
    """A self-supervised view (SimCLR's and BYOL's augmentations, DINO's
    solarize), with a RandomChoice and a RandomOrder for good measure."""
    return v2.Compose(
        [
            v2.RandomResizedCrop(size, scale=(0.2, 1.0)),
            v2.RandomHorizontalFlip(),
            v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
            v2.RandomGrayscale(0.2),
            v2.RandomApply([v2.GaussianBlur(5, (0.1, 2.0))], p=0.5),
            v2.RandomSolarize(128, p=0.2),
            v2.RandomChoice([v2.RandomEqualize(1.0), v2.RandomPosterize(4, 1.0)]),
            v2.RandomOrder([v2.RandomInvert(0.3), v2.RandomAutocontrast(0.3)]),
        ]
    )


def _to_float():
    return [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_folder(str(tmp_path_factory.mktemp("compose")), n_per_class=5)


def _loader(root, tf, **kw):
    kw.setdefault("seed", SEED)
    return ringloader.Loader(tvd.ImageFolder(root), batch_size=5, transform=tf, **kw)


def _first_epoch(loader):
    with loader:
        return torch.cat([images for images, _ in loader])


def _digest(root, tf, **kw):
    h = hashlib.sha256()
    with _loader(root, tf, **kw) as loader:
        for _ in range(2):
            for images, labels in loader:
                h.update(images.numpy().tobytes())
                h.update(labels.numpy().tobytes())
    return h.hexdigest()


def test_the_recipe_fuses_with_no_warning(root):
    import warnings

    tf = v2.Compose(ssl_view().transforms + _to_float())
    assert compile_transform(tf).rest == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = ringloader.DataLoader(
            tvd.ImageFolder(root, transform=tf), batch_size=5, num_workers=2
        )
        assert isinstance(loader, ringloader.DataLoader)
        assert sum(len(labels) for _, labels in loader) == 15


def test_batches_identical_across_threads_and_io_backends(root):
    tf = v2.Compose(ssl_view().transforms + _to_float())
    one = _digest(root, tf, num_threads=1, io="pread")
    assert _digest(root, tf, num_threads=2, io="io_uring") == one
    assert _digest(root, tf, num_threads=3, io="pread", prefetch=1) == one
    assert _digest(root, tf, num_threads=1, io="pread", seed=SEED + 1) != one


def test_in_the_loader_equal_torchvision_given_the_draws(root):
    """Each sample equals torchvision's ops, run as the sample's draws
    decide, on the loader's sample without them (the blur's 1 LSB, grown
    by the ops after it, aside: 40 dB)."""
    view = ssl_view()
    geometry, ops_part = view.transforms[:2], view.transforms[2:]
    plain = _first_epoch(_loader(root, v2.Compose(geometry + [v2.ToImage()])))
    got = _first_epoch(_loader(root, v2.Compose(geometry + ops_part + [v2.ToImage()])))
    ops = compile_transform(view).spec["ops"]
    chain = v2.Compose(ops_part)
    exact = 0
    for key in range(len(plain)):
        params = _core.augment_draw(ops, 48, 48, SEED, 0, key)
        want = reference(chain, ops, params, plain[key].clone())
        a, b = got[key].permute(1, 2, 0).numpy(), want.permute(1, 2, 0).numpy()
        exact += np.array_equal(a, b)
        assert np.array_equal(a, b) or psnr(a, b) >= 40, (key, psnr(a, b))
    assert exact >= len(plain) // 2, exact


# ---- what cannot be fused runs whole in Python ----


@pytest.mark.parametrize(
    "t, why",
    [
        (
            v2.RandomApply([v2.ColorJitter(0.4), v2.ElasticTransform()], p=0.8),
            "RandomApply: ElasticTransform has no C op",
        ),
        (
            v2.RandomChoice([v2.RandomInvert(), v2.RandomHorizontalFlip()]),
            "RandomChoice: RandomHorizontalFlip has no C op",
        ),
        (
            T.RandomOrder([T.RandomInvert(), T.Lambda(lambda x: x)]),
            "RandomOrder: Lambda has no C op",
        ),
        (
            v2.RandomApply(
                [
                    v2.RandomOrder(
                        [v2.RandomInvert(), v2.RandomRotation(10, expand=True)]
                    )
                ]
            ),
            "RandomApply: RandomOrder: RandomRotation(expand=True)",
        ),
        (
            T.RandomChoice([T.RandomInvert(), T.RandomEqualize()], p=[1]),
            "2 transforms with 1 weights",
        ),
        (
            T.RandomChoice([T.RandomInvert(), T.RandomEqualize()], p=[1, -1]),
            "weights must be >= 0",
        ),
    ],
)
def test_unfusable_composition_falls_back_whole_with_the_reason(t, why):
    compiled = compile_transform(
        v2.Compose([v2.RandomResizedCrop(32), t, v2.ToImage()])
    )
    assert compiled.rest[0] is t and why in compiled.reason, compiled.reason
    assert compiled.spec.get("ops", []) == []


def test_unfusable_composition_runs_in_python_as_torchvision(root):
    """The FallbackWarning names the composition and why; the composition
    then runs in Python on the fused prefix's samples, torchvision's own
    draws and all: never a silently different result."""
    geometry = [v2.RandomResizedCrop(40), v2.RandomHorizontalFlip()]
    group = v2.RandomApply([v2.ColorJitter(0.4), v2.ElasticTransform()], p=0.5)
    tf = v2.Compose(geometry + [v2.RandomGrayscale(0.3), group, v2.ToImage()])
    with pytest.warns(ringloader.FallbackWarning) as record:
        loader = _loader(root, tf)
    msg = str(record[0].message)
    assert "RandomApply" in msg and "ElasticTransform has no C op" in msg, msg
    prefix = _first_epoch(
        _loader(root, v2.Compose(geometry + [v2.RandomGrayscale(0.3)]))
    )
    torch.manual_seed(0)
    got = _first_epoch(loader)
    torch.manual_seed(0)
    ref = torch.stack(
        [
            v2.ToImage()(group(Image.fromarray(img.permute(1, 2, 0).numpy())))
            for img in prefix
        ]
    )
    assert torch.equal(got, ref)


def test_a_flip_may_follow_groups_of_pixel_ops_only():
    """The C core flips before the ops: a flip after a group commutes with
    it when every op inside acts on pixels alone."""
    pixels = v2.RandomApply([v2.RandomChoice([v2.ColorJitter(0.4), v2.RandomInvert()])])
    compiled = compile_transform(
        v2.Compose([v2.RandomResizedCrop(32), pixels, v2.RandomHorizontalFlip(0.3)])
    )
    assert compiled.rest == [] and compiled.spec["flip_p"] == 0.3
    warp = v2.RandomApply([v2.RandomOrder([v2.RandomInvert(), v2.RandomRotation(10)])])
    compiled = compile_transform(
        v2.Compose([v2.RandomResizedCrop(32), warp, v2.RandomHorizontalFlip()])
    )
    assert "put the flip first" in compiled.reason


def test_a_chain_over_its_length_falls_back_at_the_group_that_overflows(root):
    """Groups lengthen the chain: the group that would take it past
    _core.AUGMENT_MAX_OPS elements, and what follows, run in Python, with
    the reason; the loader runs."""
    most = _core.AUGMENT_MAX_OPS
    groups = [v2.RandomApply([v2.RandomInvert()]) for _ in range(most // 2 + 1)]
    tf = v2.Compose([v2.RandomResizedCrop(32)] + groups + [v2.ToImage()])
    compiled = compile_transform(tf)
    assert len(compiled.spec["ops"]) == 2 * (most // 2) <= most
    assert compiled.rest[0] is groups[-1], compiled.reason
    assert f"more than {most} ops and groups" in compiled.reason
    with pytest.warns(ringloader.FallbackWarning, match="RandomApply"):
        loader = _loader(root, tf)
    assert _first_epoch(loader).shape == (15, 3, 32, 32)


def test_a_group_after_the_conversion_says_so():
    """The ops run on the 8-bit image before the conversion: a group after
    it (RandomErasing in a RandomApply, say) runs in Python, and the reason
    says where it stands, not that it has no C op."""
    group = v2.RandomApply([v2.RandomErasing(1.0)], p=0.5)
    compiled = compile_transform(
        v2.Compose([v2.RandomResizedCrop(32)] + _to_float() + [group])
    )
    assert compiled.rest == [group]
    assert compiled.reason == "RandomApply after the conversion to a tensor"
