"""The prepared GPU run (benchmarks/gpu/run.py) in its dry run: the same
script, tiny sizes, the CPU and the fake CUDA runtime, so that it cannot
fail on the GPU machine for a reason that shows here. Every part that can
run without torch.cuda must succeed; the others must say "not run"."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "benchmarks", "gpu", "run.py")
sys.path.insert(0, os.path.join(HERE, "cuda"))
import fake_gpu  # noqa: E402  (tests/cuda: the fake runtime and its GPU double)


def test_the_gpu_run_dry_run(tmp_path):
    fake = fake_gpu.build(str(tmp_path / "fake_cudart.so"))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, SCRIPT, str(out), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, RINGLOADER_CUDART=fake),
    )
    results = json.loads((out / "results.json").read_text())
    status = {part: r["status"] for part, r in results.items()}
    assert proc.returncode == 0, (status, proc.stdout, proc.stderr)
    assert status == {
        "install": "ok",
        "tests": "ok",
        "train": "ok",
        "copies": "not run",
        "scaling": "ok",
        "memory": "ok",
    }, status
    memory = results["memory"]["result"]
    assert memory["device_moved_after_next"] == 0, memory
    assert memory["pinned_after_close"] == 0 < memory["pinned_before_close"], memory
    assert memory["fake_violations"] == 0, memory
    train = results["train"]["result"]
    assert train["resnet18/ringloader_host"]["images_per_s"] > 0, train
    assert (out / "GPU.md").read_text().startswith("# ringloader on a GPU (DRY RUN")
    # Every GPU test file is collected (each skips itself without a GPU).
    tests = results["tests"]["result"]
    assert tests["rc"] == 0 and not tests["failed"], tests
    log = (out / "tests.log").read_text()
    for name in ("test_cuda.py", "test_cuda_detect.py"):
        assert f"] {name}:" in log, log  # -rs: "SKIPPED [n] file:line: why"


def _run_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_run_installs_the_wheel_make_wheel_builds_on_the_gpu_machine():
    """The GPU machine's CPython 3.12 installs the abi3 wheel ``make wheel``
    builds (cp311-abi3, named as auditwheel names it); a wheel of another
    package, platform or a newer CPython is passed over; a closer tag wins,
    as pip chooses."""
    run = _run_module()
    tags = run.gpu_tags()
    abi3 = "ringloader-0.1.0-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    others = [
        "pycocotools-2.0.11-cp312-abi3-manylinux2014_x86_64.whl",
        "ringloader-0.1.0-cp311-abi3-manylinux_2_17_aarch64.whl",
        "ringloader-0.1.0-cp313-cp313-manylinux_2_17_x86_64.whl",
    ]
    assert run.pick_wheel([*others, abi3], tags) == abi3
    assert run.pick_wheel(others, tags) is None
    own = "ringloader-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert run.pick_wheel([abi3, own], tags) == own
