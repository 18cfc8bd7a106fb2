"""Run one command and record its wall time, exit status and the peak memory of its process tree.

Usage: ``python benchmarks/process_tree_peak.py --out DIR NAME TIMEOUT_S -- COMMAND ...``; the
command's output goes to ``DIR/NAME.log`` and one JSON line is appended to ``DIR/records.jsonl``
(and printed). Memory is the summed RSS and PSS (``/proc/PID/smaps_rollup``, Linux) of the command
and every descendant (a job's own Ray: GCS, raylet, ClientApp actors), sampled every second. A
command still running after ``TIMEOUT_S`` gets SIGTERM, then SIGKILL 10 s later.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path


def children_map() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, from ``/proc``."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree_memory(pid: int) -> tuple[int, int, int]:
    """Summed RSS and PSS bytes of ``pid`` and its descendants, and how many processes they are."""
    kids = children_map()
    procs, todo = [], [pid]
    while todo:
        current = todo.pop()
        procs.append(current)
        todo.extend(kids.get(current, []))
    rss = pss = 0
    for proc in procs:
        try:
            with open(f"/proc/{proc}/smaps_rollup", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return rss, pss, len(procs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("timeout_s", type=float)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(args.out / f"{args.name}.log", "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        peak_rss = peak_pss = peak_procs = 0
        timed_out = False
        while proc.poll() is None:
            rss, pss, count = tree_memory(proc.pid)
            peak_rss, peak_pss, peak_procs = max(peak_rss, rss), max(peak_pss, pss), max(peak_procs, count)
            if time.time() - start > args.timeout_s:
                timed_out = True
                os.killpg(proc.pid, signal.SIGTERM)
                time.sleep(10)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(1.0)
        proc.wait()
    record = {"name": args.name, "cmd": " ".join(command), "rc": proc.returncode,
              "wall_s": round(time.time() - start, 1), "peak_rss_mib": round(peak_rss / 2**20),
              "peak_pss_mib": round(peak_pss / 2**20), "peak_procs": peak_procs, "timed_out": timed_out}
    with open(args.out / "records.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
