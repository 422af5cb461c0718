"""The README's Python examples run as written (on the data they name)."""

import os
import re
import subprocess
import sys

import pytest
import torch

from images import write_folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/tmp/ringloader-readme-data"


def blocks():
    with open(os.path.join(ROOT, "README.md")) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


@pytest.fixture(scope="module")
def data():
    if not os.path.isdir(DATA):
        write_folder(DATA, n_per_class=8, classes=3)
    return DATA


def test_readme_has_examples():
    assert len(blocks()) >= 3


@pytest.mark.parametrize("i", range(len(blocks())))
def test_readme_example_runs(data, i):
    code = blocks()[i]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    if 'device="cuda"' in code and not torch.cuda.is_available():
        # Without a GPU the example must fail with the one clear error.
        assert proc.returncode != 0
        assert "RuntimeError: device='cuda' needs a CUDA GPU" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
