"""What C and Python share is written once, in C, and exported by _core:
the bits of a sample's random key, the largest side, the keys of the
pipeline's stats and the augmentation ops' arguments. These
tests check that the Python side reads the exported values and keeps no
copy of them (static checks on the sources), and that what it builds from
them is what the C core produces."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ringloader
from ringloader import _core, _meter, _pipeline

PKG = Path(__file__).resolve().parent.parent / "python" / "ringloader"


def _constants(module: str) -> list[tuple[int, object]]:
    """(line, value) of every int and str literal of a package module."""
    tree = ast.parse((PKG / module).read_text(encoding="utf-8"))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, (int, str))
        and not isinstance(n.value, bool)
    ]


def test_key_layout_is_read_from_the_core():
    exported = {
        _core.KEY_OCCURRENCE_SHIFT,
        _core.KEY_ATTEMPT_SHIFT,
        _core.KEY_REPLACEMENT_BIT,
        _core.MAX_CONSECUTIVE_ERRORS,
        1 << (_core.KEY_ATTEMPT_SHIFT - _core.KEY_OCCURRENCE_SHIFT),
    }
    for module in ("_keys.py", "_sampling.py", "_position.py", "loader.py"):
        copies = [(ln, v) for ln, v in _constants(module) if v in exported]
        assert not copies, f"{module} repeats the key layout: {copies}"
    from ringloader._keys import INDEX_MASK, OCCURRENCE_SHIFT

    assert OCCURRENCE_SHIFT == _core.KEY_OCCURRENCE_SHIFT
    assert INDEX_MASK == (1 << _core.KEY_OCCURRENCE_SHIFT) - 1


def test_max_side_is_read_from_the_core():
    copies = [(ln, v) for ln, v in _constants("_compiler.py") if v == _core.MAX_SIDE]
    assert not copies, f"_compiler.py repeats the largest side: {copies}"
    # The Python check and the C check agree at the bound.
    T = ringloader.transforms
    ok = T.compile_transform(T.Compose([T.Resize((8, _core.MAX_SIDE))]))
    assert ok.spec["out_w"] == _core.MAX_SIDE
    with pytest.raises(T.UnsupportedTransform, match="out of range"):
        T.compile_transform(T.Compose([T.Resize((8, _core.MAX_SIDE + 1))]))


def test_stats_keys_are_read_from_the_core():
    fields = _core.STATS_FIELDS
    assert {kind for kind, _ in fields.values()} == {"count", "seconds", "gauge"}
    # The stats dict is built from the table: the same keys, in its order.
    c = _core.Pipeline({"kind": "resize_crop", "out_h": 8, "out_w": 8}, buffers=[b"x"])
    try:
        s = c.stats()
    finally:
        c.close()
    assert list(s) == list(fields)
    for name, (kind, _) in fields.items():
        assert isinstance(s[name], float if kind == "seconds" else int), name
    # Python derives what it needs from the table, and names no key the
    # table lacks.
    assert _pipeline.COUNTERS == tuple(
        k for k, (kind, _) in fields.items() if kind != "gauge"
    )
    assert set(_meter.RENAMED) <= set(fields) and set(_meter.HIDDEN) <= set(fields)
    for module in ("_pipeline.py", "_meter.py"):
        for line, v in _constants(module):
            if v in fields:
                assert module == "_meter.py" and (
                    v in _meter.RENAMED or v in _meter.HIDDEN
                ), f"{module}:{line} names the stats key {v!r}"
    # Loader.stats() shows every key of the table but the hidden ones.
    shown = _meter.stats(_meter.Meter(), {}, None, 0, 0, 0, 0)
    for name in fields:
        if name not in _meter.HIDDEN:
            assert _meter.RENAMED.get(name, name) in shown, name


# ---- the augmentation ops' arguments (csrc/augment/augment.h) ----


def _size(fields) -> int:
    return sum(c * (1 if r is None else _size(r)) for _, c, r in fields)


def _numbers(fields) -> set[int]:
    """Every count of a layout and of its records, and their sizes."""
    out = {_size(fields)}
    for _, count, record in fields:
        out.add(count)
        if record is not None:
            out |= _numbers(record)
    return out


def _composition():
    """Every group of the C chain: torchvision's composition classes and
    a Compose inside one."""
    v2 = pytest.importorskip("torchvision.transforms.v2")
    return v2.RandomApply(
        [
            v2.RandomChoice(
                [
                    v2.Compose([v2.RandomInvert(), v2.RandomEqualize()]),
                    v2.RandomInvert(),
                ],
                p=[2, 1],
            ),
            v2.RandomOrder([v2.RandomInvert(), v2.RandomGrayscale()]),
        ],
        p=0.3,
    )


def _timm_erase():
    from ringloader.adapt import timm as adapter
    from timm.data.random_erasing import RandomErasing

    return adapter.erase_of(RandomErasing(0.3, mode="rand", max_count=2), "float32")


def _other_libraries_ops():
    """The elements of the ops other libraries' adapters make (timm's, and
    v2's source op through its own adapter)."""
    pytest.importorskip("timm")
    from torchvision.transforms import v2

    from ringloader.adapt import torchvision_v2

    source = torchvision_v2.describe(v2.RandomPhotometricDistort()).elements
    return [_timm_erase()] + _timm_elements() + list(source)


def _timm_elements():
    """An element of each of timm's C ops (csrc/augment/timm.c), from
    timm's own objects through timm_ops, and timm_op."""
    aa = pytest.importorskip("timm.data.auto_augment")
    from ringloader.adapt import timm_ops

    hp = dict(translate_const=20, img_mean=(1, 2, 3))
    objects = [
        aa.rand_augment_transform("rand-m7-n3-mstd0.5-tweights", dict(hp)),
        aa.auto_augment_transform("v0r-mstd0.5", dict(hp)),
        aa.augment_and_mix_transform("augmix-m4-w3-d2", dict(hp)),
    ]
    out = [e for t in objects for e in timm_ops.ops_of(t, 48, 40)]
    return out + [timm_ops.timm_op("rotate", 5.0, 2, (4, 5, 6))]


def test_op_layouts_are_read_from_the_core():
    from ringloader.adapt import torchvision_ops

    # Python keeps no copy of a count, a size or a limit (the three
    # channels of a fill aside), nor of the kinds' or policies' names
    # (Solarize aside: v2 keeps its table in fractions of 255).
    numbers = set().union(*map(_numbers, _core.OP_ARGS.values()))
    for limits in _core.OP_LIMITS.values():
        numbers |= set(limits.values())
    names = set(_core.POLICY_KINDS) - {"Solarize"}
    names |= set(_core.AUTO_AUGMENT_POLICIES)
    for line, v in _constants("adapt/torchvision_ops.py"):
        assert not (isinstance(v, int) and v > 3 and v in numbers), (
            f"adapt/torchvision_ops.py:{line} repeats a count or limit of the op layouts: {v}"
        )
        assert v not in names, f"adapt/torchvision_ops.py:{line} repeats the name {v!r}"
    assert torchvision_ops.POLICY_KINDS == _core.POLICY_KINDS
    assert set(torchvision_ops._MAG_OPS) <= set(_core.POLICY_KINDS)
    timm_names = set(_core.TIMM_KINDS) | set(_core.TIMM_FUNCS)
    for line, v in _constants("adapt/timm_ops.py"):
        assert not (isinstance(v, int) and v > 3 and v in numbers), (
            f"adapt/timm_ops.py:{line} repeats a count or limit of the op layouts: {v}"
        )
        assert v not in timm_names, f"adapt/timm_ops.py:{line} repeats the name {v!r}"
    # Every C op is reached from Python, and each layout is the one C
    # checks the arguments against.
    groups = {op for op, _ in torchvision_ops.ops_of(_composition(), 48, 40)}
    reached = {op for op, _ in torchvision_ops.IMAGE_OPS.values()} | {"erase"} | groups
    reached |= {op for op, _ in _other_libraries_ops()}
    assert set(_core.OP_ARGS) == reached
    for op, fields in _core.OP_ARGS.items():
        n = _size(fields)
        with pytest.raises(ValueError, match=f"{op} takes {n} arguments, not {n + 1}"):
            _core.augment_draw([(op, [0.0] * (n + 1))], 8, 8, 0, 0, 0)


def _reversed(fields):
    return tuple(
        (n, c, None if r is None else _reversed(r)) for n, c, r in reversed(fields)
    )


def _by_name(fields, args):
    """{field: its values} of args laid out by fields (NaN as None)."""
    out, at = {}, 0
    for name, count, record in fields:
        if record is None:
            out[name] = [None if v != v else v for v in args[at : at + count]]
            at += count
        else:
            size = _size(record)
            out[name] = [
                _by_name(record, args[at + k * size : at + (k + 1) * size])
                for k in range(count)
            ]
            at += count * size
    assert at == len(args)
    return out


def test_op_arguments_are_packed_by_field_name(monkeypatch):
    """With every layout's fields (and records' fields) in reverse order,
    each transform's arguments follow: Python packs by name, from the
    layout C exports, not by position."""
    v2 = pytest.importorskip("torchvision.transforms.v2")
    from ringloader.adapt import torchvision_ops

    transforms = [
        v2.ColorJitter(0.4, 0.3, 0.2, 0.1),
        v2.RandomGrayscale(0.3),
        v2.GaussianBlur((3, 7), (0.1, 2.0)),
        v2.RandomAutocontrast(0.3),
        v2.RandomEqualize(0.4),
        v2.RandomInvert(0.6),
        v2.RandomPosterize(3, 0.2),
        v2.RandomSolarize(100, 0.7),
        v2.RandomAdjustSharpness(2.0, 0.3),
        v2.RandomRotation((-10, 20), center=(3, 4), fill=7),
        v2.RandomAffine(5, (0.1, 0.2), (0.8, 1.2), (1, 2, 3, 4), center=(5, 6)),
        v2.RandomPerspective(0.4, p=0.7, fill=[7, 8, 9]),
        v2.TrivialAugmentWide(num_magnitude_bins=7, fill=[4, 5, 6]),
        v2.RandAugment(num_ops=5, magnitude=3),
        v2.AutoAugment(v2.AutoAugmentPolicy.SVHN, fill=3),
        v2.AugMix(severity=4, all_ops=False, chain_depth=2),
        _composition(),
    ]
    erasing = v2.RandomErasing(0.3, (0.1, 0.2), (0.5, 2.0), value=(1, 2, 3))
    forward = [e for t in transforms for e in torchvision_ops.ops_of(t, 48, 40)]
    forward.append(torchvision_ops.erase_of(erasing, "float32"))
    forward += _other_libraries_ops()
    assert {op for op, _ in forward} == set(_core.OP_ARGS)
    layouts = dict(_core.OP_ARGS)
    monkeypatch.setattr(
        _core, "OP_ARGS", {op: _reversed(f) for op, f in layouts.items()}
    )
    backward = [e for t in transforms for e in torchvision_ops.ops_of(t, 48, 40)]
    backward.append(torchvision_ops.erase_of(erasing, "float32"))
    backward += _other_libraries_ops()
    for (op, args), (_, rev) in zip(forward, backward):
        assert args != rev or len(layouts[op]) == 1, op
        assert _by_name(layouts[op], args) == _by_name(_core.OP_ARGS[op], rev), op


def _offset(op: str, field: str) -> int:
    at = 0
    for name, count, record in _core.OP_ARGS[op]:
        if name == field:
            return at
        at += count * (1 if record is None else _size(record))
    raise KeyError(field)


def test_op_limits_are_the_c_checks():
    """Python refuses to fuse exactly where the C check starts refusing."""
    v2 = pytest.importorskip("torchvision.transforms.v2")
    from ringloader.adapt import torchvision_ops

    most = _core.OP_LIMITS["rand_augment"]["max_num_ops"]
    bins = torchvision_ops._count("trivial_augment", "table", "magnitudes")
    kernel = _core.OP_LIMITS["gaussian_blur"]["max_kernel_size"]
    for fits, over, field, value in [
        (
            v2.RandAugment(num_ops=most),
            v2.RandAugment(num_ops=most + 1),
            "num_ops",
            most + 1,
        ),
        (
            v2.TrivialAugmentWide(num_magnitude_bins=bins),
            v2.TrivialAugmentWide(num_magnitude_bins=bins + 1),
            "num_magnitude_bins",
            bins + 1,
        ),
        (
            v2.GaussianBlur(kernel, 1.0),
            v2.GaussianBlur(kernel + 2, 1.0),
            "kernel_size",
            kernel + 2,
        ),
    ]:
        op, args = torchvision_ops.op_of(fits, 16, 16)
        _core.augment_draw([(op, args)], 16, 16, 0, 0, 0)
        with pytest.raises(torchvision_ops.NotFused):
            torchvision_ops.op_of(over, 16, 16)
        args[_offset(op, field)] = float(value)
        with pytest.raises(ValueError, match=op):
            _core.augment_draw([(op, args)], 16, 16, 0, 0, 0)
