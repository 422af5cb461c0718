"""The GPU run, in one command (about 8 minutes at most):

    make gpu-kit                                 # here: dist/ (the wheels)
    python benchmarks/gpu/run.py OUT            # on the GPU machine
    python benchmarks/gpu/run.py OUT --dry-run  # here: fake runtime, tiny sizes

The GPU machine has no package registry: dist/ travels with the checkout.
``make gpu-kit`` puts there ringloader's wheel (``make wheel``: one abi3
wheel for every CPython from 3.11 on) and, in dist/gpu/, the wheels of what
the tests need and that machine's image may lack (pycocotools), for CPython
3.12 on manylinux x86-64.

Parts, each in a subprocess of its own with a time limit, each result
written to OUT/<part>.json (and OUT/results.json, OUT/GPU.md redrawn) as
soon as it is known, so that a run cut off keeps what it measured:

1 install   the wheel from dist/ that this Python can install (by its
            tags) and dist/gpu/*.whl, with pip --no-index into a folder of
            their own that the other parts put first on their path; then
            an ImageNet-like folder from ringloader's own generator on
            local disk
2 tests     the tests marked cuda (tests/test_cuda.py: classification;
            tests/test_cuda_detect.py: detection, keypoints, segmentation
            targets on the device), their output kept
3 train     ResNet-50 (AMP bf16, channels_last, batch 256) and ResNet-18:
            images/s and stall fraction for DataLoader (pin_memory,
            non_blocking), ringloader device="cuda", ringloader host +
            pin_memory + .cuda(non_blocking=True)
4 copies    H2D bandwidth of the loader's copies against a plain pinned
            copy of the same size; a torch.profiler summary (overlap)
5 scaling   images/s at 1, 2, 4, 8, 16 threads (ringloader) and workers
            (DataLoader)
6 memory    20 epochs of a small set: memory_allocated/reserved flat,
            pinned slots returned on close(), current device unchanged

The dry run runs every part that does not need torch.cuda with tiny sizes
on the CPU (the train and scaling loops with device "cpu"; part 6 against
the fake runtime when RINGLOADER_CUDART names it, through the tests' double
tests/cuda/fake_gpu.py); the others say "not run". tests/test_gpu_run.py
runs the dry run in CI.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = ["install", "tests", "train", "copies", "scaling", "memory"]
# seconds per part on the GPU machine (total 500 s) and in the dry run
LIMITS = {
    "install": 60,
    "tests": 120,
    "train": 150,
    "copies": 40,
    "scaling": 90,
    "memory": 40,
}
DRY_LIMITS = {k: 120 for k in PARTS}


def sizes(dry: bool) -> dict[str, Any]:
    if dry:
        return dict(
            images=60,
            classes=3,
            side=32,
            batch=8,
            steps=3,
            threads=[1, 2],
            epochs=2,
            models=["resnet18"],
        )
    return dict(
        images=4000,
        classes=100,
        side=224,
        batch=256,
        steps=30,
        threads=[1, 2, 4, 8, 16],
        epochs=20,
        models=["resnet50", "resnet18"],
    )


# ---- the parts (each runs in its own process) ----


# Where part 1 installs the wheels (never into the machine's own Python);
# main() puts it first on every later part's path.
SITE = os.path.join("/tmp", "ringloader-gpu-site")


def pick_wheel(paths: list[str], tags: Any = None) -> str | None:
    """The ringloader wheel among ``paths`` that an interpreter of ``tags``
    (this one's by default) installs: the first of its tags any wheel
    carries, as pip chooses."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    rank = {t: k for k, t in enumerate(sys_tags() if tags is None else tags)}
    best: tuple[int, str] | None = None
    for path in paths:
        name, _, _, wheel_tags = parse_wheel_filename(os.path.basename(path))
        if name != "ringloader":
            continue
        fits = [rank[t] for t in wheel_tags if t in rank]
        if fits and (best is None or min(fits) < best[0]):
            best = (min(fits), path)
    return None if best is None else best[1]


def gpu_tags() -> list:
    """The tags of CPython 3.12 on manylinux x86-64 (the GPU machine's)."""
    from packaging.tags import cpython_tags

    platforms = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)]
    return list(cpython_tags((3, 12), platforms=[*platforms, "manylinux2014_x86_64"]))


def _kit() -> tuple[list[str], list[str]]:
    """The wheels in dist/ (ringloader's among them) and in dist/gpu/."""
    found = sorted(glob.glob(os.path.join(ROOT, "dist", "*.whl")))
    return found, sorted(glob.glob(os.path.join(ROOT, "dist", "gpu", "*.whl")))


def check_kit() -> int:
    found, extras = _kit()
    wheel = pick_wheel(found, gpu_tags())
    print(f"ringloader wheel for CPython 3.12: {wheel or 'none (make wheel)'}")
    print(f"with: {', '.join(os.path.basename(w) for w in extras) or 'nothing'}")
    return 0 if wheel and extras else 1


def part_install(out: str, dry: bool) -> dict:
    found, extras = _kit()
    wheel = pick_wheel(found)
    r: dict[str, Any] = {
        "wheels": [os.path.basename(w) for w in found + extras],
        "wheel": os.path.basename(wheel) if wheel else None,
    }
    if wheel is None:
        r["install"] = "missing: run `make gpu-kit` here and carry dist"
        if not dry:
            raise RuntimeError(r["install"] + f" (found {r['wheels']})")
    elif dry:
        r["install"] = "found (the dry run uses the installed test build)"
    else:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index"]
            + ["--no-deps", "--no-compile", "--upgrade", "--target", SITE]
            + [wheel, *extras],
            capture_output=True,
            text=True,
        )
        r["install"] = "installed" if proc.returncode == 0 else "pip failed"
        r["pip"] = (proc.stdout + proc.stderr)[-2000:]
        if proc.returncode != 0:
            raise RuntimeError(f"pip failed: {r['pip']}")
        import importlib

        importlib.invalidate_caches()
    import ringloader
    from ringloader.bench import data

    r["ringloader"] = os.path.dirname(ringloader.__file__)
    s = sizes(dry)
    t0 = time.perf_counter()
    r["data"] = data.build(
        os.path.join(out, "data"),
        images=s["images"],
        classes=s["classes"],
        progress=False,
    )
    r["data_s"] = round(time.perf_counter() - t0, 1)
    import torch

    r["torch"] = torch.__version__
    r["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        r["device"] = torch.cuda.get_device_name(0)
        r["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    r["python"] = platform.python_version()
    return r


# The tests of the GPU path on a real device (each file skips itself where
# torch sees none).
CUDA_TESTS = ["test_cuda.py", "test_cuda_detect.py"]


def part_tests(out: str, dry: bool) -> dict:
    import torch

    # pytest ends before the part's deadline (its whole process group), so
    # that nothing of it holds the GPU through the next part; its output
    # goes straight to the log, kept however it ends.
    limit = _time_left(dry, "tests") - 10
    path = os.path.join(out, "tests.log")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    with open(path, "w") as log:
        rc: Any = _run_group(
            cmd + [*CUDA_TESTS, "-m", "cuda", "-rfEs"],
            limit,
            session=False,  # in this part's group, which the parent kills
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=os.path.join(ROOT, "tests"),
        )
    with open(path) as f:
        lines = f.read().strip().splitlines()
    if rc is None:
        rc = f"timed out after {max(limit, 1):.0f} s"
    elif rc == 0 and not dry and not torch.cuda.is_available():
        rc = "no CUDA device seen: every test was skipped"
    return {
        "rc": rc,
        "summary": (lines or [""])[-1],
        "failed": [x for x in lines if x.startswith(("FAILED", "ERROR"))],
        "ran_on_gpu": torch.cuda.is_available(),
    }


def _time_left(dry: bool, part: str) -> float:
    """Seconds left to this part: to the deadline its parent set, else its
    whole limit (a part run by hand)."""
    deadline = os.environ.get("RINGLOADER_GPU_RUN_DEADLINE")
    if deadline is None:
        return (DRY_LIMITS if dry else LIMITS)[part]
    return float(deadline) - time.time()


def _run_group(
    cmd: list[str], timeout: float, session: bool = True, **popen: Any
) -> int | None:
    """Runs ``cmd``: its exit status, or None where it ran past ``timeout``.
    With ``session``, in a process group of its own, killed whole at the
    timeout, at an exception here (Ctrl-C, SIGTERM: see main) and after it
    exits (what it left running); without, it stays in this one. Either
    way it is killed if this process dies first (PR_SET_PDEATHSIG)."""
    proc = subprocess.Popen(
        cmd, start_new_session=session, preexec_fn=_die_with_parent, **popen
    )
    try:
        proc.communicate(timeout=max(timeout, 1))
        return proc.returncode
    except subprocess.TimeoutExpired:
        return None
    finally:
        _kill(proc, session)
        proc.wait()


def _kill(proc: subprocess.Popen, session: bool) -> None:
    try:
        if session:
            os.killpg(proc.pid, signal.SIGKILL)
        elif proc.poll() is None:
            proc.kill()
    except ProcessLookupError:
        pass


def _die_with_parent() -> None:
    """In the child, before it runs: SIGKILL when its parent dies."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _folder(out: str) -> str:
    return os.path.join(out, "data")


def _loaders(out: str, dry: bool, device: str, threads: int) -> dict[str, Callable]:
    """The three ways of feeding a step, each a function returning an
    iterable of (images on `device`, labels on `device`)."""
    import torch
    import torchvision
    from torchvision.transforms import v2

    import ringloader
    from ringloader import transforms as T

    s = sizes(dry)
    side = s["side"]
    tv = v2.Compose(
        [
            v2.RandomResizedCrop(side),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
        ]
    )
    cuda = device == "cuda"

    def dataloader():
        ds = torchvision.datasets.ImageFolder(_folder(out), transform=tv)
        dl = torch.utils.data.DataLoader(
            ds,
            batch_size=s["batch"],
            shuffle=True,
            num_workers=threads,
            pin_memory=cuda,
            drop_last=True,
            persistent_workers=threads > 0,
        )
        return (
            (x.to(device, non_blocking=True), y.to(device, non_blocking=True))
            for x, y in dl
        )

    rt = T.Compose(
        [
            T.RandomResizedCrop(side),
            T.RandomHorizontalFlip(),
            T.ToDtype(torch.float32, scale=True),
        ]
    )
    ds = ringloader.ImageFolder(_folder(out))

    def ring_device():
        ld = ringloader.Loader(
            ds,
            batch_size=s["batch"],
            shuffle=True,
            transform=rt,
            num_threads=threads,
            device="cuda",
            layout="channels_last",
            drop_last=True,
        )
        return ((x, y.to(device, non_blocking=True)) for x, y in ld)

    def ring_host():
        ld = ringloader.Loader(
            ds,
            batch_size=s["batch"],
            shuffle=True,
            transform=rt,
            num_threads=threads,
            drop_last=True,
        )
        pin = (lambda t: t.pin_memory()) if cuda else (lambda t: t)
        return (
            (pin(x).to(device, non_blocking=True), y.to(device, non_blocking=True))
            for x, y in ld
        )

    out_: dict[str, Callable] = {"dataloader": dataloader, "ringloader_host": ring_host}
    if cuda:
        out_["ringloader_device"] = ring_device
    return out_


def _train(model_name: str, feed: Callable, device: str, steps: int) -> dict:
    """Images/s and the share of step time spent waiting for data."""
    import torch
    import torchvision

    model = getattr(torchvision.models, model_name)(num_classes=1000).to(device)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    total = 0.0  # step time after two warm-up steps; waits: _timed_feed
    n = done = 0
    while done < steps + 2:
        for x, y in feed():
            t0 = time.perf_counter()
            sync()
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(
                    model(x.contiguous(memory_format=torch.channels_last)), y
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sync()
            t1 = time.perf_counter()
            if done >= 2:
                total += t1 - t0
                n += len(y)
            done += 1
            if done >= steps + 2:
                break
    return {
        "images_per_s": round(n / total, 1) if total else 0.0,
        "step_s": round(total / max(1, done - 2), 4),
    }


def _timed_feed(feed: Callable, device: str):
    """Wraps a feed so the wait for each batch is measured (synchronised,
    so that a device copy is counted as waiting)."""
    import torch

    stats = {"wait": 0.0, "n": 0}

    def gen():
        it = iter(feed())
        while True:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                return
            if device == "cuda":
                torch.cuda.current_stream().synchronize()
            stats["wait"] += time.perf_counter() - t0
            stats["n"] += 1
            yield x, y

    return gen, stats


def part_train(out: str, dry: bool) -> dict:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    s = sizes(dry)
    threads = 2 if dry else 16
    r: dict[str, Any] = {"device": device}
    for model in s["models"]:
        for name, feed in _loaders(out, dry, device, threads).items():
            gen, st = _timed_feed(feed, device)
            t0 = time.perf_counter()
            res = _train(model, gen, device, s["steps"])
            wall = time.perf_counter() - t0
            res["stall_fraction"] = round(st["wait"] / wall, 3) if wall else 0.0
            r[f"{model}/{name}"] = res
            _partial(out, "train", r)
    if device != "cuda":
        r["note"] = "device cpu (dry run): ringloader device='cuda' not run"
    return r


def part_copies(out: str, dry: bool) -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"not_run": "needs torch.cuda"}
    import ringloader
    from ringloader import transforms as T

    s = sizes(dry)
    ds = ringloader.ImageFolder(_folder(out))
    ld = ringloader.Loader(
        ds,
        batch_size=s["batch"],
        transform=T.Compose([T.RandomResizedCrop(s["side"])]),
        num_threads=16,
        device="cuda",
    )
    nbytes = s["batch"] * s["side"] * s["side"] * 3
    host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    plain = 50 * nbytes / (time.perf_counter() - t0) / 1e9
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for x, _ in ld:
            (x.float() * 2).sum()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=15)
    with open(os.path.join(out, "copies_profile.txt"), "w") as f:
        f.write(table)
    ld.close()
    memcpy = [e for e in prof.key_averages() if "Memcpy HtoD" in e.key]
    loader_gbs = None
    if memcpy:
        e = memcpy[0]
        dev_us = getattr(e, "device_time_total", None) or getattr(
            e, "cuda_time_total", 0
        )
        if dev_us:
            loader_gbs = round(e.count * nbytes / (dev_us / 1e6) / 1e9, 2)
    return {
        "plain_pinned_gb_s": round(plain, 2),
        "loader_copy_gb_s": loader_gbs,
        "profile": "copies_profile.txt",
    }


def part_scaling(out: str, dry: bool) -> dict:
    import torch

    import ringloader
    from ringloader import transforms as T

    s = sizes(dry)
    ds = ringloader.ImageFolder(_folder(out))
    tf = T.Compose([T.RandomResizedCrop(s["side"]), T.RandomHorizontalFlip()])
    r: dict[str, Any] = {"ringloader": {}, "dataloader": {}}
    for n in s["threads"]:
        ld = ringloader.Loader(ds, batch_size=s["batch"], transform=tf, num_threads=n)
        t0, k = time.perf_counter(), 0
        for x, _ in ld:
            k += len(x)
        ld.close()
        r["ringloader"][n] = round(k / (time.perf_counter() - t0), 1)
        _partial(out, "scaling", r)
    import torchvision
    from torchvision.transforms import v2

    tv = v2.Compose(
        [v2.RandomResizedCrop(s["side"]), v2.RandomHorizontalFlip(), v2.PILToTensor()]
    )
    tds = torchvision.datasets.ImageFolder(_folder(out), transform=tv)
    for n in s["threads"]:
        dl = torch.utils.data.DataLoader(tds, batch_size=s["batch"], num_workers=n)
        t0, k = time.perf_counter(), 0
        for x, _ in dl:
            k += len(x)
        r["dataloader"][n] = round(k / (time.perf_counter() - t0), 1)
        _partial(out, "scaling", r)
    for name in ("ringloader", "dataloader"):
        one = r[name][s["threads"][0]]
        r[name + "_efficiency"] = {
            n: round(v / (one * n), 2) if one else 0 for n, v in r[name].items()
        }
    return r


def part_memory(out: str, dry: bool) -> dict:
    import torch

    import ringloader
    from ringloader import transforms as T

    cuda = torch.cuda.is_available()
    fake = None
    if not cuda:
        if not os.environ.get("RINGLOADER_CUDART"):
            return {"not_run": "needs torch.cuda (or the fake runtime in a dry run)"}
        import ctypes

        sys.path.insert(0, os.path.join(ROOT, "tests", "cuda"))
        import fake_gpu

        fake_gpu.install()
        fake = ctypes.CDLL(os.environ["RINGLOADER_CUDART"])
        fake.cudaSetDevice(0)
    s = sizes(dry)

    def current() -> int:
        return torch.cuda.current_device() if cuda else fake.fake_cuda_thread_device()

    ds = ringloader.ImageFolder(_folder(out))
    ld = ringloader.Loader(
        ds,
        batch_size=s["batch"],
        transform=T.Compose([T.RandomResizedCrop(s["side"])]),
        num_threads=4,
        device="cuda",
    )
    before = current()
    allocated, reserved, moved = [], [], 0
    for _ in range(s["epochs"]):
        for _batch in ld:
            moved += current() != before
        if cuda:
            torch.cuda.synchronize()
            allocated.append(torch.cuda.memory_allocated())
            reserved.append(torch.cuda.memory_reserved())
    pinned = ld.pinned_slots
    ld.close()
    r = {
        "epochs": s["epochs"],
        "device_moved_after_next": moved,
        "pinned_before_close": pinned,
        "pinned_after_close": ld.pinned_slots,
        "memory_allocated": allocated,
        "memory_reserved": reserved,
        "flat": len(set(allocated[1:])) <= 1 and len(set(reserved[1:])) <= 1,
    }
    if fake is not None:
        r["fake_violations"] = fake.fake_cuda_violations()
        r["fake_pinned_outstanding"] = fake.fake_cuda_host_outstanding()
        r["note"] = "fake runtime: memory_allocated/reserved not measured"
    return r


# ---- the driver ----


def _partial(out: str, part: str, result: dict) -> None:
    """A part's result so far (a cut-off part keeps it)."""
    with open(os.path.join(out, f"{part}.partial.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)


def draft_md(results: dict, dry: bool) -> str:
    lines = [
        "# ringloader on a GPU" + (" (DRY RUN: fake runtime, CPU)" if dry else ""),
        "",
        "Written by benchmarks/gpu/run.py; figures as measured.",
        "",
    ]
    inst = results.get("install", {}).get("result") or {}
    for k in ("device", "driver", "cuda", "torch", "python", "wheel", "install"):
        if k in inst:
            lines.append(f"- {k}: {inst[k]}")
    for part in PARTS[1:]:
        rec = results.get(part)
        lines += ["", f"## {part}", ""]
        if rec is None:
            lines.append("not reached")
            continue
        lines.append(f"status: {rec['status']} ({rec['seconds']} s)")
        lines += [
            "",
            "```",
            json.dumps(rec.get("result"), indent=1, default=str)[:3000],
            "```",
        ]
    return "\n".join(lines) + "\n"


def _result(lines: list[str]) -> Any:
    """The last RESULT line's value, or None (none, or cut short)."""
    try:
        return json.loads(lines[-1][7:]) if lines else None
    except json.JSONDecodeError:
        return None


def run_part(part: str, out: str, dry: bool, limit: float) -> dict:
    t0 = time.perf_counter()
    cmd = [sys.executable, os.path.abspath(__file__), out, "--part", part]
    if dry:
        cmd.append("--dry-run")
    env = dict(os.environ, RINGLOADER_GPU_RUN_DEADLINE=str(time.time() + limit))
    with open(os.path.join(out, f"{part}.log"), "w") as log:
        with tempfile.TemporaryFile(mode="w+") as stdout:
            rc = _run_group(cmd, limit, stdout=stdout, stderr=log, env=env)
            stdout.seek(0)
            lines = [x for x in stdout.read().splitlines() if x.startswith("RESULT ")]
    result = _result(lines)
    if rc == 0 and result is not None:
        rec = {"status": "ok", "result": result}
    else:
        # a result printed before the part hung or crashed at exit is kept;
        # the part still counts as failed
        end = f"timed out after {limit} s" if rc is None else f"exit {rc}"
        status = f"ok, then {end}" if result is not None else f"failed ({end})"
        rec = {"status": status, "result": result}
    partial = os.path.join(out, f"{part}.partial.json")
    if rec["result"] is None and os.path.exists(partial):
        with open(partial) as f:
            rec["result"] = {"partial": json.load(f)}
    if rec["result"] and rec["result"].get("not_run"):
        rec["status"] = "not run"
    elif rec["result"] and rec["result"].get("rc", 0) != 0:  # the tests'
        rec["status"] = f"failed (pytest: {rec['result']['rc']})"
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    return rec


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument(
        "--check-kit",
        action="store_true",
        help="say which wheels in dist/ part 1 installs on CPython 3.12 "
        "(manylinux x86-64), and fail where there is no ringloader wheel",
    )
    ap.add_argument("--part", choices=PARTS)
    ap.add_argument("--parts", default=",".join(PARTS))
    a = ap.parse_args()
    if a.check_kit:
        return check_kit()
    if a.out is None:
        ap.error("OUT is needed")
    os.makedirs(a.out, exist_ok=True)
    if not a.dry_run:  # the wheels part 1 installs, first on every part's path
        os.makedirs(SITE, exist_ok=True)
        path = os.environ.get("PYTHONPATH", "")
        if SITE not in path.split(os.pathsep):
            os.environ["PYTHONPATH"] = SITE + (os.pathsep + path if path else "")
            sys.path.insert(0, SITE)
    if a.part:  # a child: one part, its result on stdout
        try:
            r = globals()[f"part_{a.part}"](a.out, a.dry_run)
        except Exception:
            traceback.print_exc()
            return 1
        print("RESULT " + json.dumps(r, default=str), flush=True)
        return 0
    limits = DRY_LIMITS if a.dry_run else LIMITS
    # SIGTERM (a job's end) as an exception: the part running is killed
    # with its process group (_run_group) before this process ends.
    signal.signal(signal.SIGTERM, _terminated)
    results: dict[str, Any] = {}
    for part in a.parts.split(","):
        rec = run_part(part, a.out, a.dry_run, limits[part])
        results[part] = rec
        print(f"{part}: {rec['status']} ({rec['seconds']} s)", flush=True)
        with open(os.path.join(a.out, f"{part}.json"), "w") as f:
            json.dump(rec, f, indent=1, default=str)
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
        with open(os.path.join(a.out, "GPU.md"), "w") as f:
            f.write(draft_md(results, a.dry_run))
        if part == "install" and rec["result"] is None:
            print("install failed: the other parts need the data", flush=True)
            break
    # ("ok, then ..." too: a part that hung or crashed at exit is a failure)
    bad = [p for p, r in results.items() if r["status"] not in ("ok", "not run")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
