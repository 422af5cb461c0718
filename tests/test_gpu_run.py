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
