"""Static plans emulated on the trajectory bank: coverage and calibration per setting and pi, in a minute.

Why. A static sweep of one setting at three pi takes about 45 minutes on two
cores. The bank (``bank.py``) holds, per job, its exploration and the runs of
fixed policies (one model on one client set, trained for 40 or 120 rounds
after the exploration). Each run is emulated as a static plan: its planned
length is the first round K whose predicted pi-quantile of the judged loss
(the contract's Monte Carlo, as in ``fit.py``) is at or below the job's
target L*, and its outcome is the test loss the run recorded after K rounds.
Per setting and pi the script reports what ``depl-fl report`` reports for a
sweep: the coverage (share at or below L*, Wilson interval) and the
calibration (empirical pi-quantile of the outcomes over L*, bootstrap
interval), with the median planned length and the runs whose plan would be
longer than the bank's runs (counted, not scored). The runs of one job share
its exploration, so those intervals are too narrow; the "by job" intervals
resample whole jobs, and each check counts the cells that meet the goal and
those not significantly off it by these intervals.

What it leaves out: the planner's choice between policies (each run is its
own plan, so no plan is picked for being the most optimistic one) and
policies that switch model or set.

``--rate setting-mean`` replaces each job's fitted rate (per model) by the
geometric mean of the rates the *other* jobs of its setting fitted: an oracle
no job has (it needs the explorations of the whole setting), so it bounds
what any setting-level rate prior could do. ``--rate setting-centred`` scales
the rates of every job of a setting by one factor, the one at which the
setting's runs fall, on average, at the centre of their predictions (mean PIT
probit 0 over every run and horizon, as ``fit.py`` scores it): an oracle of
the setting's centre, fitted on the outcomes it is then scored on, so it bounds
what any model of a setting's centre could do; the report gives the factor and
the probit's spread after centring (1 when the predicted spread is right).
``--oscillation`` scales the plan regime's oscillation (narrower predictions).

    python benchmarks/plan_regime/emulate.py BANK [--settings d1,d2,d3,d4] \\
        [--rate fitted,setting-mean,setting-centred] \\
        [--oscillation 1] [--out DIR]

Writes ``emulate.md`` and ``emulate.json`` to ``--out`` (default
``benchmarks/results/plan_regime``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from multiprocessing import get_context
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import fit  # noqa: E402 - the bank's job loader lives next door
import rate_checks  # noqa: E402

PIS = (0.8, 0.9, 0.95)
RATES = ("fitted", "setting-mean", "setting-centred")
#: Resamples of the job bootstrap (whole jobs with all their runs).
JOB_BOOTSTRAP_DRAWS = 1000
#: Bisection of the centring factor: its log lies in this range, halved this many times.
CENTRING_RANGE, CENTRING_STEPS = (-1.0, 1.0), 10


def planned_round(quantiles: Sequence[float], target: float) -> int | None:
    """The first round (1-based) whose predicted quantile is at or below ``target``; None if none is."""
    return next((k for k, q in enumerate(quantiles, start=1) if q <= target), None)


def setting_mean_factors(jobs: list[fit.Job], regime) -> list[dict[str, float]]:
    """Per job and model: the factor from its fitted rate to its setting's leave-one-out geometric mean.

    A job alone in its setting keeps its own rate (factor 1).
    """
    logs = [{m: math.log(rate_checks.fitted_rate(job, regime, m)) for m in job.profiler.trajectories}
            for job in jobs]
    factors = []
    for i, job in enumerate(jobs):
        own = {}
        for model, value in logs[i].items():
            others = [logs[j][model] for j, other in enumerate(jobs)
                      if j != i and other.setting == job.setting and model in logs[j]]
            own[model] = math.exp(float(np.mean(others)) - value) if others else 1.0
        factors.append(own)
    return factors


def centring_log_factor(mean_probit: Callable[[float], float],
                        bounds: tuple[float, float] = CENTRING_RANGE, steps: int = CENTRING_STEPS) -> float:
    """The log rate factor in ``bounds`` at which ``mean_probit`` (rising with it: a faster curve predicts
    lower losses, so the outcomes fall higher in their predictions) crosses 0, by bisection.

    Raises ``ValueError`` when it does not change sign over ``bounds``.
    """
    low, high = bounds
    at_low, at_high = mean_probit(low), mean_probit(high)
    if not at_low <= 0.0 <= at_high:
        raise ValueError(f"the mean probit does not cross 0 for log factors in {bounds}: "
                         f"{at_low:+.3f} .. {at_high:+.3f}")
    for _ in range(steps):
        middle = 0.5 * (low + high)
        if mean_probit(middle) <= 0.0:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


def _job_probits(task: tuple[int, dict, float]) -> list[float]:
    index, values, factor = task
    job = fit.JOBS[index]
    return [float(fit.pit_probit(np.mean(samples <= run["test"][k - 1])))
            for run, k, samples in fit.predictions(job, fit.regime_of(values), factor)]


def setting_centred_factors(values: dict, pool) -> tuple[list[dict[str, float]], dict[str, dict]]:
    """Per job of :data:`fit.JOBS`: its setting's centring factor for every model; per setting: the
    factor, the mean probit before and the probit's standard deviation after centring."""

    def probits(indices: list[int], log_factor: float) -> np.ndarray:
        parts = pool.map(_job_probits, [(i, values, math.exp(log_factor)) for i in indices])
        return np.array([v for part in parts for v in part])

    by_setting: dict[str, dict] = {}
    for setting in dict.fromkeys(job.setting for job in fit.JOBS):
        indices = [i for i, job in enumerate(fit.JOBS) if job.setting == setting]
        log_factor = centring_log_factor(lambda x, ix=indices: float(probits(ix, x).mean()))
        before, after = probits(indices, 0.0), probits(indices, log_factor)
        by_setting[setting] = {"factor": math.exp(log_factor), "probit_mean_before": float(before.mean()),
                               "probit_mean_after": float(after.mean()),
                               "probit_sd_after": float(after.std())}
    factors = [dict.fromkeys(job.profiler.trajectories, by_setting[job.setting]["factor"])
               for job in fit.JOBS]
    return factors, by_setting


def emulated_plans(job: fit.Job, regime, rate_factor: dict[str, float]) -> list[dict]:
    """Per usable run of ``job`` and pi: the planned length (None: beyond the run) and the outcome / L*."""
    from depl_fl.contract.plan import RoundDecision
    from depl_fl.contract.semantics import iter_round_losses, judged_losses, set_coverage

    scen = job.scenario(regime, rate_factor)
    target = float(job.cfg["target"]["loss"])
    rows = []
    for index, run in enumerate(job.runs):
        cov = set_coverage(scen, tuple(run["clients"]))
        if cov is not None and cov[1] > 0.0:
            continue  # as fit.predictions: a set that leaves a class unseen is outside the model
        rounds = [RoundDecision(run["model"], tuple(run["clients"]), {})] * len(run["test"])
        rng = np.random.default_rng(1000 + index)
        quantiles: dict[float, list[float]] = {pi: [] for pi in PIS}
        for k, walk in enumerate(iter_round_losses(scen, rounds, fit.TRAJECTORIES, rng,
                                                   start_loss=run["start_loss"]), start=1):
            judged = judged_losses(scen, rounds[k - 1], walk.copy(), rng)
            for pi, q in zip(PIS, np.quantile(judged, PIS), strict=True):
                quantiles[pi].append(float(q))
            if all(q[-1] <= target for q in quantiles.values()):
                break  # every pi has its plan
        kind = "all" if run["set"] == "all" else "subset"
        for pi in PIS:
            k = planned_round(quantiles[pi], target)
            outcome = None if k is None else run["test"][k - 1] / target
            rows.append({"setting": job.setting, "job": job.name, "policy": f"{run['model']}:{kind}",
                         "pi": pi, "rounds": k, "outcome": outcome})
    return rows


def _job_rows(task: tuple[int, dict, dict[str, float]]) -> list[dict]:
    index, values, factor = task
    return emulated_plans(fit.JOBS[index], fit.regime_of(values), factor)


def job_bootstrap(rows: list[dict], pi: float, draws: int = JOB_BOOTSTRAP_DRAWS,
                  seed: int = 0) -> dict[str, tuple[float, float]] | None:
    """95% percentile intervals of coverage and calibration resampling whole jobs (with all their runs).

    The runs of one job share its exploration, so they are not independent: the Wilson and the per-run
    bootstrap intervals are too narrow. None with fewer than two jobs.
    """
    from depl_fl.contract.semantics import empirical_quantile

    by_job: dict[str, list[float]] = {}
    for r in rows:
        by_job.setdefault(r["job"], []).append(r["outcome"])
    if len(by_job) < 2:
        return None
    groups = [np.asarray(v) for v in by_job.values()]
    rng = np.random.default_rng(seed)
    coverage, calib = [], []
    for _ in range(draws):
        sample = np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))])
        coverage.append(float(np.mean(sample <= 1.0)))
        calib.append(float(empirical_quantile(sample, pi)))
    return {"coverage": tuple(np.percentile(coverage, [2.5, 97.5]).tolist()),
            "calibration": tuple(np.percentile(calib, [2.5, 97.5]).tolist())}


def summarise(rows: list[dict], pi: float) -> dict:
    """Coverage (Wilson; and by job) and calibration (bootstrap; and by job) of the planned rows of one
    group at ``pi``."""
    from depl_fl.runs.report import calibration, wilson_interval

    planned = [r for r in rows if r["rounds"] is not None]
    out = {"runs": len(rows), "beyond": len(rows) - len(planned), "planned": len(planned)}
    if not planned:
        return out
    outcomes = [r["outcome"] for r in planned]
    met = sum(v <= 1.0 for v in outcomes)
    calib, low, high = calibration(outcomes, pi, 1.0)  # outcomes are already over L*
    return {**out, "coverage": met / len(planned), "wilson": wilson_interval(met, len(planned)),
            "calibration": calib, "calibration_interval": (low, high), "by_job": job_bootstrap(planned, pi),
            "median_rounds": float(np.median([r["rounds"] for r in planned]))}


def goal_met(cell: dict, pi: float) -> bool:
    """The per-cell goal for one cell: coverage >= pi, its Wilson interval covering pi, calibration >= 0.9."""
    if not cell.get("planned"):
        return False
    low, high = cell["wilson"]
    return cell["coverage"] >= pi and low <= pi <= high and cell["calibration"] >= 0.9


def goal_within_reach(cell: dict, pi: float) -> bool:
    """Whether the cell is not significantly off the goal once whole jobs are resampled: its by-job
    coverage interval reaches pi and its by-job calibration interval meets [0.9, 1]."""
    by_job = cell.get("by_job")
    if not cell.get("planned") or not by_job:
        return False
    low, high = by_job["calibration"]
    return by_job["coverage"][1] >= pi and low <= 1.0 and high >= 0.9


def table(rows: list[dict], settings: list[str]) -> dict[str, dict[str, dict]]:
    """:func:`summarise` per group (each setting, then all) and pi."""
    groups = {f"setting {s}": [r for r in rows if r["setting"] == s] for s in settings}
    groups["all"] = rows
    return {key: {str(pi): summarise([r for r in part if r["pi"] == pi], pi) for pi in PIS}
            for key, part in groups.items()}


def markdown(settings: list[str], jobs: int, checks: list[tuple[str, float, dict, dict | None]]) -> str:
    lines = ["# Static plans emulated on the trajectory bank", "",
             f"{jobs} jobs of the settings {', '.join(settings)}. Each recorded run (one model on one "
             "set) is a static plan of the first round whose predicted pi-quantile of the judged loss is at "
             "or below the job's L*; its outcome is the run's test loss then. Coverage: share at or below L* "
             "[95% Wilson]; calibration: empirical pi-quantile / L* [95% bootstrap] (goal: coverage >= pi, "
             "calibration in [0.9, 1]); beyond: runs whose plan would be longer than the bank recorded. The "
             "runs of one job share its exploration: the Wilson and bootstrap intervals, which treat them as "
             "independent, are too narrow; the 'by job' intervals resample whole jobs (coverage; "
             "calibration).", ""]
    for rate, scale, result, centring in checks:
        lines += [f"## rate {rate}, oscillation x{scale:g}", ""]
        if centring:
            lines += ["Centring factor per setting (mean PIT probit before -> after; its standard deviation "
                      "after, 1 when the predicted spread is right): " + "; ".join(
                          f"{s} x{c['factor']:.3f} ({c['probit_mean_before']:+.2f} -> "
                          f"{c['probit_mean_after']:+.2f}, sd {c['probit_sd_after']:.2f})"
                          for s, c in centring.items()), ""]
        cells = [(r, float(pi)) for key, per_pi in result.items() if key != "all" for pi, r in per_pi.items()]
        lines += [f"Cells meeting the goal (coverage >= pi, Wilson covering pi, calibration >= 0.9): "
                  f"{sum(goal_met(r, pi) for r, pi in cells)} of {len(cells)}; not significantly off it "
                  "(by-job coverage interval reaching pi, by-job calibration interval meeting [0.9, 1]): "
                  f"{sum(goal_within_reach(r, pi) for r, pi in cells)} of {len(cells)}.", ""]
        lines += ["| group | pi | planned | beyond | coverage [95%] | calibration [95%] | by job [95%] | "
                  "median rounds |", "|---|---|---|---|---|---|---|---|"]
        for key, per_pi in result.items():
            for pi, r in per_pi.items():
                if not r.get("planned"):
                    lines.append(f"| {key} | {pi} | 0 | {r['beyond']} | - | - | - | - |")
                    continue
                low, high = r["calibration_interval"]
                ci = "" if low is None else f" [{low:.2f}, {high:.2f}]"
                by_job = r.get("by_job")
                jobs_ci = "-" if not by_job else (
                    "[{:.2f}, {:.2f}]; [{:.2f}, {:.2f}]".format(*by_job["coverage"], *by_job["calibration"]))
                lines.append(f"| {key} | {pi} | {r['planned']} | {r['beyond']} | {r['coverage']:.3f} "
                             f"[{r['wilson'][0]:.2f}, {r['wilson'][1]:.2f}] | {r['calibration']:.3f}{ci} | "
                             f"{jobs_ci} | {r['median_rounds']:g} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank")
    parser.add_argument("--settings", default="d1,d2,d3,d4")
    parser.add_argument("--rate", default="fitted,setting-mean", help=f"comma list of {', '.join(RATES)}")
    parser.add_argument("--oscillation", default="1", help="comma list of oscillation scales")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", default=str(HERE.parents[0] / "results" / "plan_regime"))
    args = parser.parse_args()
    rates = args.rate.split(",")
    unknown = [r for r in rates if r not in RATES]
    if unknown:
        print(f"error: unknown --rate {', '.join(unknown)} (choose from {', '.join(RATES)})", file=sys.stderr)
        return 2
    try:
        scales = [float(v) for v in args.oscillation.split(",")]
    except ValueError:
        scales = []
    if not scales or not all(v > 0 and math.isfinite(v) for v in scales):
        print(f"error: --oscillation needs positive numbers, got {args.oscillation!r}", file=sys.stderr)
        return 2
    from depl_fl.runs.runconfig import compose_config

    settings = args.settings.split(",")
    fit.JOBS.extend(fit.load_jobs(args.bank, settings))
    if not fit.JOBS:
        print(f"error: no bank job under {args.bank} for the settings {args.settings}", file=sys.stderr)
        return 2
    configured = dict(compose_config([])["profile"]["plan_regime"])
    checks = []
    with get_context("fork").Pool(args.processes) as pool:
        for scale in scales:
            values = {**configured, "oscillation": configured["oscillation"] * scale}
            for rate in rates:
                centring = None
                if rate == "setting-mean":
                    factors = setting_mean_factors(fit.JOBS, fit.regime_of(values))
                elif rate == "setting-centred":
                    try:
                        factors, centring = setting_centred_factors(values, pool)
                    except ValueError as exc:
                        print(f"error: --rate setting-centred: {exc}", file=sys.stderr)
                        return 2
                else:
                    factors = [{} for _ in fit.JOBS]
                rows = [r for part in pool.map(_job_rows, [(i, values, f) for i, f in enumerate(factors)])
                        for r in part]
                checks.append((rate, scale, table(rows, settings), centring))
                print(f"rate {rate}, oscillation x{scale:g}: done", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(settings, len(fit.JOBS), checks)
    (out / "emulate.md").write_text(text)
    (out / "emulate.json").write_text(json.dumps(
        {"settings": settings, "jobs": len(fit.JOBS),
         "checks": [{"rate": r, "oscillation_scale": s, "table": t, "centring": c} for r, s, t, c in checks]},
        indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
