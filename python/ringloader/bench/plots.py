"""Plots of the harness's results (matplotlib, optional: :func:`pyplot`
raises ImportError without it, and callers say so)."""

from __future__ import annotations

import textwrap
from typing import Any

from .base import BASELINE, BOUND, label
from .report import find, rate

COLOURS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput(
    path: str, results: list[dict], pipelines: list[str], threads: int, order: list[str]
) -> str:
    """Bars of images/s per contender, one panel a pipeline; returns path."""
    plt = pyplot()
    fig, axes = plt.subplots(
        1,
        len(pipelines),
        figsize=(7.2 * len(pipelines), 0.55 * len(order) + 1.8),
        squeeze=False,
    )
    for ax, pipeline in zip(axes[0], pipelines):
        rows = {c: find(results, c, pipeline, threads) for c in order}
        names = [c for c in order if rows[c] is not None][::-1]
        vals = [rate(rows[c]) or 0.0 for c in names]
        colours = [
            "#d62728"
            if c.startswith("ringloader")
            else "#7f7f7f"
            if c == BOUND
            else "#1f77b4"
            for c in names
        ]
        ax.barh(range(len(names)), vals, color=colours)
        ax.set_yticks(
            range(len(names)),
            [label(c).replace(" (", "\n(") for c in names],
            fontsize=9,
        )
        base, top = rate(rows.get(BASELINE)), max(vals + [1.0])
        for y, (c, v) in enumerate(zip(names, vals)):
            if rate(rows[c]) is None:
                ax.text(
                    top * 0.01,
                    y,
                    "could not run",
                    va="center",
                    fontsize=9,
                    color="#555555",
                )
                continue
            text = f"{v:.0f}" + (
                f"  ({v / base:.1f}× DataLoader)" if base and c != BASELINE else ""
            )
            ax.text(v + top * 0.01, y, text, va="center", fontsize=9)
        bound = rate(rows.get(BOUND))
        if bound:
            ax.axvline(bound, color="#7f7f7f", linestyle="--", linewidth=1)
        ax.set_xlim(0, top * 1.6)
        ax.set_xlabel("images / s (higher is better)")
        what = (
            "RandomResizedCrop+flip"
            if pipeline == "train"
            else "Resize 256 + CenterCrop 224"
        )
        ax.set_title(f"{pipeline}: {what}, {threads} cores", fontsize=11)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def scaling(
    path: str,
    results: list[dict],
    names: list[str],
    pipeline: str,
    threads: list[int],
    title: str,
) -> str:
    """images/s against threads, a line per contender with its linear
    extrapolation from 1 thread (when measured); returns path."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    palette = iter(COLOURS)
    for c in names:
        colour = "#7f7f7f" if c == BOUND else next(palette, "#000000")
        pts = [(t, rate(find(results, c, pipeline, t))) for t in threads]
        pts = [(t, v) for t, v in pts if v]
        if not pts:
            continue
        name = label(c) if c != BASELINE else "torch DataLoader (num_workers)"
        ax.plot(
            [t for t, _ in pts],
            [v for _, v in pts],
            "o-",
            color=colour,
            label=name,
            linewidth=2,
        )
        one = dict(pts).get(1)
        if one and len(threads) > 1:
            ax.plot(
                threads,
                [one * t for t in threads],
                ":",
                color=colour,
                alpha=0.6,
                label=f"{name}: linear",
            )
        for t, v in pts:
            ax.annotate(
                f"{v:.0f}",
                (t, v),
                textcoords="offset points",
                xytext=(6, -12),
                fontsize=9,
            )
    ax.set_xticks(threads)
    ax.set_xlabel("threads (ringloader) / worker processes (DataLoader)")
    ax.set_ylabel("images / s")
    ax.set_ylim(bottom=0)
    # Wrapped, so a long description is not cut at the figure's edge.
    ax.set_title(
        "\n".join(textwrap.fill(line, 80) for line in title.split("\n")), fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
