"""The arguments timm's RandAugment gives its geometric ops at magnitude 9
(the train recipe's ``rand-m9-mstd0.5-inc1``), and the fill it gives them:
the cases on which tests/test_pil_warp.py asserts the Pillow-exact warp's
bytes and benchmarks/bench_pil_warp.py times it, kept in one place so that
the test checks what the benchmark measures."""

from __future__ import annotations

# timm's level functions at magnitude 9 of 10: 27 degrees, a 0.27 shear,
# 0.405 of the side (translate_pct 0.45); one of each sign.
M9_WARPS: list[tuple[str, float]] = [
    ("rotate", 27.0),
    ("rotate", -12.7),
    ("shear_x", 0.27),
    ("shear_y", -0.27),
    ("translate_x_rel", 0.405),
    ("translate_y_rel", -0.405),
]
# timm's fill for them: the ImageNet mean as bytes (hparams' img_mean).
FILL = (124, 116, 104)
