"""scripts/proc_lib.sh: the deployment script's cleanup never stalls on a process that does not exit.

Processes that ignore SIGTERM, are stopped (SIGSTOP, as a process starved under load looks
to a signal), or live in another session below their parent, are all gone within the grace
period plus the SIGKILL wait; well-behaved ones exit on SIGTERM without SIGKILL.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "scripts" / "proc_lib.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or not Path("/proc/self/stat").exists(),
                                reason="needs bash and Linux /proc")

#: Starts the processes, prints their pids, stops them with proc_stop GRACE and prints its answer.
SCRIPT = r"""
set -euo pipefail
source "$LIB"
pids=()
case "$KIND" in
stubborn)
    bash -c 'trap "" TERM; while :; do sleep 0.1; done' & pids+=("$!")       # ignores SIGTERM
    sleep 1000 & pids+=("$!"); kill -STOP "$!"                               # stopped
    # a child in a new session (like a SuperNode's SuperExec) that ignores SIGTERM too
    bash -c 'setsid bash -c "trap \"\" TERM; while :; do sleep 0.1; done" & wait' & pids+=("$!")
    ;;
polite)
    sleep 1000 & pids+=("$!")
    bash -c 'sleep 1000 & wait' & pids+=("$!")
    ;;
esac
sleep 0.5  # let the children start theirs
echo "pids ${pids[*]} $(proc_descendants "${pids[@]}")"
echo "t0 $EPOCHREALTIME"
echo "stop $(proc_stop "$GRACE" : "${pids[@]}")"
echo "t1 $EPOCHREALTIME"
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _run(kind: str, grace: int) -> tuple[list[int], int, int, float]:
    proc = subprocess.run(["bash", "-c", SCRIPT], env={"LIB": str(LIB), "KIND": kind, "GRACE": str(grace),
                                                        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
                          capture_output=True, text=True, timeout=60, start_new_session=True)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    pids = [int(p) for p in lines["pids"].split()]
    signalled, killed = (int(v) for v in lines["stop"].split())
    return pids, signalled, killed, float(lines["t1"]) - float(lines["t0"])


def test_processes_that_do_not_exit_on_sigterm_are_killed_after_the_grace_period():
    pids, signalled, killed, elapsed = _run("stubborn", grace=2)
    leftovers = [p for p in pids if _alive(p)]
    for pid in leftovers:
        subprocess.run(["kill", "-KILL", str(pid)], check=False)
    assert leftovers == []
    assert len(pids) >= 4 and signalled >= 4  # the new-session grandchild was found and signalled
    assert killed >= 3                         # the stubborn, the stopped one and the grandchild
    assert 2 <= elapsed < 2 + 1 + 5 + 3        # grace, its rounding, the SIGKILL wait, slack


def test_processes_that_exit_on_sigterm_need_no_sigkill():
    t0 = time.monotonic()
    pids, signalled, killed, elapsed = _run("polite", grace=10)
    assert [p for p in pids if _alive(p)] == []
    assert killed == 0 and signalled == len(pids) >= 3
    assert elapsed < 5 and time.monotonic() - t0 < 30
