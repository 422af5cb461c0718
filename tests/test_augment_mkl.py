"""The warps' tests on MKL's AVX-512 path, the one Intel CPUs with AVX-512
take, on whatever x86-64 CPU with AVX-512 runs CI.

torchvision's affine grid is a bmm, which torch's x86 wheels hand to MKL;
MKL's AVX-512 SGEMM fuses a multiply-add its AVX2 and generic paths round
in two steps (warps.py), and MKL takes it only on Intel CPUs: on an AMD
host the warps' tests would never see it. A preload (mkl/intel_cpu.c)
makes MKL believe the CPU is Intel's; a subprocess with it first shows that
torchvision's grid is then the fused one (else the test fails: the path did
not run), then runs the warp tests' core checks there.

Where the path cannot run, the test says why rather than passing: skipped on
a CPU without AVX-512 (or not x86-64, where torch has no MKL), failed on an
x86-64 torch built without MKL or a CPU with AVX-512 where the preload
changes nothing.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

import warps

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "mkl", "intel_cpu.c")

# the warp tests' core checks: test_augment_geometry.py but its draws'
# distributions, and the policy and AugMix cases that failed on an Intel
# Xeon (issue 26): 52 tests, about 25 s on 2 cores
CORE = (
    "(geometry and not distribution) or (trivial_augment_equals and nearest)"
    " or (auto_augment_equals and SVHN) or (drawn_parameters and v2-default)"
)
FILES = ["test_augment_geometry.py", "test_augment_policy.py", "test_augment_augmix.py"]


def build(out: str) -> str:
    """Compiles the preload into the shared library ``out`` (returned)."""
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", SOURCE]
        + ["-o", out],
        check=True,
    )
    return out


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def mkl_avx512_reachable() -> None:
    """Skips where the hardware has no AVX-512 path; fails where it has one
    and this torch cannot take it."""
    if not warps.X86 or not os.path.exists("/proc/cpuinfo"):
        pytest.skip(f"no MKL AVX-512 path on {platform.machine()}: not x86-64 Linux")
    if "avx512f" not in cpu_flags():
        pytest.skip("this CPU has no AVX-512 (avx512f): MKL's AVX-512 path cannot run")
    assert torch.backends.mkl.is_available(), (
        "this x86-64 torch has no MKL: the warps' Intel path cannot be checked"
    )


def run_preloaded(lib: str, args: list[str], timeout: float):
    # After what is preloaded already (the sanitizer run's libasan first).
    preload = " ".join(filter(None, [os.environ.get("LD_PRELOAD", ""), lib]))
    env = dict(os.environ, LD_PRELOAD=preload)
    return subprocess.run(
        [sys.executable, *args],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_preload_takes_mkl_avx512_path(tmp_path):
    """Without the preload the grid here is MKL's plain product (an AMD CPU,
    or an Intel one without AVX-512) or fused (an Intel CPU with it); with
    it, always the fused one."""
    mkl_avx512_reachable()
    lib = build(str(tmp_path / "intel_cpu.so"))
    probe = ["-c", "import warps; print(warps.torch_grid_is_plain())"]
    got = run_preloaded(lib, probe, 120)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split() == ["False"], (
        "with the preload torchvision's grid is still the plain product: MKL "
        f"did not take its AVX-512 path ({got.stdout.strip()!r})"
    )


def test_warps_on_mkl_avx512_path(tmp_path):
    """The warp tests' core checks, in a subprocess on MKL's AVX-512 path."""
    mkl_avx512_reachable()
    lib = build(str(tmp_path / "intel_cpu.so"))
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *FILES, "-k", CORE]
    got = run_preloaded(lib, args, 300)
    tail = got.stdout[-3000:] + got.stderr[-2000:]
    assert got.returncode == 0, tail
    assert " passed" in got.stdout.splitlines()[-1], tail
