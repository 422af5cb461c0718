"""A build without the system libraries names everything missing in one
message, with the Debian/Ubuntu packages to install (setup.py)."""

import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APT = (
    "apt-get install -y pkg-config libjpeg62-turbo-dev libspng-dev libdeflate-dev "
    "libwebp-dev zlib1g-dev liburing-dev libcurl4-openssl-dev"
)


def setup_py(tmp_path, **env):
    """setup.py's first step (it checks the libraries before anything
    else) in a subprocess with ``env``; returns (exit status, stderr)."""
    proc = subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stderr


def test_every_library_named_at_once(tmp_path):
    # pkg-config searches only an empty folder: it finds no library.
    empty = str(tmp_path)
    rc, err = setup_py(tmp_path, PKG_CONFIG_PATH=empty, PKG_CONFIG_LIBDIR=empty)
    assert rc != 0
    assert err.count("ringloader build error") == 1
    assert (
        "missing libjpeg, spng, libdeflate, libwebp, libwebpdemux, zlib, liburing, libcurl"
        in err
    )
    for name, package in (
        ("spng", "libspng-dev"),
        ("libdeflate", "libdeflate-dev"),
        ("libwebp", "libwebp-dev"),
        ("zlib", "zlib1g-dev"),
    ):
        assert f"  {name}: install {package} (pkg-config:" in err
    assert "libjpeg62-turbo-dev (Debian) or libjpeg-turbo8-dev (Ubuntu)" in err
    assert "liburing-dev" in err and "libcurl4-openssl-dev" in err and APT in err
    assert "pkg-config: not on PATH" not in err


def test_without_pkg_config_everything_is_named(tmp_path):
    # A PATH with no pkg-config on it (setup.py runs by absolute path).
    rc, err = setup_py(tmp_path, PATH=str(tmp_path))
    assert rc != 0
    assert err.count("ringloader build error") == 1
    assert (
        "missing pkg-config, libjpeg, spng, libdeflate, libwebp, libwebpdemux, zlib, liburing, libcurl"
        in err
    )
    assert "pkg-config: install pkg-config (not on PATH)" in err
    assert "libjpeg62-turbo-dev" in err and "liburing-dev" in err and APT in err


def test_with_the_libraries_nothing_is_missing(tmp_path):
    rc, err = setup_py(tmp_path)
    assert rc == 0, err
    assert "ringloader build error" not in err


def compile_args(**env) -> list:
    """The C compiler arguments setup.py gives the extension under ``env``
    (setuptools.setup replaced by a print: nothing is compiled)."""
    show = (
        "import json, runpy, setuptools\n"
        "setuptools.setup = lambda **kw: print(json.dumps("
        "kw['ext_modules'][0].extra_compile_args))\n"
        "runpy.run_path('setup.py')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", show],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if k != "RINGLOADER_WERROR"},
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_warnings_are_errors_only_in_our_builds():
    """A user's `pip install .` compiles without -Werror (a newer compiler's
    new warning must not stop it); RINGLOADER_WERROR=1, which the Makefile's
    builds set, adds it."""
    user = compile_args()
    assert "-Wall" in user and "-Wextra" in user and "-Werror" not in user
    assert "-Werror" in compile_args(RINGLOADER_WERROR="1")
    assert "-Werror" not in compile_args(RINGLOADER_WERROR="0")


def test_the_makefile_builds_with_werror(tmp_path):
    """Every target of the Makefile that compiles the extension sets
    RINGLOADER_WERROR=1 (make -n prints the commands, runs none)."""
    for target in ("install", "install-test", "test-asan"):
        proc = subprocess.run(
            ["make", "-n", target, f"VENV={tmp_path}/venv"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            # make itself is not ours to check: the sanitizer run's preloaded
            # ASan finds a heap overflow in Debian's make 4.3 and aborts it.
            env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"},
        )
        assert proc.returncode == 0, proc.stderr
        commands = proc.stdout.replace("\\\n", " ").splitlines()
        builds = [c for c in commands if "pip install" in c and c.endswith(" .")]
        assert builds, (target, proc.stdout)
        assert all("RINGLOADER_WERROR=1" in ln for ln in builds), (target, builds)


def test_the_version_is_written_once(tmp_path):
    """The distribution's version is __version__ of ringloader/__init__.py
    (pyproject.toml reads it, [tool.setuptools.dynamic]): in a copy of the
    tree whose __init__.py says 9.8.7, the build says 9.8.7 too."""
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    shutil.copytree(os.path.join(ROOT, "csrc"), tmp_path / "csrc")
    shutil.copytree(
        os.path.join(ROOT, "python"),
        tmp_path / "python",
        ignore=shutil.ignore_patterns("*.so", "__pycache__"),
    )
    init = tmp_path / "python" / "ringloader" / "__init__.py"
    text = init.read_text()
    assert text.count("__version__ = ") == 1
    init.write_text(re.sub(r'__version__ = "[^"]*"', '__version__ = "9.8.7"', text))
    proc = subprocess.run(
        [sys.executable, "setup.py", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "9.8.7"
