"""The README and the documentation site's pages as a new user reads them:
the README's set-up lines do what a fresh machine needs, the data line makes
the folder the examples read, and every Python example of the README and of
the site's pages (docs/, and what the site brings in: CONTRIBUTING.md, the
benchmarks' results) runs as written on it. (CI's fresh-checkout step in
.ci/run also runs the set-up lines themselves, in a new virtual environment.)
docs/distributed.md's examples run in test_docs_distributed.py instead: a
DDP script under torchrun, a script stopped and resumed, on data of their
own."""

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/tmp/ringloader-readme-data"
MARKER = ".ringloader-data.json"  # what `ringloader data` leaves in a folder
# Pages whose examples another test runs, as their page says they are run.
ELSEWHERE = {"docs/distributed.md": "test_docs_distributed.py"}


def read(page: str) -> str:
    with open(os.path.join(ROOT, page)) as f:
        return f.read()


def readme() -> str:
    return read("README.md")


def pages() -> list[str]:
    """The README and every page of the site, as paths from the checkout."""
    found = ["README.md", "CONTRIBUTING.md"]
    for pattern in ("docs/**/*.md", "benchmarks/**/*.md"):
        found += sorted(
            os.path.relpath(p, ROOT)
            for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)
            if "/out/" not in p
        )
    return found


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def examples() -> list[tuple[str, str]]:
    """(page, code) of every Python example this test runs, in page order."""
    return [
        (page, code)
        for page in pages()
        if page not in ELSEWHERE
        for code in python_blocks(read(page))
    ]


def blocks() -> list[str]:
    return [code for _, code in examples()]


def setup_lines() -> list[str]:
    """The Set-up section's shell commands, continuations joined, comments
    and blank lines dropped."""
    section = readme().split("## Set-up", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    code = code.replace("\\\n", " ")
    lines = [ln.split("#", 1)[0].strip() for ln in code.splitlines()]
    return [" ".join(ln.split()) for ln in lines if ln]


# The line CI's fresh-checkout step (.ci/run) runs with REPO replaced by the
# checkout it was started from.
CLONE = "git clone REPO ringloader && cd ringloader"


def ci_apt_packages() -> set:
    """What .ci/run installs with apt-get."""
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        text = f.read().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if "apt-get install" in ln]
    return {w for w in line.split() if not w.startswith("-") and ">" not in w} - {
        "apt-get",
        "install",
    }


def test_setup_apt_lines_are_all_make_test_needs():
    """The README's apt line installs everything CI installs but what only
    `make lint`, `make fuzz` and `make check-aarch64` use (clang and its
    runtime, clang-format, the aarch64 cross compiler and qemu-user): nginx
    among them, which the tests serve shards with."""
    (install,) = [ln for ln in setup_lines() if "apt-get install" in ln]
    readme_packages = set(install.split())
    lint_fuzz_and_cross = {
        "clang",
        "clang-format",
        "libclang-rt-14-dev",
        "gcc-aarch64-linux-gnu",
        "qemu-user",
    }
    assert ci_apt_packages() - lint_fuzz_and_cross <= readme_packages
    assert {"nginx", "git", "gcc", "python3-dev"} <= readme_packages


def data_line() -> str:
    (line,) = [ln for ln in setup_lines() if ln.startswith("ringloader data ")]
    return line


def run_shell(line: str, **kw) -> subprocess.CompletedProcess:
    # The `ringloader` command of this Python (its venv need not be active).
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    return subprocess.run(
        line,
        shell=True,
        env=dict(os.environ, PATH=path),
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


def test_setup_lines_work_for_root_and_for_users():
    lines = setup_lines()
    apt = [ln for ln in lines if "apt-get" in ln]
    assert apt and all(ln.startswith("$(command -v sudo) apt-get ") for ln in apt)
    install = next(ln for ln in apt if " install " in ln).split()
    for package in (
        "pkg-config",
        "libjpeg62-turbo-dev",
        "libspng-dev",
        "libdeflate-dev",
        "libwebp-dev",
        "zlib1g-dev",
        "liburing-dev",
        "libcurl4-openssl-dev",
    ):
        assert package in install
    # The examples need torchvision, boto3 for s3:// shards, `ringloader
    # bench` its plot (matplotlib): the set-up installs them, with ringloader,
    # from the checkout it clones and enters first.
    assert lines.index(CLONE) < lines.index('pip install ".[torchvision,s3,bench]"')
    assert not any(ln.startswith("pip install") for ln in lines[: lines.index(CLONE)])
    # ...and the folder they read.
    assert data_line().split()[2] == DATA
    assert all(DATA in code for code in blocks() if "readme-data" in code)


def test_data_line_makes_an_image_folder(tmp_path):
    """The README's data line as written, but for the folder's path."""
    out = tmp_path / "data"
    proc = run_shell(data_line().replace(DATA, shlex.quote(str(out))))
    assert proc.returncode == 0, proc.stderr
    classes = sorted(os.listdir(out))
    assert classes[0] == MARKER and classes[1:] == [f"class_{c:03d}" for c in range(4)]
    files = [f for c in classes[1:] for f in os.listdir(out / c)]
    assert len(files) == 128 and all(f.endswith(".JPEG") for f in files)
    # A second run finds the folder made and leaves it as it is.
    again = run_shell(data_line().replace(DATA, shlex.quote(str(out))))
    assert again.returncode == 0 and "128 images in 4 classes" in again.stdout


@pytest.fixture(scope="module")
def data():
    # The data line as written, unless an older test suite (which wrote the
    # folder itself, without ringloader's marker) left one there: a folder
    # that others may be reading is left alone.
    if not os.path.isdir(DATA) or os.path.exists(os.path.join(DATA, MARKER)):
        proc = run_shell(data_line(), cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
    return DATA


def test_readme_is_a_front_page():
    """The README is the front page (at most 400 lines): it keeps the
    Set-up lines and the two commands, which .ci/run reads from it, and
    links every guide of the site, where the rest lives."""
    text = readme()
    assert len(text.splitlines()) <= 400
    assert "\n## Set-up" in text and "\n## The two commands\n" in text
    guides = sorted(glob.glob(os.path.join(ROOT, "docs", "guide", "*.md")))
    assert guides
    for page in guides:
        assert f"](docs/guide/{os.path.basename(page)})" in text, page


def test_readme_and_pages_have_examples():
    """The README keeps its one-line change; the examples that moved out of
    it into the site's pages are all found there (15 in all, none lost),
    and each page's Python is either run here or named in ELSEWHERE."""
    assert len(python_blocks(readme())) >= 1
    assert len(examples()) >= 15
    guides = {page for page, _ in examples() if page.startswith("docs/guide/")}
    assert len(guides) >= 9
    for page in ELSEWHERE:
        assert python_blocks(read(page)), page


def s3_example_env(code: str, data: str, stack) -> dict:
    """For an example reading ``s3://BUCKET/PREFIX{a..b}.tar``: an S3-API
    server on 127.0.0.1 (moto) holding those shards, made from the examples'
    folder, and the environment that points boto3 at it, as a user points
    it at MinIO. Empty for other examples."""
    import io
    import tarfile

    from rlbench.servers import MotoS3

    m = re.search(r'"s3://([^/"]+)/([^"{]*)\{(\d+)\.\.(\d+)\}\.tar"', code)
    if m is None or "ThreadedMotoServer" in code:  # it starts its own
        return {}
    bucket, prefix, lo, hi = m.group(1), m.group(2), m.group(3), m.group(4)
    files = sorted(
        os.path.join(c, f)
        for c in os.listdir(data)
        if c.startswith("class_")
        for f in os.listdir(os.path.join(data, c))
    )
    names = [f"{prefix}{i:0{len(lo)}d}.tar" for i in range(int(lo), int(hi) + 1)]
    shards = {}
    for s, name in enumerate(names):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for j, rel in enumerate(files[s :: len(names)]):
                label = int(rel.split("/")[0].split("_")[1])
                for member, body in (
                    (f"{s:02d}{j:04d}.jpg", open(os.path.join(data, rel), "rb").read()),
                    (f"{s:02d}{j:04d}.cls", str(label).encode()),
                ):
                    info = tarfile.TarInfo(member)
                    info.size = len(body)
                    tf.addfile(info, io.BytesIO(body))
        shards[name] = buf.getvalue()
    server = stack.enter_context(MotoS3())
    server.upload(bucket, shards)
    return server.env()


def example_ids() -> list[str]:
    seen: dict = {}
    ids = []
    for page, _ in examples():
        seen[page] = seen.get(page, 0) + 1
        ids.append(f"{page}:{seen[page]}")
    return ids


@pytest.mark.parametrize("i", range(len(examples())), ids=example_ids())
def test_readme_example_runs(data, i):
    import contextlib

    code = blocks()[i]
    with contextlib.ExitStack() as stack:
        env = dict(os.environ, **s3_example_env(code, data, stack))
        env.pop("AWS_PROFILE", None)
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env=env,
        )
    if 'device="cuda"' in code and not torch.cuda.is_available():
        # Without a GPU the example must fail with the one clear error.
        assert proc.returncode != 0
        assert "RuntimeError: device='cuda' needs a CUDA GPU" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
