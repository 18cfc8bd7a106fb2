"""The margin analysis's candidate spread checked on the trajectory bank the plan regime was fitted on.

The candidate (``benchmarks/calibration_decomposition.py``, term "curve error beside own
oscillation"): the plan's oscillation coefficient ``sqrt(o_ref**2 - m_med**2 + m**2)``, the constant
at the reference local steps read as the learning curve's error plus the bank's median measured
oscillation ``m_med``, the latter replaced by the job's own ``m`` at its own steps; against the
configured ``o (steps / reference_steps)**gamma``. For every bank job the profile is refitted from
its exploration (``plan_regime/fit.py``'s :class:`Job`), every recorded policy is predicted with
both spreads at the bank's horizons, and per setting the script reports the share of outcomes at or
below the predicted 0.8 / 0.9 / 0.95-quantiles (calibrated: 0.80 / 0.90 / 0.95) and the probit's
mean and sd. A candidate that narrows the plans where the bank's runs need the width shows there as
coverage below the target.

    python benchmarks/calibration_bank_check.py BANK_DIR [--settings d1,d2,d3,d4] [--out FILE.md]

One process; no job's decision is involved.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "plan_regime"))

QUANTILES = (0.8, 0.9, 0.95)


def spread_factor(job, regime, bank_median: float) -> tuple[float, float]:
    """``(candidate / configured oscillation coefficient, job's local steps)`` of one bank job."""
    from depl_fl.orchestration.profile_fit import local_steps
    from depl_fl.tracking.oscillation import difference_oscillation

    steps = local_steps(job.cfg, job.properties)
    constant = regime.oscillation_at(steps)
    estimate = difference_oscillation([(t[0], t[1]) for t in job.profiler.trajectories.values()],
                                      regime.noise_exponent)
    if estimate is None or constant <= 0.0:
        return 1.0, steps
    beside = math.sqrt(max(regime.oscillation ** 2 - bank_median ** 2, 0.0) + estimate.coefficient ** 2)
    return beside / constant, steps


def outcomes(job, regime, factor: float) -> list[tuple[float, np.ndarray]]:
    """``(actual test loss, predicted samples)`` of every usable policy and horizon, spread scaled."""
    from calibration_decomposition import scaled_oscillation
    from fit import scenario_predictions

    from depl_fl.contract.scenario import scenario_from_dict

    loss = job.profiler.finish_fit(job.measured, job.properties, regime)
    doc = dict(job.scenario_doc)
    doc["loss"] = {**scaled_oscillation(loss, factor), "initial": job.scenario_doc["loss"]["initial"]}
    return [(float(run["test"][k - 1]), samples)
            for run, k, samples in scenario_predictions(job, scenario_from_dict(doc))]


def row(label: str, pairs: list[tuple[float, np.ndarray]]) -> str:
    from fit import pit_probit

    covered = [np.mean([y <= np.quantile(s, q) for y, s in pairs]) for q in QUANTILES]
    probit = pit_probit(np.array([np.mean(s <= y) for y, s in pairs]))
    return (f"| {label} | {len(pairs)} | " + " | ".join(f"{c:.3f}" for c in covered)
            + f" | {probit.mean():+.2f} | {probit.std():.2f} |")


def main(argv: list[str] | None = None) -> int:
    import fit

    from depl_fl.tracking.learning_curve import PlanRegime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank", type=Path)
    parser.add_argument("--settings", default="d1,d2,d3,d4")
    parser.add_argument("--bank-median", type=float, default=0.041)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    if not args.bank.is_dir() or not all((args.bank / s).is_dir() for s in settings):
        print(f"error: {args.bank} has no folder for every setting of {settings}", file=sys.stderr)
        return 2
    jobs = fit.load_jobs(args.bank, settings)
    if not jobs:
        print(f"error: no bank job under {args.bank}", file=sys.stderr)
        return 2
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config")
    from omegaconf import OmegaConf

    regime = PlanRegime.from_config(OmegaConf.to_container(cfg.profile.plan_regime, resolve=True))
    lines = ["# The candidate spread on the trajectory bank", "",
             f"`python benchmarks/calibration_bank_check.py {args.bank} --settings {args.settings}`", "",
             "Share of the bank's outcomes at or below their predicted 0.8 / 0.9 / 0.95-quantile "
             "(calibrated: 0.80 / 0.90 / 0.95) and the probit of their PIT, with the configured oscillation "
             "(constant "
             "grown with the local steps) and with the candidate (curve error at the reference steps beside "
             f"the job's own oscillation, bank median {args.bank_median:g}).", "",
             "| setting, spread | outcomes | ≤ q80 | ≤ q90 | ≤ q95 | probit mean | probit sd |",
             "|---|---|---|---|---|---|---|"]
    pooled: dict[str, list] = {"configured": [], "candidate": []}
    for setting in settings:
        own = [j for j in jobs if j.setting == setting]
        factors = [spread_factor(j, regime, args.bank_median) for j in own]
        configured = [p for j in own for p in outcomes(j, regime, 1.0)]
        candidate = [p for j, (f, _) in zip(own, factors, strict=True) for p in outcomes(j, regime, f)]
        pooled["configured"] += configured
        pooled["candidate"] += candidate
        steps = np.median([s for _, s in factors])
        ratio = np.median([f for f, _ in factors])
        lines.append(row(f"{setting} ({steps:.1f} steps), configured", configured))
        lines.append(row(f"{setting}, candidate (median x{ratio:.2f})", candidate))
    lines.append(row("pooled, configured", pooled["configured"]))
    lines.append(row("pooled, candidate", pooled["candidate"]))
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
