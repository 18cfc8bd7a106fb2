"""Fit and check the plan regime's constants on the trajectory bank (see ``bank.py``).

For every job of the bank the profile is refitted from its exploration's fit
inputs with the project's own code (``FederatedProfiler.measured_fit`` /
``finish_fit``), and every recorded policy -- one model on one set for K rounds
-- is predicted by the contract's Monte Carlo (``iter_round_losses`` and
``judged_losses``, as the planner's checks do). The score is the pinball
(quantile) loss of the predicted 0.8, 0.85, 0.9 and 0.95 quantiles of the
final test loss after K in (2, 3, 5, 8, 12, 16, 20, 25, 30, 40, 60, 80, 100, 120) rounds (those the
trajectory reaches): a
proper scoring rule for exactly the quantiles a plan promises. Runs on sets
that leave a class unseen are left out (the plan regime's ``max_uncovered`` 0
keeps plans off them).

    python benchmarks/plan_regime/fit.py BANK_DIR [--settings d1,d2,d3,d4] [--fit] \
        [--max-evals 160] [--restarts 0] [--box] [--fixed NAME,...] \
        [--overrides "model=digits_resnet"] [--out benchmarks/results/plan_regime]

Without ``--fit`` the configured constants (``conf/config.yaml``,
``profile.plan_regime``, composed with ``--overrides``: another network's
``model.regime``) are checked, next to the exploration-only profile
(``plan_regime.enabled: false``); with ``--fit`` they are optimised first
(Nelder-Mead over power, floor, rate_exponent, noise_exponent, oscillation,
judged_error_factor and oscillation_dof, from the configured values;
steps_exponent and reference_steps stay fixed). The defaults are the committed
fits' procedure (one run of 160 evaluations, invalid constants scored 1e9); a
converged fit gives the optimiser more evaluations (``--max-evals``), restarts it
from its best point (``--restarts``), keeps it inside the constants' valid range
(``--box``) and keeps constants the bank cannot identify at their configured values
(``--fixed``). The score is deterministic: every run's Monte Carlo has its own
seed; the Student-t draws change with ``oscillation_dof`` in jumps (a rejection
sampler), so the score is not smooth in that constant.
With ``--rate-steps`` (a prototype, fit-side only: the contract and the planner do not read it) a
set's rate also scales with ``(mean n_S / mean n)**rate_steps_exponent``, the mean local SGD steps of its
clients against the federation's (the exploration's rounds run on clients of the federation's mean size),
and ``rate_steps_exponent`` is fitted with the other constants; without it every figure is unchanged.
Writes ``fit.md`` and ``fit.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from multiprocessing import get_context
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HORIZONS = (2, 3, 5, 8, 12, 16, 20, 25, 30, 40, 60, 80, 100, 120)
TAUS = (0.8, 0.85, 0.9, 0.95)
FITTED = ("power", "floor", "rate_exponent", "noise_exponent", "oscillation", "judged_error_factor",
          "oscillation_dof")
#: The bank's jobs, loaded once before the worker processes fork (they read it, never write it).
JOBS: list = []
TRAJECTORIES = 600
#: Horizon groups of the coverage table (upper bound in rounds, label).
HORIZON_GROUPS = ((5, "K<=5"), (16, "K 6-16"), (40, "K 17-40"), (80, "K 41-80"), (10**9, "K>80"))
#: The prototype's constant: a set's rate scales with its clients' mean local steps to this power.
STEPS_KEY = "rate_steps_exponent"


class Job:
    """One bank job: its refitted exploration and its recorded policies."""

    def __init__(self, folder: Path) -> None:
        from strategies.federated_profiling import FederatedProfiler

        job = json.loads((folder / "job.json").read_text())
        self.setting, self.cfg, self.scenario_doc = folder.parent.name, job["config"], job["scenario"]
        self.name = f"{self.setting}/{folder.name}"
        cached = json.loads((folder / "profile.json").read_text())
        self.profiler, obs, fresh, self.properties = FederatedProfiler.restored(self.cfg, cached)
        self.measured = self.profiler.measured_fit(obs, fresh, self.properties)
        self.runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*_*.json"))]
        self.samples = {c["id"]: int(c["num_samples"]) for c in self.scenario_doc["clients"]}

    def steps_ratio(self, clients: list[str]) -> float:
        """Mean local SGD steps of ``clients`` over the federation's (epochs and batch size are shared)."""
        return float(np.mean([self.samples[c] for c in clients]) / np.mean(list(self.samples.values())))

    def scenario(self, regime, rate_factor: float | dict[str, float] = 1.0):
        """The job's scenario with the profile refitted under ``regime`` (None: exploration only).

        ``rate_factor`` scales the run means (the decrease per round at every level: the learning
        curve's rate) of every model, or of each model of a dict by its own value (others keep theirs).
        """
        from depl_fl.contract.scenario import scenario_from_dict

        return scenario_from_dict({**self.scenario_doc, "loss": self.loss_doc(regime, rate_factor)})

    def loss_doc(self, regime, rate_factor: float | dict[str, float] = 1.0) -> dict:
        """The loss document of :meth:`scenario`."""
        loss = self.profiler.finish_fit(self.measured, self.properties, regime)
        factors = rate_factor if isinstance(rate_factor, dict) else dict.fromkeys(loss["run"], rate_factor)
        if any(v != 1.0 for v in factors.values()):
            loss = {**loss, "run": {m: {**r, "mean": [v * factors.get(m, 1.0) for v in r["mean"]]}
                                    for m, r in loss["run"].items()}}
        return {**loss, "initial": self.scenario_doc["loss"]["initial"]}


def load_jobs(bank: str | Path, settings: list[str]) -> list[Job]:
    """Every job of ``bank`` (``BANK/<setting>/seed<S>/`` with a ``job.json``) of the given settings."""
    return [Job(folder) for setting in settings for folder in sorted((Path(bank) / setting).glob("seed*"))
            if (folder / "job.json").exists()]


def predictions(job: Job, regime, rate_factor: float = 1.0,
                steps_exponent: float = 0.0) -> list[tuple[dict, int, np.ndarray]]:
    """``(run, K, predicted judged losses)`` for every usable run and horizon of ``job`` (its learning
    curve's rate scaled by ``rate_factor``, as :meth:`Job.scenario`, and with ``steps_exponent`` not 0 by
    each run's :meth:`Job.steps_ratio` to that power)."""
    if steps_exponent == 0.0:
        return scenario_predictions(job, job.scenario(regime, rate_factor))
    from depl_fl.contract.scenario import scenario_from_dict

    base = job.loss_doc(regime, rate_factor)

    def per_run(run: dict):
        factor = job.steps_ratio(run["clients"]) ** steps_exponent
        run_profiles = {m: {**r, "mean": [v * factor for v in r["mean"]]} for m, r in base["run"].items()}
        loss = {**base, "run": run_profiles}
        return scenario_from_dict({**job.scenario_doc, "loss": loss})

    return scenario_predictions(job, per_run)


def scenario_predictions(job: Job, scen) -> list[tuple[dict, int, np.ndarray]]:
    """``(run, K, predicted judged losses)`` for every usable run and horizon of ``job`` under the
    scenario ``scen`` (the job's, with a profile of the caller's; a callable: each run's own)."""
    from depl_fl.contract.plan import RoundDecision
    from depl_fl.contract.semantics import iter_round_losses, judged_losses, set_coverage

    out = []
    scenario_of = scen if callable(scen) else (lambda run: scen)
    for index, run in enumerate(job.runs):
        scen = scenario_of(run)
        cov = set_coverage(scen, tuple(run["clients"]))
        if cov is not None and cov[1] > 0.0:
            continue  # a set that leaves a class unseen: outside the measured range
        horizons = [k for k in HORIZONS if k <= len(run["test"])]
        rounds = [RoundDecision(run["model"], tuple(run["clients"]), {})] * max(horizons)
        rng = np.random.default_rng(1000 + index)
        for k, walk in enumerate(iter_round_losses(scen, rounds, TRAJECTORIES, rng,
                                                   start_loss=run["start_loss"]), start=1):
            if k in horizons:
                out.append((run, k, judged_losses(scen, rounds[k - 1], walk.copy(), rng)))
    return out


def pit_probit(pit: np.ndarray | float) -> np.ndarray:
    """Probit of PIT values, clipped half a trajectory inside (0, 1) so that an outcome beyond every
    sample stays finite."""
    from scipy.stats import norm

    edge = 0.5 / TRAJECTORIES
    return norm.ppf(np.clip(pit, edge, 1.0 - edge))


def pinball(samples: np.ndarray, y: float) -> float:
    """Mean pinball loss of the samples' ``TAUS`` quantiles at the outcome ``y``."""
    q = np.quantile(samples, TAUS)
    return float(np.mean([(t - (y < v)) * (y - v) for t, v in zip(TAUS, q, strict=True)]))


def regime_of(values: dict):
    from depl_fl.tracking.learning_curve import PlanRegime

    return PlanRegime.from_config(values)


def _job_losses(task: tuple[int, dict | None]) -> list[float]:
    index, values = task
    regime = None if values is None else regime_of(values)
    steps = 0.0 if values is None else float(values.get(STEPS_KEY, 0.0))
    return [pinball(s, run["test"][k - 1]) for run, k, s in predictions(JOBS[index], regime, 1.0, steps)]


def score(values: dict | None, pool) -> float:
    """Mean pinball loss over every job of :data:`JOBS` (``values`` None: exploration-only profile)."""
    try:
        if values is not None:
            regime_of(values)
    except Exception:  # outside the constants' valid range
        return 1e9
    losses = pool.map(_job_losses, [(i, values) for i in range(len(JOBS))])
    return float(np.mean([v for part in losses for v in part]))


def coverage_table(jobs: list[Job], regime, steps_exponent: float = 0.0) -> dict:
    """Coverage of the predicted quantiles, PIT deciles and the PIT's mean probit (0 when the
    centre is right, above 0 when the runs end worse than predicted), overall and per group."""
    groups: dict[str, list] = {}
    for job in jobs:
        for run, k, samples in predictions(job, regime, 1.0, steps_exponent):
            y = run["test"][k - 1]
            row = [float(y <= np.quantile(samples, t)) for t in (0.8, 0.9, 0.95)]
            row.append(float(np.mean(samples <= y)))
            kind = "subset" if "+" in run["set"] else run["set"]
            horizon = next(label for bound, label in HORIZON_GROUPS if k <= bound)
            keys = ("all", f"setting {job.setting}", f"policy {run['model']}:{kind}", f"horizon {horizon}",
                    f"setting {job.setting}, horizon {horizon}")
            for key in keys:
                groups.setdefault(key, []).append(row)
    table = {}
    for key, rows in groups.items():
        arr = np.array(rows)
        probit = pit_probit(arr[:, 3])
        table[key] = {"n": len(rows), "q80": arr[:, 0].mean(), "q90": arr[:, 1].mean(),
                      "q95": arr[:, 2].mean(), "probit_mean": float(probit.mean()),
                      "pit_deciles": np.histogram(arr[:, 3], bins=10, range=(0, 1))[0].tolist()}
    return table


#: Where each fitted constant is valid (the optimiser's box; the plan regime refuses values outside it).
BOUNDS = {"power": (1.001, None), "floor": (0.0, None), "rate_exponent": (0.0, None),
          "noise_exponent": (0.0, None), "oscillation": (1e-4, None), "judged_error_factor": (0.0, None),
          "oscillation_dof": (2.05, None), STEPS_KEY: (None, None)}


def optimise(start: dict, pool, max_evals: int = 160, restarts: int = 0, fixed: tuple[str, ...] = (),
             box: bool = False) -> dict:
    """The constants of ``start`` with :data:`FITTED` (less ``fixed``) minimising :func:`score`.

    Nelder-Mead, up to ``max_evals`` evaluations, then ``restarts`` times again from the best point
    with a fresh simplex (a collapsed simplex stops short of the minimum); the restarts end early once
    one no longer improves the score. ``box``: inside :data:`BOUNDS` (else invalid constants score
    1e9, as the committed fits ran).
    """
    from scipy.optimize import minimize

    free = [k for k in (*FITTED, STEPS_KEY) if k in start and k not in fixed]

    def objective(x: np.ndarray) -> float:
        value = score({**start, **dict(zip(free, x, strict=True))}, pool)
        print(f"  {np.round(x, 4).tolist()} -> {value:.6f}", flush=True)
        return value

    x = np.array([float(start[k]) for k in free])
    best = np.inf
    for attempt in range(restarts + 1):
        res = minimize(objective, x, method="Nelder-Mead", bounds=[BOUNDS[k] for k in free] if box else None,
                       options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-6})
        print(f"run {attempt + 1}: {res.nfev} evaluations, score {res.fun:.6f} ({res.message})", flush=True)
        improved = res.fun < best - 1e-6
        if res.fun < best:
            x, best = res.x, float(res.fun)
        if not improved:
            break
    return {**start, **{k: round(float(v), 4) for k, v in zip(free, x, strict=True)}}


def markdown(checks: list[tuple[str, dict, float]], settings: list[str], jobs: int) -> str:
    lines = ["# Plan regime on the trajectory bank", "",
             f"{jobs} jobs of the settings {', '.join(settings)}; the actual final test loss against the "
             "predicted quantiles of its plan (coverage: the share at or below the quantile; calibrated = "
             "0.80 / 0.90 / 0.95). PIT deciles: where the outcome fell in its predicted distribution "
             "(uniform when calibrated).", ""]
    for label, table, value in checks:
        lines += [f"## {label}", "", f"mean pinball loss {value:.5f}", "",
                  "| group | n | P[L <= q80] | P[L <= q90] | P[L <= q95] | probit mean | PIT deciles |",
                  "|---|---|---|---|---|---|---|"]
        for key, row in table.items():
            lines.append(f"| {key} | {row['n']} | {row['q80']:.3f} | {row['q90']:.3f} | {row['q95']:.3f} | "
                         f"{row['probit_mean']:+.2f} | {' '.join(str(v) for v in row['pit_deciles'])} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank")
    parser.add_argument("--settings", default="d1,d2,d3,d4")
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--max-evals", type=int, default=160,
                        help="evaluations of the score per Nelder-Mead run (--fit)")
    parser.add_argument("--restarts", type=int, default=0,
                        help="Nelder-Mead runs after the first, each from the best point so far (--fit)")
    parser.add_argument("--box", action="store_true",
                        help="optimise inside the constants' valid range (--fit)")
    parser.add_argument("--fixed", default="",
                        help="comma-separated constants kept at their configured values (--fit)")
    parser.add_argument("--overrides", default="",
                        help="Hydra overrides the constants are composed with (e.g. model=digits_resnet)")
    parser.add_argument("--rate-steps", type=float, default=None, metavar="START",
                        help="prototype: fit rate_steps_exponent too, from START (the module docstring)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "plan_regime"))
    args = parser.parse_args()
    from depl_fl.runs.runconfig import compose_config

    settings = args.settings.split(",")
    fixed = tuple(name for name in args.fixed.split(",") if name)
    unknown = [name for name in fixed if name not in (*FITTED, STEPS_KEY)]
    if unknown or args.max_evals < 1 or args.restarts < 0:
        parser.exit(2, f"fit.py: --fixed takes {', '.join(FITTED)}; --max-evals >= 1, --restarts >= 0 (got "
                       f"--fixed {args.fixed!r}, --max-evals {args.max_evals}, --restarts {args.restarts})\n")
    JOBS.extend(load_jobs(args.bank, settings))
    configured = dict(compose_config(args.overrides.split())["profile"]["plan_regime"])
    if args.rate_steps is not None:
        configured[STEPS_KEY] = args.rate_steps
    shown = [k for k in (*FITTED, STEPS_KEY) if k in configured]
    with get_context("fork").Pool(args.processes) as pool:
        values = (optimise(configured, pool, args.max_evals, args.restarts, fixed, args.box) if args.fit
                  else configured)
        checks = [("exploration-only profile (plan_regime.enabled: false)", coverage_table(JOBS, None),
                   score(None, pool)),
                  (f"plan regime {json.dumps({k: values[k] for k in shown})}",
                   coverage_table(JOBS, regime_of(values), float(values.get(STEPS_KEY, 0.0))),
                   score(values, pool))]
    jobs = JOBS
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fit.md").write_text(markdown(checks, settings, len(jobs)))
    (out / "fit.json").write_text(json.dumps({"constants": values, "settings": settings, "jobs": len(jobs),
                                              "checks": [{"label": a, "table": b, "pinball": c}
                                                         for a, b, c in checks]}, indent=1, default=float))
    print((out / "fit.md").read_text())


if __name__ == "__main__":
    main()
