"""RESULTS.md and the plot of benchmarks/remote/compare.py: ringloader and
the other loaders on the same tar shards, from local disk, nginx (HTTP) and
an S3 API server (rclone's or moto's), side by side; the index timings; the
issue's targets."""

from __future__ import annotations

import os
from typing import Any, Optional

from ringloader.bench.report import fmt, md_table, rate, ratio

from .remote import LABELS, STORE
from .results import ringloader_line

LOCAL = "ringloader-local"
TARGET = 0.9  # ringloader over HTTP/S3 against its own local-disk rate
SERVER = {"http": "nginx", "s3": "s3"}  # the watched processes' names


def stores(s3: str) -> dict[str, str]:
    """What each store is called, with ``s3`` the S3 server's name."""
    return {"local": "local disk", "http": "nginx (HTTP)", "s3": f"{s3} (S3 API)"}


def label(name: str) -> str:
    return LABELS.get(name, name)


def _find(results: list[dict], name: str) -> Optional[dict]:
    return next((r for r in results if r["contender"] == name), None)


def _server_cpu(r: dict) -> Optional[float]:
    """CPU s/img of the server this contender reads from (None: local)."""
    server = SERVER.get(STORE.get(r["contender"], "local"))
    watched = r.get("watched_cpu_s_per_image") or {}
    return watched.get(server) if server else None


def reference(name: str) -> str:
    """The local-disk contender a remote one is compared with: the one
    with the same order of samples."""
    return LOCAL + "-runs" if name.endswith("-runs") else LOCAL


def contender_table(results: list[dict], order: list[str], s3: str) -> list[str]:
    rows = []
    for name in order:
        r = _find(results, name)
        if r is None:
            continue
        store = stores(s3)[STORE.get(name, "local")]
        if "error" in r:
            rows.append([label(name), store, "could not run (below)"] + [""] * 7)
            continue
        v = r["images_per_s"]
        local = rate(_find(results, reference(name)))
        b = "**" if name.startswith("ringloader") else ""
        counters = r.get("counters_per_image") or {}
        io_cpu = counters.get("io_cpu_s")
        first = "–"
        if r.get("first_batch_s") is not None:
            first = f"{r['cold_first_batch_s']:.2f} / {r['first_batch_s']:.2f}"
        rows.append(
            [
                f"{b}{label(name)}{b}",
                store,
                f"{b}{v:.0f}{b}",
                fmt(ratio(v, local), ".2f", "×"),
                fmt(1e3 * r["cpu_s_per_image"], ".3f"),
                fmt(None if io_cpu is None else 1e3 * io_cpu, ".3f"),
                fmt(None if _server_cpu(r) is None else 1e3 * _server_cpu(r), ".3f"),
                fmt(r.get("peak_rss_mb"), ".0f"),
                fmt(r.get("peak_pss_mb"), ".0f"),
                first,
            ]
        )
    header = [
        "contender",
        "reads from",
        "images/s",
        "× ringloader-local (same order)",
        "CPU ms/img (loader)",
        "I/O thread CPU ms/img",
        "server CPU ms/img",
        "peak RSS MB",
        "peak PSS MB",
        "first batch s (cold / warm)",
    ]
    return md_table(header, rows, "llrrrrrrrr")


def _io_cpu(r: Optional[dict]) -> Optional[float]:
    return ((r or {}).get("counters_per_image") or {}).get("io_cpu_s")


def targets(
    results: list[dict], s3: str, server_cpus: Optional[list[int]] = None
) -> list[str]:
    """The issue's two targets, each ringloader remote contender checked:
    against its own local-disk rate, and against every peer (all of them,
    and those reading from the same server). ``server_cpus``: the CPUs the
    servers were pinned to, apart from the contenders' (None: shared)."""
    where = (
        f"on CPUs {server_cpus} of its own"
        if server_cpus
        else "on the contender's own cores"
    )
    peers = [
        r for r in results if not r["contender"].startswith("ringloader") and rate(r)
    ]

    def versus(v: float, group: list[dict], what: str) -> str:
        best = max(group, key=lambda r: r["images_per_s"], default=None)
        if best is None:
            return f"no peer {what} ran"
        b = best["images_per_s"]
        verdict = "ahead of every peer" if v > b else "**behind** the best peer"
        return (
            f"{verdict} {what} ({label(best['contender'])}, {b:.0f} img/s; "
            f"{v / b:.2f}×)"
        )

    lines = []
    for name in (
        "ringloader-http",
        "ringloader-s3",
        "ringloader-http-runs",
        "ringloader-s3-runs",
        "ringloader-http-blocks",
        "ringloader-s3-blocks",
    ):
        r = _find(results, name)
        v = rate(r)
        local = rate(_find(results, reference(name)))
        if r is None or v is None or local is None:
            lines.append(f"- {label(name)}: not measured")
            continue
        x = v / local
        met = "met" if x >= TARGET else "**not met**"
        store = STORE[name]
        same = [p for p in peers if STORE.get(p["contender"]) == store]
        server = _server_cpu(r)
        lines.append(
            f"- {label(name)}: {v:.0f} img/s = {x:.2f}× {reference(name)} (target ≥ "
            f"{TARGET}×: {met}); {versus(v, peers, 'of this run')}; "
            f"{versus(v, same, f'on {stores(s3)[store]}')}"
            + (
                f"; the server spent {1e3 * server:.3f} ms CPU per image"
                if server is not None
                else ""
            )
        )
        if name == "ringloader-s3" and server and s3 == "rclone":
            lines.append(
                "  - ringloader sends one ranged GET per sample; rclone's server "
                f"spends {1e3 * server:.2f} ms of CPU per GET (signature check, a "
                f"file opened per request) {where}. With "
                "`cache_limit` (the -blocks rows) the members come in GETs of "
                "blocks of neighbours instead, a few per shard."
            )
        mine, local_io = _io_cpu(r), _io_cpu(_find(results, reference(name)))
        if server_cpus and x < TARGET and mine is not None and local_io is not None:
            what = (
                "the block GETs, each written into the cache file as it arrives "
                "and its members read back"
                if name.endswith("-blocks")
                else "a GET per sample: libcurl, the sockets"
            )
            lines.append(
                "  - with the servers apart, the gap is ringloader's own I/O: its "
                f"I/O thread spends {1e3 * mine:.3f} ms per image ({what}) against "
                f"{1e3 * local_io:.3f} locally, on the cores that decode."
            )
        if name == "ringloader-s3" and server and s3 == "moto":
            lines.append(
                "  - ringloader sends one ranged GET per sample; moto's server is one "
                "Python process (werkzeug, a thread per connection, `Connection: close` "
                f"on every response), so at {1e3 * server:.2f} ms of its CPU per GET it "
                f"serves at most about {1 / server:.0f} GETs/s on a whole core, "
                f"{where}: this row measures moto's cost per "
                "request, not S3's (an S3 endpoint serves each GET on its own fleet). "
                "The WebDataset-style peers send one GET per shard (or per 5 MiB "
                "block) and hardly load it."
            )
    return lines


def index_table(index: list[dict]) -> list[str]:
    rows = [
        [
            i["what"],
            i["how"],
            fmt(i.get("seconds"), ".3f", none="failed"),
            fmt(
                1e3 * i["seconds"] / i["shards"] if i.get("seconds") else None,
                ".1f",
                none="–",
            ),
            i.get("error", ""),
        ]
        for i in index
    ]
    return md_table(
        ["shards", "how the index is made", "seconds (all shards)", "ms / shard", ""],
        rows,
        "llrrl",
    )


HOW = (
    "How it is measured: the harness of benchmarks/compare.py (ringloader.bench). "
    "Each contender runs in a fresh subprocess pinned to the same cores, "
    "{rounds} time(s), round-robin, and the table shows each one's median run; in each run one "
    "warm-up epoch (untimed: connections, page cache, workers), then {epochs} timed "
    "epoch(s); images/s is the images of the timed epochs over their wall time. CPU "
    "ms/img (loader) is the user + system time of the contender's process tree (its "
    "threads, DataLoader workers) over the timed epochs; the servers are not in it. "
    "Server CPU ms/img is the CPU time of the process serving the contender's reads "
    "(nginx, or the S3 server in a process of its own) over the same timed epochs, "
    "read with psutil before and after each epoch by the contender's process: "
    "{layout}. I/O thread CPU ms/img "
    "(ringloader only) is the growth of `Loader.stats()['io_cpu_seconds']` (the CPU "
    "time of ringloader's I/O thread in its batch reads: io_uring submissions locally, "
    "libcurl's transfers remotely) over the timed epochs. Peak RSS / PSS: the "
    "contender's process tree, sampled every 0.1 s / 0.3 s. First batch: cold = from "
    "building the loader (shard indexes included) to the first batch of the warm-up "
    "epoch, warm = median over the timed epochs."
)


def _layout(cfg: dict[str, Any]) -> str:
    """Where the servers ran, against the contenders' CPUs."""
    mine = cfg["cpus"][: cfg["threads"]]
    if cfg.get("server_cpus"):
        return (
            f"the servers are pinned to CPUs {cfg['server_cpus']} and the contenders "
            f"to CPUs {mine}, so the servers' CPU time is not taken from the loader's, "
            "as with a store on machines of its own"
        )
    return (
        f"the servers run on the contenders' CPUs {mine}, so their CPU time is taken "
        "from the loader's"
    )


def results_md(
    cfg: dict[str, Any], info: dict, results: list[dict], plot: Optional[str]
) -> str:
    """``cfg``: command, data, data_desc, shards_desc, contenders (in order),
    rounds, epochs, threads, batch_size, prefetch, cpus, servers (text),
    index (list of dicts), upload_s, json_name, versions (extra)."""
    v = dict(info.get("versions", {}))
    v.update(cfg.get("versions", {}))
    for r in results:
        v.update(r.get("versions", {}))
    load = info["loadavg_start"][0]
    lines = [
        "# Tar shards over HTTP and S3: ringloader vs. the other loaders",
        "",
        "Made by `benchmarks/remote/compare.py`; rerun with:",
        "",
        "```sh",
        cfg["command"],
        "```",
        "",
        f"- date: {info['date']}",
        f"- machine: {info.get('cpu', '?')}, {info['cores']} cores (contenders pinned to "
        f"CPUs {cfg['cpus'][: cfg['threads']]}"
        + (f", servers to CPUs {cfg['server_cpus']}" if cfg.get("server_cpus") else "")
        + f"), {info.get('ram_gb', 0):.0f} GiB RAM, "
        f"Linux {info['kernel']}; 1-min load average at start {load:.2f}",
        f"- data: {cfg['shards_desc']}; the images: {cfg['data_desc']}",
        f"- servers, on 127.0.0.1: {cfg['servers']}",
        f"- batch size {cfg['batch_size']}, {cfg['threads']} threads / workers, 1 warm-up "
        f"epoch + {cfg['epochs']} timed epochs; ringloader prefetch {cfg['prefetch']}",
        "- " + ringloader_line(v.get("ringloader"), v.get("ringloader commit")),
        "- versions: "
        + ", ".join(
            f"{k} {x}" for k, x in sorted(v.items()) if not k.startswith("ringloader")
        ),
        "",
        "Every contender yields the same batches: uint8 (B, 3, 224, 224) contiguous NCHW "
        "tensors with int64 labels, RandomResizedCrop(224) + RandomHorizontalFlip, "
        "shuffled, from the same shards (DataLoader + ImageFolder: from the same JPEG "
        "files, unpacked). ringloader reads each sample's image member by its byte range "
        "(one ranged read or GET per sample); the WebDataset-style peers read each shard "
        "whole, in order, with a shuffle buffer.",
        "",
        HOW.format(rounds=cfg["rounds"], epochs=cfg["epochs"], layout=_layout(cfg)),
        "",
    ]
    if load > 0.5:
        lines += [
            f"> Note: the machine was not idle (load average {load:.2f} at start, per-run "
            "load averages in the notes): these numbers are noisy.",
            "",
        ]
    lines += ["## Train: RandomResizedCrop(224) + flip", ""]
    s3 = cfg.get("s3_server", "moto")
    lines += contender_table(results, cfg["contenders"], s3) + [""]
    lines += ["The issue's targets (from 127.0.0.1):", ""]
    lines += targets(results, s3, cfg.get("server_cpus")) + [""]
    if plot:
        lines += [f"![throughput](plots/{os.path.basename(plot)})", ""]
    lines += [
        "## Shard indexes",
        "",
        "ringloader reads a sample by the byte range of its image member, so each shard "
        "needs an index (member names, offsets, sizes, labels). Locally it is written "
        "next to the shard (`<shard>.idx.npz`) on first use. For the HTTP and S3 runs "
        "above the index is **prebuilt**: the sidecar made locally is uploaded (served) "
        "next to the shard, and each run fetches it into a fresh cache directory during "
        "set-up (in the cold first batch, not in the timed epochs). Without a sidecar, "
        "ringloader builds the index in one streaming pass over the shard (the "
        "`nosidecar/` copies, the same bytes with no sidecar beside them). Once cached, "
        "a later use only checks each shard's size and ETag (a HEAD). Timed once per "
        f"command in the parent process; uploading the objects to the S3 server took "
        f"{cfg['upload_s']:.1f} s.",
        "",
    ]
    lines += index_table(cfg["index"]) + [""]
    failed = [r for r in results if "error" in r]
    lines += ["## Could not run", ""]
    if not failed:
        lines += ["Every contender ran.", ""]
    for r in failed:
        lines += [
            f"### {label(r['contender'])}",
            "",
            f"Failed during {r.get('error_phase', 'run')}: `{r['error'][:500]}`",
            "",
        ]
        tb = r.get("traceback", "").strip()
        if tb:
            lines += ["```", "\n".join(tb.splitlines()[-20:]), "```", ""]
    lines += ["## Notes per contender", ""]
    for r in results:
        if "error" in r:
            continue
        extra = []
        if r.get("index_s") is not None:
            extra.append(f"index in set-up {r['index_s']:.3f} s")
        c = r.get("counters_per_image") or {}
        if c.get("read_s") is not None:
            extra.append(
                f"`read_seconds` {1e3 * c['read_s']:.3f} ms/img (the I/O thread's wall "
                f"time in batch reads), `decode_seconds` {1e3 * c.get('decode_s', 0):.3f} "
                "ms/img (the decode threads' wall time)"
            )
        watched = r.get("watched_cpu_s_per_image") or {}
        if watched:
            extra.append(
                "servers' CPU ms/img: "
                + ", ".join(f"{k} {1e3 * x:.3f}" for k, x in sorted(watched.items()))
            )
        if r.get("import_s") is not None:
            extra.append(f"import {r['import_s']:.1f} s")
        for p in r.get("problems", []):
            extra.append(f"WARNING: {p}")
        lines.append(
            f"- **{label(r['contender'])}**: " + "; ".join(r.get("notes", []) + extra)
        )
    lines.append("")
    loads = [
        f"{r['contender']}: {r['loadavg_start']:.2f}"
        for r in results
        if "loadavg_start" in r
    ]
    if loads:
        lines += ["1-min load average when each run started: " + ", ".join(loads), ""]
    many = [r for r in results if len(r.get("rounds_images_per_s", ())) > 1]
    if many:
        lines += [
            "Images/s of each round (the table shows the median): "
            + "; ".join(
                f"{r['contender']}: "
                + ", ".join(f"{x:.0f}" for x in r["rounds_images_per_s"])
                for r in many
            ),
            "",
        ]
    lines += [f"Raw numbers: `{cfg['json_name']}` (next to this file).", ""]
    return "\n".join(lines)


def plot(
    path: str,
    results: list[dict],
    order: list[str],
    threads: int,
    server_cpus: Optional[list[int]] = None,
) -> str:
    """Bars of images/s per contender, coloured by where it reads from,
    with × ringloader-local; returns ``path``."""
    from ringloader.bench.plots import pyplot

    plt = pyplot()
    names = [n for n in order if _find(results, n) is not None][::-1]
    vals = [rate(_find(results, n)) or 0.0 for n in names]
    colours = {"local": "#7f7f7f", "http": "#1f77b4", "s3": "#ff7f0e"}
    fig, ax = plt.subplots(figsize=(10.0, 0.55 * len(names) + 1.8))
    ax.barh(
        range(len(names)),
        vals,
        color=[colours[STORE.get(n, "local")] for n in names],
        edgecolor=["#d62728" if n.startswith("ringloader") else "none" for n in names],
        linewidth=2,
    )
    ax.set_yticks(range(len(names)), [label(n) for n in names], fontsize=8)
    top = max(vals + [1.0])
    for y, (n, v) in enumerate(zip(names, vals)):
        text = "could not run" if not v else f"{v:.0f}"
        local = rate(_find(results, reference(n)))
        if v and local and n != reference(n):
            text += f"  ({v / local:.2f}× {reference(n)})"
        ax.text(v + top * 0.01, y, text, va="center", fontsize=8)
    ax.set_xlim(0, top * 1.75)
    ax.set_xlabel("images / s (higher is better)")
    ax.set_title(
        f"Tar shards, RandomResizedCrop+flip, {threads} "
        f"core{'s' if threads != 1 else ''} for the loader, "
        + (
            f"the servers on CPUs {server_cpus} of their own\n"
            if server_cpus
            else "shared with the servers\n"
        )
        + "grey: local disk, blue: nginx (HTTP), orange: the S3 API server",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
