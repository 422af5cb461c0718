"""What C and Python share is written once, in C, and exported by _core:
the bits of a sample's random key, the largest side, the keys of the
pipeline's stats (and, in test_ops_layout below, the op arguments). These
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
    for module in ("_epoch.py", "loader.py"):
        copies = [(ln, v) for ln, v in _constants(module) if v in exported]
        assert not copies, f"{module} repeats the key layout: {copies}"
    from ringloader._epoch import INDEX_MASK, OCCURRENCE_SHIFT

    assert OCCURRENCE_SHIFT == _core.KEY_OCCURRENCE_SHIFT
    assert INDEX_MASK == (1 << _core.KEY_OCCURRENCE_SHIFT) - 1


def test_max_side_is_read_from_the_core():
    copies = [(ln, v) for ln, v in _constants("transforms.py") if v == _core.MAX_SIDE]
    assert not copies, f"transforms.py repeats the largest side: {copies}"
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
