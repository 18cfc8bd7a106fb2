"""Static plans re-made with the measured rises above the learning curve lifted, scored on the runs' rounds.

For every static DepL job of a sweep with a plan and a trend start, the initial plan is made
again from its cached exploration (``no_plan_reach.py``'s refit): with the profile as the job made
it (it must reproduce the job's plan; a job it does not reproduce is counted and left out) and the
other way (``--made-with kept``: jobs run before a trend start lifted the measured rises above the
curve, re-made with them lifted; ``--made-with lifted``: jobs run with them lifted, re-made with the
rises kept, to see which plans the change altered). When the other plan's
rounds are a prefix of the job's, its outcome is the test loss the job recorded after that many
training rounds (the same seeded rounds); a longer or different plan is counted as not observed.

    python benchmarks/rise_lift_replan.py SWEEP_DIR [--made-with kept|lifted] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sweep_io import job_records, write_report

sys.path.insert(0, str(Path(__file__).resolve().parent))

from no_plan_reach import _profile  # noqa: E402


def _jobs(sweep: Path) -> list[dict[str, Any]]:
    out = []
    for _, doc in job_records(sweep):
        s = doc.get("summary") or {}
        if s.get("method") == "depl" and not s.get("tracking") and doc.get("plan") \
                and s.get("final_test_loss") is not None and (doc.get("profile") or {}).get("cache_file"):
            out.append(doc)
    return sorted(out, key=lambda d: (d["summary"]["target_prob"], d["seed"]))


def _plan(doc: dict[str, Any], loss: dict[str, Any], trend: dict[str, float]):
    from depl_fl.contract.plan import Targets
    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.planner import PlanStart, make_plan

    cfg, s = doc["config"], doc["summary"]
    scen = dict(doc["scenario"])
    scen["loss"] = {**loss, "initial": float(trend["mean"])}
    t = cfg["target"]
    targets = Targets(float(t["loss"]), float(t["prob"]), float(t["deadline_s"]) - float(s["profile_time_s"]),
                      None if t.get("max_rounds") is None else int(t["max_rounds"]))
    planner = cfg["planner"]
    return make_plan(scenario_from_dict(scen), targets, method="depl", eta=float(planner["eta"]),
                     guarantee=str(planner["guarantee"]), seed=int(cfg["seed"]),
                     start=PlanStart(loss_mean=float(trend["mean"]), loss_std=float(trend["std"])),
                     mc_trajectories=int(planner["mc_trajectories"]))


def _key(rounds) -> list[tuple[str, tuple[str, ...]]]:
    return [(r.model, tuple(r.clients)) if hasattr(r, "model") else (r["model"], tuple(r["clients"]))
            for r in rounds]


def replan(doc: dict[str, Any], made_with_kept: bool = True) -> dict[str, Any] | None:
    """The job's plan as made and with the other profile; None without a trend start."""
    made, trend = _profile(doc, rises_kept=made_with_kept)
    if trend is None:
        return None
    other, _ = _profile(doc, rises_kept=not made_with_kept)
    own, new = _plan(doc, made, trend), _plan(doc, other, trend)
    job = _key(doc["plan"]["rounds"])
    k = len(new.rounds)
    train = [r for r in doc["rounds"] if r.get("phase") == "train"]
    observed = new.feasible and k >= 1 and _key(new.rounds) == job[:k]
    return {"seed": doc["seed"], "pi": doc["summary"]["target_prob"], "target": doc["summary"]["target_loss"],
            "reproduced": own.feasible and _key(own.rounds) == job, "rounds": len(job),
            "loss": doc["summary"]["final_test_loss"], "energy_j": doc["plan"]["predicted"]["cost_joules"],
            "new_rounds": k if new.feasible else None,
            "new_energy_j": new.predicted.get("cost_joules") if new.feasible else None,
            "new_loss": train[k - 1]["test_loss"] if observed else None}


def markdown(rows: list[dict[str, Any]], command: str, made_with_kept: bool = True) -> str:
    title = "lifted" if made_with_kept else "kept (as the jobs make them)"
    lines = [f"# Static plans with the measured rises above the curve {title}", "", f"`{command}`", "",
             "Jobs whose plan the profile as the job made it reproduces; the new plan's outcome is the "
             "job's own test loss after as many training rounds when its rounds are a prefix of the job's "
             "plan.", "",
             "| π | jobs (reproduced / with a plan) | same plan | no plan with the other profile "
             "| new plan a prefix (observed) "
             "| P[L ≤ L*] job / new, observed jobs | max test loss new, observed | mean rounds job / new "
             "| mean planned J job / new |",
             "|---|---|---|---|---|---|---|---|---|"]
    for pi in sorted({r["pi"] for r in rows}):
        cell = [r for r in rows if r["pi"] == pi]
        ok = [r for r in cell if r["reproduced"]]
        seen = [r for r in ok if r["new_loss"] is not None]
        same = sum(r["new_rounds"] == r["rounds"] and r["new_loss"] is not None for r in ok)
        target = cell[0]["target"]
        hits_job = sum(r["loss"] <= target for r in seen)
        hits_new = sum(r["new_loss"] <= target for r in seen)
        new_k = [r["new_rounds"] for r in ok if r["new_rounds"] is not None]
        new_e = [r["new_energy_j"] for r in ok if r["new_energy_j"] is not None]
        worst = f"{max(r['new_loss'] for r in seen):.3f}" if seen else "-"
        lines.append(
            f"| {pi:g} | {len(ok)} / {len(cell)} | {same} | {sum(r['new_rounds'] is None for r in ok)} | "
            f"{len(seen)} | {hits_job}/{len(seen)} / "
            f"{hits_new}/{len(seen)} | {worst} | {np.mean([r['rounds'] for r in ok]):.1f} / "
            f"{np.mean(new_k) if new_k else float('nan'):.1f} | {np.mean([r['energy_j'] for r in ok]):.0f} / "
            f"{np.mean(new_e) if new_e else float('nan'):.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--made-with", choices=("kept", "lifted"), default="kept",
                        help="how the sweep's jobs made their profiles (the rises above the curve)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    jobs = _jobs(args.sweep)
    kept = args.made_with == "kept"
    rows = [r for r in (replan(doc, kept) for doc in jobs) if r is not None]
    if not rows:
        print(f"error: no static DepL job with a plan and a trend start under {args.sweep}", file=sys.stderr)
        return 2
    text = markdown(rows, f"python benchmarks/rise_lift_replan.py {args.sweep} --made-with {args.made_with}",
                    kept)
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
