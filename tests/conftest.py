import atexit
import os
import shutil
import signal
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

# Ctrl-C is tested as a terminal sends it. A shell without job control
# starts a background command (`make test &`, nohup) with SIGINT ignored,
# Python then installs no handler, and every child inherits the ignore: the
# Ctrl-C tests would fail for how the suite was started. Python's own
# handler is put back; children started from here get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from images import write_folder  # noqa: E402


@pytest.fixture(scope="session")
def folder(tmp_path_factory):
    """An ImageFolder of 3 classes x 6 varied JPEGs."""
    return write_folder(str(tmp_path_factory.mktemp("folder")))


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))
