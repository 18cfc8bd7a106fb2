"""Static jobs whose exploration already met the target: what the minimum exploration costs them.

The federated exploration runs at least ``profile.explore.rounds`` rounds
(8) before anything is planned. In an easy setting the model meets L* during
those rounds, the plan is empty, and the job ends with the exploration's
model: its final loss lies below L* by however far the remaining minimum
rounds carried it (over-caution the plan did not choose), and those rounds'
energy buys nothing. Per sweep and pi the script reports:

- the jobs, and those that trained no planned round;
- for those, when the validation loss (the loss decisions read) first fell
  to L* in the exploration (a lower bound on when a stop rule that also
  carries the split's margin would have passed), and the exploration energy
  spent after that round, as a share of the jobs' total energy (an upper
  bound on what stopping the exploration there would save);
- coverage and calibration (``depl-fl report``'s functions, test loss) of
  the jobs with and without planned rounds.

No job's decision is involved: the script reads results.json files only.

    python benchmarks/explore_overshoot.py SWEEP_DIR [SWEEP_DIR ...] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sweep_io import save_and_print  # noqa: E402
from depl_fl.contract.semantics import empirical_quantile  # noqa: E402


class Job(NamedTuple):
    prob: float
    target: float
    trained: bool              # at least one planned (train) round ran
    first_met: int | None      # first exploration round whose validation loss is <= L*
    energy_after_j: float      # exploration energy of the rounds after ``first_met``
    total_j: float
    test_loss: float


def job_of(doc: dict) -> Job:
    """One results.json document as a :class:`Job`."""
    summary = doc["summary"]
    target = float(summary["target_loss"])
    explore = [r for r in doc["rounds"] if r["phase"] == "profile"]
    first = next((int(r["round"]) for r in explore if float(r["loss"]) <= target), None)
    after = sum(float(r["energy_j"]) for r in explore if first is not None and int(r["round"]) > first)
    return Job(float(summary["target_prob"]), target, any(r["phase"] == "train" for r in doc["rounds"]),
               first, after, float(summary["total_energy_j"]), float(summary["final_test_loss"]))


def load_jobs(sweep: Path) -> list[Job]:
    """Every job of a sweep folder with a final test loss (searched recursively)."""
    jobs = []
    for path in sorted(sweep.rglob("results.json")):
        doc = json.loads(path.read_text())
        if doc.get("summary", {}).get("final_test_loss") is not None:
            jobs.append(job_of(doc))
    return jobs


def _figures(jobs: list[Job]) -> str:
    if not jobs:
        return "- | -"
    losses = np.array([j.test_loss for j in jobs])
    covered = float(np.mean(losses <= jobs[0].target))
    calibration = float(empirical_quantile(losses, jobs[0].prob)) / jobs[0].target
    return f"{covered:.3f} | {calibration:.2f}"


def rows(label: str, jobs: list[Job]) -> list[str]:
    """Markdown rows, one per pi, of one sweep."""
    out = []
    for prob in sorted({j.prob for j in jobs}):
        cell = [j for j in jobs if j.prob == prob]
        untrained = [j for j in cell if not j.trained]
        firsts = [j.first_met for j in untrained if j.first_met is not None]
        share = (sum(j.energy_after_j for j in untrained) / sum(j.total_j for j in untrained)
                 if untrained else 0.0)
        first = (f"{int(np.min(firsts))}-{int(np.max(firsts))} (median {np.median(firsts):g})"
                 if firsts else "-")
        out.append(f"| {label} | {prob:g} | {len(cell)} | {len(untrained)} | {first} | {share:.1%} | "
                   f"{_figures(untrained)} | {_figures([j for j in cell if j.trained])} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", type=Path, nargs="+", metavar="SWEEP_DIR")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = ["| sweep | pi | jobs | no planned round | exploration round where validation <= L* "
             "| their exploration energy after it (share of their total) | coverage / calibration, "
             "no planned round | coverage / calibration, planned |",
             "|---|---|---|---|---|---|---|---|"]
    for sweep in args.sweeps:
        if not sweep.is_dir():
            print(f"error: {sweep} is not a folder", file=sys.stderr)
            return 2
        jobs = load_jobs(sweep)
        if not jobs:
            print(f"error: no job with a final test loss under {sweep}", file=sys.stderr)
            return 2
        lines += rows(sweep.name if sweep.name not in ("static", "tracking") else
                      f"{sweep.parent.name}/{sweep.name}", jobs)
    text = "\n".join(lines) + "\n"
    save_and_print(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
