"""What the servers of rlbench.servers share: their error, free ports of
127.0.0.1, and starting, pinning and stopping their processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from typing import Any

HOST = "127.0.0.1"


class ServerError(RuntimeError):
    """A server that could not be started; the message says why (with the
    server's own error output) and what to install."""


def free_port() -> int:
    """A TCP port of 127.0.0.1 free at the time of the call (bound to port
    0, then released: another process may take it before it is used, so
    callers retry on EADDRINUSE)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


def pin(pid: int, cpus: list[int]) -> None:
    """Pins every thread of process ``pid`` to ``cpus`` (threads it starts
    later inherit it): a server kept off the CPUs a benchmark measures."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended
            os.sched_setaffinity(int(tid), cpus)


def end(proc: subprocess.Popen) -> None:
    """Terminate a server started in a session of its own: SIGTERM (nginx:
    fast shutdown), then SIGKILL to its process group if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # workers left by a killed master
    if proc.poll() is None:
        proc.wait()


def shut(server: Any) -> None:
    """End a server's process (``_proc``) and remove its temporary
    directory (``_tmp``), each once: what both process servers' stop()
    does, safe on a server whose start failed half way."""
    proc, server._proc = getattr(server, "_proc", None), None
    if proc is not None:
        end(proc)
    tmp, server._tmp = getattr(server, "_tmp", None), None
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
