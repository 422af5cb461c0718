"""What the harness reads from the system: CPU time and memory of process
trees (from /proc; another process's CPU time with psutil where it is
installed), running a command pinned and sampled, and a description of the
machine and the versions installed.

A process tree is a process and its live descendants. Its CPU time adds
what ``getrusage`` says of the process and its reaped children to what
/proc says of live descendants and their reaped children, so DataLoader
workers count whether they are alive (persistent) or already reaped.
Memory is sampled from outside the process, every 0.1 s: RSS (shared pages
counted once per process), and every third sample PSS (shared pages split
between the processes) and anonymous PSS (Pss_Anon + Pss_Shmem: heaps,
tensors, shared-memory batches, no mapped library) from smaps_rollup.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import signal
import subprocess
import tempfile
import time
from typing import Any, Optional

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _stat(pid: int) -> Optional[list[str]]:
    """The fields of /proc/PID/stat after the command name (field 3 on)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """Live descendants of ``pid`` (a scan of /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                children.setdefault(int(st[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process, its reaped children and
    its live descendants (with what they reaped)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        total += ru.ru_utime + ru.ru_stime
    for pid in descendants(os.getpid()):
        st = _stat(pid)
        if st is not None:  # utime, stime, cutime, cstime
            total += sum(int(v) for v in st[11:15]) / _TICK
    return total


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of another process ``pid`` and its live
    descendants (a server and its workers), with what they reaped; psutil's
    reading when it is installed, else /proc's. 0 for a process gone."""
    try:
        import psutil
    except ImportError:
        total = 0.0
        for p in [pid, *descendants(pid)]:
            st = _stat(p)
            if st is not None:  # utime, stime, cutime, cstime
                total += sum(int(v) for v in st[11:15]) / _TICK
        return total
    total = 0.0
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_rss_mb(pid: int) -> float:
    total = 0
    for p in [pid, *descendants(pid)]:
        st = _stat(p)
        total += int(st[21]) * _PAGE if st else 0
    return total / 2**20


def smaps_kb(pid: int) -> dict[str, int]:
    """Pss, Pss_Anon and Pss_Shmem of ``pid`` in kB (empty if unreadable)."""
    out = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("Pss", "Pss_Anon", "Pss_Shmem"):
                    out[key] = int(line.split()[1])
    return out


class TreeSampler:
    """Peak RSS, PSS and anonymous PSS of a process tree, sampled."""

    def __init__(self, pid: int, smaps: bool = True) -> None:
        self.pid, self.smaps = pid, smaps
        self.peak_rss_mb = self.peak_pss_mb = self.peak_anon_mb = 0.0
        self.max_processes = 0
        self._n = 0

    def sample(self) -> None:
        procs = [self.pid, *descendants(self.pid)]
        self.max_processes = max(self.max_processes, len(procs))
        self.peak_rss_mb = max(self.peak_rss_mb, tree_rss_mb(self.pid))
        self._n += 1
        if self.smaps and self._n % 3 == 1:  # walks the page tables: less often
            kb = [smaps_kb(p) for p in procs]
            pss = sum(k.get("Pss", 0) for k in kb) / 1024
            anon = sum(k.get("Pss_Anon", 0) + k.get("Pss_Shmem", 0) for k in kb) / 1024
            self.peak_pss_mb = max(self.peak_pss_mb, pss)
            self.peak_anon_mb = max(self.peak_anon_mb, anon)

    def peaks(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "peak_rss_mb": self.peak_rss_mb,
            "max_processes": self.max_processes,
        }
        if self.smaps:
            out.update(peak_pss_mb=self.peak_pss_mb, peak_anon_mb=self.peak_anon_mb)
        return out


def run_measured(
    cmd: list[str],
    cpus: list[int],
    timeout: float,
    env: Optional[dict] = None,
    cwd: Optional[str] = None,
    smaps: bool = True,
) -> dict[str, Any]:
    """Runs ``cmd`` pinned to ``cpus`` in a session of its own, sampling its
    tree's memory; returns its exit status, output, wall time, the CPU time
    of its whole tree (wait4) and the memory peaks. On timeout the session
    is killed; stray grandchildren are killed in any case."""
    out_f, err_f = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=out_f,
        stderr=err_f,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    sampler = TreeSampler(proc.pid, smaps)
    timed_out = False
    try:
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            sampler.sample()
            if time.perf_counter() - t0 > timeout:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                _, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out_f.seek(0)
    err_f.seek(0)
    return {
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "stdout": out_f.read(),
        "stderr": err_f.read(),
        "process_wall_s": time.perf_counter() - t0,
        "process_tree_cpu_s": ru.ru_utime + ru.ru_stime,
        **sampler.peaks(),
    }


def package_versions(names: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of these distributions (those installed)."""
    from importlib import metadata

    out = {}
    for n in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[n] = metadata.version(n)
    return out


# The probe's private field: where ringloader was imported from, turned
# into a commit and dropped (a result names no folder of the machine).
_FOLDER = "ringloader folder"

_VERSIONS_PROBE = (
    f"FOLDER = {_FOLDER!r}"
    + """
import contextlib, json, platform
from importlib import metadata
v = {"python": platform.python_version()}
for n in ("torch", "torchvision", "pillow", "numpy", "ringloader", "nvidia-dali-cuda120",
          "spdl", "spdl_io", "ffcv", "numba", "opencv-python"):
    with contextlib.suppress(Exception):
        v[n] = metadata.version(n)
with contextlib.suppress(Exception):
    from PIL import features
    v["pillow libjpeg-turbo"] = features.version("libjpeg_turbo")
with contextlib.suppress(Exception):
    import os, ringloader
    v[FOLDER] = os.path.dirname(os.path.abspath(ringloader.__file__))
print(json.dumps(v))
"""
)


def git_commit(folder: str) -> Optional[str]:
    """The commit of the git checkout that holds ``folder`` (12 hex
    digits, "-dirty" when tracked files differ from it); None outside a
    checkout, in a folder it ignores (a virtual environment inside it: an
    installed copy, not its source), or without git."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-C", folder, *args], capture_output=True, text=True, timeout=60
        )

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0 or git("check-ignore", "-q", ".").returncode == 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty else "")


def ringloader_commit(folder: str, repo: Optional[str] = None) -> str:
    """What a result records of the ringloader it ran: the commit of the
    checkout it was imported from (``folder``), else, for an installed
    copy, that of ``repo`` (the benchmark's own checkout) saying so; never
    the folder itself."""
    commit = git_commit(folder)
    if commit is not None:
        return commit
    commit = git_commit(repo) if repo else None
    if commit is not None:
        return f"{commit} (the benchmark's checkout; ringloader was installed)"
    return "unknown (an installed copy, outside a git checkout)"


def imported_ringloader(build: Optional[str] = None) -> dict[str, str]:
    """The version and commit (:func:`ringloader_commit`) of the ringloader
    this process imported, as a contender's result records them. Raises
    RuntimeError when ``build`` (a python/ folder) is given and ringloader
    was imported from elsewhere: the run would time another build."""
    import ringloader

    folder = os.path.dirname(os.path.abspath(ringloader.__file__))
    if build and not folder.startswith(os.path.abspath(build) + os.sep):
        raise RuntimeError(
            f"ringloader was imported from {folder}, not from the build {build} "
            "(is its _core built there? python setup.py build_ext --inplace)"
        )
    return {
        "ringloader_version": ringloader.__version__,
        "ringloader_commit": ringloader_commit(folder),
    }


def portable_command(args: list[str]) -> list[str]:
    """``args`` with each absolute path cut to its last component, also
    after ``=`` and between commas (``--builds old=/x/python,new=python``):
    how a run was made, without the machine's folders."""
    out = []
    for arg in args:
        parts = []
        for part in arg.split(","):
            head, eq, tail = part.partition("=")
            if os.path.isabs(part):
                part = os.path.basename(part.rstrip("/")) or part
            elif eq and os.path.isabs(tail):
                part = f"{head}={os.path.basename(tail.rstrip('/')) or tail}"
            parts.append(part)
        out.append(",".join(parts))
    return out


def machine_info(python: str, repo: Optional[str] = None) -> dict[str, Any]:
    """Date, CPU, cores, RAM, kernel, load average, and the versions that
    ``python`` (the contenders' interpreter) sees, with the commit of the
    ringloader it imports (see :func:`ringloader_commit`; ``repo``: the
    benchmark's checkout)."""
    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "kernel": platform.release(),
        "cores": os.cpu_count(),
        "cores_usable": len(cpus()),
        "cpu": cpu_model(),
        "loadavg_start": os.getloadavg(),
        "versions": {},
    }
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo") as f:
            info["ram_gb"] = int(f.readline().split()[1]) / 2**20
    with contextlib.suppress(Exception):
        out = subprocess.run(
            [python, "-c", _VERSIONS_PROBE], capture_output=True, text=True, timeout=120
        )
        info["versions"] = json.loads(out.stdout.strip().splitlines()[-1])
    folder = info["versions"].pop(_FOLDER, None)
    if folder is not None:
        info["versions"]["ringloader commit"] = ringloader_commit(folder, repo)
    with contextlib.suppress(Exception):
        pc = subprocess.run(
            ["pkg-config", "--modversion", "libjpeg"], capture_output=True, text=True
        )
        info["versions"]["system libjpeg-turbo (pkg-config libjpeg)"] = (
            pc.stdout.strip()
        )
    return info
