"""How well static plans' predicted final-loss distributions match what the runs did.

For every static job of a sweep (``tracking.enabled=false``) the plan's
predicted distribution of the judged final loss is sampled again with the
contract's Monte Carlo (``simulate_final_losses`` on the job's own scenario
and plan, from its start loss), and the job's actual final test loss is
placed in it (the PIT: uniform on [0, 1] when the prediction is calibrated).
Per target probability the script reports:

- the PIT deciles (their counts) and the share of runs above the predicted
  pi-quantile (the promise: at most 1 - pi);
- the calibration the report shows (empirical pi-quantile / L*, inverted
  CDF) and the calibration **an exact model would show with the same number
  of runs**: each run's outcome is redrawn from its own predicted
  distribution, 400 times. With 20 runs the empirical 0.95-quantile is the
  19th of 20, whose expected level is 19/21 = 0.905, so even an exact model
  shows a calibration below 1 at high pi; this column says how far below;
- whether the runs meet the per-cell goal (coverage >= pi with its Wilson
  interval covering pi, calibration >= 0.9), how often an exact model would,
  and how often the best model of a family (the prediction times a factor)
  would: the goal's window on the empirical pi-quantile, [0.9, 1.0] x L*, is
  narrow against its spread over 40 runs, so even the best model misses it often.

    python benchmarks/plan_pit.py SWEEP_DIR [--out FILE.md] [--runs N]
    python benchmarks/plan_pit.py --pooled SWEEP_DIR [SWEEP_DIR ...] [--out FILE.md]

``--runs N`` redraws N runs per cell (each a plan of the sweep's, drawn with
replacement) for the exact and best model columns: how the goal's chance
grows with more seeds.

``--pooled`` reads several sweeps (other settings, other targets) and reports
per pi only what can be pooled across targets: the PIT deciles and the share
of runs above their own plan's predicted pi-quantile with its Wilson
interval; and per sweep where its runs fell in their predictions in
standard-normal units (the probit of the PIT: its mean is the offset, its
standard deviation the spread over the predicted one), and the same by plan
length (rounds): a learning curve of the wrong shape shows as an offset that
drifts with the length. One cell's 40 runs
cannot tell a model that is 20% too cautious from an exact one; all settings
together can.

No job's decision is involved: the script reads results.json files only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLES = 4000
REDRAWS = 400
CALIBRATION_GOAL = 0.9
# Models that differ from the prediction by a factor on every loss (1.0: the prediction itself).
SCALES = (0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2)
#: Plan lengths (label, rounds from, rounds below) of the pooled report's horizon table; the plan regime's
#: trajectory bank reaches 40 rounds, so the last two bins are extrapolation.
HORIZON_BINS = (("1-10", 1, 11), ("11-20", 11, 21), ("21-40", 21, 41), ("41-80", 41, 81),
                (">= 81", 81, math.inf))
#: Bins of a job's fitted rate relative to its sweep's median (the pooled report's rate table).
RATE_BINS = (("< 0.85", 0.0, 0.85), ("0.85-1", 0.85, 1.0), ("1-1.15", 1.0, 1.15), (">= 1.15", 1.15, math.inf))


class Outcome(NamedTuple):
    """One static job: its final test loss, its plan's predicted samples of it, L*, pi, plan rounds,
    and the rate its profile fitted (predicted decrease per round at L* of the plan's last model)."""

    actual: float
    samples: np.ndarray
    target: float
    prob: float
    rounds: int
    rate: float


def predicted_samples(doc: dict, seed: int) -> np.ndarray | None:
    """Samples of the judged final loss the job's static plan predicted (None: no plan)."""
    from depl_fl.contract.plan import RoundDecision
    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.contract.semantics import simulate_final_losses

    plan = doc.get("plan") or {}
    if not plan.get("rounds"):
        return None
    scenario = scenario_from_dict(doc["scenario"])
    rounds = [RoundDecision(r["model"], tuple(r["clients"]), dict(r.get("levels", {})))
              for r in plan["rounds"]]
    return simulate_final_losses(scenario, rounds, SAMPLES, seed)


def fitted_rate(doc: dict, target: float) -> float:
    """The profile's predicted decrease per round at ``target`` for the model the plan ends on."""
    model = doc["plan"]["rounds"][-1]["model"]
    run = doc["scenario"]["loss"]["run"][model]
    return float(np.interp(target, run["levels"], run["mean"]))


def finished_static(summary: dict) -> bool:
    """A job without online tracking that ran to its end (a running job's last loss is not final)."""
    from depl_fl.runs.report import UNFINISHED

    return not summary.get("tracking") and summary.get("status") not in UNFINISHED


def cell_rows(sweep: Path) -> dict[float, list[Outcome]]:
    """Per pi: the outcome of every finished static job with a plan."""
    cells: dict[float, list[Outcome]] = {}
    for path in sorted(sweep.rglob("results.json")):
        doc = json.loads(path.read_text())
        summary = doc.get("summary", {})
        actual = summary.get("final_test_loss")
        if actual is None or doc.get("replans") or not finished_static(summary):
            continue
        samples = predicted_samples(doc, int(summary.get("seed", 0)))
        if samples is None:
            continue
        target = float(summary["target_loss"])
        cells.setdefault(float(summary["target_prob"]), []).append(
            Outcome(float(actual), samples, target, float(summary["target_prob"]),
                    len(doc["plan"]["rounds"]), fitted_rate(doc, target)))
    return cells


def meets_goal(losses: np.ndarray, prob: float, target: float) -> tuple[bool, bool, bool]:
    """The per-cell goal on one cell: ``(coverage >= pi, calibration >= 0.9, both and Wilson covers pi)``."""
    from depl_fl.contract.semantics import empirical_quantile
    from depl_fl.runs.report import wilson_interval

    met = int(np.sum(losses <= target))
    covered = met / losses.size >= prob
    calibrated = float(empirical_quantile(losses, prob)) / target >= CALIBRATION_GOAL
    low, high = wilson_interval(met, losses.size)
    return covered, calibrated, covered and calibrated and low <= prob <= high


def redraw(rows: list[Outcome], rng: np.random.Generator,
           runs: int | None) -> np.ndarray:
    """One outcome per run drawn from its own prediction; ``runs`` given: that many runs, whose
    plans are drawn from the sweep's (with replacement)."""
    picked = range(len(rows)) if runs is None else rng.integers(len(rows), size=runs)
    return np.array([rng.choice(rows[i].samples) for i in picked])


def pit_values(rows: list[Outcome]) -> np.ndarray:
    """Each run's PIT: the share of its own plan's predicted samples at or below its actual loss."""
    return np.array([float(np.mean(r.samples <= r.actual)) for r in rows])


def pit_counts(prob: float, rows: list[Outcome]) -> tuple[list[int], int]:
    """The runs per PIT decile, and how many runs ended above their own predicted ``prob``-quantile."""
    pit = pit_values(rows)
    above = int(sum(r.actual > np.quantile(r.samples, prob) for r in rows))
    return np.histogram(pit, bins=10, range=(0.0, 1.0))[0].tolist(), above


def describe(prob: float, rows: list[Outcome],
             rng: np.random.Generator, runs: int | None = None) -> tuple[str, float, float]:
    """One markdown row for the cell ``prob``; the shares of redraws meeting the goal (exact, best model)."""
    from depl_fl.contract.semantics import empirical_quantile

    actual = np.array([r.actual for r in rows])
    target = rows[0].target
    deciles, above_count = pit_counts(prob, rows)
    above = above_count / len(rows)
    redraws = [redraw(rows, rng, runs) for _ in range(REDRAWS)]
    exact = [float(empirical_quantile(r, prob)) / target for r in redraws]
    goals = np.array([meets_goal(r, prob, target) for r in redraws], dtype=float).mean(axis=0)
    best_share, best_scale = max((float(np.mean([meets_goal(r * k, prob, target)[2] for r in redraws])), k)
                                 for k in SCALES)
    lo, mid, hi = np.percentile(exact, [2.5, 50, 97.5])
    yes = "yes" if meets_goal(actual, prob, target)[2] else "no"
    row = (f"| {prob:g} | {len(rows)} | {' '.join(map(str, deciles))} | {above:.3f} | "
           f"{empirical_quantile(actual, prob) / target:.3f} | {mid:.3f} [{lo:.3f}, {hi:.3f}] | "
           f"{yes} | {goals[0]:.2f} / {goals[1]:.2f} / {goals[2]:.2f} | {best_share:.2f} (x{best_scale:g}) |")
    return row, float(goals[2]), best_share


def pooled_row(prob: float, rows: list[Outcome]) -> str:
    """One markdown row of the pooled table: runs, PIT deciles, share above the predicted pi-quantile."""
    from depl_fl.runs.report import wilson_interval

    deciles, above = pit_counts(prob, rows)
    low, high = wilson_interval(above, len(rows))
    return (f"| {prob:g} | {len(rows)} | {' '.join(map(str, deciles))} | {above / len(rows):.3f} "
            f"[{low:.3f}, {high:.3f}] | {1.0 - prob:.2f} |")


def probits(rows: list[Outcome]) -> np.ndarray:
    """The probit of each run's PIT (clipped to half a sample from 0 and 1): standard normal when
    the predictions are calibrated."""
    from scipy.stats import norm

    edge = 0.5 / SAMPLES
    return norm.ppf(np.clip(pit_values(rows), edge, 1.0 - edge))


def shape_row(sweep: Path, rows: list[Outcome]) -> str:
    """One markdown row on where a sweep's runs fell in their predictions, in standard-normal units.

    The probit's mean is the runs' offset (above 0: worse than predicted), its standard deviation
    the ratio of the runs' spread to the predicted one (below 1: the predictions are too wide).
    """
    probit = probits(rows)
    ratios = [r.actual / m for r in rows if (m := float(np.median(r.samples))) > 0.0]
    ratio = float(np.median(ratios)) if ratios else float("nan")  # a prediction of exactly 0 has no ratio
    return (f"| `{sweep}` | {len(rows)} | {probit.mean():+.2f} | {probit.std():.2f} | {ratio:.2f} |")


def offset_row(label: str, rows: list[Outcome]) -> str:
    """One markdown row on a group of runs: the probit's mean with its 95% interval and standard
    deviation, and the share of runs above their own plan's predicted pi-quantile against the share
    promised (the mean of 1 - pi over the runs)."""
    probit = probits(rows)
    half = 1.96 * probit.std(ddof=1) / np.sqrt(probit.size) if probit.size > 1 else float("nan")
    above = np.mean([r.actual > np.quantile(r.samples, r.prob) for r in rows])
    promised = np.mean([1.0 - r.prob for r in rows])
    return (f"| {label} | {len(rows)} | {probit.mean():+.2f} [{probit.mean() - half:+.2f}, "
            f"{probit.mean() + half:+.2f}] | {probit.std():.2f} | {above:.3f} | {promised:.3f} | "
            f"{int(np.median([r.rounds for r in rows]))} |")


def _binned(rows: list[Outcome], values: list[float], bins: tuple) -> list[str]:
    """:func:`offset_row` per bin ``(label, low, high)`` (``low <= value < high``) that has runs."""
    lines = []
    for label, low, high in bins:
        inside = [r for r, v in zip(rows, values, strict=True) if low <= v < high]
        if inside:
            lines.append(offset_row(label, inside))
    return lines


def horizon_rows(rows: list[Outcome]) -> list[str]:
    """:func:`offset_row` per plan-length bin of :data:`HORIZON_BINS` that has runs."""
    return _binned(rows, [float(r.rounds) for r in rows], HORIZON_BINS)


def rate_rows(sweeps: list[list[Outcome]]) -> list[str]:
    """:func:`offset_row` per bin of :data:`RATE_BINS` of each job's fitted rate over its sweep's median."""
    rows, relative = [], []
    for own in sweeps:
        median = float(np.median([r.rate for r in own]))
        rows += own
        relative += [r.rate / median if median > 0 else 1.0 for r in own]
    return _binned(rows, relative, RATE_BINS)


def pooled_report(sweeps: list[Path]) -> str | None:
    """The pooled PIT table over ``sweeps`` (per pi, every static job with a plan of every sweep)
    and one row per sweep on its offset and spread; None when no sweep has such a job."""
    cells: dict[float, list[Outcome]] = {}
    shapes, per_sweep = [], []
    for sweep in sweeps:
        own = cell_rows(sweep)
        for prob, rows in own.items():
            cells.setdefault(prob, []).extend(rows)
        if own:
            per_sweep.append([row for rows in own.values() for row in rows])
            shapes.append(shape_row(sweep, per_sweep[-1]))
    if not cells:
        return None
    lines = [f"# Predicted against actual final test loss, pooled over {len(sweeps)} sweeps", "",
             "Sweeps: " + ", ".join(f"`{s}`" for s in sweeps) + ". Static jobs with a plan, as in the "
             "per-sweep tables; each run's final test loss is placed in its own plan's predicted "
             "distribution, so runs of different targets pool. Promise: the share above the predicted "
             "pi-quantile is at most 1 - pi; a share well below it is a model too cautious there.", "",
             "| π | runs | PIT deciles | share above predicted π-quantile [95% Wilson] | promised at most |",
             "|---|---|---|---|---|"]
    lines += [pooled_row(prob, cells[prob]) for prob in sorted(cells)]
    lines += ["", "Per sweep (every pi): the probit of each run's PIT is standard normal when the "
              "predictions are calibrated. Its mean is the runs' offset in predicted standard deviations "
              "(above 0: worse than predicted), its standard deviation the runs' spread over the predicted "
              "one (below 1: predictions too wide); the last column is the median of actual / predicted "
              "median final loss.", "",
              "| sweep | runs | probit mean | probit sd | actual / predicted median |",
              "|---|---|---|---|---|"]
    lines += shapes
    header = ["| {} | runs | probit mean [95%] | probit sd | share above own π-quantile | promised at most "
              "| median plan rounds |", "|---|---|---|---|---|---|---|"]
    lines += ["", "By plan length (every sweep and pi): where the runs fell in their predictions as a "
              "function of how many rounds the plan trains (the plan regime's constants were fitted on "
              "trajectories of up to 40 rounds).", "", header[0].format("plan rounds"), header[1]]
    lines += horizon_rows([row for rows in cells.values() for row in rows])
    lines += ["", "By the rate the job's exploration fitted (the profile's predicted decrease per round at "
              "L* for the plan's model), over the median of its sweep's jobs: a job whose exploration "
              "fitted a high rate gets a short plan, a low rate a long one. An offset that rises with the "
              "fitted rate is the rate's estimation error passed on to the plans (the planner trusts a "
              "lucky exploration); an offset that drifts with the plan length but not with the rate is "
              "the learning curve's shape.", "", header[0].format("fitted rate / sweep median"), header[1]]
    lines += rate_rows(per_sweep)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", type=Path, nargs="+", metavar="SWEEP_DIR")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=None,
                        help="redraw this many runs per cell instead of the sweep's (plans drawn from it)")
    parser.add_argument("--pooled", action="store_true",
                        help="pool the PIT of several sweeps (targets may differ)")
    args = parser.parse_args(argv)
    for sweep in args.sweeps:
        if not sweep.is_dir():
            print(f"error: {sweep} is not a folder", file=sys.stderr)
            return 2
    if len(args.sweeps) > 1 and not args.pooled:
        print("error: several sweeps need --pooled (their targets differ)", file=sys.stderr)
        return 2
    if args.pooled and args.runs is not None:
        print("error: --runs redraws the per-sweep table's cells; it does not apply to --pooled",
              file=sys.stderr)
        return 2
    if args.runs is not None and args.runs < 2:
        print(f"error: --runs must be at least 2, got {args.runs}", file=sys.stderr)
        return 2
    if args.pooled:
        text = pooled_report(args.sweeps)
        if text is None:
            print("error: no static job with a plan and a final test loss under "
                  + ", ".join(map(str, args.sweeps)), file=sys.stderr)
            return 2
        return _emit(text, args.out)
    sweep = args.sweeps[0]
    cells = cell_rows(sweep)
    if not cells:
        print(f"error: no static job with a plan and a final test loss under {sweep}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    lines = [f"# Predicted against actual final test loss: {sweep.name}", "",
             "Static jobs with a plan of at least one round (jobs without a plan, whose exploration "
             "already met the target, or that re-planned are not here). PIT deciles: counts of runs by where "
             "their final test loss fell in their own plan's predicted distribution (uniform when "
             "calibrated). Calibration: empirical pi-quantile / L* of the runs, and the median [95% range] "
             "an exact model would show with as many runs. Goal (per cell, on these runs): coverage >= pi, "
             "its 95% Wilson interval covering pi, and calibration >= 0.9; the last column is how often "
             "an exact model (each run redrawn from its own prediction) meets coverage / calibration / the "
             "whole goal with as many runs; \"best model\" is the largest share over models whose every "
             f"loss is the prediction times a factor in {list(SCALES)} (the factor in brackets): what the "
             "goal allows on these plans with this many runs, whatever the model.", "",
             "| π | runs | PIT deciles | share above predicted π-quantile | calibration | exact model's "
             "| goal met | exact model meets (coverage / calibration / goal) | best model meets goal |",
             "|---|---|---|---|---|---|---|---|---|"]
    if args.runs is not None:
        lines.insert(2, f"Redraws with {args.runs} runs per cell (the exact and best model columns).")
    described = [describe(prob, cells[prob], rng, args.runs) for prob in sorted(cells)]
    lines += [row for row, _, _ in described]
    exact_every = float(np.prod([share for _, share, _ in described]))
    best_every = float(np.prod([best for _, _, best in described]))
    lines += ["", "An exact model meets the whole goal in every cell above with probability "
              f"{exact_every:.2f}, the best model of each cell at most {best_every:.2f} "
              "(the cells' redraws are independent)."]
    return _emit("\n".join(lines) + "\n", args.out)


def _emit(text: str, out: Path | None) -> int:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
