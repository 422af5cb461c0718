"""Builds and runs the C unit tests (tests/c), plain and under
ThreadSanitizer: the pool, I/O, resampler and pipeline without Python, and
a varying pipeline's arena and its samples past it (test_varying), the
recipes of docs/ARCHITECTURE.md (a toy source, decoder and op),
Pillow's affine warp at every SIMD level, and the kernels' bytes at every
level (test_same_bytes; `make check-aarch64` compares them with aarch64's),
the lookups in a shard set's record files (test_shard_records), the
mask raster of COCO polygons and RLEs (test_masks), a segmentation PNG's
indices sampled through index maps (test_mask_png), boxes and keypoints
mapped through a target geometry (test_boxes) and through one read from a
sample's plan (test_plan_geom), and the detection ops' random draws
(test_draws)."""

import os
import shutil
import subprocess

import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c")


@pytest.mark.parametrize("sanitize", ["", "thread"])
def test_c_units(tmp_path, sanitize):
    if shutil.which("make") is None or shutil.which("pkg-config") is None:
        pytest.fail("make and pkg-config are needed to build the C tests")
    # The core is compiled once into objects and linked into each test:
    # the jobs are those objects' compiles.
    jobs = f"-j{os.cpu_count() or 2}"
    cmd = ["make", "-s", jobs, "-C", HERE, "check", f"OUT={tmp_path}"]
    if sanitize:
        cmd.append(f"SANITIZE={sanitize}")
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING: ThreadSanitizer" not in proc.stderr
    for name in (
        "test_pool",
        "test_resize",
        "test_filters",
        "test_io",
        "test_pipeline",
        "test_varying",
        "test_lock_rule",
        "test_io_faults",
        "test_recipes",
        "test_fields",
        "test_field_checks",
        "test_pil_warp",
        "test_same_bytes",
        "test_decode_buf",
        "test_shard_records",
        "test_masks",
        "test_mask_png",
        "test_boxes",
        "test_plan_geom",
        "test_draws",
    ):
        assert f"{name}: " in proc.stdout
