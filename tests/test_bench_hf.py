"""benchmarks/bench_hf.py's quick mode: every contender (transformers'
example over the saved data set and over its Parquet file, row indexing,
ringloader.Loader and ringloader.DataLoader over HFDataset,
ringloader.Parquet) reads a saved Hugging Face dataset to the end of its batches,
and the results file and plot are written, so the benchmark keeps working
as HFDataset and the libraries under it change."""

from __future__ import annotations

import pytest
from subproc import run_bench_quick

pytest.importorskip("datasets")
pytest.importorskip("psutil")
pytest.importorskip("matplotlib")

PEERS = ["hf example", "hf rows", "parquet example"]
OURS = ["ringloader.Loader", "ringloader.DataLoader", "ringloader.Parquet"]
CONTENDERS = PEERS + OURS


def test_quick_mode_runs_every_contender(tmp_path):
    proc, results, png = run_bench_quick("bench_hf.py", tmp_path, "hf")
    versions = ("python", "torch", "torchvision", "datasets", "pyarrow")
    for key in ("cpu", "cores") + versions:
        assert results["machine"][key], key
    assert sorted(results["throughput"]) == ["eval", "train"]
    for by in results["throughput"].values():
        assert sorted(by) == sorted(CONTENDERS)
        for who, r in by.items():
            assert "error" not in r, (who, r)
            assert r["img_s"] > 0 and r["rows"] == results["images"], (who, r)
        for peer in PEERS:
            assert set(by[peer]["ratios"]) == set(OURS), by[peer]
    for who in CONTENDERS:
        rows = [r.get("rows") for r in results["memory"][who]]
        assert rows == results["rows"], (who, results["memory"][who])
    # The table names every contender of every row.
    assert proc.stdout.count("| ringloader.Loader |") == 4, proc.stdout[-3000:]
    assert proc.stdout.count("| ringloader.Parquet |") == 4, proc.stdout[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
