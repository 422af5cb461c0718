"""benchmarks/bench_streamfmt.py's quick mode: litdata's StreamingDataset
and ringloader.LitData each read an uncompressed and a zstd LitData folder
to the end of their batches, and the results file and plot are written,
so the benchmark keeps working as LitData and the libraries under it
change."""

from __future__ import annotations

import pytest
from subproc import run_bench_quick

pytest.importorskip("litdata")
pytest.importorskip("psutil")
pytest.importorskip("matplotlib")


def test_quick_mode_runs_every_contender(tmp_path):
    proc, results, png = run_bench_quick("bench_streamfmt.py", tmp_path, "streamfmt")
    for key in ("cpu", "cores", "python", "torch", "torchvision", "litdata"):
        assert results["machine"][key], key
    assert sorted(results["throughput"]) == ["plain", "zstd"]
    for by in results["throughput"].values():
        for who in ("litdata", "ringloader"):
            assert "error" not in by[who], (who, by[who])
            assert by[who]["img_s"] > 0
        assert by["ratio"] > 0 and len(by["ratio_runs"]) == 1
    assert proc.stdout.count("| ringloader |") == 2, proc.stdout[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
