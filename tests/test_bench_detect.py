"""benchmarks/bench_detect.py's quick mode: every recipe of torchvision's
detection and segmentation references read by torch's DataLoader and by
ringloader.DataLoader to the end of their batches; the results file holds
each recipe, each round's ratio the quotient of that round's rates and
the reported ratio their median, and
ringloader running natively exactly where its front door raised no
FallbackWarning: the eval and hflip presets, masks or not, the
multiscale, ssdlite and lsj presets and the segmentation train preset."""

from __future__ import annotations

import pytest
from subproc import run_bench_quick

pytest.importorskip("psutil")
pytest.importorskip("matplotlib")
pytest.importorskip("pycocotools")

RECIPES = (
    "eval hflip hflip+masks multiscale ssdlite ssd lsj segmentation segmentation-v1 "
    "segmentation-coco segmentation-coco-v2"
).split()
# Recipes that fall back, with the transform their reason names (none now).
UNMAPPED: dict = {}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return run_bench_quick("bench_detect.py", tmp_path_factory.mktemp("b"), "detect")


def test_every_recipe_is_measured_for_both(quick):
    proc, results, png = quick
    for key in ("cpu", "cores", "python", "torch", "torchvision"):
        assert results["machine"][key], key
    assert list(results["recipes"]) == RECIPES
    for recipe, by in results["recipes"].items():
        for who in ("torch", "ringloader"):
            assert "error" not in by[who], (recipe, who, by[who])
            assert by[who]["img_s"] > 0 and by[who]["cpu_ms_per_image"] >= 0
        assert f"| {recipe} |" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ratios_are_the_rounds_quotients_and_their_median(quick):
    _, results, _ = quick
    for recipe, by in results["recipes"].items():
        ours, theirs = by["ringloader"], by["torch"]
        runs = [o / t for o, t in zip(ours["img_s_runs"], theirs["img_s_runs"])]
        assert by["ratio_runs"] == pytest.approx(runs, abs=6e-4), recipe
        # The reported ratio is the median of the rounds' ratios (DETECT.md),
        # not the quotient of the median rates, which can differ by more
        # than any rounding when the rounds are uneven.
        rs = by["ratio_runs"]
        assert by["ratio"] in rs, recipe
        assert 2 * sum(r <= by["ratio"] for r in rs) >= len(rs), recipe
        assert 2 * sum(r >= by["ratio"] for r in rs) >= len(rs), recipe


def test_native_exactly_where_no_fallback_warning(quick):
    proc, results, _ = quick
    native = []
    for recipe, by in results["recipes"].items():
        r = by["ringloader"]
        reason = r["fallback"]
        assert r["native"] is (reason is None), recipe
        if r["native"]:
            native.append(recipe)
            assert r["read_ms_per_image"] >= 0 and r["decode_ms_per_image"] > 0
        else:
            assert "using torch.utils.data.DataLoader because" in reason
            assert UNMAPPED[recipe] in reason, (recipe, reason)
            assert "read_ms_per_image" not in r
            assert f"- {recipe}: {reason}" in proc.stdout
    assert native == RECIPES
