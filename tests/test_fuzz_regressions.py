"""Replays every input the fuzzer ever crashed on (tests/fuzz/regressions)
and the fuzzer's seed corpus (made by tests/fuzz/make_corpus.py) through
the decoder, as _core.decode and as a
Loader would decode them. Each file is the fuzzer's input: 8 header bytes
choosing the transform (see fuzz_decode.c), then the JPEG."""

from __future__ import annotations

import json
import os

from subproc import HERE, run_python

REGRESSIONS = os.path.join(HERE, "fuzz", "regressions")

REPLAY = r"""
import json, os, sys, tempfile
import ringloader
from ringloader import _core, transforms as T
paths = json.loads(sys.argv[1])
tmp = tempfile.mkdtemp()
jpegs = []
for i, p in enumerate(paths):
    with open(p, "rb") as f:
        data = f.read()[8:]
    for tolerant in (False, True):
        try:
            _core.decode(data, allow_truncated=tolerant)
        except ringloader.DecodeError:
            pass
    jpegs.append(os.path.join(tmp, f"{i}.jpg"))
    with open(jpegs[-1], "wb") as f:
        f.write(data)
class DS:
    samples = [(p, 0) for p in jpegs]
batches = [[0]]
for t in (T.Compose([T.Resize(40), T.CenterCrop(32)]),
          T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()])):
    loader = ringloader.Loader(DS, batch_sampler=batches, transform=t)
    for i in range(len(jpegs)):
        batches[:] = [[i]]
        try:
            list(loader)
        except ringloader.DecodeError as e:
            assert e.path == jpegs[i]
print(len(paths))
"""


def test_fuzz_regressions_and_seeds_replay(tmp_path):
    names = sorted(n for n in os.listdir(REGRESSIONS) if n != "README")
    paths = [os.path.join(REGRESSIONS, n) for n in names]
    seeds = tmp_path / "seeds"
    proc = run_python(
        "import runpy, sys; sys.argv = ['make_corpus.py', sys.argv[1]]; "
        f"runpy.run_path({os.path.join(HERE, 'fuzz', 'make_corpus.py')!r}, "
        "run_name='__main__')",
        str(seeds),
    )
    assert proc.returncode == 0, proc.stderr
    paths += sorted(str(p) for p in seeds.iterdir())
    assert len(paths) > 100
    proc = run_python(REPLAY, json.dumps(paths), timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == str(len(paths))
