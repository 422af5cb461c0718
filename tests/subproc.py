"""Running a test's risky part in a child Python, so that a crash or a hang
fails that test instead of killing or stalling pytest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_python(
    code: str, *args: str, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Runs `code` with `args` in a fresh interpreter that can import the
    tests' helpers; fails on a signal death or a timeout, with the output."""
    full_env = dict(os.environ, PYTHONPATH=HERE, **(env or {}))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"child hung for {timeout} s; output so far:\n{e.stdout}\n{e.stderr}"
        ) from None
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        raise AssertionError(
            f"child died of {name}; last lines:\n{proc.stdout[-2000:]}\n"
            f"{proc.stderr[-4000:]}"
        )
    return proc


def run_bench_quick(script: str, tmp_path, name: str) -> tuple:
    """``benchmarks/<script> --quick`` writing its data, results and plot
    under ``tmp_path``: (its output, the results as a dict, the plot's
    path), after checking that it exited 0."""
    import json

    out, png = tmp_path / f"{name}.json", tmp_path / f"{name}.png"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(os.path.dirname(HERE), "benchmarks", script),
            "--quick",
            f"--dir={tmp_path / 'data'}",
            f"--json={out}",
            f"--plot={png}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(out.read_text()), png
