"""Where a static plan's margin comes from: its recorded plan predicted again, one model term at a time.

For every static DepL job of a sweep (``tracking.enabled=false``, no re-plan) the script splits the
cell's calibration (empirical pi-quantile of the final test losses / L*) into its sources:

- **jobs that never plan**: the exploration met the target by the stop rule (their final test loss
  is the exploration's model's; their margin is the stop rule's, not the plan's);
- **the planner's slack**: the plan's own predicted pi-quantile / L* (the plan stops at the first
  round whose predicted pi-quantile is at most L*, so a round's whole decrease can lie below it);
- **the model's error**: where the runs' final test losses fall in their own plan's predicted
  distribution (the contract's Monte Carlo on the job's scenario and plan).

For the model's error the recorded plan is predicted again with one term of the loss model
changed at a time (the plan itself is not made again):

``model``
    the job's scenario as it planned with.
``no judged error``
    ``loss.judged_error`` 0 (the test and validation splits' sampling error).
``normal oscillation``
    the last round's oscillation normal instead of Student-t (``loss.eval_dof`` removed).
``own oscillation``
    the oscillation coefficient the job's own exploration measures (second differences of its
    merged trajectories, :func:`depl_fl.tracking.oscillation.difference_oscillation`, at the
    job's local steps) instead of the plan regime's constant at those steps.
``oscillation with own excess``
    ``sqrt(o**2 - m_med**2 + m**2)``: the constant's variance with the bank's median measured
    oscillation (``--bank-median``, at the reference steps) replaced by the job's own ``m``.
``no oscillation``
    only the judged error spreads the final loss.
``curve error beside own oscillation``
    ``sqrt(o_ref**2 - m_med**2 + m**2)`` with ``o_ref`` the constant at the reference steps: the
    constant's variance read as the learning curve's error (not growing with the local steps)
    plus the bank's median oscillation, the latter replaced by the job's own ``m`` at its steps.
``oscillation without the set's size``
    the final oscillation without ``r_eff**-b`` of the plan's last set (``data_exponent_std`` 0).
``oscillation at reference steps``
    the oscillation without the plan regime's growth with the local SGD steps
    (``(steps / reference_steps)**gamma`` removed): what the constant predicts on the bank's steps.
``oscillation within the steps range``
    the oscillation the plan regime uses with the local steps held inside ``--steps-range``
    (default: the configured ``profile.plan_regime.steps_min`` / ``steps_max``, the bank's range):
    the job's own plan where its steps lie inside, else its growth with the steps stopped at the range's end.
``no coverage``
    every set at its plain data ratio ``r`` instead of ``c_S r`` (rate and oscillation).
``trend start``
    the plan regime refitted with ``anchor: trend`` (the curve through the exploration's
    trajectory, started at its fitted end level with the fit's uncertainty) instead of the
    exploration's last measured loss; needs the job's profile cache file.

Per cell and term: the share of runs above their own predicted pi-quantile (promise: at most
``1 - pi``; exactly that when calibrated), the probit of the runs' PIT (mean: offset, above 0
worse than predicted; sd: spread over the predicted one) and the cell's pi-quantile the pooled
predictions put against the runs' own (actual / predicted; 1 when calibrated). A term whose
removal moves that ratio onto 1 and the share onto ``1 - pi`` carries the margin.

    python benchmarks/calibration_decomposition.py SWEEP_DIR [SWEEP_DIR ...] [--out PREFIX] \
        [--steps-range MIN,MAX]

Writes ``PREFIX.md`` and ``PREFIX.json`` (stdout without ``--out``). No job's decision is involved:
the script reads results.json and profile cache files only.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SAMPLES = 4000
#: The median oscillation coefficient the trajectory bank's 80 explorations measure, at the reference
#: local steps (benchmarks/results/plan_regime/oscillation.md, "bank, pooled").
BANK_MEDIAN_OSCILLATION = 0.041
TERMS = ("model", "no judged error", "normal oscillation", "own oscillation", "oscillation with own excess",
         "curve error beside own oscillation", "oscillation at reference steps",
         "oscillation within the steps range",
         "oscillation without the set's size", "no oscillation", "no coverage", "trend start")


def _rounds(plan_rounds: list[dict[str, Any]]) -> list[Any]:
    from depl_fl.contract.plan import RoundDecision

    return [RoundDecision(r["model"], tuple(r["clients"]), dict(r.get("levels", {}))) for r in plan_rounds]


def scaled_oscillation(loss: dict[str, Any], factor: float) -> dict[str, Any]:
    """``loss`` with every run profile's oscillation (``eval_std``) times ``factor``.

    The walk's own spread ``sqrt(std**2 - 2 eval_std**2)`` is kept: ``std`` changes by the
    oscillation's share only.
    """
    out = copy.deepcopy(loss)
    for run in out["run"].values():
        if not run.get("eval_std"):
            continue
        ev = np.asarray(run["eval_std"], dtype=float)
        sd = np.asarray(run["std"], dtype=float)
        walk = np.maximum(sd * sd - 2.0 * ev * ev, 0.0)
        run["eval_std"] = (ev * factor).tolist()
        # the contract's 2 eval_std**2 <= std**2, kept through rounding
        run["std"] = (np.sqrt(walk + 2.0 * (ev * factor) ** 2) * (1.0 + 1e-12)).tolist()
    return out


def job_oscillation(doc: dict[str, Any], cached: dict[str, Any] | None,
                    steps_range: tuple[float | None, float | None] = (None, None)) -> dict[str, float] | None:
    """The job's local steps, the oscillation coefficient its plan used there, the one its plan
    uses with the steps held inside ``steps_range`` and the one its exploration measures (also at
    the reference steps)."""
    from depl_fl.orchestration.profile_fit import local_steps, plan_oscillation
    from depl_fl.tracking.learning_curve import PlanRegime
    from depl_fl.tracking.oscillation import difference_oscillation

    if cached is None or "fit_inputs" not in cached:
        return None
    cfg = doc["config"]
    regime = PlanRegime.from_config(cfg["profile"]["plan_regime"])
    props = {cid: {"num-samples": n} for cid, _, n, _ in cached["profile"]["data"]}
    steps = local_steps(cfg, props)
    trajectories = cached["fit_inputs"]["trajectories"]
    estimate = difference_oscillation([(t[0], t[1]) for t in trajectories.values()], regime.noise_exponent)
    if estimate is None:
        return None
    merged = {m: (t[0], t[1]) for m, t in trajectories.items()}
    used = plan_oscillation(merged, regime, steps)
    bounded = dataclasses.replace(regime, steps_min=steps_range[0], steps_max=steps_range[1])
    return {"steps": steps, "constant": used, "in_range": plan_oscillation(merged, bounded, steps),
            "measured": estimate.coefficient,
            "measured_at_reference": estimate.coefficient / regime.steps_factor(steps),
            "steps_factor": regime.steps_factor(steps)}


def trend_scenario(doc: dict[str, Any], cached: dict[str, Any]) -> tuple[dict[str, Any], float, float] | None:
    """The job's loss profile refitted with ``anchor: trend``, and the start (mean, std) it plans from."""
    from depl_fl.tracking.learning_curve import PlanRegime
    from strategies.federated_profiling import FederatedProfiler

    cfg = doc["config"]
    profiler, obs, fresh, props = FederatedProfiler.restored(cfg, cached)
    measured = profiler.measured_fit(obs, fresh, props)
    regime = PlanRegime.from_config({**cfg["profile"]["plan_regime"], "anchor": "trend"})
    loss = profiler.finish_fit(measured, props, regime)
    start = profiler.start_trend
    if start is None:
        return None
    return {**loss, "initial": float(start["mean"])}, float(start["mean"]), float(start["std"])


def variant_losses(doc: dict[str, Any], cached: dict[str, Any] | None,
                   osc: dict[str, float] | None, bank_median: float) -> dict[str, tuple[dict, Any]]:
    """Per term: the loss document and the start (None: the scenario's initial loss, known)."""
    loss = doc["scenario"]["loss"]
    out: dict[str, tuple[dict, Any]] = {"model": (loss, None),
                                        "no judged error": ({**loss, "judged_error": 0.0}, None),
                                        "normal oscillation": ({k: v for k, v in loss.items()
                                                                if k != "eval_dof"}, None),
                                        "no oscillation": (scaled_oscillation(loss, 0.0), None),
                                        "no coverage": ({k: v for k, v in loss.items()
                                                         if k not in ("label_shares", "coverage_threshold",
                                                                      "min_coverage", "max_uncovered")},
                                                        None)}
    if osc is not None and osc["constant"] > 0.0:
        out["own oscillation"] = (scaled_oscillation(loss, osc["measured"] / osc["constant"]), None)
        reference = bank_median * osc["steps_factor"]
        combined = math.sqrt(max(osc["constant"] ** 2 - reference ** 2 + osc["measured"] ** 2, 0.0))
        out["oscillation with own excess"] = (scaled_oscillation(loss, combined / osc["constant"]), None)
        out["oscillation at reference steps"] = (scaled_oscillation(loss, 1.0 / osc["steps_factor"]), None)
        within = osc["in_range"] / osc["constant"]
        out["oscillation within the steps range"] = (scaled_oscillation(loss, within), None)
        curve = osc["constant"] / osc["steps_factor"]
        beside = math.sqrt(max(curve ** 2 - bank_median ** 2, 0.0) + osc["measured"] ** 2)
        out["curve error beside own oscillation"] = (scaled_oscillation(loss, beside / osc["constant"]), None)
    out["oscillation without the set's size"] = ({**loss, "data_exponent_std": 0.0}, None)
    if cached is not None and "fit_inputs" in cached:
        trend = trend_scenario(doc, cached)
        if trend is not None:
            out["trend start"] = (trend[0], (trend[1], trend[2]))
    return out


def predicted(doc: dict[str, Any], loss: dict[str, Any], start: Any, seed: int,
              plain_ratio: bool = False) -> np.ndarray:
    """Samples of the judged final loss of the job's recorded plan under ``loss`` from ``start``
    (``plain_ratio``: without the clients' label histograms, every set at its data ratio ``r``)."""
    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.contract.semantics import simulate_final_losses

    raw = dict(doc["scenario"])
    raw["loss"] = loss
    if plain_ratio:
        raw["clients"] = [{k: v for k, v in c.items() if k != "label_histogram"} for c in raw["clients"]]
    scenario = scenario_from_dict(raw)
    rng = np.random.default_rng(seed)
    start_loss = None
    if start is not None:
        mean, std = start
        start_loss = np.maximum(rng.normal(mean, std, SAMPLES), 0.0) if std > 0 else mean
    rounds = _rounds(doc["plan"]["rounds"])
    return simulate_final_losses(scenario, rounds, SAMPLES, rng, start_loss=start_loss)


def static_jobs(sweep: Path) -> list[dict[str, Any]]:
    """Every finished static DepL job of ``sweep`` that did not re-plan."""
    from depl_fl.runs.report import UNFINISHED

    out = []
    for path in sorted(sweep.rglob("results.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        s = doc.get("summary") or {}
        if s.get("method") == "depl" and not s.get("tracking") and s.get("status") not in UNFINISHED \
                and not doc.get("replans"):
            out.append(doc)
    return out


def _cache(sweep: Path, doc: dict[str, Any]) -> dict[str, Any] | None:
    from plan_regime.oscillation_reference import cache_file

    name = (doc.get("profile") or {}).get("cache_file")
    path = cache_file(sweep, name) if name else None
    return json.loads(path.read_text(encoding="utf-8")) if path is not None else None


def job_row(sweep: Path, doc: dict[str, Any], bank_median: float,
            steps_range: tuple[float | None, float | None] = (None, None)) -> dict[str, Any]:
    """One job: its outcome, how it ended, and per term its PIT and predicted pi-quantile."""
    s = doc["summary"]
    pi, target = float(s["target_prob"]), float(s["target_loss"])
    plan = doc.get("plan") or {}
    row: dict[str, Any] = {"seed": s["seed"], "pi": pi, "target": target, "actual": s.get("final_test_loss"),
                           "met_in_exploration": s.get("profile_met_round") is not None,
                           "rounds": len(plan.get("rounds") or []),
                           "plan_quantile": (plan.get("predicted") or {}).get("loss_quantile")}
    if not row["rounds"] or row["actual"] is None:
        return row
    cached = _cache(sweep, doc)
    osc = job_oscillation(doc, cached, steps_range)
    row["oscillation"] = osc
    row["terms"] = {}
    seed = int(s.get("seed", 0))
    for term, (loss, start) in variant_losses(doc, cached, osc, bank_median).items():
        samples = predicted(doc, loss, start, seed, plain_ratio=term == "no coverage")
        row["terms"][term] = {"pit": float(np.mean(samples <= row["actual"])),
                              "quantile": float(np.quantile(samples, pi)),
                              "median": float(np.median(samples)),
                              "samples": samples}
    return row


def _probit(pits: list[float]) -> tuple[float, float]:
    from scipy.stats import norm

    edge = 0.5 / SAMPLES
    z = norm.ppf(np.clip(pits, edge, 1.0 - edge))
    return float(np.mean(z)), float(np.std(z, ddof=1)) if z.size > 1 else float("nan")


def _calibration(losses: list[float], pi: float, target: float) -> str:
    from depl_fl.runs.report import calibration

    if len(losses) < 1:
        return "–"
    q, low, high = calibration(losses, pi, target)
    return f"{q:.2f}" if low is None else f"{q:.2f} [{low:.2f}, {high:.2f}]"


def cell_lines(label: str, pi: float, rows: list[dict[str, Any]]) -> tuple[list[str], list[str], dict]:
    """The cell's sources row, its per-term rows, and its figures (JSON)."""
    from depl_fl.contract.semantics import empirical_quantile

    target = rows[0]["target"]
    done = [r for r in rows if r["actual"] is not None]
    met = [r for r in done if r["met_in_exploration"]]
    planned = [r for r in done if "terms" in r]
    slack = [r["plan_quantile"] / target for r in planned if r["plan_quantile"] is not None]
    osc = [r["oscillation"] for r in planned if r.get("oscillation")]
    figures: dict[str, Any] = {
        "setting": label, "pi": pi, "target": target, "jobs": len(rows), "finished": len(done),
        "met_in_exploration": len(met), "planned": len(planned),
        "plan_slack_median": float(np.median(slack)) if slack else None,
        "oscillation_constant_median": float(np.median([o["constant"] for o in osc])) if osc else None,
        "oscillation_measured_median": float(np.median([o["measured"] for o in osc])) if osc else None,
        "terms": {}}
    source = (f"| {label} | {pi:g} | {len(done)} | {_calibration([r['actual'] for r in done], pi, target)} | "
              f"{len(met)} | {_calibration([r['actual'] for r in met], pi, target)} | {len(planned)} | "
              f"{_calibration([r['actual'] for r in planned], pi, target)} | "
              f"{np.median(slack) if slack else float('nan'):.2f} | "
              + (f"{figures['oscillation_constant_median']:.3f} / "
                 f"{figures['oscillation_measured_median']:.3f} |" if osc else "– |"))
    term_rows = []
    if planned:
        actual = np.array([r["actual"] for r in planned])
        actual_q = float(empirical_quantile(actual, pi))
        for term in TERMS:
            have = [r for r in planned if term in r["terms"]]
            if not have:
                continue
            pits = [r["terms"][term]["pit"] for r in have]
            above = sum(r["actual"] > r["terms"][term]["quantile"] for r in have)
            pooled = np.concatenate([r["terms"][term]["samples"] for r in have])
            own_q = float(empirical_quantile(np.array([r["actual"] for r in have]), pi))
            pred_q = float(np.quantile(pooled, pi))
            mean, sd = _probit(pits)
            figures["terms"][term] = {"runs": len(have), "above": int(above), "probit_mean": mean,
                                      "probit_sd": sd, "predicted_quantile": pred_q, "actual_quantile": own_q,
                                      "plan_quantile_median": float(np.median(
                                          [r["terms"][term]["quantile"] for r in have])) / target}
            centre = float(np.median([r["actual"] / r["terms"][term]["median"] for r in have
                                      if r["terms"][term]["median"] > 0.0]))
            figures["terms"][term]["actual_over_predicted_median"] = centre
            term_rows.append(f"| {label} | {pi:g} | {term} | {len(have)} | {above}/{len(have)} "
                             f"(promise ≤ {1 - pi:.2f}) | {mean:+.2f} | {sd:.2f} | {centre:.2f} | "
                             f"{pred_q / target:.2f} | {own_q / pred_q:.2f} |")
        figures["actual_quantile"] = actual_q
    return [source], term_rows, figures


def markdown(sweeps: list[Path], cells: list[tuple[list[str], list[str], dict]], command: str) -> str:
    lines = ["# Where the static plans' margin comes from", "", f"`{command}`", "",
             "Static DepL jobs (no re-plan). **Sources**: the cell's calibration (empirical π-quantile of "
             "the final test losses / L\\*, 95% bootstrap) over every finished job, over the jobs whose "
             "exploration met the target (no plan) and over the jobs with a plan; the plans' own predicted "
             "π-quantile / L\\* (median; below 1: the planner's slack); the oscillation coefficient the "
             "plan regime uses at the jobs' local steps against the one their explorations measure "
             "(medians).", "",
             "| setting | π | jobs | calibration, all | met in exploration | calibration | planned | "
             "calibration | plan's predicted π-quantile / L* | oscillation used / measured |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [line for c in cells for line in c[0]]
    lines += ["", "**Terms**: each planned job's recorded plan predicted again with one term changed "
              "(the module docstring says how). Above: runs above their own predicted π-quantile. "
              "Probit: mean (above 0: worse than predicted) and sd (below 1: predictions too wide) of the "
              "runs' PIT. Actual / predicted median: the median over runs of the final test loss over "
              "its own predicted median (the centre). Predicted / L\\*: the π-quantile of the cell's pooled "
              "predictions; actual / predicted: the runs' empirical π-quantile over it (1 when the term set "
              "is calibrated; below 1: the predictions are too cautious).", "",
              "| setting | π | term | runs | above own π-quantile | probit mean | probit sd | "
              "actual / predicted median (median) | predicted π-quantile / L* | actual / predicted |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [line for c in cells for line in c[1]]
    return "\n".join(lines) + "\n"


def pooled_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per term, every planned job of every sweep and pi: share above own pi-quantile against 1 - pi."""
    from depl_fl.runs.report import wilson_interval

    planned = [r for r in rows if "terms" in r]
    lines = ["", "**Pooled** over every setting and π (planned jobs): runs above their own predicted "
             "π-quantile against the promise (the mean of 1 - π), with the probit's mean and sd.", "",
             "| term | runs | above [95% Wilson] | promised | probit mean | probit sd |",
             "|---|---|---|---|---|---|"]
    for term in TERMS:
        have = [r for r in planned if term in r["terms"]]
        if not have:
            continue
        above = sum(r["actual"] > r["terms"][term]["quantile"] for r in have)
        low, high = wilson_interval(above, len(have))
        mean, sd = _probit([r["terms"][term]["pit"] for r in have])
        lines.append(f"| {term} | {len(have)} | {above / len(have):.3f} [{low:.3f}, {high:.3f}] | "
                     f"{np.mean([1 - r['pi'] for r in have]):.3f} | {mean:+.2f} | {sd:.2f} |")
    return lines


#: The local steps the digits CNN's trajectory bank ran (outward-rounded;
#: ``benchmarks/plan_regime/steps_range.py``): the opt-in ``model.regime.steps_min`` / ``steps_max``.
BANK_STEPS_RANGE = (3.207, 5.614)


def _steps_range(text: str | None) -> tuple[float | None, float | None] | None:
    """``(MIN, MAX)`` of ``--steps-range`` (None: the digits CNN bank's, :data:`BANK_STEPS_RANGE`); None
    when it is no range."""
    if text is None:
        return BANK_STEPS_RANGE
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        return None
    return (low, high) if 0.0 < low <= high < math.inf else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", type=Path, nargs="+", metavar="SWEEP_DIR")
    parser.add_argument("--out", type=Path, default=None, help="write PREFIX.md and PREFIX.json")
    parser.add_argument("--bank-median", type=float, default=BANK_MEDIAN_OSCILLATION)
    parser.add_argument("--steps-range", default=None, metavar="MIN,MAX",
                        help="the local steps range of the term 'oscillation within the steps range' "
                             "(default: the digits CNN bank's, 3.207,5.614)")
    args = parser.parse_args(argv)
    for sweep in args.sweeps:
        if not sweep.is_dir():
            print(f"error: {sweep} is not a folder", file=sys.stderr)
            return 2
    if not args.bank_median >= 0.0:
        print(f"error: --bank-median must be a number >= 0, got {args.bank_median}", file=sys.stderr)
        return 2
    steps_range = _steps_range(args.steps_range)
    if steps_range is None:
        print(f"error: --steps-range must be MIN,MAX with 0 < MIN <= MAX, got {args.steps_range!r}",
              file=sys.stderr)
        return 2
    cells, every = [], []
    for sweep in args.sweeps:
        jobs = static_jobs(sweep)
        rows = [job_row(sweep, doc, args.bank_median, steps_range) for doc in jobs]
        every += rows
        for pi in sorted({r["pi"] for r in rows}):
            cells.append(cell_lines(sweep.name, pi, [r for r in rows if r["pi"] == pi]))
    if not every:
        print("error: no finished static DepL job under " + ", ".join(map(str, args.sweeps)), file=sys.stderr)
        return 2
    command = " ".join(["python benchmarks/calibration_decomposition.py", *map(str, args.sweeps)])
    text = markdown(args.sweeps, cells, command) + "\n".join(pooled_lines(every)) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text, encoding="utf-8")
    jobs_json = [{**{k: v for k, v in r.items() if k != "terms"},
                  "terms": {t: {k: v for k, v in f.items() if k != "samples"}
                            for t, f in r.get("terms", {}).items()}}
                 for r in every]
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "cells": [c[2] for c in cells],
                                                         "jobs": jobs_json}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
