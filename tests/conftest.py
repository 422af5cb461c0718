import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from images import write_folder  # noqa: E402


@pytest.fixture(scope="session")
def folder(tmp_path_factory):
    """An ImageFolder of 3 classes x 6 varied JPEGs."""
    return write_folder(str(tmp_path_factory.mktemp("folder")))


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))
