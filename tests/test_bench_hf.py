"""benchmarks/bench_hf.py's quick mode: every contender (transformers'
example over the saved data set and over its Parquet file, row indexing,
ringloader.Loader and ringloader.DataLoader over HFDataset,
ringloader.Parquet, and ringloader.Parquet over HTTP from nginx) reads a
saved Hugging Face dataset to the end of its batches, and the results file
and plot are written, so the benchmark keeps working as HFDataset and the
libraries under it change."""

from __future__ import annotations

import pytest
from rlbench.servers import find_nginx
from subproc import run_bench_quick

pytest.importorskip("datasets")
pytest.importorskip("psutil")
pytest.importorskip("matplotlib")

PEERS = ["hf example", "hf rows", "parquet example"]
OURS = ["ringloader.Loader", "ringloader.DataLoader", "ringloader.Parquet"]
HTTP = "ringloader.Parquet (HTTP)"
# nginx serves the HTTP contender's files; without it the benchmark says so
# and leaves that contender out.
CONTENDERS = PEERS + OURS + ([HTTP] if find_nginx() else [])


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
    if HTTP not in CONTENDERS:
        assert f"nginx is not installed (apt-get install nginx): {HTTP} not run" in (
            proc.stdout
        )
        assert results["contenders"] == PEERS + OURS
        return
    # Over HTTP against the local file, round by round: img/s and the first
    # batch (each run's extract made anew), in the results and a table.
    assert proc.stdout.count(f"| {HTTP} |") == 4, proc.stdout[-3000:]
    pairs = list(results["throughput"].values()) + [
        {who: results["memory"][who][k] for who in CONTENDERS}
        for k in range(len(results["rows"]))
    ]
    for by in pairs:
        v = by[HTTP]["vs_local"]
        for key in ("img_s", "first_batch_s"):
            # Each run's ratio is that run's HTTP figure over the local
            # run's of the same round (rounded to 0.01), and the ratio
            # reported is their median, not the ratio of the medians.
            runs = v[f"{key}_runs"]
            assert len(runs) == results["repeat"], (key, by)
            h, lo = by[HTTP][f"{key}_runs"], by["ringloader.Parquet"][f"{key}_runs"]
            for k, got in enumerate(runs):
                assert got == pytest.approx(h[k] / lo[k], abs=0.0051), (key, k, by)
            assert v[key] == sorted(runs)[len(runs) // 2], (key, by)
    for column in ("img/s HTTP ÷ local", "first batch HTTP ÷ local"):
        assert proc.stdout.count(f"| {column} |") == 1, proc.stdout[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
