"""Does a job's fitted learning-curve rate carry over to its plans? Two checks on the trajectory bank.

Why. On the static sweeps, jobs whose exploration fitted a fast rate got short
plans that ended worse than predicted, and slow ones long plans that ended
better (``plan_pit.py --pooled``, rate table). Two readings predict that:
(a) the fitted rate is an estimate whose error lasts for the whole plan, so
the prediction should carry it as a per-trajectory random factor; (b) within
a setting the fitted rate says little about the job's real rate, and the
planner's choice of plan length turns that noise into the pattern. This
script measures which.

``persistence``
    Per setting and policy (one model on every client, the first
    ``--horizon`` rounds after the exploration): the rate each job's
    exploration fitted (:func:`depl_fl.tracking.learning_curve.rate_coefficient`,
    the policy's model's trajectory) against the rate the job then realised (the
    learning curve's rate that takes it from its start loss to the mean
    validation loss of rounds ``horizon-1 .. horizon+2``,
    :func:`realised_rate`). Slope 1 and a high correlation: the fitted rate
    is the job's own; slope 0: within a setting it is noise. (The realised
    rate leaves out the set's ``r_eff**a``: the same for every job of a
    setting, so it moves only the mean log ratio.)
``factor``
    The bank's pinball check (:mod:`fit`) with the run means of every Monte
    Carlo trajectory scaled by a persistent factor ``exp(s Z - s**2 / 2)``
    (``Z`` on :data:`FACTOR_GROUPS` standard-normal quantiles, mean factor 1),
    for each ``s`` of ``--factors`` and each oscillation scale of
    ``--oscillation``: reading (a) as a model.

    python benchmarks/plan_regime/rate_checks.py BANK [--settings d1,d2,d3,d4] [--horizon 10] \\
        [--factors 0,0.15,0.25] [--oscillation 1,0.75] [--out DIR]

Writes ``rate_checks.md`` and ``rate_checks.json`` to ``--out`` (default
``benchmarks/results/plan_regime``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from multiprocessing import get_context
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import fit  # noqa: E402 - the bank's job loader and pinball score live next door

#: Monte Carlo groups of the factor check: one factor per group of ``TRAJECTORIES / FACTOR_GROUPS``.
FACTOR_GROUPS = 20
#: Horizon groups of the factor check (first and last round of each).
FACTOR_HORIZONS = ((1, 5), (6, 16), (17, 40), (41, 80), (81, 10**9))


def curve_loss(start: float, rate: float, rounds: float, power: float, floor: float) -> float:
    """The learning curve ``dL/dk = -rate (L - floor)**power`` after ``rounds`` rounds from ``start``.

    ``(L - f)**(1 - p)`` grows by ``rate (p - 1)`` per round, so
    ``L_k = f + ((L_0 - f)**(1 - p) + rate (p - 1) k)**(-1 / (p - 1))``.
    """
    if start <= floor:
        return float(start)
    base = (start - floor) ** (1.0 - power) + rate * (power - 1.0) * rounds
    return float(floor + base ** (-1.0 / (power - 1.0)))


def realised_rate(start: float, loss: float, rounds: float, power: float, floor: float) -> float | None:
    """The rate whose learning curve goes from ``start`` to ``loss`` in ``rounds`` rounds.

    None when the curve cannot get there (``loss`` not strictly between ``floor`` and ``start``).
    """
    if not (floor < loss < start) or rounds <= 0:
        return None
    # Inverse of curve_loss: closed form.
    return float(((loss - floor) ** (1.0 - power) - (start - floor) ** (1.0 - power))
                 / ((power - 1.0) * rounds))


def fitted_rate(job: fit.Job, regime, model: str) -> float:
    """The rate the job's exploration fitted for ``model`` (as the profile computes it)."""
    from depl_fl.tracking.learning_curve import effective_floor, rate_coefficient

    losses = job.profiler.trajectories[model][0]
    floor = effective_floor(regime.floor, losses[-1])
    return rate_coefficient(losses[0], losses[-1], len(losses) - 1, regime.power, floor)


def persistence(jobs: list[fit.Job], regime, horizon: int) -> list[dict]:
    """Per (setting, policy on every client): how the fitted rate predicts the realised one."""
    from depl_fl.tracking.learning_curve import effective_floor

    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for job in jobs:
        for run in job.runs:
            if run["set"] != "all" or len(run["val"]) < horizon + 2:
                continue
            rate = fitted_rate(job, regime, run["model"])
            floor = effective_floor(regime.floor, run["start_loss"])
            reached = float(np.mean(run["val"][horizon - 2:horizon + 2]))  # rounds horizon-1 .. horizon+2
            actual = realised_rate(run["start_loss"], reached, horizon + 0.5, regime.power, floor)
            if actual is not None:
                pairs.setdefault((job.setting, run["model"]), []).append((rate, actual))
    rows = [association(setting, f"{model}:all", np.log(np.array(values)))
            for (setting, model), values in sorted(pairs.items())]
    for model in sorted({m for _, m in pairs}):
        # Pooled within settings: each setting's logs centred on its own means.
        parts = [np.log(np.array(v)) for (_, m), v in sorted(pairs.items()) if m == model]
        centred = np.concatenate([p - p.mean(axis=0) for p in parts])
        rows.append({**association("pooled within settings", f"{model}:all", centred),
                     "median_fitted": None, "mean_log_ratio": None})  # centred: no level left
    return rows


def association(setting: str, policy: str, logs: np.ndarray) -> dict:
    """Spread, correlation and slope (with a 95% interval) of log realised on log fitted rates."""
    x, y = logs[:, 0] - logs[:, 0].mean(), logs[:, 1] - logs[:, 1].mean()
    varx, n = float(np.sum(x * x)), len(logs)
    slope = float(np.sum(x * y) / varx) if varx > 0 else math.nan
    half = math.nan
    if varx > 0 and n > 2:
        residual = y - slope * x
        half = 1.96 * math.sqrt(float(np.sum(residual * residual)) / (n - 2) / varx)
    return {"setting": setting, "policy": policy, "jobs": n,
            "median_fitted": float(np.exp(np.median(logs[:, 0]))),
            "sd_log_fitted": float(logs[:, 0].std()), "sd_log_realised": float(logs[:, 1].std()),
            "correlation": float(np.corrcoef(logs[:, 0], logs[:, 1])[0, 1]) if varx > 0 else math.nan,
            "slope": slope, "slope_half_width": half,
            "mean_log_ratio": float(np.mean(logs[:, 1] - logs[:, 0]))}


def factor_predictions(job: fit.Job, regime, spread: float) -> list[tuple[dict, int, np.ndarray]]:
    """:func:`fit.predictions` with every trajectory's run means scaled by its own persistent factor."""
    from scipy.stats import norm

    from depl_fl.contract.plan import RoundDecision
    from depl_fl.contract.semantics import iter_round_losses, judged_losses, set_coverage

    per_group = fit.TRAJECTORIES // FACTOR_GROUPS
    scenarios = [job.scenario(regime, math.exp(spread * z - 0.5 * spread * spread))
                 for z in norm.ppf((np.arange(FACTOR_GROUPS) + 0.5) / FACTOR_GROUPS)]
    out = []
    for index, run in enumerate(job.runs):
        cov = set_coverage(scenarios[0], tuple(run["clients"]))
        if cov is not None and cov[1] > 0.0:
            continue  # as fit.predictions: sets that leave a class unseen are outside the model
        horizons = [k for k in fit.HORIZONS if k <= len(run["test"])]
        rounds = [RoundDecision(run["model"], tuple(run["clients"]), {})] * max(horizons)
        samples: dict[int, list[np.ndarray]] = {k: [] for k in horizons}
        for group, scen in enumerate(scenarios):
            rng = np.random.default_rng(1000 + 100 * index + group)
            for k, walk in enumerate(iter_round_losses(scen, rounds, per_group, rng,
                                                       start_loss=run["start_loss"]), start=1):
                if k in samples:
                    samples[k].append(judged_losses(scen, rounds[k - 1], walk.copy(), rng))
        out += [(run, k, np.concatenate(samples[k])) for k in horizons]
    return out


def _factor_rows(task: tuple[int, dict, float]) -> list[tuple[str, int, float, float, list[float]]]:
    index, values, spread = task
    job = fit.JOBS[index]
    rows = []
    for run, k, samples in factor_predictions(job, fit.regime_of(values), spread):
        y = run["test"][k - 1]
        rows.append((job.setting, k, fit.pinball(samples, y), float(np.mean(samples <= y)),
                     [float(y <= np.quantile(samples, t)) for t in (0.8, 0.9, 0.95)]))
    return rows


def summarise(rows: list[tuple[str, int, float, float, list[float]]]) -> dict:
    """Pinball, PIT probit mean / sd and coverage of the 0.8/0.9/0.95 quantiles of ``rows``."""
    probit = fit.pit_probit(np.array([r[3] for r in rows]))
    cover = np.mean([r[4] for r in rows], axis=0)
    return {"n": len(rows), "pinball": float(np.mean([r[2] for r in rows])),
            "probit_mean": float(probit.mean()), "probit_sd": float(probit.std()),
            "q80": float(cover[0]), "q90": float(cover[1]), "q95": float(cover[2])}


def factor_check(values: dict, spread: float, pool) -> dict[str, dict]:
    """:func:`summarise` overall, per horizon group and per setting, for one factor spread."""
    rows = [r for part in pool.map(_factor_rows, [(i, values, spread) for i in range(len(fit.JOBS))])
            for r in part]
    groups = {"all": rows}
    for first, last in FACTOR_HORIZONS:
        label = f"K {first}-{last}" if last < 10**9 else f"K >= {first}"
        groups[label] = [r for r in rows if first <= r[1] <= last]
    for setting in sorted({r[0] for r in rows}):
        groups[f"setting {setting}"] = [r for r in rows if r[0] == setting]
    return {key: summarise(part) for key, part in groups.items() if part}


def markdown(settings: list[str], jobs: int, horizon: int, persist: list[dict],
             checks: list[tuple[float, float, dict]]) -> str:
    lines = ["# Does the fitted rate carry over? (trajectory bank)", "",
             f"{jobs} jobs of the settings {', '.join(settings)}.", "",
             f"## Fitted against realised rate (first {horizon} rounds on every client)", "",
             "| setting | policy | jobs | median fitted | sd log fitted | sd log realised | correlation | "
             "slope (95%) | mean log(realised/fitted) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in persist:
        low, high = r["slope"] - r["slope_half_width"], r["slope"] + r["slope_half_width"]
        median = "-" if r["median_fitted"] is None else f"{r['median_fitted']:.4f}"
        lines.append(f"| {r['setting']} | {r['policy']} | {r['jobs']} | {median} | "
                     f"{r['sd_log_fitted']:.3f} | {r['sd_log_realised']:.3f} | {r['correlation']:+.2f} | "
                     f"{r['slope']:+.2f} [{low:+.2f}, {high:+.2f}] | "
                     f"{'-' if r['mean_log_ratio'] is None else format(r['mean_log_ratio'], '+.3f')} |")
    lines += ["", "## Persistent rate factor in the prediction", "",
              "Pinball of the 0.8/0.85/0.9/0.95 quantiles (lower is better), PIT probit mean / sd "
              "(0 / 1 when calibrated) and coverage of the 0.8/0.9/0.95 quantiles.", "",
              "| factor sd | oscillation x | group | n | pinball | probit mean | probit sd | "
              "P[L <= q80] | P[L <= q90] | P[L <= q95] |", "|---|---|---|---|---|---|---|---|---|---|"]
    for spread, scale, table in checks:
        for key, r in table.items():
            lines.append(f"| {spread:g} | {scale:g} | {key} | {r['n']} | {r['pinball']:.5f} | "
                         f"{r['probit_mean']:+.3f} | {r['probit_sd']:.3f} | {r['q80']:.3f} | "
                         f"{r['q90']:.3f} | {r['q95']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank")
    parser.add_argument("--settings", default="d1,d2,d3,d4")
    parser.add_argument("--horizon", type=int, default=10)
    parser.add_argument("--factors", default="0,0.15,0.25")
    parser.add_argument("--oscillation", default="1,0.75")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", default=str(HERE.parents[0] / "results" / "plan_regime"))
    args = parser.parse_args()
    from depl_fl.runs.runconfig import compose_config

    settings = args.settings.split(",")
    fit.JOBS.extend(fit.load_jobs(args.bank, settings))
    configured = dict(compose_config([])["profile"]["plan_regime"])
    persist = persistence(fit.JOBS, fit.regime_of(configured), args.horizon)
    checks = []
    with get_context("fork").Pool(args.processes) as pool:
        for scale in (float(v) for v in args.oscillation.split(",")):
            values = {**configured, "oscillation": configured["oscillation"] * scale}
            for spread in (float(v) for v in args.factors.split(",")):
                checks.append((spread, scale, factor_check(values, spread, pool)))
                print(f"factor sd {spread:g}, oscillation x{scale:g}: pinball "
                      f"{checks[-1][2]['all']['pinball']:.5f}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(settings, len(fit.JOBS), args.horizon, persist, checks)
    (out / "rate_checks.md").write_text(text)
    (out / "rate_checks.json").write_text(json.dumps(
        {"settings": settings, "jobs": len(fit.JOBS), "horizon": args.horizon, "persistence": persist,
         "factor_checks": [{"factor_sd": s, "oscillation_scale": o, "table": t} for s, o, t in checks]},
        indent=1))
    print(text)


if __name__ == "__main__":
    main()
