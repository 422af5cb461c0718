"""The ringloader command: `python -m ringloader info`, a tiny `bench` in
subprocesses, and what each says when an optional package is missing."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib import metadata

import pytest

import ringloader
from ringloader import cli

PNG = b"\x89PNG\r\n\x1a\n"


def run(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "ringloader", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


def test_info():
    out = run("info").stdout
    assert f"ringloader {ringloader.__version__}" in out
    for line in (
        "python 3.",
        "torch ",
        "torchvision ",
        "numpy ",
        "io_uring: ",
        "ringloader CUDA path: ",
        "CUDA (torch): ",
        "libjpeg-turbo ",
        "SIMD, libjpeg-turbo: ",
        "SIMD, ringloader resampler: ",
        "CPUs: ",
    ):
        assert line in out, (line, out)
    from ringloader import _core

    assert f"libjpeg-turbo {_core.libjpeg_version}" in out
    ok, _ = _core.io_probe()
    assert ("io_uring: available" in out) == ok
    assert f"CPUs: {len(os.sched_getaffinity(0))} usable" in out


def test_bench_tiny(tmp_path):
    plot = tmp_path / "bench.png"
    proc = run(
        "bench",
        "--images",
        "24",
        "--threads",
        "1",
        "--batch-size",
        "8",
        "--pipeline",
        "eval",
        "--plot",
        str(plot),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    out = proc.stdout
    assert "24 JPEGs in 10 classes" in out
    assert "threads | ringloader img/s | DataLoader img/s | ratio" in out
    row = [line for line in out.splitlines() if line.strip().startswith("1 |")]
    assert len(row) == 1, out
    cells = [c.strip() for c in row[0].split("|")]
    assert float(cells[1]) > 0 and float(cells[2]) > 0
    assert cells[3].endswith("x") and float(cells[4]) > 0 and float(cells[5]) > 0
    assert "ringloader / DataLoader:" in out
    assert f"plot: wrote {plot}" in out
    assert plot.read_bytes()[:8] == PNG
    # The generated folder is cached: a second build returns it at once.
    from ringloader.bench import data

    cached = [d for d in os.listdir(tmp_path / "cache") if d.startswith("demo-")]
    assert len(cached) == 1
    root = data.demo_folder(24, cache_dir=str(tmp_path / "cache"), progress=False)
    assert os.path.basename(root) == cached[0]
    assert len(ringloader.ImageFolder(root)) == 24


def test_bench_without_torchvision_or_matplotlib(folder, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    plot = tmp_path / "none.png"
    rc = cli.main(
        [
            "bench",
            "--data",
            folder,
            "--images",
            "9",
            "--threads",
            "1,2",
            "--batch-size",
            "4",
            "--plot",
            str(plot),
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "torchvision is not installed" in out and "only ringloader runs" in out
    assert "DataLoader img/s" not in out
    assert (
        "plot: not written: matplotlib is not installed (pip install matplotlib)"
    ) in out
    assert not plot.exists()
    assert "9 JPEGs in 3 classes" in out
    rows = [line for line in out.splitlines() if line.strip()[:2] in ("1 ", "2 ")]
    assert len(rows) == 2 and all(float(r.split("|")[1]) > 0 for r in rows)


def test_bench_without_pillow_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(SystemExit) as e:
        cli.main(
            [
                "bench",
                "--images",
                "4",
                "--threads",
                "1",
                "--no-progress",
                "--cache-dir",
                str(tmp_path),
            ]
        )
    assert "Pillow" in str(e.value) and "pip install pillow" in str(e.value)
    assert not [d for d in os.listdir(tmp_path) if d.startswith("demo-")]


def test_thread_lists():
    from ringloader.bench.harness import parse_threads

    assert parse_threads("1,2,4") == [1, 2, 4]
    assert parse_threads("1-3,8") == [1, 2, 3, 8]
    assert parse_threads(None) == list(range(1, len(os.sched_getaffinity(0)) + 1))
    with pytest.raises(argparse.ArgumentTypeError):
        parse_threads("0")


def test_index(folder, tmp_path, capsys):
    rc = cli.main(["index", folder, "--cache-dir", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "18 images, 3 classes" in out, out
    assert cli.main(["index", str(tmp_path / "nowhere"), "--no-progress"]) == 1
    assert "nowhere" in capsys.readouterr().err


def test_console_script_declared():
    scripts = metadata.entry_points(group="console_scripts")
    (ep,) = [e for e in scripts if e.name == "ringloader"]
    assert ep.value == "ringloader.cli:main"


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "bench" in capsys.readouterr().out
