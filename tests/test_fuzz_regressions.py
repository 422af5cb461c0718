"""Replays every input a fuzzer ever failed on and each fuzzer's seed
corpus (made by tests/fuzz/make_corpus.py) through what it fuzzes:

- fuzz_decode.c (tests/fuzz/regressions): the decoder, as _core.decode and
  as a Loader would decode them. Each file is 8 header bytes choosing the
  transform (see fuzz_decode.c), then the JPEG; fuzz_png and fuzz_webp
  (the same harness on the PNG and WebP decoders: regressions_png,
  regressions_webp), likewise.
- fuzz_http.c (regressions_http): the HTTP response checks, through the
  harness itself built with the system's C compiler (ASan + UBSan where it
  has them) and replay_main.c instead of libFuzzer.
- fuzz_masks.c (regressions_masks): the mask raster's parsers and polygon
  scan conversion, through the harness built the same way.
- fuzz_mask_png.c (regressions_mask_png): a segmentation PNG's indices
  sampled through index maps, likewise (with libspng and libdeflate).
- fuzz_tar.py (regressions_tar): the shard index's tar walk, through the
  harness's own checks without atheris.
- fuzz_fields.py (regressions_fields): the core's member checks against
  Python's decoding, likewise.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from subproc import HERE, run_python

FUZZ = os.path.join(HERE, "fuzz")
REGRESSIONS = os.path.join(FUZZ, "regressions")

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


def inputs(folder: str, seeds, kind: str = "decode") -> list[str]:
    """The regression inputs in tests/fuzz/``folder``, then the seeds
    make_corpus.py writes for ``kind`` into ``seeds``."""
    where = os.path.join(FUZZ, folder)
    paths = [os.path.join(where, n) for n in sorted(os.listdir(where)) if n != "README"]
    proc = run_python(
        "import runpy, sys; sys.argv = ['make_corpus.py', *sys.argv[1:]]; "
        f"runpy.run_path({os.path.join(FUZZ, 'make_corpus.py')!r}, "
        "run_name='__main__')",
        str(seeds),
        kind,
    )
    assert proc.returncode == 0, proc.stderr
    return paths + sorted(str(p) for p in seeds.iterdir())


def test_fuzz_regressions_and_seeds_replay(tmp_path):
    paths = inputs("regressions", tmp_path / "seeds")
    assert len(paths) > 100
    proc = run_python(REPLAY, json.dumps(paths), timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == str(len(paths))


def _replay_c(
    tmp_path, harness: str, sources: list, paths: list, packages: tuple = ()
) -> None:
    """Builds a libFuzzer harness with replay_main.c (ASan + UBSan where
    the compiler has them), linked with the pkg-config ``packages``, and
    runs every input through it."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc is not None, "a C compiler is needed to build the harness"
    exe = str(tmp_path / harness)
    srcs = [os.path.join(FUZZ, f) for f in (harness + ".c", "replay_main.c")]
    srcs += [os.path.join(HERE, "..", "csrc", s) for s in sources]
    base = [cc, "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"]
    flags = []
    if packages:
        pc = ["pkg-config", "--cflags", "--libs", *packages]
        flags = subprocess.run(
            pc, capture_output=True, text=True, check=True
        ).stdout.split()
    base += ["-I", os.path.join(HERE, "..", "csrc"), "-o", exe, *srcs, *flags, "-lm"]
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    built = subprocess.run(base[:1] + san + base[1:], capture_output=True, text=True)
    if built.returncode != 0:  # a compiler without the sanitizers' runtime
        built = subprocess.run(base, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1")
    proc = subprocess.run([exe, *paths], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == str(len(paths))


def test_http_check_regressions_and_seeds_replay(tmp_path):
    paths = inputs("regressions_http", tmp_path / "seeds", "http")
    assert len(paths) > 30
    _replay_c(tmp_path, "fuzz_http", [os.path.join("source", "http_resp.c")], paths)


def test_mask_regressions_and_seeds_replay(tmp_path):
    paths = inputs("regressions_masks", tmp_path / "seeds", "masks")
    assert len(paths) > 15
    targets = os.path.join(HERE, "..", "csrc", "targets")
    sources = [
        os.path.join("targets", f)
        for f in sorted(os.listdir(targets))
        if f.startswith("mask_") and f.endswith(".c") and f != "mask_png.c"
    ]
    _replay_c(tmp_path, "fuzz_masks", sources, paths)


def test_mask_png_regressions_and_seeds_replay(tmp_path):
    paths = inputs("regressions_mask_png", tmp_path / "seeds", "mask_png")
    assert len(paths) > 100
    sources = [
        "targets/mask_png.c",
        "targets/mask_sample.c",
        "decode/png_index.c",
        "decode/png_rows.c",
        "decode/buffer.c",
        "simd.c",
    ]
    _replay_c(tmp_path, "fuzz_mask_png", sources, paths, ("spng", "libdeflate"))


def _replay_atheris(target: str, paths: list) -> None:
    """Each input through an atheris target's one_input, in this process."""
    sys.path.insert(0, FUZZ)
    try:
        module = importlib.import_module(target)
    finally:
        sys.path.remove(FUZZ)
    for p in paths:
        with open(p, "rb") as f:
            module.one_input(f.read())


def test_tar_walk_regressions_and_seeds_replay(tmp_path):
    paths = inputs("regressions_tar", tmp_path / "seeds", "tar")
    assert len(paths) > 10
    _replay_atheris("fuzz_tar", paths)


@pytest.mark.parametrize("kind", ["png", "webp"])
def test_png_and_webp_regressions_and_seeds_replay(tmp_path, kind):
    """fuzz_png and fuzz_webp (fuzz_decode.c with libspng's and libwebp's
    decoder): their regression inputs and seeds, whole and cut, replay
    through _core.decode and the Loader as the JPEG ones do."""
    paths = inputs(f"regressions_{kind}", tmp_path / "seeds", kind)
    assert len(paths) > 40
    proc = run_python(REPLAY, json.dumps(paths), timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == str(len(paths))


def test_field_check_regressions_and_seeds_replay(tmp_path):
    """fuzz_fields.py: the core's member checks agree with Python's
    decoding on its seeds and regressions_fields/."""
    paths = inputs("regressions_fields", tmp_path / "seeds", "fields")
    assert len(paths) > 20
    _replay_atheris("fuzz_fields", paths)
