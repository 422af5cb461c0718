"""The extension is built for Python's stable ABI (the limited API of 3.11,
setup.py): one module, _core.abi3.so, that every CPython from 3.11 on loads,
so that one wheel, tagged cp311-abi3, serves them all (packaging/wheels.py)."""

import os
import sysconfig

import ringloader._core as core


def test_the_module_is_built_for_the_stable_abi():
    name = os.path.basename(core.__file__)
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        # A free-threaded Python has no stable ABI: a build of its own.
        assert name == "_core" + sysconfig.get_config_var("EXT_SUFFIX")
    else:
        assert name == "_core.abi3.so"
