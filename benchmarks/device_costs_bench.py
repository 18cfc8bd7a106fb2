"""Planning on what the devices measure: loopback deployments of heterogeneous emulated devices.

``run``: loopback deployments (``scripts/deploy_loopback.sh --netem``) whose SuperNodes have
real, different speeds (a cgroup v1 CPU quota per cluster, ``--cpu-quota``) and links (``tc``
rate limits per network namespace), while ``conf/clusters/two_class.yaml`` declares B 4x slower
than A (the devices by default: 8x, so the table is wrong by 2x for B). Each seed runs with
``cost.source=measured`` (or ``table``) and the wall-clock deadline, one deployment at a time
(a wall-clock experiment: no ``nice``); ``meta.json`` beside each ``results.json`` keeps the
command and the load average around the run.

``report``: from the runs' ``results.json``: per training round the plan's round time against the
measured one (after the exploration), whether the deadline held in wall-clock time, the
measured and modelled energy, and what a plan made on the declared table would have done on the
same federation under the costs the exploration measured (its predicted time against the
deadline left, and its energy): a counterfactual from the fitted model, not a run. Over the
seeds: the pooled median round-time error, the deadline successes with their Wilson interval.

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
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "deploy_loopback.sh"
CLUSTERS = "A,B,B"
#: Real speeds: B's quota is an eighth of A's while the table declares B 4x slower (wrong by 2x for B).
QUOTA = "A=100,B=12"
#: Both levels train on one thread (a quota of at most one CPU gains nothing from a second thread:
#: two threads under a one-CPU quota measured 15-25x slower); level 1 declares twice the power.
NODE_EXTRA = 'level-threads="1,1" level-watts="3,6"'
#: profile=thorough: the exploration the committed figures were measured with
#: (the default explores frugally with tracking).
JOB = {"profile": "thorough", "profile.explore.rounds": "4", "profile.explore.max_rounds": "4",
       "target.loss": "0.25", "target.prob": "0.9", "target.deadline_s": "600", "output.plot": "false",
       "server.round_timeout_slack_s": "300"}


def merged_overrides(base: dict[str, str], extra: list[str]) -> list[str]:
    """``key=value`` overrides of ``base`` with ``extra`` on top (a later key wins)."""
    out = dict(base)
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"device_costs_bench: override {item!r} is not KEY=VALUE")
        out[key] = value
    return [f"{k}={v}" for k, v in out.items()]


def run(args: argparse.Namespace) -> int:
    """One loopback deployment per seed into ``out/<cost>-seed<k>``, one after the other.

    Beside each ``results.json`` a ``meta.json`` keeps the command, the load
    average before and after, the script's own wall time and exit status.
    """
    out_root = Path(args.out)
    failed = 0
    for seed in args.seeds:
        out = out_root / f"{args.cost}-seed{seed}"
        cache = out_root / "cache" / f"{args.cost}-seed{seed}"
        cmd = ["bash", str(SCRIPT), "-n", "3", "-c", args.clusters, "--netem", "--cpu-quota", args.quota,
               "--node-extra", args.node_extra, "-o", str(out), "-t", str(args.timeout),
               *merged_overrides({**JOB, "cost.source": args.cost, "seed": str(seed)}, args.overrides)]
        env = {**os.environ, "FLWR_BIN": str(Path(sys.executable).parent), "DEPL_CACHE_DIR": str(cache),
               "DEPL_START_WAIT_S": os.environ.get("DEPL_START_WAIT_S", "120")}
        print("+", " ".join(cmd), flush=True)
        load_before, t0 = os.getloadavg(), time.monotonic()
        done = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        meta = {"command": cmd, "returncode": done.returncode, "script_wall_s": time.monotonic() - t0,
                "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg()),
                "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - (
                    time.monotonic() - t0)))}
        out.mkdir(parents=True, exist_ok=True)
        (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        failed += done.returncode != 0
    return 1 if failed else 0


def _scenarios(doc: dict[str, Any]) -> tuple[Any, Any]:
    """``(fitted, table)``: the run's planning scenario and the same with the declared table's costs."""
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


def _plan(doc: dict[str, Any], scenario: Any, deadline_s: float) -> Any:
    """The run's planner on ``scenario`` with ``deadline_s`` left (no plan start: the scenario's loss)."""
    from depl_fl.contract.plan import Targets
    from depl_fl.planner import make_plan

    cfg = doc["config"]
    targets = Targets(float(cfg["target"]["loss"]), float(cfg["target"]["prob"]), deadline_s,
                      cfg["target"].get("max_rounds"))
    return make_plan(scenario, targets, method=str(cfg["method"]), eta=float(cfg["planner"]["eta"]),
                     guarantee=str(cfg["planner"]["guarantee"]), seed=int(cfg["seed"]),
                     mc_trajectories=int(cfg["planner"]["mc_trajectories"]))


def counterfactual(doc: dict[str, Any]) -> dict[str, Any]:
    """The declared table's plan judged by the fitted (measured) costs, and whether the deadline binds.

    ``deadline_left_s`` is what the exploration left of the wall-clock deadline.
    ``replanned_rounds`` re-plans the fitted scenario here (no plan start): it
    should give the run's own plan (``own_rounds``), the check that the
    counterfactual plans as the run did. ``binding``: the fitted plan with
    this deadline costs more energy (or is infeasible) than with 20x the time.
    """
    from depl_fl.contract.plan import MAX_DEADLINE_S
    from depl_fl.contract.semantics import plan_totals

    fitted, table = _scenarios(doc)
    left = float(doc["config"]["target"]["deadline_s"]) - float(doc["profile"]["wall_s"])
    own = _plan_rounds(doc)
    own_e, own_t = plan_totals(fitted, own)
    out: dict[str, Any] = {"deadline_left_s": left, "own_rounds": len(own), "measured_plan_energy_j": own_e,
                           "measured_plan_time_s": own_t}
    if left <= 0:
        return {**out, "feasible": False}
    again = _plan(doc, fitted, left)
    loose = _plan(doc, fitted, min(20.0 * left, MAX_DEADLINE_S))
    tight_e = plan_totals(fitted, again.rounds)[0] if again.feasible else float("inf")
    loose_e = plan_totals(fitted, loose.rounds)[0] if loose.feasible else float("inf")
    out.update(replanned_rounds=len(again.rounds) if again.feasible else None,
               loose_energy_j=loose_e, binding=bool(tight_e > loose_e * (1 + 1e-9)))
    plan = _plan(doc, table, left)
    if not plan.feasible:
        return {**out, "feasible": False}
    energy_t, time_t = plan_totals(table, plan.rounds)
    energy_m, time_m = plan_totals(fitted, plan.rounds)
    return {**out, "feasible": True, "rounds": len(plan.rounds), "table_time_s": time_t,
            "measured_time_s": time_m, "misses_deadline": time_m > left, "table_energy_j": energy_t,
            "measured_energy_j": energy_m}


def tighter_deadlines(doc: dict[str, Any], lefts: list[float]) -> list[dict[str, Any]]:
    """Both plans at other deadlines left after the exploration, judged by the fitted costs.

    Per deadline left: the fitted plan (feasible, its time and energy) and the
    declared table's (its own predicted time, its time under the fitted costs,
    whether that misses the deadline, its energy). Planning only, no run.
    """
    from depl_fl.contract.semantics import plan_totals

    fitted, table = _scenarios(doc)
    out = []
    for left in lefts:
        row: dict[str, Any] = {"deadline_left_s": left}
        own = _plan(doc, fitted, left)
        if own.feasible:
            row["measured_plan_energy_j"], row["measured_plan_time_s"] = plan_totals(fitted, own.rounds)
        row["measured_plan_feasible"] = bool(own.feasible)
        plan = _plan(doc, table, left)
        row["table_plan_feasible"] = bool(plan.feasible)
        if plan.feasible:
            row["table_energy_j"], time_m = plan_totals(fitted, plan.rounds)
            row.update(table_time_s=plan_totals(table, plan.rounds)[1], measured_time_s=time_m,
                       misses_deadline=time_m > left)
        out.append(row)
    return out


def _plan_rounds(doc: dict[str, Any]) -> list[Any]:
    from depl_fl.contract.plan import plan_from_dict

    return list(plan_from_dict(doc["plan"]).rounds) if doc.get("plan") else []


def _meta(path: Path) -> dict[str, Any]:
    meta = path.parent / "meta.json"
    return json.loads(meta.read_text()) if meta.exists() else {}


def _devices(meta: dict[str, Any]) -> str | None:
    """``-c``, ``--cpu-quota`` and ``--node-extra`` of the run's command (None: no meta.json)."""
    cmd = meta.get("command") or []
    flags = {"-c": "clusters", "--cpu-quota": "quota", "--node-extra": "node"}
    parts = [f"{flags[f]} {cmd[i + 1]}" for i, f in enumerate(cmd[:-1]) if f in flags]
    return "; ".join(parts) or None


def summarize_run(path: Path, lefts: list[float] | None = None) -> dict[str, Any]:
    """Per-run figures (see the module doc); ``lefts``: deadlines left for :func:`tighter_deadlines`."""
    doc = json.loads(path.read_text())
    train = [r for r in doc["rounds"] if r["phase"] == "train"]
    errors = [abs(r["wall_s"] / r["round_time_s"] - 1.0) for r in train if r["round_time_s"] > 0]
    summary, meta = doc["summary"], _meta(path)
    out = {"run": str(path.parent.name), "status": summary["status"], "seed": doc["seed"],
           "cost": (doc.get("cost") or {}).get("source"), "cost_used": (doc.get("cost") or {}).get("used"),
           "train_rounds": len(train),
           "profile_rounds": summary.get("profile_rounds"), "profile_wall_s": doc["profile"].get("wall_s"),
           "rounds": [{"round": r["round"], "plan_s": r["round_time_s"], "wall_s": r["wall_s"],
                       "clients": r.get("clients"), "model": r.get("model"), "levels": r.get("levels"),
                       "train_time_s": r.get("train_time_s"), "replanned": r.get("replanned", False)}
                      for r in train],
           "errors": errors, "median_abs_error": statistics.median(errors) if errors else None,
           "deadline_s": summary["deadline_s"],
           "wall_clock_used_s": (doc["profile"].get("wall_s") or 0.0) + (summary.get("elapsed_s") or 0.0),
           "met": summary["met"], "measured": summary.get("measured"),
           "train_measured_energy_j": sum(r.get("measured_energy_j") or 0.0 for r in train),
           "fit_overhead_s": ((doc.get("cost") or {}).get("fit") or {}).get("overhead_s"),
           "replans": [p["reason"] for p in doc.get("replans") or []],
           "loadavg_before": meta.get("loadavg_before"), "loadavg_after": meta.get("loadavg_after"),
           "script_wall_s": meta.get("script_wall_s"), "devices": _devices(meta)}
    out["deadline_met"] = bool(out["met"] and out["wall_clock_used_s"] <= out["deadline_s"])
    try:
        usable = out["cost_used"] == "measured" and doc.get("scenario")
        out["table_plan"] = counterfactual(doc) if usable else None
        out["tighter"] = tighter_deadlines(doc, lefts) if usable and lefts else []
    except Exception as exc:  # a counterfactual that cannot be planned is reported, not fatal
        out["table_plan"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def failed_run(meta_path: Path) -> dict[str, Any]:
    """A run that wrote no completed results.json (counts as a deadline miss)."""
    meta = json.loads(meta_path.read_text())
    return {"run": meta_path.parent.name, "status": "failed", "returncode": meta.get("returncode"),
            "loadavg_before": meta.get("loadavg_before"), "script_wall_s": meta.get("script_wall_s"),
            "deadline_met": False, "errors": [], "cost": meta_path.parent.name.split("-seed")[0],
            "devices": _devices(meta)}


def aggregate(runs: list[dict[str, Any]], cost: str, prob: float) -> dict[str, Any]:
    """Pooled round-time error, deadline successes with their Wilson interval, counterfactual totals."""
    from depl_fl.runs.report import wilson_interval

    mine = [r for r in runs if r["cost"] == cost]
    if not mine:
        return {"runs": 0}
    errors = [e for r in mine for e in r["errors"]]
    met = sum(r["deadline_met"] for r in mine)
    low, high = wilson_interval(met, len(mine))
    out = {"runs": len(mine), "train_rounds": len(errors),
           "median_abs_error": statistics.median(errors) if errors else None,
           "rounds_within_20pct": sum(e <= 0.2 for e in errors),
           "deadline_met": met, "wilson95": [low, high], "target_prob": prob,
           "meets_prob": met / len(mine) >= prob,
           "train_measured_energy_j": sum(r.get("train_measured_energy_j") or 0.0 for r in mine)}
    plans = [r["table_plan"] for r in mine if r.get("table_plan") and "error" not in r["table_plan"]]
    if plans:
        out["table_plan"] = {"evaluated": len(plans),
                             "infeasible": sum(not p["feasible"] for p in plans),
                             "misses_deadline": sum(bool(p.get("misses_deadline")) for p in plans),
                             "energy_j": sum(p.get("measured_energy_j", 0.0) for p in plans if p["feasible"]),
                             "own_energy_j": sum(p["measured_plan_energy_j"] for p in plans if p["feasible"]),
                             "binding": sum(bool(p.get("binding")) for p in plans),
                             "replans_match": sum(p.get("replanned_rounds") == p["own_rounds"]
                                                  for p in plans)}
    return out


def _fmt(x: Any, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def _load(r: dict[str, Any]) -> str:
    before, after = r.get("loadavg_before"), r.get("loadavg_after")
    return f"{before[0]:.1f}->{after[0]:.1f}" if before and after else "n/a"


def _table_cell(tp: dict[str, Any] | None) -> str:
    if not tp:
        return "-"
    if "error" in tp:
        return tp["error"]
    if not tp.get("feasible"):
        return "infeasible"
    verdict = "MISS" if tp.get("misses_deadline") else "ok"
    return (f"{tp['rounds']} rounds, {tp['measured_time_s']:.0f} s (table: {tp['table_time_s']:.0f} s) of "
            f"{tp['deadline_left_s']:.0f} s left "
            f"({verdict}), {tp['measured_energy_j']:.0f} J vs {tp['measured_plan_energy_j']:.0f} J"
            + (", binding" if tp.get("binding") else ""))


def run_row(r: dict[str, Any]) -> str:
    """One markdown row of the runs table."""
    if r["status"] != "completed":
        return f"| {r['run']} | {r['status']} | | | | | NO | | | {_load(r)} | |"
    m = r["measured"] or {}
    return (f"| {r['run']} | {r['profile_rounds']} ({r['profile_wall_s'] or 0:.0f}) | {r['train_rounds']} "
            f"| {_fmt(r['median_abs_error'])} | {r['wall_clock_used_s']:.0f} / {r['deadline_s']:.0f} "
            f"| {r['met']} | {'yes' if r['deadline_met'] else 'NO'} "
            f"| {m.get('measured_energy_j') or 0:.0f} / {r['train_measured_energy_j']:.0f} "
            f"| {len(r['replans'])} | {_load(r)} | {_table_cell(r.get('table_plan'))} |")


def _aggregate_lines(name: str, agg: dict[str, Any]) -> list[str]:
    if not agg.get("runs"):
        return [f"- {name}: no runs"]
    low, high = agg["wilson95"]
    lines = [f"- {name}: {agg['runs']} runs, {agg['train_rounds']} training rounds; median |wall/plan - 1| "
             f"{_fmt(agg['median_abs_error'])} ({agg['rounds_within_20pct']} of {agg['train_rounds']} rounds "
             f"within 20%); target met within the deadline in {agg['deadline_met']} of {agg['runs']} "
             f"(Wilson 95% {low:.2f}-{high:.2f}; pi = {agg['target_prob']})"]
    tp = agg.get("table_plan")
    if tp:
        lines.append(f"  - declared-table plan under the measured costs ({tp['evaluated']} runs): "
                     f"{tp['infeasible']} infeasible, {tp['misses_deadline']} miss the deadline left; "
                     f"energy {tp['energy_j']:.0f} J against the measured plans' {tp['own_energy_j']:.0f} J; "
                     f"deadline binding in {tp['binding']}; re-planning here reproduced the run's "
                     f"plan length in {tp['replans_match']}")
    return lines


def _tighter_lines(runs: list[dict[str, Any]]) -> list[str]:
    rows = [(r["run"], t) for r in runs for t in r.get("tighter") or []]
    if not rows:
        return []
    lines = ["", "Tighter deadlines (planning only, judged by each run's fitted costs; s left after the "
             "exploration): fitted plan | declared-table plan", "",
             "| run | s left | fitted plan: time, energy | table plan: table says, fitted says, energy |",
             "|---|---|---|---|"]
    for name, t in rows:
        own = (f"{t['measured_plan_time_s']:.0f} s, {t['measured_plan_energy_j']:.0f} J"
               if t["measured_plan_feasible"] else "refused (no dependable plan)")
        table = (f"{t['table_time_s']:.0f} s, {t['measured_time_s']:.0f} s"
                 f"{' MISS' if t['misses_deadline'] else ''}, {t['table_energy_j']:.0f} J"
                 if t["table_plan_feasible"] else "refused")
        lines.append(f"| {name} | {t['deadline_left_s']:.0f} | {own} | {table} |")
    return lines


def report(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.results]
    # A run folder with a meta.json and no results.json given here: its run failed (a miss).
    metas = {m.parent for root in {p.parent.parent for p in paths} for m in root.glob("*/meta.json")}
    runs = [summarize_run(p, args.deadlines_left) for p in paths]
    runs += [failed_run(d / "meta.json") for d in sorted(metas - {p.parent for p in paths})]
    aggs = {cost: aggregate(runs, cost, args.prob) for cost in ("measured", "table")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tighter = (" --deadlines-left " + " ".join(f"{d:g}" for d in args.deadlines_left)
               if args.deadlines_left else "")
    command = (f"python benchmarks/device_costs_bench.py report {' '.join(args.results)}{tighter} "
               f"--out {args.out}")
    (out / "devices.json").write_text(json.dumps({"command": command, "aggregate": aggs, "runs": runs},
                                                 indent=2) + "\n")
    lines = ["# Planning on measured device costs (loopback, emulated heterogeneous devices)", "",
             f"Regenerate: `{command}`", "",
             "Devices (SuperNodes' clusters, CPU quota in % of one CPU, node config): "
             + (" | ".join(sorted({r["devices"] for r in runs if r.get("devices")})) or "not recorded"), "",
             "Aggregate:", ""]
    for cost, agg in aggs.items():
        lines += _aggregate_lines(f"cost.source={cost}", agg)
    lines += ["", "| run | explore rounds (wall s) | train rounds | median abs(wall/plan - 1) "
              "| wall-clock used / deadline (s) | met | deadline held | energy measured: all / training (J) "
              "| re-plans | load avg before->after | declared-table plan under measured costs |",
              "|" + "---|" * 11]
    lines += [run_row(r) for r in runs]
    lines += _tighter_lines(runs)
    lines += ["", "Per training round (plan s -> wall s):", ""]
    for r in runs:
        lines.append(f"- {r['run']}: " + ", ".join(f"{x['round']}: {x['plan_s']:.2f} -> {x['wall_s']:.2f}"
                                                     + (" (re-planned)" if x["replanned"] else "")
                                                     for x in r.get("rounds", [])))
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
    p_run.add_argument("--clusters", default=CLUSTERS, help="cluster of each SuperNode")
    p_run.add_argument("--quota", default=QUOTA, help="CPU quota per cluster, %% of one CPU")
    p_run.add_argument("--node-extra", default=NODE_EXTRA, help="node config of every SuperNode")
    p_run.add_argument("overrides", nargs="*")
    p_rep = sub.add_parser("report")
    p_rep.add_argument("results", nargs="+")
    p_rep.add_argument("--out", default=str(ROOT / "benchmarks/results/devices"))
    p_rep.add_argument("--prob", type=float, default=0.9, help="pi the deadline successes are held to")
    p_rep.add_argument("--deadlines-left", type=float, nargs="*", default=[],
                       help="also plan both ways at these deadlines left after the exploration (s)")
    args = parser.parse_args(argv)
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
