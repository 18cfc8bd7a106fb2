"""Summarise ``benchmarks/profiling_cost.sh``: achieved probability and energy including profiling.

``python benchmarks/profiling_summary.py SWEEP_DIR [--out DIR]`` reads the arms
``SWEEP_DIR/{depl,full,depl-reuse}`` (any may be missing or partial: only the
finished jobs count, and the table says how many) and writes ``summary.md`` and
``summary.json``. Figures per arm: runs, ``P[L <= L*]`` with its 95% Wilson
interval, mean training / profiling / total energy, p95 total energy. Ratios:
DepL's total (profiling included) over dependable FedAvg's training energy (the
yardstick: FedAvg as if its profile were free) and over FedAvg's total;
and DepL amortised over ``k`` jobs per federation (the first pays the exploration
rounds, the others reuse the cached profile):
``(profile + train_first + (k - 1) * train_reuse) / k``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from depl_fl.runs.report import ReportError, load_results, wilson_interval  # noqa: E402

ARMS = ("depl", "full", "depl-reuse")
#: Sweep folders of each arm (an arm may be split over sweeps run in parallel).
ARM_DIRS = {"depl": ("depl", "depl-b"), "full": ("full",), "depl-reuse": ("depl-reuse",)}


def _load(folders: list[Path]) -> list:
    """Finished runs of the folders, one per seed.

    Where parallel sweeps both ran a seed, the job that made (and paid for)
    the profile is kept: the other one reused it and is not a single job.
    """
    best: dict = {}
    for folder in folders:
        try:
            found, _ = load_results(folder)
        except ReportError:
            continue
        for r in found:
            if r.seed not in best or r.profile_energy_j > best[r.seed].profile_energy_j:
                best[r.seed] = r
    return [best[k] for k in sorted(best, key=str)]


def arm_figures(folders: list[Path], expected: int | None = None) -> dict | None:
    """Figures of one arm (its sweep folders), or ``None`` when it has no finished job.

    With ``expected``, a seed that ended without results.json (e.g. no
    dependable plan) while the seeds on both sides of it finished counts as a failure.
    """
    runs = _load(folders)
    if not runs:
        return None
    seeds = sorted(r.seed for r in runs if isinstance(r.seed, int))
    missing = [s for s in range(expected or 0) if s not in seeds and seeds and seeds[0] < s < seeds[-1]]
    n = len(runs) + len(missing)
    met = sum(r.met for r in runs)
    low, high = wilson_interval(met, n)
    totals = [r.total_j for r in runs]
    made: dict[str, float] = {}
    for r in runs:
        if r.profile_file is not None and r.profile_made_j is not None:
            made[r.profile_file] = r.profile_made_j
    return {"runs": n, "met": met, "probability": met / n, "wilson": [low, high],
            "train_j": float(np.mean([r.cost_j for r in runs])),
            "profile_j": float(np.mean([r.profile_energy_j for r in runs])),
            "total_j": float(np.mean(totals)), "total_p95_j": float(np.percentile(totals, 95)),
            # Every distinct profile paid once, spread over the arm's jobs.
            "amortised_j": float(np.mean([r.cost_j for r in runs]) + sum(made.values()) / len(runs)),
            "distinct_profiles": len(made),
            "method": runs[0].method, "seeds": sorted(r.seed for r in runs),
            "failed_without_results": missing}


def ratios(arms: dict[str, dict | None]) -> dict[str, float]:
    """DepL's energy relative to dependable FedAvg's, single job and amortised."""
    depl, full, reuse = (arms.get(a) for a in ARMS)
    out: dict[str, float] = {}
    if depl and full:
        out["depl_total_over_full_train"] = depl["total_j"] / full["train_j"]
        out["depl_total_over_full_total"] = depl["total_j"] / full["total_j"]
        out["depl_train_over_full_train"] = depl["train_j"] / full["train_j"]
    if depl and reuse:
        for k in (2, 5, 10, 30):
            amortised = (depl["total_j"] + (k - 1) * reuse["train_j"]) / k
            out[f"depl_amortised_{k}_j"] = amortised
            if full:
                out[f"depl_amortised_{k}_over_full_train"] = amortised / full["train_j"]
    return out


def markdown(arms: dict[str, dict | None], rat: dict[str, float], sweep: str) -> str:
    lines = [f"# Profiling cost\n\nSweep {sweep}: non-IID digits (alpha 0.5), 10 clients, "
             "L* = 0.35, pi = 0.9, federated profiling.\n",
             "| arm | method | runs | P[L ≤ L*] | 95% Wilson | training (J) | profiling (J) | total (J) "
             "| p95 total (J) | amortised over the arm (J) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in ARMS:
        a = arms.get(name)
        if a is None:
            lines.append(f"| {name} | - | 0 | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        lines.append(f"| {name} | {a['method']} | {a['runs']} "
                     f"| {a['probability']:.3f} "
                     f"| [{a['wilson'][0]:.3f}, {a['wilson'][1]:.3f}] | {a['train_j']:.4g} "
                     f"| {a['profile_j']:.4g} | {a['total_j']:.4g} | {a['total_p95_j']:.4g} "
                     f"| {a['amortised_j']:.4g} |")
    lines.append("")
    for key, value in rat.items():
        lines.append(f"- {key}: {value:.4g}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir")
    parser.add_argument("--out", default="benchmarks/results/profiling")
    parser.add_argument("--expected", type=int, default=None,
                        help="seeds per arm; a seed below the last finished one without results fails")
    args = parser.parse_args(argv)
    sweep = Path(args.sweep_dir)
    arms = {name: arm_figures([sweep / d for d in ARM_DIRS[name]], args.expected) for name in ARMS}
    rat = ratios(arms)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"sweep": str(sweep), "arms": arms, "ratios": rat},
                                                 indent=2) + "\n", encoding="utf-8")
    text = markdown(arms, rat, str(sweep))
    (out / "summary.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
