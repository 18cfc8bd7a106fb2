"""Why a job found no dependable plan: what its planner could reach, re-made from its cached exploration.

For every DepL job of a sweep that ended without a dependable plan (``status: infeasible``) the
profile is refitted from the exploration's cached fit inputs (``FederatedProfiler.restored``, as
``regime_replan.py`` does) and the initial plan is searched again:

- with the profile as the job made it (the measured levels above the learning curve as measured,
  ``no_rise_above`` off) at the deadline the exploration left, at the whole deadline and at 2x / 10x
  that deadline: does more deadline make a plan?
- from the trend without its spread, and from the exploration's last loss: does the start's spread
  make the difference?
- with a trend start's measured levels above the curve lifted to the curve's top rate (tried, not
  used by the jobs: it made static plans bolder than predicted).

Also the measured levels above the curve whose mean is a rise (a loss that grows there).

    python benchmarks/no_plan_reach.py SWEEP_DIR [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sweep_io import job_records, write_report


def _infeasible_jobs(sweep: Path) -> list[dict[str, Any]]:
    out = []
    for _, doc in job_records(sweep):
        s = doc.get("summary") or {}
        if s.get("method") == "depl" and s.get("status") == "infeasible" \
                and (doc.get("profile") or {}).get("cache_file"):
            out.append(doc)
    return sorted(out, key=lambda d: (d["summary"]["tracking"], d["summary"]["target_prob"], d["seed"]))


@contextmanager
def _rises_kept(kept: bool):
    """Make the profile with the measured levels above the curve as measured (``kept``, as the jobs
    do) or, for a trend start (the call that passes its ``floor``), lifted to the curve's top rate."""
    from depl_fl.tracking import learning_curve

    original = learning_curve.plan_regime_run

    def chosen(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**kwargs, "no_rise_above": not kept and "floor" in kwargs})

    learning_curve.plan_regime_run = chosen
    try:
        yield
    finally:
        learning_curve.plan_regime_run = original


def _profile(doc: dict[str, Any], rises_kept: bool) -> tuple[dict[str, Any], dict[str, float] | None]:
    from depl_fl.tracking.learning_curve import PlanRegime
    from strategies.federated_profiling import FederatedProfiler

    cfg = doc["config"]
    cached = json.loads(Path(doc["profile"]["cache_file"]).read_text(encoding="utf-8"))
    profiler, obs, fresh, props = FederatedProfiler.restored(cfg, cached)
    with _rises_kept(rises_kept):
        measured = profiler.measured_fit(obs, fresh, props)
        loss = profiler.finish_fit(measured, props, PlanRegime.from_config(cfg["profile"]["plan_regime"]))
    return loss, profiler.start_trend


def _search(doc: dict[str, Any], loss: dict[str, Any], trend: dict[str, float] | None, deadline: float,
            start: str = "trend") -> str:
    from depl_fl.contract.plan import Targets
    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.planner import PlanStart, make_plan

    cfg, s = doc["config"], doc["summary"]
    scen = dict(doc["scenario"])
    if start == "last" or trend is None:
        initial, begin = float(doc["rounds"][-1]["loss"]), None
    else:
        initial = float(trend["mean"])
        begin = PlanStart(loss_mean=initial, loss_std=float(trend["std"]) if start == "trend" else 0.0)
    scen["loss"] = {**loss, "initial": initial}
    planner = cfg["planner"]
    targets = Targets(float(s["target_loss"]), float(s["target_prob"]), deadline,
                      None if cfg["target"].get("max_rounds") is None else int(cfg["target"]["max_rounds"]))
    plan = make_plan(scenario_from_dict(scen), targets, method="depl", eta=float(planner["eta"]),
                     guarantee=str(planner["guarantee"]), seed=int(cfg["seed"]), start=begin,
                     mc_trajectories=int(planner["mc_trajectories"]))
    p = plan.predicted
    verdict = "plan" if plan.feasible else "none"
    return (f"{verdict}: P {p.get('probability', float('nan')):.4f}, {len(plan.rounds)} rounds, "
            f"{p.get('time_s', float('nan')):.0f} s, {p.get('cost_joules', float('nan')):.0f} J")


def _rises(loss: dict[str, Any], trend: dict[str, float] | None) -> str:
    """The measured levels above the curve (1.25x the start) of every variant whose mean is a rise."""
    from depl_fl.tracking.learning_curve import REGIME_TOP

    if trend is None:
        return "-"
    top = REGIME_TOP * float(trend["mean"])
    out = []
    for model, run in sorted(loss["run"].items()):
        rising = [f"{lv:.2f}: {mu:+.2f}" for lv, mu in zip(run["levels"], run["mean"], strict=True)
                  if lv > top * (1 + 1e-9) and mu < 0]
        if rising:
            out.append(f"{model} " + ", ".join(rising))
    return "; ".join(out) or "none"


def rows(doc: dict[str, Any]) -> list[str]:
    """The searches of one job, one markdown row each."""
    s = doc["summary"]
    left = float(doc["config"]["target"]["deadline_s"]) - float(s["profile_time_s"])
    whole = float(doc["config"]["target"]["deadline_s"])
    kept, trend = _profile(doc, rises_kept=True)
    lifted, _ = _profile(doc, rises_kept=False)
    arm = "tracking" if s["tracking"] else "static"
    start = f"{trend['mean']:.3f} +- {trend['std']:.3f}" if trend else "-"
    head = (f"| {s['seed']} | {arm} | {s['target_prob']:g} | {s['profile_rounds']} rounds, "
            f"{s['profile_time_s']:.0f} s | {start} | ")
    searches = [
        ("as the job made it, the deadline left", kept, left, "trend"),
        ("as the job made it, the whole deadline", kept, whole, "trend"),
        ("as the job made it, 2x the whole deadline", kept, 2 * whole, "trend"),
        ("as the job made it, 10x the whole deadline", kept, 10 * whole, "trend"),
        ("as the job made it, the trend without its spread", kept, left, "point"),
        ("as the job made it, from the last loss", kept, left, "last"),
        ("measured rises lifted (now), the deadline left", lifted, left, "trend"),
    ]
    out = []
    for name, loss, deadline, start in searches:
        out.append(head + f"{_rises(loss, trend)} | {name} ({deadline:.0f} s) | "
                   f"{_search(doc, loss, trend, deadline, start)} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    jobs = _infeasible_jobs(args.sweep)
    if not jobs:
        print(f"error: no DepL job without a dependable plan under {args.sweep}", file=sys.stderr)
        return 2
    lines = [f"`python benchmarks/no_plan_reach.py {args.sweep}`", "",
             "| seed | arm | π | exploration | trend start | measured rises above the curve (level: mean) "
             "| search | result |", "|---|---|---|---|---|---|---|---|"]
    for doc in jobs:
        lines += rows(doc)
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
