"""A build without the system libraries names everything missing in one
message, with the Debian/Ubuntu packages to install (setup.py)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APT = (
    "apt-get install -y pkg-config libjpeg62-turbo-dev liburing-dev "
    "libcurl4-openssl-dev"
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
    assert "missing libjpeg, liburing, libcurl" in err
    assert "libjpeg62-turbo-dev (Debian) or libjpeg-turbo8-dev (Ubuntu)" in err
    assert "liburing-dev" in err and "libcurl4-openssl-dev" in err and APT in err
    assert "pkg-config: not on PATH" not in err


def test_without_pkg_config_everything_is_named(tmp_path):
    # A PATH with no pkg-config on it (setup.py runs by absolute path).
    rc, err = setup_py(tmp_path, PATH=str(tmp_path))
    assert rc != 0
    assert err.count("ringloader build error") == 1
    assert "missing pkg-config, libjpeg, liburing, libcurl" in err
    assert "pkg-config: install pkg-config (not on PATH)" in err
    assert "libjpeg62-turbo-dev" in err and "liburing-dev" in err and APT in err


def test_with_the_libraries_nothing_is_missing(tmp_path):
    rc, err = setup_py(tmp_path)
    assert rc == 0, err
    assert "ringloader build error" not in err
