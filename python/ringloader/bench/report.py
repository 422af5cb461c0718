"""Tables of the harness's results: RESULTS.md of benchmarks/compare.py, the
comparison of ringloader builds, the report of benchmarks/bench_eval.py and
the text table of ``ringloader bench``.

A result is a dict from harness.measure or harness.Runner (the median
round, see harness.median_run); it is found by (contender, pipeline,
threads), the decode-only bound under any pipeline.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Optional

from .base import BASELINE, BOUND, LABELS, PIPELINES, label, split

TITLES = {
    "train": "Train: RandomResizedCrop(224) + flip",
    "eval": "Eval: Resize(256) + CenterCrop(224)",
    "ta": "Reference recipe: RandomResizedCrop(176) + flip + TrivialAugmentWide "
    "+ Normalize + RandomErasing(0.1)",
    "ta-plain": "The same without TrivialAugmentWide and RandomErasing",
    "train-norm": "Train: RandomResizedCrop(224) + flip + Normalize",
    "jitter": "RandomResizedCrop(224) + flip + ColorJitter(0.4, 0.4, 0.4) + Normalize",
    "randaug": "v2: RandomResizedCrop(224) + flip + RandAugment + Normalize",
    "timm-eval": "timm's eval recipe: " + PIPELINES["timm-eval"][6:],
    "timm-train": "timm's train recipe without auto_augment: "
    + PIPELINES["timm-train"][6:],
    "timm-train-random": "timm's train recipe, random interpolation: "
    + PIPELINES["timm-train-random"][6:],
    "timm-train-rkrc": "timm's train recipe, train_crop_mode rkrc: "
    + PIPELINES["timm-train-rkrc"][6:],
    "timm-train-rkrr": "timm's train recipe, train_crop_mode rkrr: "
    + PIPELINES["timm-train-rkrr"][6:],
    "timm-train-ra": "timm's default ImageNet train recipe: "
    + PIPELINES["timm-train-ra"][6:],
    "timm-ra": "RandomResizedCrop(224) + flip + timm's RandAugment "
    "(rand-m9-mstd0.5-inc1, random interpolation) + Normalize",
}


def fmt(v: Any, spec: str, suffix: str = "", none: str = "–") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, spec) + suffix


def find(
    results: list[dict], contender: str, pipeline: str, threads: int
) -> Optional[dict]:
    for r in results:
        if (
            r["contender"] == contender
            and r["threads"] == threads
            and r["pipeline"] in (pipeline, "any")
        ):
            return r
    return None


def rate(r: Optional[dict]) -> Optional[float]:
    """images/s of a result that ran, else None."""
    return None if r is None or "error" in r else r.get("images_per_s")


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a and b else None


def md_table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """A markdown table; ``align`` has one letter a column, l or r."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return ["| " + " | ".join(header) + " |", rule] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def contender_table(
    results: list[dict], pipeline: str, threads: int, order: list[str]
) -> list[str]:
    """RESULTS.md's table of one pipeline and thread count."""
    base = rate(find(results, BASELINE, pipeline, threads))
    bound = rate(find(results, BOUND, pipeline, threads))
    rows = []
    for name in order:
        r = find(results, name, pipeline, threads)
        if r is None:
            continue
        if "error" in r:
            rows.append([label(name), "could not run (below)"] + [""] * 6)
            continue
        v = r["images_per_s"]
        b = "**" if name.startswith("ringloader") else ""
        first = "–"
        if r.get("first_batch_s") is not None:
            first = f"{r['cold_first_batch_s']:.2f} / {r['first_batch_s']:.2f}"
        rows.append(
            [
                f"{b}{label(name)}{b}",
                f"{b}{v:.0f}{b}",
                fmt(ratio(v, base), ".2f", "×"),
                fmt(ratio(v, bound), ".2f", "×"),
                fmt(r["cpu_s_per_image"], ".4f"),
                fmt(r.get("peak_rss_mb"), ".0f"),
                fmt(r.get("peak_pss_mb"), ".0f"),
                first,
            ]
        )
    header = "contender|images/s|× DataLoader|× decode bound|CPU s/img|peak RSS MB|"
    header += "peak PSS MB|first batch s (cold / warm)"
    return md_table(header.split("|"), rows, "lrrrrrrr")


def builds_table(
    results: list[dict], builds: list[str], pipelines: list[str], threads: list[int]
) -> list[str]:
    """img/s of each build of ringloader by pipeline and thread count, the
    last build over the first, and each over the decode-only bound."""
    lines = []
    bases = sorted(
        {split(r["contender"])[0] for r in results if split(r["contender"])[1]}
    )
    for base in bases:
        new, old = builds[-1], builds[0]
        header = ["pipeline", "threads"] + [f"{b} img/s" for b in builds]
        header += [f"{new} / {old}"] + [f"{b} ÷ bound" for b in builds]
        rows = []
        for p in pipelines:
            for t in threads:
                v = [rate(find(results, f"{base}@{b}", p, t)) for b in builds]
                bound = rate(find(results, BOUND, p, t))
                rows.append(
                    [p, str(t)]
                    + [fmt(x, ".0f", none="failed") for x in v]
                    + [fmt(ratio(v[-1], v[0]), ".3f", "×")]
                    + [fmt(ratio(x, bound), ".2f", "×") for x in v]
                )
        lines += [f"{LABELS[base]}, by build:", ""]
        lines += md_table(header, rows, "lr" + "r" * (2 * len(builds) + 1)) + [""]
    return lines


def scaling_table(results: list[dict], names: list[str], threads: int) -> list[str]:
    rows = []
    for t in range(1, threads + 1):
        cells = []
        for c in names:
            v, one = (
                rate(find(results, c, "train", t)),
                rate(find(results, c, "train", 1)),
            )
            eff = f" ({v / (t * one):.0%})" if v and one and t > 1 else ""
            cells.append(fmt(v, ".0f") + eff)
        rows.append([str(t)] + cells)
    header = ["threads"] + [label(c) for c in names]
    return md_table(header, rows, "r" * (len(names) + 1))


def rounds_line(results: list[dict]) -> list[str]:
    """Every round's images/s, when there was more than one."""
    many = [r for r in results if len(r.get("rounds_images_per_s", ())) > 1]
    if not many:
        return []
    text = "; ".join(
        f"{tag(r, results)}: " + ", ".join(f"{v:.0f}" for v in r["rounds_images_per_s"])
        for r in many
    )
    n = max(len(r["rounds_images_per_s"]) for r in many)
    return [
        f"Images/s of each of the {n} rounds (the tables show the median): {text}",
        "",
    ]


def tag(r: dict, results: list[dict]) -> str:
    """contender/pipeline, with /threads when they vary, and the options."""
    tag = f"{r['contender']}/{r['pipeline']}"
    if len({x["threads"] for x in results}) > 1:
        tag += f"/{r['threads']}t"
    return tag + "".join(f",{k}={v}" for k, v in sorted(r.get("options", {}).items()))


NAMES = {"dataloader": "torch DataLoader", "ringloader": "ringloader"}


def eval_report(info: dict, cfg: dict[str, Any], results: list[dict]) -> str:
    """benchmarks/bench_eval.py's report (what `make demo` prints), in words
    a PyTorch user knows: passes over the data, memory counted once."""
    base = rate(next((r for r in results if r["contender"] == BASELINE), None))
    rows = []
    for r in results:
        name = NAMES.get(r["contender"], r["contender"])
        if "error" in r:
            last = [ln.strip() for ln in r["error"].splitlines() if ln.strip()] or [""]
            rows.append([name, "failed: " + last[-1].replace("|", "\\|")])
            rows[-1] += [""] * 5
            continue
        v = r["images_per_s"]
        cpu_ms = 1e3 * r["cpu_s_per_image"]
        cells = [(v, ".0f", ""), (ratio(v, base), ".2f", "x"), (cpu_ms, ".2f", "")]
        cells += [(r.get("peak_anon_mb"), ".0f", ""), (r.get("peak_rss_mb"), ".0f", "")]
        cells += [(r["first_batch_s"], ".3f", "")]
        rows.append([name] + [fmt(x, f, u, none="n/a") for x, f, u in cells])
    header = [
        "loader",
        "images/s",
        "speed vs DataLoader",
        "CPU ms per image",
        "working memory MB",
        "resident memory MB",
        "first batch s",
    ]
    threads = cfg["threads"]
    lines = [
        f"Data: {cfg['data']}: {cfg['data_desc']}.",
        f"Each loader: {PIPELINES['eval']}, uint8 output, batch size "
        f"{cfg['batch_size']}; DataLoader with {threads} worker processes, "
        f"ringloader with {threads} threads; one warm-up pass over the data "
        f"(not counted), then {cfg['epochs']} timed passes.",
        "",
        *md_table(header, rows, "lrrrrrr"),
        "",
        "What the columns mean:",
        "- images/s: images delivered per second over the timed passes (higher "
        "is better); speed vs DataLoader: that over torch's DataLoader's.",
        "- CPU ms per image: processor time the loader used per image, all its "
        "processes and threads and all cores added up (lower leaves more CPU "
        "for training).",
        "- working memory MB: the most memory the loader held at once for its "
        "data (heap, tensors, batches; sampled every 0.1 s), each page counted "
        "once even where processes share it.",
        "- resident memory MB: the same moment as `top` or `ps` count it, added "
        "up over the processes: program code included, and pages that "
        "DataLoader's worker processes share counted in each of them.",
        "- first batch s: seconds from the start of a timed pass to its first batch.",
        "",
    ]
    for r in results:
        if "error" in r:
            continue
        per_pass = ", ".join(
            f"{e['images'] / e['wall_s']:.0f}"
            for e in r["epochs"][r["warmup_epochs"] :]
        )
        load = r["loadavg_start"]
        busy = (
            f" (the machine was already busy: load {load:.1f} on "
            f"{info['cores']} cores; expect lower numbers than when idle)"
            if load > 0.5 * info["cores"]
            else ""
        )
        lines.append(
            f"- {NAMES.get(r['contender'], r['contender'])}: "
            f"{r['images_per_epoch']} images a pass; images/s of each timed pass: "
            f"{per_pass}; importing it took {r['import_s']:.1f} s, making the loader "
            f"{r['setup_s']:.2f} s, the very first batch "
            f"{r['epochs'][0]['first_batch_s']:.2f} s; {r.get('max_processes', '?')} "
            f"process(es){busy}. Settings: {'; '.join(r['notes'])}"
        )
        lines += [f"  - WARNING: {p}" for p in r.get("problems", [])]
    lines += [""]
    lines += rounds_line(results)
    v = info.get("versions", {})
    lines.append(
        f"Machine: {info['cpu']}, {info['cores']} cores, Linux {info['kernel']}, Python "
        f"{v.get('python', '?')}, torch {v.get('torch', '?')}, torchvision "
        f"{v.get('torchvision', '?')}, Pillow {v.get('pillow', '?')} (libjpeg-turbo "
        f"{v.get('pillow libjpeg-turbo', '?')}), ringloader {v.get('ringloader', '?')}; {info['date']}"
    )
    return "\n".join(lines)


def cli_table(
    results: list[dict], threads: list[int], pipeline: str, with_dl: bool
) -> list[str]:
    """The text table of ``ringloader bench``."""
    names = ["ringloader", BASELINE] if with_dl else ["ringloader"]
    head = ["threads", "ringloader img/s"]
    head += ["DataLoader img/s", "ratio"] if with_dl else []
    head += ["CPU ms/img ringloader", "CPU ms/img DataLoader"][: len(names)]
    widths = [len(h) for h in head]
    lines = [" | ".join(head), "-|-".join("-" * w for w in widths)]
    for t in threads:
        rs = [find(results, n, pipeline, t) for n in names]
        v = [rate(r) for r in rs]
        cells = [str(t)] + [fmt(x, ".1f", none="-") for x in v]
        cells += [fmt(ratio(*v), ".2f", "x", none="-")] if with_dl else []
        ms = [1e3 * r["cpu_s_per_image"] if x else None for x, r in zip(v, rs)]
        cells += [fmt(x, ".2f", none="-") for x in ms]
        lines.append(" | ".join(c.rjust(w) for c, w in zip(cells, widths)))
    return lines


def ratio_summary(
    results: list[dict], threads: list[int], pipeline: str
) -> Optional[str]:
    """ "ringloader / DataLoader: 4.17x to 4.48x (median 4.32x)"."""
    pairs = [
        [find(results, n, pipeline, t) for n in ("ringloader", BASELINE)]
        for t in threads
    ]
    ratios = [x for x in (ratio(rate(a), rate(b)) for a, b in pairs) if x]
    if not ratios:
        return None
    return (
        f"ringloader / DataLoader: {min(ratios):.2f}x to {max(ratios):.2f}x "
        f"(median {statistics.median(ratios):.2f}x)"
    )
