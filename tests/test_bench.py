"""ringloader.bench, the one benchmark harness: its plan of rounds, a
contender run in a child that imports ringloader from a given build, the
medians, and the one data generator."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ringloader
from ringloader.bench import contenders, data, harness, report, system

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    # Imported from the build (else an error), recorded by version and commit.
    assert r["ringloader_version"] == ringloader.__version__
    assert r["ringloader_commit"] == system.ringloader_commit(
        os.path.join(BUILD, "ringloader")
    )
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


def test_what_only_tests_and_benchmarks_use_is_not_installed():
    """The servers' launchers, the peers, the remote benchmark and the
    RESULTS.md writer live in the checkout (benchmarks/rlbench), not in the
    package every user installs; ``ringloader bench`` needs none of them."""
    import importlib.util

    for name in ("servers", "peers", "remote", "remote_results", "results", "shards"):
        assert importlib.util.find_spec(f"ringloader.bench.{name}") is None, name
        assert importlib.util.find_spec(f"rlbench.{name}") is not None, name
    assert set(contenders.FACTORIES) >= {"dataloader", "ringloader", "decode-bound"}
    assert "dali" not in contenders.FACTORIES or "dali" in contenders.PLUGINS


def test_compare_runs_the_bound_and_reports_non_jpeg_files(tmp_path):
    """benchmarks/compare.py with an installed ringloader, as its help says:
    the decode-only bound is built from benchmarks/decode_bound.c, the
    decode_jpeg contender decodes a PNG named .JPEG (and says so) instead
    of dying on it, and RESULTS.md's links lead to files that exist."""
    import json
    import re

    from PIL import Image

    root = data.build(str(tmp_path / "data"), images=12, classes=2, progress=False)
    _, samples = data.scan_folder(root)
    png = samples[3][0]
    Image.new("RGB", (300, 260), (200, 30, 90)).save(png, format="PNG")
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "compare.py"),
            "--data",
            root,
            "--contenders",
            "ringloader,decode-bound,dataloader-tvio",
            "--pipelines",
            "train",
            "--threads",
            "1",
            "--rounds",
            "1",
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--no-scaling",
            "--venv",
            str(tmp_path / "no-venv"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "compare-results.json").read_text())["results"]
    by_name = {r["contender"]: r for r in results}
    assert not [r.get("error") for r in results if "error" in r], proc.stderr[-3000:]
    assert by_name["decode-bound"]["images_per_s"] > 0
    tvio = " ".join(by_name["dataloader-tvio"]["notes"])
    first = os.path.relpath(png, root)  # within the data, not the machine
    assert f"1 of 12 files are not JPEG (the first: {first})" in tvio
    md = (out / "RESULTS.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", md)
    assert links and "`benchmarks/PROFILE.md`" in md  # out is not in the checkout
    for link in links:
        assert (out / link).exists(), link
    # Results are committed and shared: they name no folder of this machine
    # (the data, the output, where ringloader was imported from), and say
    # which ringloader ran by version and commit.
    text = md + (out / "compare-results.json").read_text()
    for folder in _machine_folders(tmp_path):
        assert folder not in text, folder
    versions = json.loads((out / "compare-results.json").read_text())["machine"]
    commit = versions["versions"]["ringloader commit"]
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?( \(.*\))?", commit), commit
    assert f"ringloader {ringloader.__version__}, commit {commit}" in md


def _machine_folders(tmp_path) -> list[str]:
    """Folders of this machine a result could leak: the test's, the
    checkout's, the interpreter's, where ringloader and the harness were
    imported from, the home folder."""
    folders = {str(tmp_path), ROOT, sys.prefix, BUILD, os.path.expanduser("~")}
    folders.add(os.path.dirname(os.path.abspath(contenders.__file__)))
    return sorted(f for f in folders if f not in ("", "/"))


def test_results_name_versions_and_commits_not_folders(tmp_path):
    """What the report code records of the machine and of a run's command
    line: the ringloader version and commit, paths cut to their names."""
    import json
    import re

    info = system.machine_info(sys.executable)
    for folder in _machine_folders(tmp_path):
        assert folder not in json.dumps(info), folder
    assert info["versions"]["ringloader"] == ringloader.__version__
    assert info["versions"]["ringloader commit"]
    # Installed (not imported from a checkout): the benchmark's checkout.
    outside = str(tmp_path / "site-packages" / "ringloader")
    os.makedirs(outside)
    commit = system.ringloader_commit(outside, ROOT)
    assert re.fullmatch(
        r"[0-9a-f]{12}(-dirty)? \(the benchmark's checkout; .*\)", commit
    )
    args = ["--data", str(tmp_path / "imgs"), f"--out={tmp_path}/res/", "--builds"]
    args.append(f"old={tmp_path}/old/python,new=python")
    assert system.portable_command(args) == [
        "--data",
        "imgs",
        "--out=res",
        "--builds",
        "old=python,new=python",
    ]


def test_a_contender_that_cannot_start_is_logged(tmp_path, monkeypatch, capsys):
    """The bound without its source: the run's error is a result and a line
    on stderr, as every other failure is."""
    monkeypatch.setattr(contenders, "BOUND_SOURCE", tmp_path / "decode_bound.c")
    spec = harness.Spec("decode-bound", "any", 1, str(tmp_path), workdir=str(tmp_path))
    result = harness.Runner(verbose=True)(spec)
    assert "decode_bound.c not found" in result["error"]
    assert "could not run:" in capsys.readouterr().err


def test_the_peers_venv_sees_this_torch_and_ringloader(tmp_path, monkeypatch):
    """benchmarks/compare.py --setup run from a venv: the peers' venv
    imports the torch and the ringloader of the interpreter that made it
    (a venv made from a venv is made from the base interpreter)."""
    from rlbench import peers

    import torch

    # ensurepip leaves files in HOME on some machines (~/.rustup here).
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    python = peers.make_venv(str(tmp_path / "peers"))
    proc = subprocess.run(
        [
            str(python),
            "-c",
            "import ringloader, torch; print(ringloader.__file__); print(torch.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [ringloader.__file__, torch.__file__]
    # Made again (an older venv, or another interpreter): still the same.
    assert peers.make_venv(str(tmp_path / "peers")) == python


def test_the_tail_benchmark_runs_its_three_contenders(tmp_path):
    """benchmarks/bench_tail.py patches the loader's tail: it must still
    find what it patches (a rename of ringloader's tail broke it once)."""
    out = tmp_path / "TAIL.md"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "bench_tail.py"),
            "--images=24",
            "--rounds=1",
            "--batch-size=8",
            f"--data={tmp_path / 'data'}",
            f"--out={out}",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = out.read_text()
    for name in ("| ringloader |", "| ringloader, tail on torch's threads |"):
        assert name in table, table
    assert "| DataLoader |" in table, table
