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
