"""Stopping an interrupted job's child processes after the job has exited (standard library only).

Under Ray a job's children are its GCS, raylet, agents and workers. They
ignore Ctrl-C (Ray blocks SIGINT in them) and outlive a driver that ends with
:func:`os._exit` by minutes, so a stopped job must stop them. It cannot do so
itself: once the raylet is gone, Ray's core worker in the driver exits the
driver with status 1 ("owner's node has crashed"), racing the job's own exit
status 130/143. The job therefore hands its children to a reaper
(:func:`hand_to_reaper`, this file run as a script): the reaper waits until the
job has exited, then sends SIGTERM, and SIGKILL to those alive ``wait_s`` later.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: How long the reaper waits for the job to exit before stopping its children anyway.
JOB_EXIT_WAIT_S = 10.0


def _stat_fields(pid: int | str) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first), or None if gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every live (not zombie) descendant of process ``pid``, from ``/proc`` (empty without it)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(entry.name)
        if fields is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        kids = children.get(queue.pop(), [])
        found += kids
        queue += kids
    return found


def stop(pids: list[int], wait_s: float = 3.0) -> list[int]:
    """SIGTERM to ``pids``, SIGKILL to those alive ``wait_s`` later; returns those still alive."""
    pending = [p for p in pids if alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pending:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while pending and time.monotonic() < deadline:
            time.sleep(0.05)
            pending = [p for p in pending if alive(p)]
        if not pending:
            break
    return pending


def stop_after_exit(job_pid: int, pids: list[int], wait_s: float = 3.0,
                    job_wait_s: float = JOB_EXIT_WAIT_S) -> list[int]:
    """Wait (at most ``job_wait_s``) until process ``job_pid`` has exited, then :func:`stop` ``pids``."""
    deadline = time.monotonic() + job_wait_s
    while alive(job_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return stop(pids, wait_s)


def hand_to_reaper(pids: list[int], wait_s: float = 3.0) -> subprocess.Popen | None:
    """Start a reaper that stops ``pids`` once this process has exited (None when there are none).

    The reaper stays in this process's group and holds none of its files open.
    It starts with SIGINT ignored (an ignored signal stays ignored across exec,
    and Python keeps it so), so a second Ctrl-C does not stop it. Call from the
    main thread.
    """
    if not pids:
        return None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.Popen(
            [sys.executable, "-S", str(Path(__file__).resolve()), str(os.getpid()), str(wait_s),
             *map(str, pids)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def _main(argv: list[str]) -> int:
    """``processes.py JOB_PID WAIT_S PID...``: the reaper started by :func:`hand_to_reaper`."""
    job_pid, wait_s, pids = int(argv[0]), float(argv[1]), [int(p) for p in argv[2:]]
    return 1 if stop_after_exit(job_pid, pids, wait_s) else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
