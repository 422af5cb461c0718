"""The harness's modules, as the running harness has them.

In the harness's child processes ``ringloader.bench`` is loaded by path as
``_ringloader_bench`` (ringloader/bench/harness.py), so that ``import
ringloader`` in a contender finds the build under test, imported and timed
by the contender; the contender modules here then take the harness's base
and data from that package. Anywhere else they are ringloader.bench's.
"""

import sys

if "_ringloader_bench" in sys.modules:  # a harness child
    from _ringloader_bench import base, data, system  # type: ignore[import-not-found]
else:
    from ringloader.bench import base, data, system

__all__ = ["base", "data", "system"]
