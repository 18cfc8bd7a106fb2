"""In-sample coverage of fitted plan-regime constants per setting and policy, on the trajectory bank.

``fit.py`` reports coverage per setting and per policy; this splits it by both
(a policy can be too bold on one setting and too cautious on the other) and
adds, per setting, the exploration's own mean local steps over the
federation's (the reference of ``fit.py --rate-steps``: a set's steps ratio is
its clients' mean sample count over the federation's; epochs and batch size
are shared).

    python benchmarks/plan_regime/coverage_cells.py BANK_DIR FIT_JSON [--settings b300,b1000] \
        [--overrides "model=synthetic_mlp ..."] [--out cells.md]

``FIT_JSON``: a ``fit.json`` of ``fit.py``; its constants are checked (with
its ``rate_steps_exponent`` where it has one), composed with ``--overrides``
as ``fit.py`` composes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fit  # noqa: E402  (the bank's jobs and predictions, as fit.py scores them)

QUANTILES = (0.8, 0.9, 0.95)


def exploration_steps_ratio(job: fit.Job, bank: Path) -> float:
    """Mean over the exploration's rounds (its profile's recorded rounds) of the round's clients'
    :meth:`fit.Job.steps_ratio`."""
    recorded = json.loads((bank / job.name / "profile.json").read_text())["fit_inputs"]["records"]
    records = [r for r in recorded if r.get("phase") == "profile" and r.get("clients")]
    return float(np.mean([job.steps_ratio(r["clients"]) for r in records])) if records else float("nan")


def cells(jobs: list[fit.Job], regime, steps_exponent: float) -> dict[tuple[str, str], list[list[float]]]:
    """``{(setting, policy): [[covered at q80, q90, q95, PIT], ...]}`` over every usable run and horizon."""
    out: dict[tuple[str, str], list[list[float]]] = {}
    for job in jobs:
        for run, k, samples in fit.predictions(job, regime, 1.0, steps_exponent):
            y = run["test"][k - 1]
            row = [float(y <= np.quantile(samples, t)) for t in QUANTILES] + [float(np.mean(samples <= y))]
            out.setdefault((job.setting, f"{run['model']}:{run['set']}"), []).append(row)
    return out


def markdown(table: dict[tuple[str, str], list[list[float]]], ratios: dict[str, list[float]],
             label: str) -> str:
    lines = ["# In-sample coverage per setting and policy", "", label, "",
             "Coverage: the share of outcomes at or below the predicted 0.8 / 0.9 / 0.95-quantile "
             "(calibrated: 0.80 / 0.90 / 0.95); probit mean of the PIT (below 0: the runs end lower than "
             "predicted); PIT deciles (uniform when calibrated).", "",
             "| setting | policy | n | P[L <= q80] | P[L <= q90] | P[L <= q95] | probit mean | PIT deciles |",
             "|---|---|---|---|---|---|---|---|"]
    for (setting, policy), rows in sorted(table.items()):
        arr = np.array(rows)
        deciles = np.histogram(arr[:, 3], bins=10, range=(0, 1))[0]
        covered = " | ".join(f"{v:.3f}" for v in arr[:, :3].mean(axis=0))
        probit = float(fit.pit_probit(arr[:, 3]).mean())
        lines.append(f"| {setting} | {policy} | {len(rows)} | {covered} | {probit:+.2f} | "
                     f"{' '.join(str(v) for v in deciles)} |")
    lines += ["", "The exploration's mean local steps over the federation's (per job, mean over its rounds):",
              ""]
    for setting, values in ratios.items():
        lines.append(f"- {setting}: {' '.join(f'{v:.3f}' for v in values)}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank")
    parser.add_argument("fit_json")
    parser.add_argument("--settings", default="b300,b1000")
    parser.add_argument("--overrides", default="")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    path = Path(args.fit_json)
    if not path.is_file():
        parser.exit(2, f"coverage_cells.py: no such fit.json: {path}\n")
    constants = json.loads(path.read_text())["constants"]
    from depl_fl.runs.runconfig import compose_config

    configured = dict(compose_config(args.overrides.split())["profile"]["plan_regime"])
    values = {**configured, **constants}
    steps = float(values.get(fit.STEPS_KEY, 0.0))
    jobs = fit.load_jobs(args.bank, args.settings.split(","))
    ratios: dict[str, list[float]] = {}
    for job in jobs:
        ratios.setdefault(job.setting, []).append(exploration_steps_ratio(job, Path(args.bank)))
    shown = {k: values[k] for k in (*fit.FITTED, fit.STEPS_KEY) if k in values}
    text = markdown(cells(jobs, fit.regime_of(values), steps), ratios,
                    f"{len(jobs)} jobs of {args.settings}; constants {json.dumps(shown)} ({path}).")
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
