"""Stopping a process group a test started (a ``ray start --block`` node, a job)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, wait_s: float = 30.0) -> None:
    """SIGTERM the group ``proc`` leads, SIGKILL it if it has not ended within ``wait_s``."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=wait_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
