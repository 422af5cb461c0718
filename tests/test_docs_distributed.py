"""The examples of docs/distributed.md run as written: the DDP script under
torchrun with 2 processes, the resumable script stopped and resumed, the
stats and Prometheus snippets, and the command lines parse."""

from __future__ import annotations

import os
import re
import shlex

import pytest

from ringloader import cli
from ringloader.bench import data as bench_data
from subproc import run_python
from test_distributed import torchrun

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "distributed.md")
ROOT_LINE = 'root = "/tmp/ringloader-docs-data"'


def blocks(lang: str) -> list[str]:
    with open(DOC) as f:
        text = f.read()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.DOTALL)


def python_block(first_line: str) -> str:
    (code,) = [b for b in blocks("python") if b.startswith(first_line)]
    return code


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A photo-like ImageFolder big enough for batches of 32 on 2 ranks."""
    cache = str(tmp_path_factory.mktemp("docs"))
    return bench_data.demo_folder(96, classes=4, cache_dir=cache, progress=False)


def localise(code: str, data: str, tmp: str) -> str:
    assert ROOT_LINE in code
    code = code.replace(ROOT_LINE, f"root = {data!r}")
    return code.replace(
        "/tmp/ringloader-docs-checkpoint.pt", os.path.join(tmp, "ck.pt")
    )


def test_ddp_example_under_torchrun(data, tmp_path):
    script = tmp_path / "train_ddp.py"
    script.write_text(localise(python_block("# train_ddp.py"), data, str(tmp_path)))
    out = torchrun(str(script), cwd=str(tmp_path)).stdout
    for rank in (0, 1):
        for epoch in (0, 1):
            # 96 images, 48 per rank: one batch of 32 (drop_last=True).
            assert f"rank {rank} epoch {epoch}: 1 batches" in out, out


def test_resumable_example(data, tmp_path):
    code = localise(python_block("# train_resumable.py"), data, str(tmp_path))
    first = run_python(code, "3")
    assert first.returncode == 1, first.stderr
    assert "stopped after 3 batches" in first.stderr
    assert os.path.exists(tmp_path / "ck.pt")
    second = run_python(code)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed at epoch 0, batch 2" in second.stdout
    assert second.stdout.rstrip().endswith("done")
    assert not os.path.exists(tmp_path / "ck.pt")


def test_stats_and_prometheus_snippets(data, tmp_path):
    pytest.importorskip("prometheus_client")
    others = [
        b
        for b in blocks("python")
        if not b.startswith(("# train_ddp.py", "# train_resumable.py"))
    ]
    assert len(others) == 2
    # Each snippet in a namespace of its own, one child process for both;
    # port 0 for the server so that the test never collides with anything.
    snippets = [
        localise(b, data, str(tmp_path)).replace("serve(9400", "serve(0")
        for b in others
    ]
    driver = (
        "import sys\n"
        "for code in sys.argv[1:]:\n"
        "    exec(compile(code, 'doc', 'exec'), {})\n"
    )
    proc = run_python(driver, *snippets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"\d+ images/s, stalled \d+%, decode", proc.stdout), proc.stdout
    assert "ringloader_stall_fraction{" in proc.stdout, proc.stdout


def test_command_lines_parse():
    parser = cli._parser()
    lines = [
        line.split("#")[0].strip() for b in blocks("sh") for line in b.splitlines()
    ]
    commands = [
        shlex.split(os.path.expanduser(line))[1:]
        for line in lines
        if line.startswith("ringloader ")
    ]
    assert {c[0] for c in commands} == {"bench", "index", "info"}
    for argv in commands:
        parser.parse_args(argv)
