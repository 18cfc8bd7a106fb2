"""Static plans re-made with the measured switch jumps as measured and without a cycle's gain.

For every static DepL job of a sweep with a plan and a cached exploration, the profile is refitted from
the cache (``FederatedProfiler.restored``) twice: with ``profile.plan_regime.switch_cycles`` as the job
ran it and with the other value (``measured`` / ``no_gain``, :mod:`depl_fl.tracking.switch_cycles`), and
the initial plan is made again from each. The plan with the job's own value must reproduce the job's
plan (a job it does not reproduce is marked). Per job: the switch jumps' loop gain (the least cycle
mean), the plan's rounds, how many of them switch the variant, its planned energy and predicted
pi-quantile, the other plan's, and the job's final test loss; when the other plan's rounds are a prefix
of the job's, the test loss the job recorded after that many training rounds (the same seeded rounds).

    python benchmarks/switch_cycle_replan.py SWEEP_DIR [--out FILE.md]
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

SWITCH_CYCLES = ("measured", "no_gain")


def _jobs(sweep: Path) -> list[dict[str, Any]]:
    out = []
    for _, doc in job_records(sweep):
        s = doc.get("summary") or {}
        if s.get("method") == "depl" and not s.get("tracking") and doc.get("plan") \
                and s.get("final_test_loss") is not None and s.get("status") == "completed" \
                and (doc.get("profile") or {}).get("cache_file"):
            out.append(doc)
    return sorted(out, key=lambda d: (d["summary"]["target_prob"], d["seed"]))


def _profile(doc: dict[str, Any], switch_cycles: str) -> tuple[dict[str, Any], dict[str, float] | None]:
    from depl_fl.tracking.learning_curve import PlanRegime
    from strategies.federated_profiling import FederatedProfiler

    cfg = doc["config"]
    cached = json.loads(Path(doc["profile"]["cache_file"]).read_text(encoding="utf-8"))
    profiler, obs, fresh, props = FederatedProfiler.restored(cfg, cached)
    measured = profiler.measured_fit(obs, fresh, props)
    raw = {**cfg["profile"]["plan_regime"], "switch_cycles": switch_cycles}
    loss = profiler.finish_fit(measured, props, PlanRegime.from_config(raw))
    return loss, profiler.start_trend


def _plan(doc: dict[str, Any], loss: dict[str, Any], trend: dict[str, float] | None):
    from depl_fl.contract.plan import Targets
    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.planner import PlanStart, make_plan

    cfg, s = doc["config"], doc["summary"]
    scen = dict(doc["scenario"])
    initial = float(trend["mean"]) if trend is not None else float(doc["scenario"]["loss"]["initial"])
    scen["loss"] = {**loss, "initial": initial}
    t = cfg["target"]
    targets = Targets(float(t["loss"]), float(t["prob"]), float(t["deadline_s"]) - float(s["profile_time_s"]),
                      None if t.get("max_rounds") is None else int(t["max_rounds"]))
    planner = cfg["planner"]
    start = None if trend is None else PlanStart(loss_mean=initial, loss_std=float(trend["std"]))
    return make_plan(scenario_from_dict(scen), targets, method="depl", eta=float(planner["eta"]),
                     guarantee=str(planner["guarantee"]), seed=int(cfg["seed"]), start=start,
                     mc_trajectories=int(planner["mc_trajectories"]))


def _key(rounds) -> list[tuple[str, tuple[str, ...]]]:
    return [(r.model, tuple(r.clients)) if hasattr(r, "model") else (r["model"], tuple(r["clients"]))
            for r in rounds]


def _switches(key: list[tuple[str, tuple[str, ...]]]) -> int:
    return sum(a[0] != b[0] for a, b in zip(key, key[1:], strict=False))


def _loop_gain(loss: dict[str, Any]) -> float:
    from depl_fl.tracking.switch_cycles import least_cycle_mean

    jumps = {(s["from"], s["to"]): float(s["mean"]) for s in loss.get("switch") or ()}
    least = least_cycle_mean(jumps)
    return float("nan") if least is None else least


def replan(doc: dict[str, Any]) -> dict[str, Any]:
    """The job's plan re-made with its own ``switch_cycles`` and with the other value."""
    own_value = str(doc["config"]["profile"]["plan_regime"].get("switch_cycles") or "measured")
    other_value = SWITCH_CYCLES[1 - SWITCH_CYCLES.index(own_value)]
    made, trend = _profile(doc, own_value)
    other, _ = _profile(doc, other_value)
    own, new = _plan(doc, made, trend), _plan(doc, other, trend)
    job = _key(doc["plan"]["rounds"])
    k = len(new.rounds)
    train = [r for r in doc["rounds"] if r.get("phase") == "train"]
    observed = new.feasible and k >= 1 and _key(new.rounds) == job[:k] and k <= len(train)
    return {"seed": doc["seed"], "pi": doc["summary"]["target_prob"], "target": doc["summary"]["target_loss"],
            "own": own_value, "other": other_value, "loop_mean": _loop_gain(made),
            "reproduced": own.feasible and _key(own.rounds) == job,
            "rounds": len(job), "switches": _switches(job), "loss": doc["summary"]["final_test_loss"],
            "energy_j": doc["plan"]["predicted"]["cost_joules"],
            "quantile": doc["plan"]["predicted"].get("loss_quantile"),
            "new_rounds": k if new.feasible else None,
            "new_switches": _switches(_key(new.rounds)) if new.feasible else None,
            "new_energy_j": new.predicted.get("cost_joules") if new.feasible else None,
            "new_quantile": new.predicted.get("loss_quantile") if new.feasible else None,
            "new_loss": train[k - 1]["test_loss"] if observed else None}


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    lines = [f"# Static plans re-made with the switch jumps {rows[0]['own']} (as the jobs ran) and "
             f"{rows[0]['other']}", "", f"`{command}`", "",
             "Loop mean: the least mean jump over the cycles of switches the job measured (below 0: a cycle "
             "gains). Quantile: the plan's predicted π-quantile of the judged final loss. Other plan's test "
             "loss: the job's own after as many training rounds, when the other plan is a prefix of the "
             "job's (else -).", "",
             "| seed | π | loop mean | reproduced | rounds (switches) job / other | planned J job / other "
             "| quantile job / other | test loss job | other plan's test loss |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['pi']:g} | {r['loop_mean']:+.4f} | {'yes' if r['reproduced'] else 'no'} | "
            f"{r['rounds']} ({r['switches']}) / "
            f"{_num(r['new_rounds'], 'd')} ({_num(r['new_switches'], 'd')}) | "
            f"{r['energy_j']:.1f} / {_num(r['new_energy_j'], '.1f')} | {_num(r['quantile'], '.3f')} / "
            f"{_num(r['new_quantile'], '.3f')} | {r['loss']:.3f} | {_num(r['new_loss'], '.3f')} |")
    ok = [r for r in rows if r["reproduced"] and r["new_rounds"] is not None]
    changed = [r for r in ok if r["new_rounds"] != r["rounds"] or r["new_switches"] != r["switches"]]
    if ok:
        lines += ["", f"Reproduced with a plan both ways: {len(ok)} of {len(rows)}; plans changed: "
                  f"{len(changed)}. Mean rounds job / other {np.mean([r['rounds'] for r in ok]):.1f} / "
                  f"{np.mean([r['new_rounds'] for r in ok]):.1f}; mean planned J "
                  f"{np.mean([r['energy_j'] for r in ok]):.1f} / "
                  f"{np.mean([r['new_energy_j'] for r in ok]):.1f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    jobs = _jobs(args.sweep)
    if not jobs:
        print(f"error: no finished static DepL job with a plan and a cached exploration under {args.sweep}",
              file=sys.stderr)
        return 2
    rows = [replan(doc) for doc in jobs]
    write_report(markdown(rows, f"python benchmarks/switch_cycle_replan.py {args.sweep}"), args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
