"""Planning on what the devices measure: loopback deployments of heterogeneous emulated devices.

``run``: loopback deployments (``scripts/deploy_loopback.sh --netem``) whose SuperNodes have
real, different speeds (a cgroup v1 CPU quota per cluster, ``--cpu-quota``) and links (``tc``
rate limits per network namespace), while ``conf/clusters/two_class.yaml`` declares B 4x slower
than A (the devices: 2x, so the table is wrong by 2x for B). Each seed runs with
``cost.source=measured`` (or ``table``) and the wall-clock deadline.

``report``: from the runs' ``results.json``: per training round the plan's round time against the
measured one (after the exploration), whether the deadline held in wall-clock time, the
measured and modelled energy, and what a plan made on the declared table would have done on the
same federation under the costs the exploration measured (its predicted time against the
deadline left, and its energy): a counterfactual from the fitted model, not a run.

Usage::

    python benchmarks/device_costs_bench.py run --seeds 0 1 --cost measured \\
        --out benchmarks/results/devices/runs [HYDRA_OVERRIDE ...]
    python benchmarks/device_costs_bench.py report benchmarks/results/devices/runs/*/results.json \\
        --out benchmarks/results/devices
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "deploy_loopback.sh"
CLUSTERS = "A,B,B"
QUOTA = "A=100,B=50"
NODE_EXTRA = 'level-threads="1,2" level-watts="3,6"'
JOB = ["profile.explore.rounds=4", "profile.explore.max_rounds=4", "target.loss=0.25", "target.prob=0.8",
       "target.deadline_s=600", "output.plot=false", "server.round_timeout_slack_s=300"]


def run(args: argparse.Namespace) -> int:
    """One loopback deployment per seed into ``out/<cost>-seed<k>``."""
    out_root = Path(args.out)
    failed = 0
    for seed in args.seeds:
        out = out_root / f"{args.cost}-seed{seed}"
        cache = out_root / f"cache-{args.cost}-seed{seed}"
        cmd = ["bash", str(SCRIPT), "-n", "3", "-c", CLUSTERS, "--netem", "--cpu-quota", QUOTA,
               "--node-extra", NODE_EXTRA, "-o", str(out), "-t", str(args.timeout),
               f"cost.source={args.cost}", f"seed={seed}", *JOB, *args.overrides]
        env = {**os.environ, "FLWR_BIN": str(Path(sys.executable).parent), "DEPL_CACHE_DIR": str(cache)}
        print("+", " ".join(cmd), flush=True)
        done = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        failed += done.returncode != 0
    return 1 if failed else 0


def _table_scenario(doc: dict[str, Any]) -> Any:
    """The run's scenario with the declared table's costs (clusters and real FLOPs) put back."""
    import dataclasses

    from depl_fl.contract.scenario import scenario_from_dict
    from depl_fl.orchestration.scenario_builder import cluster_docs, model_docs
    from depl_fl.task.partitions import geometry

    cfg = doc["config"]
    fitted = scenario_from_dict(doc["scenario"])
    geo = geometry(cfg)
    table = scenario_from_dict({**doc["scenario"], "clusters": cluster_docs(cfg),
                                "models": model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)})
    return fitted, dataclasses.replace(table, loss=fitted.loss)


def counterfactual(doc: dict[str, Any]) -> dict[str, Any]:
    """The plan the declared table gives, judged by the fitted (measured) costs."""
    from depl_fl.contract.plan import Targets
    from depl_fl.contract.semantics import plan_totals
    from depl_fl.planner import make_plan

    fitted, table = _table_scenario(doc)
    cfg = doc["config"]
    left = float(cfg["target"]["deadline_s"]) - float(doc["profile"]["wall_s"])
    targets = Targets(float(cfg["target"]["loss"]), float(cfg["target"]["prob"]), left,
                      cfg["target"].get("max_rounds"))
    plan = make_plan(table, targets, method=str(cfg["method"]), eta=float(cfg["planner"]["eta"]),
                     guarantee=str(cfg["planner"]["guarantee"]), seed=int(cfg["seed"]),
                     mc_trajectories=int(cfg["planner"]["mc_trajectories"]))
    if not plan.feasible:
        return {"feasible": False}
    energy_t, time_t = plan_totals(table, plan.rounds)
    energy_m, time_m = plan_totals(fitted, plan.rounds)
    own_e, own_t = plan_totals(fitted, [r for r in _plan_rounds(doc)])
    return {"feasible": True, "rounds": len(plan.rounds), "deadline_left_s": left,
            "table_time_s": time_t, "measured_time_s": time_m, "misses_deadline": time_m > left,
            "table_energy_j": energy_t, "measured_energy_j": energy_m,
            "measured_plan_energy_j": own_e, "measured_plan_time_s": own_t}


def _plan_rounds(doc: dict[str, Any]) -> list[Any]:
    from depl_fl.contract.plan import plan_from_dict

    return list(plan_from_dict(doc["plan"]).rounds) if doc.get("plan") else []


def summarize_run(path: Path) -> dict[str, Any]:
    """Per-run figures (see the module doc)."""
    doc = json.loads(path.read_text())
    train = [r for r in doc["rounds"] if r["phase"] == "train"]
    ratios = [r["wall_s"] / r["round_time_s"] for r in train if r["round_time_s"] > 0]
    errors = [abs(x - 1.0) for x in ratios]
    summary = doc["summary"]
    out = {"run": str(path.parent.name), "status": summary["status"], "seed": doc["seed"],
           "cost": (doc.get("cost") or {}).get("used"), "train_rounds": len(train),
           "profile_rounds": summary.get("profile_rounds"), "profile_wall_s": doc["profile"].get("wall_s"),
           "rounds": [{"round": r["round"], "plan_s": r["round_time_s"], "wall_s": r["wall_s"],
                       "replanned": r.get("replanned", False)} for r in train],
           "median_abs_error": statistics.median(errors) if errors else None,
           "deadline_s": summary["deadline_s"],
           "wall_clock_used_s": (doc["profile"].get("wall_s") or 0.0) + (summary.get("elapsed_s") or 0.0),
           "met": summary["met"], "measured": summary.get("measured"),
           "fit_error": (doc.get("cost") or {}).get("median_relative_error"),
           "replans": [p["reason"] for p in doc.get("replans") or []]}
    out["deadline_met"] = out["wall_clock_used_s"] <= out["deadline_s"]
    try:
        out["table_plan"] = counterfactual(doc) if doc.get("scenario") else None
    except Exception as exc:  # a counterfactual that cannot be planned is reported, not fatal
        out["table_plan"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def report(args: argparse.Namespace) -> int:
    runs = [summarize_run(Path(p)) for p in args.results]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "devices.json").write_text(json.dumps(runs, indent=2) + "\n")
    lines = ["# Planning on measured device costs (loopback, emulated heterogeneous devices)", "",
             f"Devices: 3 SuperNodes ({CLUSTERS}), CPU quota {QUOTA} (cgroup v1), links shaped to the "
             "table's bytes_per_s (tc), node config " + NODE_EXTRA.replace('"', "") + "; the table "
             "(conf/clusters/two_class.yaml) declares B 4x slower than A, the devices are 2x apart. "
             "Machine: 2 cores shared with other jobs (load average 10-15): timings are noisy.", "",
             f"Regenerate: `python benchmarks/device_costs_bench.py report {' '.join(args.results)} "
             f"--out {args.out}`", "",
             "| run | status | cost | explore rounds (wall s) | train rounds | median abs(wall/plan - 1) "
             "| wall-clock used / deadline (s) | met | energy measured / modelled (J, source) | re-plans "
             "| table plan under measured costs |", "|" + "---|" * 11]
    for r in runs:
        m = r["measured"] or {}
        tp = r["table_plan"] or {}
        verdict = "MISS" if tp.get("misses_deadline") else "ok"
        table = ("infeasible" if tp.get("feasible") is False else tp.get("error") or
                 f"{tp.get('rounds')} rounds, {tp.get('measured_time_s', 0):.1f} s of "
                 f"{tp.get('deadline_left_s', 0):.1f} s left ({verdict}), "
                 f"{tp.get('measured_energy_j', 0):.1f} J vs {tp.get('measured_plan_energy_j', 0):.1f} J")
        err = r["median_abs_error"]
        lines.append(
            f"| {r['run']} | {r['status']} | {r['cost']} "
            f"| {r['profile_rounds']} ({r['profile_wall_s'] or 0:.0f}) "
            f"| {r['train_rounds']} | {'n/a' if err is None else f'{err:.2f}'} "
            f"| {r['wall_clock_used_s']:.0f} / {r['deadline_s']:.0f} | {r['met']} "
            f"| {m.get('measured_energy_j') or 0:.1f} / {m.get('modelled_energy_j') or 0:.1f} "
            f"({m.get('energy_source')}) | {len(r['replans'])} | {table} |")
    lines += ["", "Per training round (plan s -> wall s):", ""]
    for r in runs:
        lines.append(f"- {r['run']}: " + ", ".join(f"{x['round']}: {x['plan_s']:.2f} -> {x['wall_s']:.2f}"
                                                     + (" (re-planned)" if x["replanned"] else "")
                                                     for x in r["rounds"]))
    (out / "devices.md").write_text("\n".join(lines) + "\n")
    print(out / "devices.md")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("--seeds", type=int, nargs="+", default=[0])
    p_run.add_argument("--cost", choices=("measured", "table"), default="measured")
    p_run.add_argument("--out", default=str(ROOT / "benchmarks/results/devices/runs"))
    p_run.add_argument("--timeout", type=int, default=1800)
    p_run.add_argument("overrides", nargs="*")
    p_rep = sub.add_parser("report")
    p_rep.add_argument("results", nargs="+")
    p_rep.add_argument("--out", default=str(ROOT / "benchmarks/results/devices"))
    args = parser.parse_args(argv)
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
