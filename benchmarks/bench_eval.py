"""Evaluation-pipeline benchmark: ringloader versus torch DataLoader.

What ``make demo`` runs. Both contenders read the same ImageFolder tree and
produce the same output, uint8 tensors of shape ``(B, 3, 224, 224)`` plus
int64 labels, with the classic evaluation transform ``Resize(256)`` followed
by ``CenterCrop(224)``:

* ``dataloader``: ``torch.utils.data.DataLoader`` over
  ``torchvision.datasets.ImageFolder`` (PIL decode) with ``num_workers``
  worker processes;
* ``ringloader``: ``ringloader.Loader`` over ``ringloader.ImageFolder`` with
  ``num_threads`` threads.

Each contender runs in a fresh subprocess (ringloader.bench's harness, as
benchmarks/compare.py) with one warm-up epoch, which also fills the page
cache, then ``--epochs`` timed epochs, and reports images/s, CPU seconds per
image over the whole process tree, the time to the first batch, and the
peak memory of the process tree: the sum of RSS, and the anonymous memory
(heap, tensors, shared-memory batches), which does not count pages shared
between the DataLoader's forked workers twice.

Usage::

    python benchmarks/bench_eval.py [--data DIR] [--batch-size 64] [--threads N]
                                    [--epochs 2] [--rounds 1] [--json OUT]
                                    [--plot PNG] [--check]

Without ``--data`` an ImageNet-like folder is built (once) in
``/tmp/ringloader-bench-data``. ``--plot PNG`` also draws images/s of each
loader (``make demo`` writes benchmarks/out/demo.png).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from dataclasses import replace
from typing import Any, Optional

from ringloader.bench import contenders, data, harness, report, system

DEFAULT_DATA = "/tmp/ringloader-bench-data"
CONTENDERS = ("dataloader", "ringloader")


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", help=f"ImageFolder root (default: build {DEFAULT_DATA})"
    )
    parser.add_argument(
        "--images",
        type=int,
        default=2000,
        help="images to build when --data is not given",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="DataLoader workers / ringloader threads",
    )
    parser.add_argument(
        "--epochs", type=int, default=2, help="timed epochs after the warm-up epoch"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs of each contender, round-robin (median)",
    )
    parser.add_argument(
        "--prefetch", type=int, default=4, help="ringloader prefetch depth (batches)"
    )
    parser.add_argument(
        "--only",
        choices=CONTENDERS,
        action="append",
        help="run only this contender (repeatable)",
    )
    parser.add_argument(
        "--json", metavar="OUT", help="also write the results as JSON to OUT"
    )
    parser.add_argument(
        "--plot",
        metavar="PNG",
        help="also plot images/s of each loader to PNG (needs matplotlib)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only verify that both loaders yield the same number of samples",
    )
    parser.add_argument(
        "--no-anon", action="store_true", help="do not sample PSS and anonymous memory"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds allowed per contender"
    )
    args = parser.parse_args(argv)
    if min(args.epochs, args.batch_size, args.threads, args.rounds) < 1:
        parser.error("--epochs, --batch-size, --threads and --rounds must be positive")
    return args


def run_check(spec: harness.Spec) -> int:
    """Both loaders in lockstep, in this process: the same number of
    samples (else failure), the same labels, and the mean absolute pixel
    difference where batches line up (the resize filters differ a little)."""
    import torch

    loaders = {}
    for name in CONTENDERS:
        c = contenders.make(replace(spec, contender=name))
        try:
            c.load()
            c.build()
        except Exception as exc:  # reported, then the check fails
            print(
                f"error: cannot create the {name} loader: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 2
        loaders[name] = c
    counts = dict.fromkeys(CONTENDERS, 0)
    labels: dict[str, list] = {name: [] for name in CONTENDERS}
    diffs = []
    epochs = [loaders[n].epoch(0) for n in CONTENDERS]
    for batches in itertools.zip_longest(*epochs):
        for name, batch in zip(CONTENDERS, batches):
            if batch is not None:
                counts[name] += int(batch[0].shape[0])
                labels[name].append(torch.as_tensor(batch[1]).flatten().to(torch.int64))
        ref, new = batches
        if ref is not None and new is not None and ref[0].shape == new[0].shape:
            diffs.append(
                (ref[0].to(torch.int16) - new[0].to(torch.int16))
                .abs()
                .flatten(1)
                .float()
                .mean(1)
            )
    for c in loaders.values():
        c.close()
    print(
        f"samples: dataloader {counts['dataloader']}, ringloader {counts['ringloader']}"
    )
    seqs = [torch.cat(v) if v else torch.empty(0) for v in labels.values()]
    print(f"label sequences identical: {torch.equal(*seqs)}")
    if diffs:
        per_image = torch.cat(diffs)
        print(
            f"mean |pixel difference| over {per_image.numel()} aligned images: {per_image.mean():.2f} (0-255 scale)"
        )
    if counts["dataloader"] != counts["ringloader"]:
        print("CHECK FAILED: different number of samples")
        return 1
    print("CHECK OK: same number of samples")
    return 0


def write_plot(path: str, results: list[dict], threads: int) -> str:
    """Bars of images/s, ringloader above DataLoader; says what it did."""
    from ringloader.bench import plots

    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        plots.throughput(path, results, ["eval"], threads, list(CONTENDERS)[::-1])
    except ImportError:
        return "Plot: not written: matplotlib is not installed (pip install matplotlib)"
    except OSError as e:
        return f"Plot: not written: {e}"
    return f"Plot: {os.path.abspath(path)}"


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.data:
        if not os.path.isdir(args.data):
            raise SystemExit(f"error: --data {args.data} is not a directory")
        root = os.path.abspath(args.data)
    else:
        root = data.build(DEFAULT_DATA, images=args.images)
    desc = data.summary(root)
    print(f"{root}: {desc}", file=sys.stderr)
    spec = harness.Spec(
        "ringloader",
        "eval",
        threads=args.threads,
        data=root,
        batch_size=args.batch_size,
        epochs=args.epochs,
        prefetch=args.prefetch,
    )
    if args.check:
        return run_check(spec)
    info = system.machine_info(sys.executable)
    specs = harness.plan(list(args.only or CONTENDERS), ["eval"], [args.threads], spec)
    runner = harness.Runner(
        subprocess=True, timeout=args.timeout, smaps=not args.no_anon
    )
    results = harness.run_rounds(specs, args.rounds, runner)
    cfg: dict[str, Any] = dict(vars(args), data=root, data_desc=desc)
    text = report.eval_report(info, cfg, results)
    print(text)
    if args.plot:
        print(write_plot(args.plot, results, args.threads))
    if args.json:
        harness.write_json(
            args.json,
            {"machine": info, "config": cfg, "results": results, "report": text},
        )
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
