"""RESULTS.md, the report of benchmarks/compare.py: the set-up, the tables
of report.py by pipeline and thread count (and by build), the plots, thread
scaling, what could not run and why, notes per contender, every round."""

from __future__ import annotations

import os
from typing import Any

from ringloader.bench.base import AUGMENT, LABELS, label, split
from ringloader.bench.report import (
    TITLES,
    tag,
    builds_table,
    contender_table,
    rounds_line,
    scaling_table,
)


def _failures(results: list[dict], setup_errors: dict[str, str]) -> list[str]:
    failed = [r for r in results if "error" in r]
    lines = ["## Could not run", ""] + (
        ["Every contender ran.", ""] if not failed else []
    )
    seen = set()
    for r in failed:
        if (r["contender"], r["error"]) in seen:
            continue
        seen.add((r["contender"], r["error"]))
        lines += [
            f"### {label(r['contender'])} ({r['pipeline']} pipeline, {r['threads']} threads)",
            "",
            f"Failed during {r.get('error_phase', 'run')}: `{r['error'][:500]}`",
            "",
        ]
        install = setup_errors.get(split(r["contender"])[0])
        if install:
            lines += ["Installation:", "", "```", install.strip(), "```", ""]
        tb = r.get("traceback", "").strip()
        if tb:
            lines += ["```", "\n".join(tb.splitlines()[-20:]), "```", ""]
    return lines


def _notes(results: list[dict]) -> list[str]:
    lines, noted = ["## Notes per contender", ""], set()
    for r in results:
        if "error" in r or r["contender"] in noted:
            continue
        noted.add(r["contender"])
        extra = []
        for key, text in (
            ("conversion_s", "dataset conversion {:.1f} s"),
            ("beton_mb", ".beton file {:.0f} MB"),
            ("import_s", "import {:.1f} s"),
            ("ffmpeg", "libavcodec {}"),
            ("io_backend", "I/O {}"),
        ):
            if r.get(key) is not None:
                extra.append(text.format(r[key]))
        if r.get("conversion_reused"):
            extra.append("conversion reused from an earlier run of this command")
        if r.get("build"):
            extra.append(
                ringloader_line(r.get("ringloader_version"), r.get("ringloader_commit"))
            )
        lines.append(
            f"- **{label(r['contender'])}**: " + "; ".join(r.get("notes", []) + extra)
        )
    loads = [
        f"{tag(r, results)}: {r['loadavg_start']:.2f}"
        for r in results
        if "loadavg_start" in r
    ]
    lines.append("")
    if loads:
        lines += ["1-min load average when each run started: " + ", ".join(loads), ""]
    return lines


def _threads(threads: list[int]) -> str:
    return (
        str(threads[0])
        if len(threads) == 1
        else "{" + ", ".join(map(str, threads)) + "}"
    )


HOW = (
    "How it is measured: each contender runs in a fresh subprocess pinned to the same "
    "cores, {rounds} times, round-robin (every contender once, then again), and the "
    "tables show each one's median run, since a shared machine's speed drifts over "
    "minutes; images/s is the images of the timed epochs over their wall time; CPU "
    "s/img is the user + system time of the contender's whole process tree (itself, "
    "its workers and threads) over the timed epochs, per image: a CPU s/img well below "
    "threads / (images/s) means the contender could not keep the cores busy; peak RSS "
    "/ PSS is the sum over the process tree, sampled every 0.1 s (PSS every 0.3 s) by "
    "the parent (RSS counts pages shared by forked workers once per process, PSS "
    "splits them); first batch: cold = from building the loader to the first batch of "
    "the warm-up epoch, warm = median over the timed epochs from `iter()` to the first "
    "batch. The decode-only bound decodes every file in full (libjpeg defaults, as "
    "Pillow) from memory on all threads and does nothing else: no crop, resize, "
    "batching or I/O."
)


def ringloader_line(version: Any, commit: Any) -> str:
    """Which ringloader ran: its version and commit, never its folder."""
    return f"ringloader {version or '?'}, commit {commit or 'unknown'}"


def results_md(
    cfg: dict[str, Any], info: dict, results: list[dict], plots: list[str]
) -> str:
    """RESULTS.md. ``cfg``: command, data, data_desc, contenders, pipelines,
    threads, scaling (contenders), builds (labels), batch_size, epochs,
    prefetch, rounds, cpus, json_name, setup_errors."""
    v = info.get("versions", {})
    threads = cfg["threads"]
    load = info["loadavg_start"][0]
    lines = [
        "# ringloader vs. the other loaders",
        "",
        "Made by `benchmarks/compare.py`; rerun with:",
        "",
        "```sh",
        cfg["command"],
        "```",
        "",
        f"- date: {info['date']}",
        f"- machine: {info.get('cpu', '?')}, {info['cores']} cores (contenders pinned to "
        f"CPUs {cfg['cpus'][: max(threads)]}), {info.get('ram_gb', 0):.0f} GiB RAM, Linux "
        f"{info['kernel']}; 1-min load average at start {load:.2f}",
        f"- data: `{os.path.basename(cfg['data'].rstrip('/'))}`: {cfg['data_desc']}",
        f"- batch size {cfg['batch_size']}, {_threads(threads)} threads / workers, "
        f"1 warm-up epoch + {cfg['epochs']} timed epochs; ringloader prefetch {cfg['prefetch']}",
        "- versions: "
        + ", ".join(f"{k} {x}" for k, x in v.items() if not k.startswith("ringloader")),
        "- " + ringloader_line(v.get("ringloader"), v.get("ringloader commit")),
    ]
    lines += [
        "",
        "Every contender yields the same batches: uint8 (B, 3, 224, 224) contiguous NCHW "
        "tensors (float32 normalised for *ringloader float32*), with labels. Train: "
        "RandomResizedCrop(224) + RandomHorizontalFlip, shuffled. Eval: Resize(256) + "
        "CenterCrop(224), in order."
        + (
            " The augmentation recipes (ta, ta-plain, jitter, randaug) are torchvision "
            "transform objects given as they are to both loaders (DataLoader + "
            "ImageFolder, and ringloader, which fuses them): float32 normalised "
            "batches of their crop size, shuffled. The timm recipes (timm-eval, "
            "timm-train, timm-train-random, timm-train-rkrc, timm-train-rkrr, "
            "timm-train-ra) are the objects timm's "
            "create_transform makes, given the same way: DataLoader + ImageFolder "
            "with them is timm's own loader without its prefetcher (PIL decode, "
            "timm's transforms in the workers); timm-eval is not shuffled. timm's "
            "RandAugment (timm-ra, timm-train-ra) posterizes as before Pillow 13 "
            "for both loaders: Pillow 13 refuses the 0 bits it draws, and timm's "
            "own loader would stop with a ValueError."
            if set(cfg.get("pipelines", [])) & set(AUGMENT)
            else ""
        ),
        "",
        HOW.format(rounds=cfg["rounds"]),
        "",
    ]
    if load > 0.5:
        lines += [
            f"> Note: the machine was not idle (load average {load:.2f} at start, per-run "
            "load averages in the notes): these numbers are noisy.",
            "",
        ]
    order = [c for c in cfg["contenders"] if split(c)[0] in LABELS]
    for pipeline in cfg["pipelines"]:
        lines += [f"## {TITLES[pipeline]}", ""]
        for t in threads:
            if len(threads) > 1:
                lines += [f"### {t} thread(s)", ""]
            lines += contender_table(results, pipeline, t, order) + [""]
    if cfg.get("builds"):
        lines += ["## ringloader builds", ""]
        lines += builds_table(results, cfg["builds"], cfg["pipelines"], threads)
    for p in plots:
        lines += [
            f"![{os.path.splitext(os.path.basename(p))[0]}](plots/{os.path.basename(p)})",
            "",
        ]
    if cfg.get("scaling"):
        lines += ["## Thread scaling (train pipeline)", ""]
        lines += scaling_table(results, cfg["scaling"], max(threads))
        lines += ["", "(in brackets: scaling efficiency against 1 thread)", ""]
    lines += _failures(results, cfg.get("setup_errors", {})) + _notes(results)
    lines += rounds_line(results)
    # A link only where it leads within the repository (out inside it).
    profile = cfg.get("profile")
    profile = f"[PROFILE.md]({profile})" if profile else "`benchmarks/PROFILE.md`"
    lines += [
        f"Raw numbers: `{cfg['json_name']}` (next to this file). Where ringloader's time "
        f"goes (perf, by library and kernel): {profile}, made with "
        "`benchmarks/profile_decode.py`.",
        "",
    ]
    return "\n".join(lines)
