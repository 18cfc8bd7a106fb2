"""Does the plan regime's learning-curve rate miss the local SGD steps a set's clients run?

Pure reading of committed trajectory banks (``benchmarks/plan_regime/bank.py``; no new runs). For every
fixed plan of a bank: its set's ``r_eff`` (the contract's), its clients' local steps per round
(``epochs * ceil(n / batch_size)`` from the scenario's ``num_samples``: mean, median and the
sample-weighted mean FedAvg averages), the realised rate of its own validation trajectory (the learning
curve ``c`` through its start loss and its loss after ``K`` rounds, with the job's power and floor,
:func:`depl_fl.tracking.learning_curve.rate_coefficient`, as the exploration's rate is read) against the
predicted ``c r_eff**a``, the realised against the predicted median loss drop after ``K`` rounds, and the
residual under the configured constants (the probit of the outcome's PIT in its predicted distribution,
``benchmarks/plan_regime/fit.py``). Then OLS with one intercept per setting (within the bank):

* ``log(c_real / c_job) ~ log r_eff + log steps``: the empirical rate exponent and a steps exponent
  (``c_job`` the job's rate as its exploration measured it, ``profile.plan_regime.rate_at_full:
  cheapest``, read at ``r = 1`` in the column "at r = 1"; the model says ``a`` and 0);
* ``log(c_real / (c_job r_eff**a))`` and the mean probit on the same two regressors (the model says 0).

    python benchmarks/analysis/rate_steps.py \
        --bank "synthetic=/tmp/bank-synthetic_mlp:b300,b1000:model=synthetic_mlp" \
        --bank "digits=/tmp/bank2:d1,d2,d3,d4:" [--horizon 12] [--out benchmarks/results/plan_regime]

A ``--bank`` is ``NAME=DIR:SETTINGS:OVERRIDES`` (the Hydra overrides the constants are composed with, as
``fit.py --overrides``). Writes ``rate_steps.md`` and ``rate_steps.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "plan_regime"))

import fit  # noqa: E402  (the bank's loader and predictions)


def client_steps(sizes: list[int], epochs: float, batch_size: int) -> np.ndarray:
    """Local SGD steps per round of clients with ``sizes`` samples (the last partial batch counts)."""
    return float(epochs) * np.ceil(np.asarray(sizes, dtype=float) / float(batch_size))


def curve_constants(run_profile: dict, power: float) -> tuple[float, float]:
    """``(c, f)`` of ``mu(L) = c (L - f)**p`` from a plan-regime run profile: ``f`` the highest level
    with no decrease, ``c`` from the first level above it."""
    levels, mean = run_profile["levels"], run_profile["mean"]
    floor = max((lv for lv, mu in zip(levels, mean, strict=True) if mu <= 0.0), default=0.0)
    above = [(lv, mu) for lv, mu in zip(levels, mean, strict=True) if lv > floor and mu > 0.0]
    level, decrease = above[0]
    return decrease / (level - floor) ** power, floor


def run_rows(job, regime, horizon: int) -> list[dict]:
    """One row per usable run of ``job`` (see the module docstring)."""
    from depl_fl.contract.semantics import effective_ratio
    from depl_fl.tracking.learning_curve import rate_coefficient, ratio_factor

    loss = job.profiler.finish_fit(job.measured, job.properties, regime)
    scen = job.scenario(regime)
    sizes = {c["id"]: int(c["num_samples"]) for c in job.scenario_doc["clients"]}
    train = job.cfg["train"]
    all_steps = client_steps(list(sizes.values()), train["local_epochs"], train["batch_size"])
    rows: dict[int, dict] = {}
    for run, k, samples in fit.scenario_predictions(job, scen):
        row = rows.get(id(run))
        if row is None:
            n = [sizes[c] for c in run["clients"]]
            steps = client_steps(n, train["local_epochs"], train["batch_size"])
            c_job, floor = curve_constants(loss["run"][run["model"]], regime.power)
            r_eff = effective_ratio(scen, run["clients"])
            kk = min(horizon, len(run["val"]))
            c_real = rate_coefficient(run["start_loss"], run["val"][kk - 1], kk, regime.power, floor)
            if not run["val"][kk - 1] > floor:  # below the floor: the curve cannot reach it
                c_real = math.nan
            rows[id(run)] = row = {
                "setting": job.setting, "job": job.name, "model": run["model"],
                "policy": f"{run['model']}:{'subset' if '+' in run['set'] else run['set']}",
                "set_size": len(n), "r_eff": r_eff, "steps_mean": float(steps.mean()),
                "steps_median": float(np.median(steps)),
                "steps_weighted": float(np.dot(steps, n) / sum(n)),
                "steps_federation": float(all_steps.mean()), "c_job": c_job,
                "c_pred": c_job * r_eff ** regime.rate_exponent, "rate_exponent": regime.rate_exponent,
                "explore_factor": ratio_factor(job.profiler.trajectories[run["model"]][1],
                                               regime.rate_exponent),
                "c_real": c_real if c_real > 1e-6 else math.nan, "probits": {}, "drop_ratio": math.nan}
        y = run["test"][k - 1]
        row["probits"][k] = float(fit.pit_probit(np.mean(samples <= y)))
        if k == max(h for h in fit.HORIZONS if h <= horizon):
            predicted = run["start_loss"] - float(np.median(samples))
            row["drop_ratio"] = (run["start_loss"] - y) / predicted if predicted > 0 else math.nan
    out = []
    for row in rows.values():
        probits = row.pop("probits")
        row["probit_mean"] = float(np.mean(list(probits.values())))
        row["probit_last"] = probits[max(probits)]
        out.append(row)
    return out


def ols(y: np.ndarray, columns: dict[str, np.ndarray], groups: list[str]) -> dict:
    """OLS of ``y`` on ``columns`` with one intercept per group: coefficients, standard errors, R^2
    (of the columns beyond the intercepts: the share of the within-group variance they explain)."""
    keep = np.isfinite(y) & np.all([np.isfinite(v) for v in columns.values()], axis=0)
    labels = sorted(set(groups))
    g = np.array(groups)[keep]
    dummies = np.column_stack([(g == lab).astype(float) for lab in labels])
    x = np.column_stack([dummies, *[v[keep] for v in columns.values()]])
    yk = y[keep]
    beta, *_ = np.linalg.lstsq(x, yk, rcond=None)
    resid = yk - x @ beta
    dof = max(len(yk) - x.shape[1], 1)
    cov = (resid @ resid / dof) * np.linalg.pinv(x.T @ x)
    within = yk - dummies @ np.linalg.lstsq(dummies, yk, rcond=None)[0]
    r2 = 1.0 - (resid @ resid) / (within @ within) if within @ within > 0 else math.nan
    names = list(columns)
    return {"n": int(keep.sum()), "r2_within": float(r2),
            "coef": {k: float(beta[len(labels) + i]) for i, k in enumerate(names)},
            "se": {k: float(math.sqrt(cov[len(labels) + i, len(labels) + i])) for i, k in enumerate(names)}}


def regressions(rows: list[dict]) -> dict:
    """The three regressions of the module docstring, plus each regressor alone."""
    arr = {k: np.array([r[k] for r in rows], dtype=float) for k in
           ("r_eff", "steps_mean", "steps_weighted", "c_real", "c_job", "probit_mean", "drop_ratio",
            "rate_exponent")}
    groups = [r["setting"] for r in rows]
    log_r, log_s = np.log(arr["r_eff"]), np.log(arr["steps_mean"])
    rate = np.log(arr["c_real"] / arr["c_job"])
    targets = {"log c_real/c_job": rate, "log c_real/c_pred": rate - arr["rate_exponent"] * log_r,
               "probit mean": arr["probit_mean"], "log drop ratio": np.log(np.where(
                   arr["drop_ratio"] > 0, arr["drop_ratio"], np.nan))}
    out = {}
    for name, y in targets.items():
        out[name] = {"both": ols(y, {"log r_eff": log_r, "log steps": log_s}, groups),
                     "r_eff only": ols(y, {"log r_eff": log_r}, groups),
                     "steps only": ols(y, {"log steps": log_s}, groups),
                     "both, sample-weighted steps": ols(
                         y, {"log r_eff": log_r, "log steps": np.log(arr["steps_weighted"])}, groups)}
    finite = np.isfinite(log_r) & np.isfinite(log_s)
    spread = float(np.std(log_s[finite]))
    out["corr(log r_eff, log steps)"] = (float(np.corrcoef(log_r[finite], log_s[finite])[0, 1])
                                         if spread > 0 else math.nan)
    out["sd(log steps)"] = spread
    return out


def policy_table(rows: list[dict]) -> list[dict]:
    """Per setting and policy: medians of the run figures."""
    keys = sorted({(r["setting"], r["policy"]) for r in rows})
    out = []
    for setting, policy in keys:
        part = [r for r in rows if r["setting"] == setting and r["policy"] == policy]
        med = {k: float(np.nanmedian([r[k] for r in part])) for k in
               ("set_size", "r_eff", "steps_mean", "steps_median", "steps_weighted", "c_real", "c_pred",
                "drop_ratio", "probit_mean", "explore_factor")}
        out.append({"setting": setting, "policy": policy, "runs": len(part), **med,
                    "rate_ratio": float(np.nanmedian([r["c_real"] / r["c_pred"] for r in part])),
                    "rate_ratio_full": float(np.nanmedian([r["c_real"] * r["explore_factor"] / r["c_pred"]
                                                           for r in part]))})
    return out


def bank_rows(spec: str, horizon: int) -> tuple[str, list[dict], float, dict]:
    """``(name, rows, rate exponent, constants)`` of one ``NAME=DIR:SETTINGS:OVERRIDES``."""
    from depl_fl.runs.runconfig import compose_config

    name, rest = spec.split("=", 1)
    folder, settings, overrides = rest.split(":", 2)
    values = dict(compose_config(overrides.split())["profile"]["plan_regime"])
    # c_job is the rate as the exploration measured it; the table converts it to r = 1 in its own column
    regime = fit.regime_of({**values, "rate_at_full": "cheapest"})
    jobs = fit.load_jobs(folder, settings.split(","))
    if not jobs:
        raise SystemExit(f"rate_steps.py: no bank job under {folder} for settings {settings}")
    rows = [row for job in jobs for row in run_rows(job, regime, horizon)]
    constants = {k: values[k] for k in fit.FITTED}
    return name, rows, regime.rate_exponent, constants


def fmt(reg: dict) -> str:
    parts = [f"{k} {reg['coef'][k]:+.3f} ± {reg['se'][k]:.3f}" for k in reg["coef"]]
    return f"{'; '.join(parts)} | {reg['r2_within']:.2f} | {reg['n']}"


def markdown(banks: list[dict], horizon: int, command: str) -> str:
    lines = ["# The plan regime's rate against the local steps", "", f"    {command}", "",
             "Per fixed plan: `r_eff` (the contract's), the clients' local SGD steps per round "
             "(`epochs * ceil(n / batch)`), the realised rate `c_real` of its validation trajectory (the "
             "learning curve through its start loss and its loss after "
             f"K = {horizon} rounds, the job's power and floor), the predicted `c_pred = c_job r_eff**a`, "
             "the realised / predicted median loss drop "
             f"after K = {max(h for h in fit.HORIZONS if h <= horizon)} rounds and the mean probit of the "
             "outcome's PIT over the horizons (below 0: the run ends lower than predicted). Regressions: OLS "
             "with one intercept per setting; R^2 of the within-setting variance; ± one standard error "
             "(runs of one job share its exploration, so the errors are optimistic).", ""]
    for bank in banks:
        reg = bank["regressions"]
        lines += [f"## {bank['name']} (rate_exponent a = {bank['rate_exponent']})", "",
                  f"{len(bank['rows'])} runs; corr(log r_eff, log steps) "
                  f"{reg['corr(log r_eff, log steps)']:.2f}, sd(log steps) {reg['sd(log steps)']:.3f}.", "",
                  "| target | regressors | coefficients | R^2 within | n |", "|---|---|---|---|---|"]
        for target in ("log c_real/c_job", "log c_real/c_pred", "probit mean", "log drop ratio"):
            for which in ("both", "r_eff only", "steps only", "both, sample-weighted steps"):
                lines.append(f"| {target} | {which} | {fmt(reg[target][which])} |")
        lines += ["", "| setting | policy | runs | set | r_eff | steps mean | median | weighted | c_real | "
                  "c_pred | c_real/c_pred | exploration's mean r**a | c_real/c_pred at r = 1 | drop ratio | "
                  "probit |", "|---" * 15 + "|"]
        for p in bank["policies"]:
            lines.append(f"| {p['setting']} | {p['policy']} | {p['runs']} | {p['set_size']:.0f} | "
                         f"{p['r_eff']:.4f} | {p['steps_mean']:.1f} | {p['steps_median']:.1f} | "
                         f"{p['steps_weighted']:.1f} | {p['c_real']:.4g} | {p['c_pred']:.4g} | "
                         f"{p['rate_ratio']:.2f} | {p['explore_factor']:.3f} | {p['rate_ratio_full']:.2f} | "
                         f"{p['drop_ratio']:.2f} | {p['probit_mean']:+.2f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", action="append", required=True, help="NAME=DIR:SETTINGS:OVERRIDES")
    parser.add_argument("--horizon", type=int, default=12)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "plan_regime"))
    args = parser.parse_args()
    if args.horizon < 2 or any(spec.count(":") < 2 or "=" not in spec.split(":")[0] for spec in args.bank):
        parser.exit(2, "rate_steps.py: --bank NAME=DIR:SETTINGS:OVERRIDES, --horizon >= 2\n")
    banks = []
    for spec in args.bank:
        name, rows, a, constants = bank_rows(spec, args.horizon)
        banks.append({"name": name, "spec": spec, "rate_exponent": a, "constants": constants,
                      "rows": rows, "regressions": regressions(rows), "policies": policy_table(rows)})
    if len(banks) > 1:
        rows = [{**r, "setting": f"{b['name']}/{r['setting']}"} for b in banks for r in b["rows"]]
        banks.append({"name": "all banks (one intercept per bank and setting, each with its own constants)",
                      "spec": "", "rate_exponent": "per bank", "constants": {}, "rows": rows,
                      "regressions": regressions(rows), "policies": []})
    command = "python benchmarks/analysis/rate_steps.py " + " ".join(f'--bank "{s}"' for s in args.bank) + \
        f" --horizon {args.horizon}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rate_steps.md").write_text(markdown(banks, args.horizon, command))
    (out / "rate_steps.json").write_text(json.dumps({"command": command, "horizon": args.horizon,
                                                     "banks": banks}, default=float))
    print((out / "rate_steps.md").read_text())


if __name__ == "__main__":
    main()
