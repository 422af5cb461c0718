"""ringloader.metrics: Prometheus export of every live loader's stats,
scraped over HTTP on 127.0.0.1."""

from __future__ import annotations

import gc
import os
import sys
import urllib.request

import pytest

import ringloader
from ringloader import transforms as T

from images import jpeg_bytes

prom = pytest.importorskip("prometheus_client")
import ringloader.metrics  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


class Repeated:
    def __init__(self, path, n):
        self.samples = [(path, i) for i in range(n)]

    def __len__(self):
        return len(self.samples)


def scrape(port: int) -> dict:
    """{(name, rank, loader): value} of the ringloader samples."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("ringloader_"):
                out[s.name, s.labels["rank"], s.labels["loader"]] = s.value
    return out


@pytest.fixture(scope="module")
def jpeg(tmp_path_factory):
    p = tmp_path_factory.mktemp("metrics") / "a.jpg"
    p.write_bytes(jpeg_bytes("baseline", 200, 300))
    return str(p)


def test_serve_and_scrape(jpeg):
    registry = prom.CollectorRegistry()
    server, _ = ringloader.metrics.serve(0, registry=registry)
    try:
        port = server.server_port
        assert server.server_address[0] == "127.0.0.1"
        loaders = [
            ringloader.Loader(
                Repeated(jpeg, 24),
                batch_size=4,
                num_threads=1,
                transform=T.Resize((32, 32)),
                rank=r,
                world_size=2,
            )
            for r in (0, 1)
        ]
        for loader in loaders:
            for _ in loader:
                pass
        got = scrape(port)
        ranks = {k[1] for k in got}
        assert ranks == {"0", "1"}
        ids = {k[2] for k in got}
        assert len(ids) == 2
        for rank in ("0", "1"):
            (lid,) = {k[2] for k in got if k[1] == rank}
            v = {k[0]: val for k, val in got.items() if k[1:] == (rank, lid)}
            assert v["ringloader_images_per_second"] > 0
            assert v["ringloader_batches_per_second"] > 0
            assert 0 <= v["ringloader_stall_fraction"] <= 1
            assert v["ringloader_samples_decoded_total"] == 12
            assert v["ringloader_read_bytes_total"] == 12 * os.path.getsize(jpeg)
            assert v["ringloader_read_seconds_total"] > 0
            assert v["ringloader_decode_seconds_total"] > 0
            assert v["ringloader_errors_total"] == 0
            assert v["ringloader_http_requests_total"] == 0  # local files
            assert v["ringloader_queue_depth"] == 0
            assert v["ringloader_inflight_batches"] == 0
        # A second serve() on the same registry does not register twice.
        server2, _ = ringloader.metrics.serve(0, registry=registry)
        server2.shutdown()
        server2.server_close()
        # Loaders that are gone disappear from the next scrape.
        for loader in loaders:
            loader.close()
        del loader, loaders
        gc.collect()
        assert not any(k[2] in ids for k in scrape(port))
    finally:
        server.shutdown()
        server.server_close()


def test_default_registry_includes_process_metrics(jpeg):
    server, _ = ringloader.metrics.serve(0)
    try:
        loader = ringloader.Loader(
            Repeated(jpeg, 4), batch_size=2, num_threads=1, transform=T.Resize((32, 32))
        )
        next(iter(loader))
        with urllib.request.urlopen(
            f"http://127.0.0.1:{server.server_port}/metrics", timeout=10
        ) as r:
            text = r.read().decode()
        assert "ringloader_stall_fraction{" in text
        assert "python_info" in text
        loader.close()
    finally:
        server.shutdown()
        server.server_close()


def test_missing_prometheus_client_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"pip install ringloader\[metrics\]"):
        ringloader.metrics.serve(0)
