"""Static plans with the job's own measured oscillation, checked offline on a sweep's recorded runs.

For every static DepL job of a sweep (``tracking.enabled=false``) the profile
is refitted from its exploration's cached fit inputs (as
``benchmarks/regime_replan.py`` does) twice: with the constants the job ran
with, and with ``profile.plan_regime.explored_oscillation`` set (the job's
exploration widens the oscillation by what it measures beyond that
reference, :mod:`depl_fl.tracking.oscillation`). Two checks per job:

1. **The same plan, predicted again**: the job's recorded plan is sampled
   with the contract's Monte Carlo under both profiles, and the job's actual
   final test loss is placed in each prediction (PIT). Where the runs spread
   wider than predicted, the widened profile must bring the share of runs
   above their own predicted pi-quantile towards ``1 - pi`` and the probit's
   standard deviation towards 1.
2. **The plan made again** with the widened profile: feasible or not, its
   rounds and its predicted training energy against the job's own plan
   (its outcome is not observed: a longer plan trains rounds the job never ran).

Jobs without a static plan (no dependable plan after exploring) are counted.

    python benchmarks/oscillation_replan.py SWEEP_DIR [--reference 0.073] [--set NAME=VALUE ...] \
        [--out FILE.md] [--json FILE.json]

``--set floor=0.0725`` also changes a plan-regime constant of the widened profile (how the
learning curve's floor, which one exploration cannot fit, interacts with the wider oscillation).

No job's decision is involved: the script reads the jobs' files only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sweep_io import job_records, write_report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks.lib.number_settings import number_settings  # noqa: E402

SAMPLES = 4000


def _samples(scenario: Any, plan_rounds: list[dict[str, Any]], seed: int) -> np.ndarray:
    from depl_fl.contract.plan import RoundDecision
    from depl_fl.contract.semantics import simulate_final_losses

    rounds = [RoundDecision(r["model"], tuple(r["clients"]), dict(r.get("levels", {}))) for r in plan_rounds]
    return simulate_final_losses(scenario, rounds, SAMPLES, seed)


def check_job(doc: dict[str, Any], cache: Path, reference: float,
              changes: dict[str, float] | None = None) -> dict[str, Any]:
    """Both checks on one static job (see the module docstring); ``changes``: other plan-regime
    constants of the widened profile (e.g. the floor)."""
    from regime_replan import _key, _planner

    from depl_fl.contract.plan import Targets
    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.orchestration.profile_fit import local_steps, plan_oscillation
    from depl_fl.tracking.learning_curve import PlanRegime
    from strategies.federated_profiling import FederatedProfiler

    cfg, s = doc["config"], doc["summary"]
    cached = json.loads(cache.read_text(encoding="utf-8"))
    profiler, obs, fresh, props = FederatedProfiler.restored(cfg, cached)
    measured = profiler.measured_fit(obs, fresh, props)
    raw = dict(cfg["profile"]["plan_regime"])
    widened = PlanRegime.from_config({**raw, **(changes or {}), "explored_oscillation": reference})
    own = PlanRegime.from_config({**raw, "explored_oscillation": None})

    def scenario(regime: PlanRegime):
        loss = profiler.finish_fit(measured, props, regime)
        doc_scenario = dict(doc["scenario"])
        doc_scenario["loss"] = {**loss, "initial": doc["scenario"]["loss"]["initial"]}
        return scenario_from_dict(doc_scenario)

    steps = local_steps(cfg, props)
    row = {"seed": s["seed"], "pi": s["target_prob"], "target": s["target_loss"],
           "oscillation": own.oscillation_at(steps),
           "widened_oscillation": plan_oscillation(profiler.trajectories, widened, steps),
           "actual": s.get("final_test_loss"), "rounds": len((doc.get("plan") or {}).get("rounds") or []),
           "energy_j": s.get("cost_j")}
    new_scenario = scenario(widened)
    t = cfg["target"]
    targets = Targets(float(t["loss"]), float(t["prob"]), float(t["deadline_s"]) - float(s["profile_time_s"]),
                      None if t.get("max_rounds") is None else int(t["max_rounds"]))
    remade = _planner(cfg, "depl")(new_scenario, targets)
    row.update({"remade_feasible": bool(remade.feasible),
                "remade_rounds": len(remade.rounds) if remade.feasible else None,
                "remade_energy_j": remade.predicted.get("cost_joules") if remade.feasible else None})
    if row["rounds"] and row["actual"] is not None:
        plan_rounds = doc["plan"]["rounds"]
        seed = int(s.get("seed", 0))
        old = _samples(scenario_from_dict(doc["scenario"]), plan_rounds, seed)
        new = _samples(new_scenario, plan_rounds, seed)
        own_rebuilt = scenario(own)
        row["reproduced"] = _key(_planner(cfg, "depl")(own_rebuilt, targets).rounds) == _key(plan_rounds)
        actual = float(row["actual"])
        row.update({"pit": float(np.mean(old <= actual)), "pit_widened": float(np.mean(new <= actual)),
                    "quantile": float(np.quantile(old, row["pi"])),
                    "quantile_widened": float(np.quantile(new, row["pi"]))})
    return row


def _probit_sd(pits: list[float]) -> float:
    from scipy.stats import norm

    edge = 0.5 / SAMPLES
    return float(np.std(norm.ppf(np.clip(pits, edge, 1.0 - edge)), ddof=1)) if len(pits) > 1 else float("nan")


def markdown(rows: list[dict[str, Any]], reference: float, command: str,
             changes: dict[str, float] | None = None) -> str:
    """Per pi: the same plans predicted again, and the plans made again."""
    from depl_fl.runs.report import wilson_interval

    changed = "".join(f", {k} = {v:g}" for k, v in (changes or {}).items())
    lines = ["# Static plans with the job's own measured oscillation", "", f"`{command}`", "",
             f"Reference `explored_oscillation` = {reference:g}{changed}. Same plan: each job's recorded "
             "static plan predicted again with the widened profile, its actual final test loss placed in "
             "both predictions. Plan made again: the widened profile's plan against the job's own "
             "(its outcome is not observed).", "",
             "| π | static jobs with a plan | oscillation used at the job's steps (median, max) | "
             "share above own π-quantile, job's profile [95% Wilson] | widened | probit sd job's / widened | "
             "plans made again feasible | mean rounds own / again | mean training J own / again |",
             "|---|---|---|---|---|---|---|---|---|"]
    for pi in sorted({r["pi"] for r in rows}):
        cell = [r for r in rows if r["pi"] == pi and "pit" in r]
        if not cell:
            continue
        used = [r["widened_oscillation"] for r in cell]
        above_old = sum(r["actual"] > r["quantile"] for r in cell)
        above_new = sum(r["actual"] > r["quantile_widened"] for r in cell)
        n = len(cell)
        lo_o, hi_o = wilson_interval(above_old, n)
        lo_n, hi_n = wilson_interval(above_new, n)
        feasible = [r for r in cell if r["remade_feasible"]]
        lines.append(
            f"| {pi:g} | {n} | {np.median(used):.3f}, {max(used):.3f} | {above_old / n:.3f} "
            f"[{lo_o:.2f}, {hi_o:.2f}] | {above_new / n:.3f} [{lo_n:.2f}, {hi_n:.2f}] | "
            f"{_probit_sd([r['pit'] for r in cell]):.2f} / "
            f"{_probit_sd([r['pit_widened'] for r in cell]):.2f} | "
            f"{len(feasible)} / {n} | {np.mean([r['rounds'] for r in feasible]):.1f} / "
            f"{np.mean([r['remade_rounds'] for r in feasible]):.1f} | "
            f"{np.mean([r['energy_j'] for r in feasible]):.0f} / "
            f"{np.mean([r['remade_energy_j'] for r in feasible]):.0f} |")
    pooled = [r for r in rows if "pit" in r]
    unplanned = [r for r in rows if "pit" not in r]
    reproduced = sum(bool(r.get("reproduced")) for r in pooled)
    sd_old = _probit_sd([r["pit"] for r in pooled])
    sd_new = _probit_sd([r["pit_widened"] for r in pooled])
    rescued = sum(r["remade_feasible"] for r in unplanned)
    lines += ["", f"Pooled over every π: probit sd {sd_old:.2f} (job's profile) / {sd_new:.2f} (widened), "
              f"{len(pooled)} runs; the job's own constants reproduce {reproduced} of their plans. "
              f"Jobs without a static plan: {len(unplanned)} (with the widened profile {rescued} of them "
              "would get one)."]
    return "\n".join(lines) + "\n"


def static_jobs(sweep: Path) -> list[tuple[dict[str, Any], Path]]:
    """Every static DepL job of ``sweep`` whose profile cache file (with its fit inputs) exists."""
    from plan_regime.oscillation_reference import cache_file

    out = []
    for _, doc in job_records(sweep):
        s = doc.get("summary") or {}
        name = (doc.get("profile") or {}).get("cache_file")
        if s.get("method") != "depl" or s.get("tracking") or not name or doc.get("replans"):
            continue
        cache = cache_file(sweep, name)
        if cache is not None and "fit_inputs" in json.loads(cache.read_text(encoding="utf-8")):
            out.append((doc, cache))
    return out


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--reference", type=float, default=0.073)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.reference >= 0.0:
        print(f"error: --reference must be a number >= 0, got {args.reference}", file=sys.stderr)
        return 2
    changes = number_settings(args.set)
    if changes is None:
        return 2
    jobs = static_jobs(args.sweep)
    if not jobs:
        print(f"error: no static DepL job with a profile cache file under {args.sweep}", file=sys.stderr)
        return 2
    rows = [check_job(doc, cache, args.reference, changes) for doc, cache in jobs]
    command = " ".join(["python benchmarks/oscillation_replan.py", str(args.sweep),
                        f"--reference {args.reference:g}", *[f"--set {s}" for s in args.set]])
    text = markdown(rows, args.reference, command, changes)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"reference": args.reference, "changes": changes, "jobs": rows},
                                        indent=1),
                             encoding="utf-8")
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
