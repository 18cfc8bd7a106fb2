"""Which finished tracking jobs the patience stop would have ended earlier, per patience.

Reads every ``results.json`` given (files or folders searched recursively),
keeps the tracking jobs with training rounds, and replays
:func:`depl_fl.tracking.stall.stalled` on their recorded validation losses
(``summary.initial_loss`` as the first reference). A job counts as stopped
earlier when the rule fires after a training round before its last. The jobs
it would have stopped are split by whether the job went on to meet its target
(``summary.met``). The safe default is the smallest patience that stops no job
that met its target. Jobs are deduplicated by their content (the same run
copied to two places counts once).

Usage: ``python benchmarks/stall_scan.py PATH ... [--candidates 20 30 50 100] [--out FILE.md]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from depl_fl.tracking.stall import rounds_since_best, stalled


def result_files(paths: Iterable[str]) -> list[Path]:
    """Every ``results.json`` among ``paths`` (a folder is searched recursively), sorted, once each."""
    found: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.update(path.rglob("results.json"))
        elif path.is_file():
            found.add(path)
    return sorted(found)


def tracking_job(doc: dict[str, Any]) -> dict[str, Any] | None:
    """Start loss, training losses and met of a tracking job's results document; else ``None``."""
    summary = doc.get("summary") or {}
    if not summary.get("tracking"):
        return None
    train = [r for r in doc.get("rounds") or [] if r.get("phase", "train") == "train"]
    if not train:
        return None
    losses = [math.nan if r.get("loss") is None else float(r["loss"]) for r in train]
    start = summary.get("initial_loss")
    return {"start": None if start is None else float(start), "losses": losses,
            "met": bool(summary.get("met")), "rounds": len(losses)}


def stop_round(losses: Sequence[float], start: float | None, patience: int) -> int | None:
    """The training round after which the patience stop would fire, if before the job's last round."""
    for k in range(1, len(losses)):
        if stalled(losses[:k], start, patience):
            return k
    return None


def scan(paths: Iterable[str],
         candidates: Sequence[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The tracking jobs found and, per candidate, the jobs it stops early split by met / not met."""
    jobs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in result_files(paths):
        try:
            text = path.read_text()
            doc = json.loads(text)
        except (OSError, ValueError):
            continue
        digest = hashlib.sha256(text.encode()).hexdigest()
        job = tracking_job(doc) if isinstance(doc, dict) else None
        if job is None or digest in seen:
            continue
        seen.add(digest)
        jobs.append({**job, "path": str(path)})
    rows = []
    for patience in candidates:
        stops = [(job, stop_round(job["losses"], job["start"], patience)) for job in jobs]
        early = [(job, k) for job, k in stops if k is not None]
        rows.append({"patience": patience,
                     "stopped_met": [(job["path"], k, job["rounds"]) for job, k in early if job["met"]],
                     "stopped_unmet": [(job["path"], k, job["rounds"])
                                       for job, k in early if not job["met"]]})
    return jobs, rows


def longest_wait(job: dict[str, Any]) -> int:
    """The most training rounds the job went on without a new lowest validation loss."""
    return max(rounds_since_best(job["losses"][:k], job["start"]) for k in range(1, job["rounds"] + 1))


def safe_default(rows: Sequence[dict[str, Any]]) -> int | None:
    """The smallest patience that stops no job that met its target (``None``: none does)."""
    ok = [row["patience"] for row in rows if not row["stopped_met"]]
    return min(ok) if ok else None


def report(jobs: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]], command: str) -> str:
    """The markdown table of the scan."""
    met = sum(job["met"] for job in jobs)
    longest = max((job["rounds"] for job in jobs), default=0)
    lines = [
        "# The patience stop replayed on finished tracking jobs",
        "",
        f"Command: `{command}`",
        "",
        f"{len(jobs)} distinct tracking jobs with training rounds ({met} met their target, "
        f"{len(jobs) - met} did not; the longest trained {longest} rounds).",
        "A job counts as stopped earlier when the rule (lowest validation loss so far, the job's",
        "`initial_loss` counting as round 0, reached at least `patience` training rounds ago) fires after",
        "a training round before its last.",
        "",
        "| patience | stopped earlier, later met | stopped earlier, not met |",
        "|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['patience']} | {len(row['stopped_met'])} | {len(row['stopped_unmet'])} |")
    waits = sorted(((longest_wait(job), job["path"], job["rounds"]) for job in jobs if job["met"]),
                   reverse=True)
    if waits:
        lines += ["", "Longest stretches without a new lowest validation loss in jobs that met their target "
                  "(rounds, job, its training rounds):"]
        lines += [f"- {w} rounds: `{path}` ({n} rounds)" for w, path, n in waits[:5]]
    default = safe_default(rows)
    lines += ["", "Safe default (smallest patience that stops no job that met its target): "
              + (str(default) if default is not None else "none of the candidates; 100")]
    for row in rows:
        for label in ("stopped_met", "stopped_unmet"):
            for path, k, n in row[label]:
                lines.append(f"- patience {row['patience']}, {label.replace('_', ' ')}: `{path}` "
                             f"(after round {k} of {n})")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--candidates", type=int, nargs="+", default=[20, 30, 50, 100])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    jobs, rows = scan(args.paths, args.candidates)
    given = sys.argv[1:] if argv is None else list(argv)
    text = report(jobs, rows, "python benchmarks/stall_scan.py " + " ".join(given))
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
