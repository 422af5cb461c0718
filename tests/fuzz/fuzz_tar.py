"""fuzz_tar.py - atheris harness on the tar walk that indexes shards
(python/ringloader/datasets/tarindex.py: ``_scan``, over Python's
``tarfile``). There is no C tar code: the C source reads the byte ranges
this walk records, so what it accepts is what the loader trusts.

DESIGN: the input is a whole shard. It is walked twice, as a local file
(a BytesIO) and as a remote shard streamed in chunks (``_ForwardReader``,
chunk sizes chosen by the input's length); both walks must agree. A walk
may end only in a ShardError (naming the shard) or in index arrays whose
every member lies inside the shard, with samples numbered in member
order and extensions that index their table; any other exception is a finding, as is a member outside
the file.

Run: python fuzz_tar.py [libFuzzer flags] CORPUS_DIR SEEDS_DIR (needs
atheris). tests/test_fuzz_regressions.py calls ``one_input`` on the
seeds (make_corpus.py OUT tar) and regressions_tar/ without atheris.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator

import numpy as np

tarindex = None  # imported by load(): under atheris, instrumented


def load() -> None:
    global tarindex
    from ringloader.datasets import tarindex as module

    tarindex = module


def _chunks(data: bytes, step: int) -> Iterator[bytes]:
    for i in range(0, len(data), step):
        yield data[i : i + step]


def _walk(f, size: int) -> dict | None:
    try:
        return tarindex._scan(f, "fuzz.tar", size)
    except tarindex.ShardError as e:
        assert str(e).startswith("fuzz.tar: "), e
        return None


def _check(z: dict, size: int) -> None:
    offsets, sizes = z["offsets"], z["sizes"]
    n = len(offsets)
    assert len(sizes) == len(z["key_ids"]) == len(z["ext_codes"]) == n
    assert len(z["ints"]) == n and len(z["names_offsets"]) == n + 1
    assert np.all(offsets >= 0) and np.all(sizes >= 0)
    assert np.all(offsets + sizes <= size), "a member past the end"
    if n:
        groups = z["key_ids"]
        assert groups[0] == 0, "the first sample is not sample 0"
        steps = np.diff(groups)
        assert np.all((steps == 0) | (steps == 1)), "samples out of member order"
        assert z["ext_codes"].min() >= 0
        assert z["ext_codes"].max() < len(z["exts_offsets"]) - 1


def one_input(data: bytes) -> None:
    if tarindex is None:
        load()
    local = _walk(io.BytesIO(data), len(data))
    step = 1 + len(data) % 4093
    streamed = _walk(tarindex._ForwardReader(_chunks(data, step)), len(data))
    assert (local is None) == (streamed is None), "the two walks disagree"
    if local is None:
        return
    _check(local, len(data))
    for k, v in local.items():
        assert np.array_equal(v, streamed[k]), f"{k} differs when streamed"


def main() -> None:
    import atheris

    with atheris.instrument_imports(include=["tarfile", "ringloader.datasets"]):
        import tarfile  # noqa: F401 - instrumented before tarindex uses it

        load()
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
