"""The resampler's SIMD kernels (portable C, SSE2, AVX2) do the same integer
arithmetic, and the vector output conversions round as the scalar ones do,
so every level must give the same bytes. The level is capped
through a private hook; each test restores the best level afterwards."""

import hashlib
import json
import platform

import pytest
import torch

import ringloader
from ringloader import _core
from ringloader import transforms as T

from images import jpeg_bytes
from subproc import run_python

LEVELS = ["c", "sse2", "avx2"]


@pytest.fixture
def best_level():
    best = _core.resample_simd("avx2")  # capping at the top restores the best
    yield best
    _core.resample_simd("avx2")


class Files:
    def __init__(self, paths):
        self.samples = [(p, i) for i, p in enumerate(paths)]

    def __len__(self):
        return len(self.samples)


@pytest.fixture(scope="module")
def odd_folder(tmp_path_factory):
    """Sizes that leave every kind of remainder: widths not a multiple of 4,
    8 or 16 pixels, tiny images that are upscaled, one needing DCT scaling."""
    root = tmp_path_factory.mktemp("simd")
    sizes = [
        (37, 53),
        (227, 301),
        (256, 256),
        (333, 499),
        (480, 641),
        (97, 1003),
        (1001, 203),
        (999, 1403),
    ]
    kinds = [
        "s420",
        "s444",
        "grayscale",
        "cmyk",
        "s422",
        "progressive",
        "baseline",
        "s420",
    ]
    paths = []
    for i, ((h, w), kind) in enumerate(zip(sizes, kinds)):
        p = root / f"{i}.jpg"
        p.write_bytes(jpeg_bytes(kind, h, w, seed=i))
        paths.append(str(p))
    return paths


TRANSFORMS = {
    "train": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()]),
    "eval": lambda: T.Compose([T.Resize(256), T.CenterCrop(224)]),
    "odd-size": lambda: T.Compose([T.Resize((131, 97)), T.RandomHorizontalFlip()]),
    "bicubic-train": lambda: T.Compose(
        [T.RandomResizedCrop(224, interpolation="bicubic"), T.RandomHorizontalFlip()]
    ),
    "bicubic-eval": lambda: T.Compose(
        [T.Resize(256, interpolation="bicubic"), T.CenterCrop(224)]
    ),
    "bicubic-odd": lambda: T.Resize((131, 397), interpolation="bicubic"),
    "nearest-odd": lambda: T.Compose(
        [T.Resize((131, 97), interpolation="nearest"), T.RandomHorizontalFlip()]
    ),
    "half-nchw": lambda: T.Compose(
        [T.RandomResizedCrop(45), T.ToDtype(torch.float16, scale=True)]
    ),
    "bf16-nhwc": lambda: T.Compose(
        [
            T.RandomResizedCrop(45),
            T.RandomHorizontalFlip(),
            T.ToDtype(torch.bfloat16, scale=True),
            T.Normalize([0.5] * 3, [0.25] * 3),
        ]
    ),
    "half-nhwc": lambda: T.Compose(
        [
            T.RandomResizedCrop(45),
            T.ToDtype(torch.float16, scale=True),
            T.Normalize([0.5] * 3, [0.25] * 3),
        ]
    ),
    "float-nhwc": lambda: T.Compose(
        [
            T.RandomResizedCrop(61),
            T.RandomHorizontalFlip(),
            T.ToDtype(torch.float32, scale=True),
            T.Normalize([0.5] * 3, [0.25] * 3),
        ]
    ),
}


def epoch_digests(paths, make_transform, layout):
    with ringloader.Loader(
        Files(paths),
        batch_size=3,
        num_threads=2,
        transform=make_transform(),
        layout=layout,
        seed=7,
    ) as loader:
        out = []
        for epoch in range(3):
            loader.set_epoch(epoch)
            for images, _ in loader:
                raw = images.contiguous().view(-1).view(torch.uint8).numpy()
                out.append(hashlib.sha256(raw.tobytes()).hexdigest())
        return out


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_every_simd_level_gives_the_same_bytes(odd_folder, best_level, name):
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert best_level in ("sse2", "avx2"), "x86-64 always has SSE2"
    levels = LEVELS[: LEVELS.index(best_level) + 1]
    if len(levels) < 2:
        pytest.skip(f"only the portable kernel exists here ({best_level})")
    layout = "NHWC" if name.endswith("nhwc") else "NCHW"
    results = {}
    for level in levels:
        assert _core.resample_simd(level) == level
        results[level] = epoch_digests(odd_folder, TRANSFORMS[name], layout)
    for level in levels[1:]:
        assert results[level] == results["c"], f"{level} differs from C"


def test_level_names_and_cap(best_level):
    assert _core.resample_simd() == best_level
    assert _core.resample_simd("c") == "c"
    assert _core.resample_simd() == "c"
    with pytest.raises(ValueError, match="unknown SIMD level"):
        _core.resample_simd("neon")


# Run with RINGLOADER_SIMD set: the RuntimeWarnings that importing
# ringloader gave, the level in use and what `ringloader info` says of it.
CHILD = r"""
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import ringloader
from ringloader import _core, cli
said = [str(w.message) for w in caught if w.category is RuntimeWarning]
info = [l for l in cli._simd_lines() if l.startswith("SIMD, ringloader")]
print(json.dumps({"level": _core.resample_simd(), "warnings": said, "info": info}))
"""


@pytest.mark.parametrize(
    "value, named",
    [
        ("c", "c"),
        ("SSE2", "sse2"),  # any case
        ("AvX2", "avx2"),
        ("", None),  # empty: the best, as unset
        ("avx512", None),  # not a level: warned about
        ("sse 2", None),
    ],
)
def test_the_environment_caps_the_level_or_says_why_not(value, named, best_level):
    proc = run_python(CHILD, env={"RINGLOADER_SIMD": value})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    # The level named, where the CPU runs it; else (none named) the best.
    want = best_level
    if named is not None and LEVELS.index(named) < LEVELS.index(best_level):
        want = named
    assert got["level"] == want, got
    if named is None and value:
        assert len(got["warnings"]) == 1, got
        said = got["warnings"][0]
        assert f"RINGLOADER_SIMD={value!r}" in said, said
        assert "'c', 'sse2', 'avx2'" in said and f"use {want!r}" in said, said
        assert "ignored" in got["info"][0], got
    else:
        assert got["warnings"] == [], got
