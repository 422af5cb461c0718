"""bench_hf.py's ``ringloader.Parquet (HTTP)`` contender: the same Parquet
files as ``ringloader.Parquet`` reads from disk, served by nginx on
127.0.0.1 (rlbench.servers), and its figures against the local reader's.

Both extract into a fresh cache directory each run, so each first batch
includes the one-time extract (over HTTP by range GETs; from the local
disk), and the steady img/s reads the extract alike. The ratios HTTP ÷
local are taken run by run within a round, then their median.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Optional

HTTP = "ringloader.Parquet (HTTP)"
LOCAL = "ringloader.Parquet"


@contextlib.contextmanager
def serving(folder: str, contenders: list) -> Iterator[Optional[str]]:
    """nginx serving ``folder`` while the block runs: its URL, or None
    when the HTTP contender is not among ``contenders``. Where nginx is
    not installed, the contender is taken out of ``contenders`` (in
    place), with a line saying so."""
    if HTTP not in contenders:
        yield None
        return
    from rlbench.servers import Nginx, find_nginx

    if find_nginx() is None:
        print(f"nginx is not installed (apt-get install nginx): {HTTP} not run")
        contenders.remove(HTTP)
        yield None
        return
    with Nginx(folder) as server:
        yield server.url


def url_of(base: Optional[str], folder: str) -> str:
    """The URL that serves ``folder`` (a data set's folder beside its
    ``.parquet`` file) from nginx at ``base``."""
    if base is None:
        raise RuntimeError(f"{HTTP}: no server is running")
    return f"{base}/{os.path.basename(folder)}"


def _ratio_runs(http: dict, local: dict, key: str) -> list:
    return [
        round(h / lo, 2)
        for h, lo in zip(http.get(key, []), local.get(key, []))
        if h and lo
    ]


def pair(by: dict) -> None:
    """Adds to the HTTP contender's result in ``by`` (contender ->
    result) ``vs_local``: img/s and first-batch seconds HTTP ÷ local, run
    by run within a round and their medians."""
    http, local = by.get(HTTP, {}), by.get(LOCAL, {})
    if "error" in http or "error" in local or not http or not local:
        return
    out: dict = {}
    for key in ("img_s", "first_batch_s"):
        runs = _ratio_runs(http, local, f"{key}_runs")
        out[f"{key}_runs"] = runs
        out[key] = sorted(runs)[len(runs) // 2] if runs else None
    http["vs_local"] = out


def table(results: dict) -> str:
    """HTTP against local, a row a data set and transform; empty when the
    HTTP contender did not run."""
    if HTTP not in results["contenders"]:
        return ""
    out = [
        f"| data | transform | {LOCAL} img/s | {HTTP} img/s "
        "| img/s HTTP ÷ local | local first batch | HTTP first batch "
        "| first batch HTTP ÷ local |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]

    def row(data: str, tf: str, by: dict) -> None:
        http, local = by[HTTP], by[LOCAL] if LOCAL in by else {"error": "not run"}
        v: Any = http.get("vs_local")
        if v is None:
            why = http.get("error") or local.get("error") or "no ratio"
            out.append(f"| {data} | {tf} | {why} | | | | | |")
            return
        out.append(
            f"| {data} | {tf} | {local['img_s']:,.0f} | {http['img_s']:,.0f} "
            f"| {v['img_s']:.2f}x | {local['first_batch_s']:.2f} s "
            f"| {http['first_batch_s']:.2f} s | {v['first_batch_s']:.2f}x |"
        )

    for tf, by in results["throughput"].items():
        row(f"{results['images']:,} ImageNet-like", tf, by)
    for k, n in enumerate(results["rows"]):
        by = {who: results["memory"][who][k] for who in results["contenders"]}
        row(f"{n:,} small", "train", by)
    return "\n".join(out)
