"""ringloader.bench, the one benchmark harness: its plan of rounds, a
contender run in a child that imports ringloader from a given build, the
medians, and the one data generator."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ringloader
from ringloader.bench import data, harness, report

BUILD = os.path.dirname(os.path.dirname(os.path.abspath(ringloader.__file__)))


def test_import_ringloader_leaves_bench_alone():
    code = (
        "import sys, ringloader; print([m for m in sys.modules if 'ringloader.b' in m])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_plan_runs_the_bound_once_per_thread_count():
    template = harness.Spec("x", "train", 1, "/data")
    builds = {"old": "/old/python", "new": "/new/python"}
    names = ["ringloader@old", "ringloader@new", "decode-bound"]
    specs = harness.plan(names, ["train", "eval"], [1, 2], template, builds)
    keys = [(s.contender, s.pipeline, s.threads) for s in specs]
    assert keys[:2] == [("decode-bound", "any", 1), ("decode-bound", "any", 2)]
    assert len(keys) == len(set(keys)) == 2 + 2 * 2 * 2
    assert {s.build for s in specs if s.contender == "ringloader@old"} == {
        "/old/python"
    }
    assert all(s.build is None for s in specs if s.contender == "decode-bound")


def test_median_run_lists_every_round():
    runs = [{"images_per_s": v, "n": i} for i, v in enumerate([30.0, 10.0, 20.0])]
    m = harness.median_run(runs)
    assert m["n"] == 2 and m["rounds_images_per_s"] == [30.0, 10.0, 20.0]
    assert "error" in harness.median_run(runs + [{"error": "boom"}])


def test_parse_builds(tmp_path):
    assert harness.parse_builds(f"here={BUILD}") == {"here": BUILD}
    with pytest.raises(Exception, match="holds no ringloader"):
        harness.parse_builds(f"x={tmp_path}")


def test_child_imports_ringloader_from_the_build(folder, tmp_path):
    spec = harness.Spec(
        "ringloader@here",
        "eval",
        1,
        folder,
        batch_size=4,
        epochs=1,
        warmup=1,
        images=9,
        build=BUILD,
        workdir=str(tmp_path),
    )
    results = harness.run_rounds([spec], 2, harness.Runner(timeout=300), say=None)
    (r,) = results
    assert "error" not in r, r.get("traceback", r.get("error"))
    assert r["ringloader_path"] == os.path.join(BUILD, "ringloader")
    assert r["images_per_epoch"] == 9 and len(r["rounds_images_per_s"]) == 2
    assert r["peak_rss_mb"] > 0 and r["cpu_s_per_image"] > 0
    table = report.builds_table(results, ["here"], ["eval"], [1])
    assert table[0] == "ringloader uint8, by build:" and "| eval | 1 |" in table[4]


def test_data_is_deterministic_and_leaves_other_folders_alone(tmp_path):
    a = data.build(str(tmp_path / "a"), images=6, classes=2, progress=False)
    b = data.build(str(tmp_path / "b"), images=6, classes=2, progress=False)
    _, files_a = data.scan_folder(a)
    _, files_b = data.scan_folder(b)
    assert len(files_a) == 6
    for (pa, la), (pb, lb) in zip(files_a, files_b):
        assert la == lb and open(pa, "rb").read() == open(pb, "rb").read()
    assert data.build(a, images=6, classes=2, progress=False) == a  # cached
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        data.build(str(tmp_path / "mine"), images=6, progress=False)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
