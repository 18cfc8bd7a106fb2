"""Static plans re-made with other plan-regime constants, scored on the runs' own recorded rounds.

For every static DepL job of a sweep (``tracking.enabled=false``) the profile
is refitted from its exploration's cached fit inputs
(``FederatedProfiler.restored``, as ``plan_regime/fit.py`` does) and the
initial plan is made again with the job's planner settings:

1. with the job's own constants: it must reproduce the job's plan (rounds,
   models, client sets, predicted energy); a job it does not reproduce is
   counted and left out;
2. with the perturbed constants (``--set NAME=VALUE``): when its rounds are a
   prefix of the job's plan, its outcome is the test loss the job recorded
   after that many training rounds (the same seeded rounds); a longer or
   different plan is counted as not observed;
3. with ``method=full`` and the job's own constants: the training energy
   plain FedAvg (full model, every client) is planned to spend on the same
   profile (in simulation a static plan's energy is its modelled energy).

Per pi: the job's and the perturbed plans' coverage, calibration (with the
intervals of ``depl-fl report``), rounds and energy, and full's planned energy.

    python benchmarks/regime_replan.py SWEEP_DIR --set floor=0.0725 --set oscillation=0.12 \
        [--out FILE.md] [--json FILE.json]

``--json`` also caches: a job it already holds with the same changes is not re-made.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sweep_io import job_records, write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.lib.number_settings import number_settings  # noqa: E402


def _static_jobs(sweep: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every finished static DepL job with a plan and a profile cache file (a running job is left out)."""
    from depl_fl.runs.report import UNFINISHED

    out = []
    for path, doc in job_records(sweep):
        s = doc.get("summary") or {}
        if s.get("method") == "depl" and not s.get("tracking") and s.get("status") not in UNFINISHED \
                and doc.get("plan") and s.get("final_test_loss") is not None \
                and (doc.get("profile") or {}).get("cache_file"):
            out.append((str(path), doc))
    return out


def _planner(cfg: dict[str, Any], method: str):
    from depl_fl.planner import make_plan

    planner = cfg["planner"]

    def plan(scenario, targets, start=None):
        return make_plan(scenario, targets, method=method, eta=float(planner["eta"]),
                         guarantee=str(planner["guarantee"]), seed=int(cfg["seed"]), start=start,
                         mc_trajectories=int(planner["mc_trajectories"]))
    return plan


def _key(rounds) -> list[tuple[str, tuple[str, ...]]]:
    return [(r.model, tuple(r.clients)) if hasattr(r, "model") else (r["model"], tuple(r["clients"]))
            for r in rounds]


def replan(doc: dict[str, Any], changes: dict[str, float]) -> dict[str, Any]:
    """The job's plan re-made with its own and with the changed constants, and full's plan."""
    from depl_fl.contract.plan import Targets
    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.planner import PlanStart
    from depl_fl.tracking.learning_curve import PlanRegime
    from strategies.federated_profiling import FederatedProfiler

    cfg, s = doc["config"], doc["summary"]
    cached = json.loads(Path(doc["profile"]["cache_file"]).read_text(encoding="utf-8"))
    profiler, obs, fresh, props = FederatedProfiler.restored(cfg, cached)
    measured = profiler.measured_fit(obs, fresh, props)
    raw = cfg["profile"]["plan_regime"]

    def scenario(values: dict[str, Any]):
        """The scenario and the plan's start (the exploration's trend with its uncertainty, as the
        strategy starts a plan, when the regime anchors there; else the recorded initial loss)."""
        loss = profiler.finish_fit(measured, props, PlanRegime.from_config(values))
        trend = profiler.start_trend
        scen = dict(doc["scenario"])
        initial = doc["scenario"]["loss"]["initial"] if trend is None else float(trend["mean"])
        scen["loss"] = {**loss, "initial": initial}
        start = None if trend is None else PlanStart(loss_mean=initial, loss_std=float(trend["std"]))
        return scenario_from_dict(scen), start

    t = cfg["target"]
    targets = Targets(float(t["loss"]), float(t["prob"]), float(t["deadline_s"]) - float(s["profile_time_s"]),
                      None if t.get("max_rounds") is None else int(t["max_rounds"]))
    own_scenario, own_start = scenario(raw)
    own = _planner(cfg, "depl")(own_scenario, targets, own_start)
    changed_scenario, changed_start = scenario({**raw, **changes})
    changed = _planner(cfg, "depl")(changed_scenario, targets, changed_start)
    full = _planner(cfg, "full")(own_scenario, targets, own_start)
    train = [r for r in doc["rounds"] if r.get("phase") == "train"]
    explored = [r for r in doc["rounds"] if r.get("phase") == "profile"]
    job = _key(doc["plan"]["rounds"])
    k = len(changed.rounds)
    observed = changed.feasible and _key(changed.rounds) == job[:k]
    outcome = None
    if observed:
        outcome = train[k - 1]["test_loss"] if k else (explored[-1]["test_loss"] if explored else None)
    return {"seed": s["seed"], "pi": s["target_prob"], "target": s["target_loss"],
            "reproduced": own.feasible and _key(own.rounds) == job
            and abs(own.predicted.get("cost_joules", 0.0) - doc["plan"]["predicted"]["cost_joules"]) < 1e-6,
            "rounds": len(job), "energy_j": s["cost_j"], "loss": s["final_test_loss"],
            "changed_rounds": k if changed.feasible else None,
            "changed_energy_j": changed.predicted.get("cost_joules") if changed.feasible else None,
            "changed_loss": outcome,
            "full_energy_j": full.predicted.get("cost_joules") if full.feasible else None,
            "full_rounds": len(full.rounds) if full.feasible else None}


def _cell(losses: list[float], target: float, pi: float) -> str:
    from depl_fl.runs.report import calibration, wilson_interval

    arr = np.asarray(losses, dtype=float)
    hits = int(np.sum(arr <= target))
    low, high = wilson_interval(hits, arr.size)
    q, q_low, q_high = calibration(arr, pi, target)
    interval = "" if q_low is None else f" [{q_low:.2f}, {q_high:.2f}]"
    return f"{hits}/{arr.size} = {hits / arr.size:.3f} [{low:.2f}, {high:.2f}] | {q:.2f}{interval}"


def markdown(rows: list[dict[str, Any]], changes: dict[str, float], command: str) -> str:
    """Per pi: the jobs' own plans against the re-made ones, on the jobs whose plan was reproduced."""
    lines = ["# Static plans re-made with other plan-regime constants", "", f"`{command}`", "",
             f"Perturbed: {', '.join(f'{k} = {v:g}' for k, v in changes.items())}. Only jobs whose plan the "
             "own constants reproduce exactly; the perturbed plan's outcome is the job's own test loss after "
             "as many training rounds when its rounds are a prefix of the job's plan (else not observed). "
             "Full: the training energy `method=full` plans on the same profile.", "",
             "| π | jobs (reproduced / static) | P[L ≤ L*], own [95% Wilson] "
             "| calibration, own [95% bootstrap] | P[L ≤ L*], perturbed | calibration, perturbed "
             "| same plan | perturbed not observed | "
             "mean rounds own / perturbed | mean training J own / perturbed / full |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for pi in sorted({r["pi"] for r in rows}):
        cell = [r for r in rows if r["pi"] == pi]
        ok = [r for r in cell if r["reproduced"]]
        if not ok:
            lines.append(f"| {pi:g} | 0 / {len(cell)} | | | | | | | | |")
            continue
        target = ok[0]["target"]
        seen = [r for r in ok if r["changed_loss"] is not None]
        same = sum(r["changed_rounds"] == r["rounds"] for r in ok)
        perturbed = _cell([r["changed_loss"] for r in seen], target, pi).split(" | ") if seen else ["", ""]
        full = [r["full_energy_j"] for r in ok if r["full_energy_j"] is not None]
        changed_e = [r["changed_energy_j"] for r in ok if r["changed_energy_j"] is not None]
        changed_k = [r["changed_rounds"] for r in ok if r["changed_rounds"] is not None]
        mean_k = np.mean(changed_k) if changed_k else float("nan")
        lines.append(
            f"| {pi:g} | {len(ok)} / {len(cell)} | {_cell([r['loss'] for r in ok], target, pi)} | "
            f"{perturbed[0]} | {perturbed[1]} | {same} | {len(ok) - len(seen)} | "
            f"{np.mean([r['rounds'] for r in ok]):.1f} / {mean_k:.1f} | "
            f"{np.mean([r['energy_j'] for r in ok]):.0f} / "
            f"{np.mean(changed_e) if changed_e else float('nan'):.0f} / "
            f"{np.mean(full) if full else float('nan'):.0f} ({len(full)} full plans) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a profile.plan_regime constant and its perturbed value")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    changes = number_settings(args.set)
    if changes is None:
        return 2
    jobs = _static_jobs(args.sweep)
    if not jobs:
        print(f"error: no static DepL job with a plan under {args.sweep}", file=sys.stderr)
        return 2
    # --json is also a cache: a job already re-made with the same changes is not re-made.
    known = {}
    if args.json is not None and args.json.exists():
        old = json.loads(args.json.read_text(encoding="utf-8"))
        if old.get("changes") == changes:
            known = {row["path"]: row for row in old["jobs"]}
    rows = []
    for path, doc in jobs:
        rows.append(known.get(path) or {"path": path, **replan(doc, changes)})
        if args.json is not None:  # after every job, the jobs made so far and those still cached
            done = {row["path"] for row in rows}
            kept = rows + [row for p, row in known.items() if p not in done]
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"changes": changes, "jobs": kept}, indent=1), encoding="utf-8")
    command = "python benchmarks/regime_replan.py " + " ".join([str(args.sweep)]
                                                               + [f"--set {s}" for s in args.set])
    text = markdown(rows, changes, command)
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
