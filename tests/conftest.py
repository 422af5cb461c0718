import atexit
import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# benchmarks/rlbench (the servers' launchers, the remote benchmark), which
# is not installed: the tests run against the installed ringloader from
# tests/, and take these from the checkout.
sys.path.insert(1, os.path.join(os.path.dirname(HERE), "benchmarks"))

# The tests write nothing outside the checkout and the system temp folder:
# ringloader's cache (shard and folder indexes, the generated data set) and
# what other tools cache under XDG_CACHE_HOME or ~/.cache (matplotlib's font
# list, rclone's) go to a folder of this session's, which child processes
# inherit, removed at exit. Tests of the default cache folder set these
# variables themselves.
SESSION_CACHE = tempfile.mkdtemp(prefix="ringloader-tests-home-")
atexit.register(shutil.rmtree, SESSION_CACHE, ignore_errors=True)
os.environ["RINGLOADER_CACHE_DIR"] = os.path.join(SESSION_CACHE, "ringloader")
os.environ["XDG_CACHE_HOME"] = os.path.join(SESSION_CACHE, "cache")
os.environ["XDG_CONFIG_HOME"] = os.path.join(SESSION_CACHE, "config")
os.environ["MPLCONFIGDIR"] = os.path.join(SESSION_CACHE, "matplotlib")

from images import write_folder  # noqa: E402


@pytest.fixture(scope="session")
def folder(tmp_path_factory):
    """An ImageFolder of 3 classes x 6 varied JPEGs."""
    return write_folder(str(tmp_path_factory.mktemp("folder")))


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))
