"""benchmarks/bench_streamfmt.py's quick mode: litdata's StreamingDataset
and ringloader.LitData each read an uncompressed and a zstd LitData folder,
MosaicML Streaming's StreamingDataset and ringloader.MDS an uncompressed
and a zstd MDS folder, to the end of their batches, and the results file
and plot are written, so the benchmark keeps working as LitData, Streaming
and the libraries under them change."""

from __future__ import annotations

import pytest
from subproc import run_bench_quick

pytest.importorskip("litdata")
pytest.importorskip("streaming")
pytest.importorskip("psutil")
pytest.importorskip("matplotlib")


def test_quick_mode_runs_every_contender(tmp_path):
    proc, results, png = run_bench_quick("bench_streamfmt.py", tmp_path, "streamfmt")
    machine = ("cpu", "cores", "python", "torch", "torchvision", "litdata", "streaming")
    for key in machine:
        assert results["machine"][key], key
    for key, own in (("throughput", "litdata"), ("mds", "streaming")):
        assert sorted(results[key]) == ["plain", "zstd"]
        for by in results[key].values():
            for who in (own, "ringloader"):
                assert "error" not in by[who], (key, who, by[who])
                assert by[who]["img_s"] > 0
            assert by["ratio"] > 0 and len(by["ratio_runs"]) == 1
    assert proc.stdout.count("| ringloader |") == 4, proc.stdout[-3000:]
    assert "ringloader ÷ streaming" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
