#!/usr/bin/env python3
"""Side-by-side benchmark of ringloader and the loaders people would otherwise use.

Every contender runs in a fresh subprocess pinned (``os.sched_setaffinity``)
to the same N cores, on the same ImageNet-like JPEG folder, with the same
batch size and the same output: uint8 NCHW 224x224 batches from

* the train pipeline: RandomResizedCrop(224) + RandomHorizontalFlip(), shuffled;
* the eval pipeline:  Resize(256) + CenterCrop(224), in order.

Each run does one warm-up epoch, then ``--epochs`` timed epochs, and records
images/s, CPU seconds per image (the contender's whole process tree), peak
resident memory of the process tree (sampled by this process) and the time
to the first batch; every contender runs ``--rounds`` times, round-robin,
and the report shows each one's median round.  The results go to RESULTS.md
and compare-results.json with plots in plots/.  The harness is
ringloader.bench (python/ringloader/bench/), with the peers of
benchmarks/rlbench.

Contenders (``--contenders``, comma separated):

  dataloader        torch DataLoader + torchvision ImageFolder (PIL decode)
  dataloader-tvio   torch DataLoader, torchvision.io.decode_jpeg + v2 transforms
  dali              NVIDIA DALI CPU pipeline
  spdl              SPDL pipeline, FFmpeg image decode
  ffcv              FFCV (the folder is first converted to a .beton file)
  decode-bound      full-image libjpeg-turbo decode from memory (decode_bound.c)
  ringloader        ringloader, uint8
  ringloader-float  ringloader, float32 normalised (ToDtype + Normalize)
  NAME@LABEL        a ringloader contender importing the build LABEL of --builds

Two builds of ringloader side by side: ``--builds old=DIR,new=DIR`` (each a
checkout's python/ folder with its _core built in place) runs
ringloader@old, ringloader@new and the decode-only bound (unless
--contenders says otherwise), prints img/s by build, pipeline and thread
count with new/old and each over the bound, and writes its report to
/tmp/ringloader-compare/builds (unless --out says otherwise).

Peers are installed into their own virtual environment (``--setup``; it reuses
torch/torchvision from the system site-packages).  A contender that cannot be
installed or run is reported with its error.

  python benchmarks/compare.py --setup            # full run, ~10 min on 2 cores
  python benchmarks/compare.py --images 300 --epochs 1 --no-scaling   # quick look
  python benchmarks/compare.py --builds old=/tmp/rl-old/python,new=python \\
      --recipes train,eval --threads 1,2 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

from ringloader.bench import base, contenders, data, harness, plots, report, system
from rlbench import peers  # benchmarks/rlbench: this script's folder is on sys.path
from rlbench.results import results_md

HERE = Path(__file__).resolve().parent
contenders.BOUND_SOURCE = HERE / "decode_bound.c"  # whichever ringloader.bench runs
contenders.register(peers)
DEFAULT_VENV = "/tmp/bench-venv"
BUILDS_OUT = os.path.join(harness.WORK_DIR, "builds")


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--data",
        help="ImageFolder root (default: build an ImageNet-like folder of --images "
        "files in /tmp/ringloader-compare-data-N)",
    )
    p.add_argument("--images", type=int, default=2000)
    p.add_argument(
        "--threads",
        type=harness.parse_threads,
        default=None,
        metavar="LIST",
        help="cores = threads = workers, e.g. 2 or 1,2 (default: all usable CPUs)",
    )
    p.add_argument("--pipelines", "--recipes", default="train,eval")
    p.add_argument(
        "--contenders",
        default=None,
        help="default: all (with --builds: the builds and the bound)",
    )
    p.add_argument(
        "--builds",
        type=harness.parse_builds,
        default={},
        metavar="LABEL=DIR,...",
        help="ringloader builds to compare: each DIR a python/ folder holding ringloader",
    )
    p.add_argument(
        "--epochs", type=int, default=2, help="timed epochs after the warm-up"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="run every contender this many times, round-robin, and report "
        "each one's median run (a shared machine's speed drifts over minutes)",
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument(
        "--prefetch", type=int, default=4, help="ringloader prefetch (batches)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out",
        default=None,
        help="where RESULTS.md and plots/ go (default: next to this script)",
    )
    p.add_argument(
        "--scaling",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run ringloader and DataLoader on 1..N threads (train)",
    )
    p.add_argument(
        "--venv",
        default=DEFAULT_VENV,
        help="the peers' virtual environment (made by --setup)",
    )
    p.add_argument(
        "--python",
        help="interpreter for the contenders (default: the venv's if it exists, else this one)",
    )
    p.add_argument(
        "--setup",
        action="store_true",
        help="create the venv and install the peers first",
    )
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = p.parse_args(argv)
    args.pipelines = [x for x in args.pipelines.split(",") if x]
    for x in args.pipelines:
        if x not in base.PIPELINES:
            p.error(f"unknown pipeline {x!r} (choose from {', '.join(base.PIPELINES)})")
    if args.contenders is None:
        builds = [f"ringloader@{b}" for b in args.builds]
        args.contenders = builds + [base.BOUND] if builds else list(base.LABELS)
    else:
        args.contenders = [x for x in args.contenders.split(",") if x]
    for x in args.contenders:
        if not contenders.known(x):
            p.error(
                f"unknown contender {x!r} (choose from {', '.join(base.LABELS)}, or ringloader*@LABEL)"
            )
        if base.split(x)[1] not in (None, *args.builds):
            p.error(f"{x}: no build {base.split(x)[1]!r} in --builds")
    args.cpus = system.cpus()
    args.threads = args.threads or [len(args.cpus)]
    if max(args.threads) > len(args.cpus):
        p.error(
            f"--threads must be in 1..{len(args.cpus)} (the CPUs this process may use)"
        )
    if min(args.epochs, args.batch_size, args.rounds) < 1:
        p.error("--epochs, --batch-size and --rounds must be positive")
    args.out = args.out or (BUILDS_OUT if args.builds else str(HERE))
    return args


def prepare_data(args: argparse.Namespace) -> str:
    if args.data:
        if not Path(args.data).is_dir():
            raise SystemExit(f"error: --data {args.data} is not a directory")
        return str(Path(args.data).resolve())
    root = f"/tmp/ringloader-compare-data-{args.images}"
    harness.log(f"building {args.images} ImageNet-like images in {root} (once)")
    return data.build(root, images=args.images)


def write_plots(
    args: argparse.Namespace, results: list, order: list, scaling: list, where: Path
) -> list[str]:
    """throughput.png; scaling.png (ringloader and DataLoader, train); with
    --builds and several thread counts, builds-PIPELINE.png."""
    where.mkdir(parents=True, exist_ok=True)
    top = max(args.threads)
    paths = [
        plots.throughput(
            str(where / "throughput.png"), results, args.pipelines, top, order
        )
    ]
    if scaling:
        path, title = str(where / "scaling.png"), "Thread scaling, train pipeline"
        ts = list(range(1, top + 1))
        paths.append(plots.scaling(path, results, scaling, "train", ts, title))
    if args.builds and len(args.threads) > 1:
        names = [c for c in order if base.split(c)[1] or c == base.BOUND]
        for pipeline in args.pipelines:
            path = str(where / f"builds-{pipeline}.png")
            title = f"ringloader builds, {report.TITLES[pipeline]}"
            paths.append(
                plots.scaling(path, results, names, pipeline, args.threads, title)
            )
    return paths


def profile_link(out: Path) -> Optional[str]:
    """The link from ``out``'s RESULTS.md to benchmarks/PROFILE.md, when
    ``out`` is in this checkout; None elsewhere (a link out of a scratch
    folder would lead through the machine's folders, and nowhere once the
    results are moved into the repository)."""
    root, where = HERE.parent, out.resolve()
    if where != root and root not in where.parents:
        return None
    return os.path.relpath(HERE / "PROFILE.md", where)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    command = "python benchmarks/compare.py " + " ".join(
        shlex.quote(a) for a in system.portable_command(given)
    )
    setup_errors = (
        peers.setup(args.venv) if args.setup else peers.setup_errors(args.venv)
    )
    if not args.python:
        venv_py = Path(args.venv) / "bin" / "python"
        if venv_py.exists():  # made by an older --setup, or by another Python
            peers.make_venv(args.venv)
        args.python = str(venv_py) if venv_py.exists() else sys.executable
    harness.log(f"contenders run with {args.python}")
    args.data = prepare_data(args)
    os.makedirs(harness.WORK_DIR, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):  # a fresh FFCV conversion, timed
        os.remove(os.path.join(harness.WORK_DIR, "data.beton"))

    info = system.machine_info(args.python, str(HERE))
    scaling = (
        [c for c in ("ringloader", "dataloader") if c in args.contenders]
        if args.scaling
        else []
    )
    template = harness.Spec(
        args.contenders[0],
        "train",
        threads=1,
        data=args.data,
        batch_size=args.batch_size,
        epochs=args.epochs,
        prefetch=args.prefetch,
        seed=args.seed,
    )
    specs = harness.plan(
        args.contenders,
        args.pipelines,
        args.threads,
        template,
        args.builds,
        tuple(scaling),
    )
    runner = harness.Runner(
        subprocess=True, python=args.python, cpus=args.cpus, timeout=args.timeout
    )
    results = harness.run_rounds(specs, args.rounds, runner)

    out = Path(args.out)
    main_results = [
        r
        for r in results
        if r["threads"] in args.threads and r["pipeline"] in (*args.pipelines, "any")
    ]
    scaling_results = [
        r for r in results if r["contender"] in scaling and r["pipeline"] == "train"
    ]
    order = base.ordered(args.contenders)
    written = write_plots(args, results, order, scaling, out / "plots")
    cfg = dict(
        vars(args),
        contenders=order,
        command=command,
        data_desc=data.summary(args.data),
        scaling=scaling,
        builds=list(args.builds),
        json_name="compare-results.json",
        setup_errors=setup_errors,
        profile=profile_link(out),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "RESULTS.md").write_text(results_md(cfg, info, results, written))
    payload = {
        "command": command,
        "machine": info,
        "builds": args.builds,
        "results": main_results,
        "scaling": scaling_results,
        "setup_errors": setup_errors,
    }
    harness.write_json(str(out / cfg["json_name"]), payload)
    for pipeline in args.pipelines:
        for t in args.threads:
            print(f"\n{report.TITLES[pipeline]}, {t} thread(s)\n")
            print("\n".join(report.contender_table(results, pipeline, t, order)))
    if args.builds:
        print()
        print(
            "\n".join(
                report.builds_table(
                    results, list(args.builds), args.pipelines, args.threads
                )
            )
        )
    harness.log(f"wrote {out / 'RESULTS.md'} and {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
