"""The benchmark harness: runs contenders, round-robin, and measures them.

DESIGN. A run is a :class:`Spec` (contender, pipeline, threads, data and
settings; plain JSON). :func:`measure` runs one in this process: import
(timed), set-up (timed), ``warmup`` untimed epochs, then ``epochs`` timed
ones, each recording images, wall time, the CPU time of the whole process
tree and the time to its first batch. A :class:`Runner` runs a spec either
that way or in a fresh child process pinned to ``threads`` CPUs, whose
memory the parent samples (system.py); :func:`run_rounds` runs a plan of
specs ``rounds`` times, every spec once per round in the same order, so a
machine whose speed drifts slows every contender alike, and keeps each
spec's median round, with every round's images/s listed.

The child is ``python -c BOOTSTRAP``: it loads this package from its
folder under the name ``_ringloader_bench``, so that ``import ringloader``
in a contender finds the ringloader under test, which need not be the one
this package belongs to: ``ringloader@old`` runs with ``PYTHONPATH`` set to
that build's ``python/`` folder (another checkout, its ``_core`` built in
place). Hence no module of this package imports ``ringloader`` at its top
or another module of ringloader by a relative import. The child prints its
result as one JSON line after RESULT_TAG.

An external contender (the decode-only bound) is a program: it runs pinned
and sampled like a child, and reports its own numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Optional

from . import base, contenders, system

RESULT_TAG = "@@bench-result@@ "
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
WORK_DIR = "/tmp/ringloader-compare"
BOOTSTRAP = (
    "import importlib.util, sys\n"
    "where = sys.argv[1]\n"
    "spec = importlib.util.spec_from_file_location('_ringloader_bench', where + "
    "'/__init__.py', submodule_search_locations=[where])\n"
    "bench = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = bench\n"
    "spec.loader.exec_module(bench)\n"
    "from _ringloader_bench.harness import child_main\n"
    "sys.exit(child_main(sys.argv[2]))\n"
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Spec:
    """One run: what to run, on what, how (plain JSON for the child)."""

    contender: str  # a name of contenders.FACTORIES, or "name@build-label"
    pipeline: str  # "train", "eval", or "any" for the decode-only bound
    threads: int
    data: str
    batch_size: int = 64
    epochs: int = 2  # timed epochs
    warmup: int = 1  # untimed epochs before them
    prefetch: int = 4  # ringloader's and SPDL's
    seed: int = 0
    images: Optional[int] = None  # a subset spread over the folder; None: all
    build: Optional[str] = None  # the python/ folder ringloader is imported from
    workdir: str = WORK_DIR  # compiled bound, FFCV's .beton, the child's cwd
    options: dict = field(default_factory=dict)  # contender's: dtype, layout, io...
    # Processes outside the contender whose CPU time over the timed epochs
    # is reported per image (name -> pid: the servers of remote shards).
    watch: dict = field(default_factory=dict)
    # [module, folder] of a contender defined outside this package
    # (contenders.register); child_command fills it in.
    plugin: Optional[list] = None

    @property
    def key(self) -> tuple:
        options = tuple(sorted(self.options.items()))
        return (self.contender, self.pipeline, self.threads, options)


def parse_ranges(text: str, lowest: int = 0) -> list[int]:
    """'1,2,4', '1-4' or a mix to a sorted list of numbers, each at least
    ``lowest``; ValueError otherwise."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    if not out or min(out) < lowest:
        raise ValueError(text)
    return sorted(out)


def parse_threads(text: Optional[str]) -> list[int]:
    """'1,2,4' or '1-4' (or a mix) to a sorted list; default 1..usable CPUs."""
    if not text:
        return list(range(1, len(system.cpus()) + 1))
    try:
        return parse_ranges(text, lowest=1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad thread list {text!r}: use e.g. 1,2,4 or 1-4"
        ) from None


def parse_builds(text: str) -> dict[str, str]:
    """'old=/tmp/rl-old/python,new=python' to {label: absolute folder}; each
    folder must hold a ringloader package."""
    builds = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        label, sep, path = part.partition("=")
        if not sep or not label or "@" in label:
            raise argparse.ArgumentTypeError(
                f"bad build {part!r}: use LABEL=PYTHON_DIR"
            )
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(os.path.join(path, "ringloader", "__init__.py")):
            raise argparse.ArgumentTypeError(f"{path} holds no ringloader package")
        builds[label] = path
    return builds


def _identity(spec: Spec) -> dict[str, Any]:
    out: dict[str, Any] = {
        "contender": spec.contender,
        "pipeline": spec.pipeline,
        "threads": spec.threads,
    }
    if spec.options:
        out["options"] = spec.options
    if spec.build:
        out["build"] = spec.build
    return out


def _bar(total: Optional[int], desc: str, enabled: bool) -> Any:
    if enabled:
        with contextlib.suppress(ImportError):
            from tqdm import tqdm

            return tqdm(
                total=total, desc=desc, unit="batch", leave=False, file=sys.stderr
            )
    return None


def _epoch(
    c: base.Contender, e: int, bar: Any, watch: dict[str, int]
) -> dict[str, Any]:
    counters0 = c.counters()
    watched0 = {k: system.process_cpu_seconds(pid) for k, pid in watch.items()}
    cpu0 = system.tree_cpu_seconds()
    t0 = time.perf_counter()
    first = None
    n = batches = 0
    for images, labels in c.epoch(e):
        if first is None:
            first = time.perf_counter() - t0
        images = c.check(images, labels, batches == 0)
        n += int(images.shape[0])
        batches += 1
        del images, labels  # a batch kept is a ringloader buffer not recycled
        if bar is not None:
            bar.update(1)
    wall = time.perf_counter() - t0
    cpu = system.tree_cpu_seconds() - cpu0
    out = {
        "images": n,
        "batches": batches,
        "wall_s": wall,
        "cpu_s": cpu,
        "first_batch_s": first,
    }
    if watch:
        out["watched_cpu_s"] = {
            k: system.process_cpu_seconds(pid) - watched0[k] for k, pid in watch.items()
        }
    counters = c.counters()
    if counters:
        out["counters"] = {k: v - counters0.get(k, 0.0) for k, v in counters.items()}
    return out


def _per_image(timed: list[dict], key: str, n: int) -> dict[str, float]:
    """The per-epoch dicts ``key`` of the timed epochs, added up, per image."""
    total: dict[str, float] = {}
    for ep in timed:
        for k, v in ep.get(key, {}).items():
            total[k] = total.get(k, 0.0) + v
    return {k: v / n for k, v in total.items()}


def measure(
    spec: Spec,
    progress: bool = False,
    before_epoch: Optional[Callable[[int], None]] = None,
    say: Optional[Callable[[str], None]] = None,
) -> dict[str, Any]:
    """Runs ``spec`` in this process; returns its result (with "error",
    "error_phase" and "traceback" when it failed: never raises for the
    contender's failures). ``before_epoch(e)`` runs before each epoch,
    untimed; ``say`` gets a line per epoch."""
    result = _identity(spec)
    result.update(pid=os.getpid(), loadavg_start=os.getloadavg()[0], cpus=system.cpus())
    c = contenders.make(spec)
    phase, bar = "import", None
    try:
        t0 = time.perf_counter()
        c.load()
        import torch  # noqa: F401 - every contender hands out torch tensors

        result["import_s"] = time.perf_counter() - t0
        result["versions"] = system.package_versions(c.packages)
        phase = "set-up"
        t0 = time.perf_counter()
        c.build()
        result["setup_s"] = time.perf_counter() - t0
        result["rss_after_setup_mb"] = system.tree_rss_mb(os.getpid())
        phase = "run"
        total = spec.warmup + spec.epochs
        per_epoch = c.batches()
        desc = f"{base.split(spec.contender)[0]:>10} {spec.threads} thr"
        bar = _bar(per_epoch * total if per_epoch else None, desc, progress)
        epochs = []
        for e in range(total):
            if before_epoch is not None:
                before_epoch(e)
            epochs.append(_epoch(c, e, bar, spec.watch))
            if say is not None:
                ep = epochs[-1]
                warm = " (warm-up)" if e < spec.warmup else ""
                say(
                    f"  [{spec.contender}/{spec.pipeline}/{spec.threads}t] epoch {e}{warm}: "
                    f"{ep['images']} images, {ep['images'] / ep['wall_s']:.0f} img/s"
                )
        timed = epochs[spec.warmup :]
        n = sum(ep["images"] for ep in timed)
        if len({ep["images"] for ep in epochs}) > 1:
            c.problem(f"epochs of different sizes: {[ep['images'] for ep in epochs]}")
        setup = result["setup_s"] - c.extra.get("conversion_s", 0.0)  # FFCV's apart
        result.update(
            images_per_epoch=epochs[0]["images"],
            warmup_epochs=spec.warmup,
            images_per_s=n / sum(ep["wall_s"] for ep in timed),
            cpu_s_per_image=sum(ep["cpu_s"] for ep in timed) / n,
            first_batch_s=statistics.median(ep["first_batch_s"] for ep in timed),
            cold_first_batch_s=setup + (epochs[0]["first_batch_s"] or 0.0),
            epochs=epochs,
        )
        if spec.watch:
            result["watched_cpu_s_per_image"] = _per_image(timed, "watched_cpu_s", n)
        if any("counters" in ep for ep in timed):
            result["counters_per_image"] = _per_image(timed, "counters", n)
    except Exception as exc:  # the contender's failure is a result
        result.update(
            error=f"{type(exc).__name__}: {exc}".strip(),
            error_phase=phase,
            traceback=traceback.format_exc(),
        )
        if say is not None:
            say(result["traceback"])
    finally:
        if bar is not None:
            bar.close()
        with contextlib.suppress(Exception):
            c.close()
    result.update(notes=c.notes, problems=c.problems, **c.extra)
    return result


def child_command(spec: Spec, python: str = sys.executable) -> list[str]:
    """The command that runs ``spec`` with :func:`measure` in a fresh
    ``python``, whatever ringloader that interpreter imports."""
    spec = replace(spec, plugin=contenders.plugin_of(spec.contender))
    return [python, "-c", BOOTSTRAP, BENCH_DIR, json.dumps(asdict(spec))]


def child_main(spec_json: str) -> int:
    spec = Spec(**json.loads(spec_json))
    contenders.load_plugin(spec.plugin)
    result = measure(spec, say=log)
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0 if "error" not in result else 1


@dataclass
class Runner:
    """Runs a spec in a pinned child process (``subprocess``) or in this
    one (external contenders always run as their own process)."""

    subprocess: bool = True
    python: str = sys.executable
    cpus: list = field(default_factory=system.cpus)
    timeout: float = 900.0
    smaps: bool = True  # sample PSS and anonymous memory
    progress: bool = False  # progress bars, in this process
    verbose: bool = True  # a line per run on stderr

    def __call__(self, spec: Spec) -> dict[str, Any]:
        c = contenders.make(spec)
        if not (self.subprocess or c.external):
            return measure(spec, self.progress)
        cpus = self.cpus[: spec.threads]
        if self.verbose:
            what = f"{spec.contender} / {spec.pipeline} / {spec.threads} thread(s)"
            log(f"== {what} on CPUs {cpus}")
        result = _identity(spec)
        try:
            cmd = c.command() if c.external else child_command(spec, self.python)
        except Exception as exc:  # the bound could not be built
            if self.verbose:
                log(f"   could not run: {exc}")
            return {**result, "error": str(exc), "error_phase": "set-up"}
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if spec.build:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [spec.build, env.get("PYTHONPATH")])
            )
        os.makedirs(spec.workdir, exist_ok=True)
        run = system.run_measured(
            cmd, cpus, self.timeout, env, spec.workdir, self.smaps
        )
        result.update(self._result(c, run))
        measured = ("process_", "peak_", "max_processes")
        result.update({k: v for k, v in run.items() if k.startswith(measured)})
        if self.verbose:
            if "error" in result:
                log(f"   could not run: {result['error']}")
            else:
                ms = result["cpu_s_per_image"] * 1e3
                log(
                    f"   {result['images_per_s']:.0f} img/s, {ms:.2f} ms CPU/img, "
                    f"peak resident memory {result['peak_rss_mb']:.0f} MB"
                )
        return result

    def _result(self, c: base.Contender, run: dict[str, Any]) -> dict[str, Any]:
        if c.external and run["returncode"] == 0:
            return c.result(run["stdout"])
        if not c.external:
            lines = [
                ln for ln in run["stdout"].splitlines() if ln.startswith(RESULT_TAG)
            ]
            if lines:
                return json.loads(lines[-1][len(RESULT_TAG) :])
        why = (
            f"timed out after {self.timeout:.0f} s"
            if run["timed_out"]
            else f"exited with status {run['returncode']} and no result"
        )
        tail = "\n".join(run["stderr"].strip().splitlines()[-25:])
        return {"error": why, "traceback": tail, "error_phase": "process"}


def plan(
    names: list[str],
    pipelines: list[str],
    threads: list[int],
    template: Spec,
    builds: Optional[dict[str, str]] = None,
    scaling: tuple[str, ...] = (),
) -> list[Spec]:
    """The specs of one round: each contender on each pipeline and thread
    count (the bound once per thread count), then ``scaling`` contenders on
    the train pipeline at every thread count from 1 to the largest."""
    specs: dict[tuple, Spec] = {}

    def add(name: str, pipeline: str, t: int) -> None:
        build = (builds or {}).get(base.split(name)[1] or "")
        s = replace(template, contender=name, pipeline=pipeline, threads=t, build=build)
        specs.setdefault(s.key, s)

    for t in threads:
        for name in names:
            if base.split(name)[0] in base.ANY_PIPELINE:
                add(name, "any", t)
    for pipeline in pipelines:
        for t in threads:
            for name in names:
                if base.split(name)[0] not in base.ANY_PIPELINE:
                    add(name, pipeline, t)
    for name in scaling:
        for t in range(1, max(threads) + 1):
            add(name, "train", t)
    return list(specs.values())


def median_run(runs: list[dict]) -> dict[str, Any]:
    """The run with the median images/s (the lower middle one for an even
    count), with every round's images/s attached; the first failure if any
    round failed, since a contender that fails sometimes is not a result."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    ranked = sorted(runs, key=lambda r: r["images_per_s"])
    out = dict(ranked[(len(ranked) - 1) // 2])
    out["rounds_images_per_s"] = [round(r["images_per_s"], 1) for r in runs]
    # A one-off cost (FFCV's dataset conversion) is paid by the first round.
    first = next((r for r in runs if r.get("conversion_s") is not None), None)
    if first is not None:
        out["conversion_s"] = first["conversion_s"]
        out.pop("conversion_reused", None)
    return out


def run_rounds(
    specs: list[Spec],
    rounds: int,
    run: Callable[[Spec], dict],
    say: Optional[Callable[[str], None]] = log,
) -> list[dict[str, Any]]:
    """Runs every spec once per round, in order; returns each one's
    :func:`median_run`, in the order of ``specs``."""
    runs: dict[tuple, list[dict]] = {s.key: [] for s in specs}
    for r in range(rounds):
        if rounds > 1 and say is not None:
            say(f"-- round {r + 1} of {rounds}")
        for s in specs:
            runs[s.key].append(run(s))
    return [median_run(runs[s.key]) for s in specs]


def write_json(path: str, payload: dict[str, Any]) -> None:
    with open(path, "w") as f:
        f.write(json.dumps(payload, indent=1) + "\n")
