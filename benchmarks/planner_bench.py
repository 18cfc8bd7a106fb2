"""Planner benchmark: cost/time/probability of the methods and planner scalability.

Run ``python benchmarks/planner_bench.py`` (add ``--quick`` for a short run,
``--only deadline`` for one section).
Writes ``benchmarks/results/planner_bench.md`` (tables) and
``benchmarks/results/planner_bench.png`` (scalability plot).

(a) Paper-like scenario (:func:`scenarios.paper_like`): DepL, expectation,
    full and a *restricted* optimum at pi = 0.8, 0.9, 0.95. The optimum is
    the exhaustive branch-and-bound of :mod:`depl_fl.planner.optimum`, but
    over 5 client sets only (DepL's, all clients, each cluster alone) instead
    of all 2^30 subsets.
(c) Hard random scenarios (:func:`scenarios.random_hard`), the tuning and the
    held-out seed sets: DepL against the exhaustive optimum (cost ratio),
    an independent 20,000-trajectory Monte Carlo of DepL's plan, planning
    time (wall and CPU), switches and the automatic eta.
(d) Binding deadlines (:func:`scenarios.random_deadline`): three clusters
    with activation costs, four variants, deadlines that force fast levels
    or fewer clients; the same columns as (c), tuning and held-out seeds.
(b) Scalability: planner wall time and peak resident memory
    (``VmHWM`` of a fresh process per point, so it includes the
    interpreter and numpy, ~65 MB) as clients, rounds, models and 1/eta grow.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from scenarios import (  # noqa: E402
    DEADLINE_HELDOUT_SEEDS,
    DEADLINE_TUNING_SEEDS,
    HARD_HELDOUT_SEEDS,
    HARD_TUNING_SEEDS,
    paper_like,
    random_deadline,
    random_hard,
    scaled,
)

from depl_fl.contract.semantics import evaluate_plan  # noqa: E402
from depl_fl.planner import make_plan  # noqa: E402
from depl_fl.planner.context import PlanContext  # noqa: E402
from depl_fl.planner.optimum import plan_optimum  # noqa: E402

RESULTS = HERE / "results"


def one_point(spec: dict) -> dict:
    """Plan one scaled scenario in this process; wall time and peak RSS."""
    import resource
    scen, targets = scaled(spec["clients"], spec["models"], spec["rounds"])
    started, cpu = time.perf_counter(), time.process_time()
    plan = make_plan(scen, targets, eta=spec.get("eta"))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak_kib = _peak_rss_kib() or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {**spec, "seconds": seconds, "cpu_s": cpu, "peak_mib": peak_kib / 1024.0,
            "feasible": plan.feasible,
            "planned_rounds": len(plan.rounds), "probability": plan.predicted["probability"]}


def _peak_rss_kib() -> float | None:
    """This process's peak RSS (``VmHWM``), or None off Linux.

    ``ru_maxrss`` is not used where avoidable: Linux carries it over from the
    parent across fork + exec, so a child would report the parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def run_point(spec: dict, timeout: float) -> dict:
    """Run :func:`one_point` in a fresh interpreter (clean memory peak)."""
    try:
        proc = subprocess.run([sys.executable, __file__, "--point", json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**spec, "seconds": float("nan"), "peak_mib": float("nan"),
                "feasible": None, "note": f"timeout {timeout:.0f} s"}
    if proc.returncode != 0:
        return {**spec, "seconds": float("nan"), "peak_mib": float("nan"), "feasible": None,
                "note": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def paper_table(quick: bool) -> tuple[list[dict], list[str]]:
    rows, lines = [], []
    for pi in ((0.95,) if quick else (0.8, 0.9, 0.95)):
        scen, targets = paper_like(pi)
        plans = {}
        cpu = {}
        for method in ("depl", "expectation", "full"):
            c0 = time.process_time()
            plans[method] = make_plan(scen, targets, method=method)
            cpu[method] = time.process_time() - c0
        if not quick:
            started = time.perf_counter()
            ctx = PlanContext.build(scen, targets, None, plans["depl"].extra["eta"])
            depl_set = tuple(plans["depl"].rounds[0].clients)
            sets = [depl_set, tuple(c.id for c in scen.clients)]
            sets += [tuple(c.id for c in scen.clients if c.cluster == cl.id) for cl in scen.clusters]
            plans["optimum (5 sets)"] = plan_optimum(ctx, 0, 20000, started, client_sets=sets)
        for method, plan in plans.items():
            ev = evaluate_plan(scen, plan.rounds, targets, n=20000, seed=2024)
            rows.append({"pi": pi, "method": method, "feasible": plan.feasible,
                         "rounds": len(plan.rounds), "cost_j": ev["cost_joules"],
                         "time_s": ev["time_s"], "probability": ev["probability"],
                         "planner_s": plan.planner_seconds, "cpu_s": cpu.get(method, float("nan")),
                         "switches": _switches(plan), "eta": plan.extra.get("eta"),
                         "models": sorted({r.model for r in plan.rounds}),
                         "clients": len(plan.rounds[0].clients) if plan.rounds else 0})
    lines.append("| pi | method | feasible | rounds | clients | cost (kJ) | time (h) | "
                 "P[L<=L*] (indep. MC) | planner wall (s) | planner CPU (s) | switches | models used |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lines.append(f"| {r['pi']} | {r['method']} | {r['feasible']} | {r['rounds']} | {r['clients']} | "
                     f"{r['cost_j'] / 1e3:.1f} | {r['time_s'] / 3600:.2f} | {r['probability']:.4f} | "
                     f"{r['planner_s']:.2f} | {r['cpu_s']:.2f} | {r['switches']} | "
                     f"{', '.join(r['models'])} |")
    return rows, lines


def _switches(plan) -> int:
    models = [r.model for r in plan.rounds]
    return sum(1 for a, b in zip(models, models[1:], strict=False) if a != b)


def _cost_ratio(depl, opt) -> float:
    """DepL's cost over the optimum's; 1 when both plans are empty (the target holds at round 0)."""
    if not (depl.feasible and opt.feasible):
        return float("nan")
    if opt.predicted["cost_joules"] == 0:
        return 1.0 if depl.predicted["cost_joules"] == 0 else float("inf")
    return depl.predicted["cost_joules"] / opt.predicted["cost_joules"]


def hard_rows(seeds, generator=random_hard) -> list[dict]:
    """DepL vs the exhaustive optimum on ``generator``'s scenarios (:func:`random_hard` by default)."""
    rows = []
    for seed in seeds:
        scen, targets = generator(seed)
        wall, cpu = time.perf_counter(), time.process_time()
        depl = make_plan(scen, targets, seed=seed)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        opt = make_plan(scen, targets, method="optimum", seed=seed)
        ev = evaluate_plan(scen, depl.rounds, targets, n=20000, seed=424242)
        ratio = _cost_ratio(depl, opt)
        rows.append({"seed": seed, "pi": targets.target_prob, "feasible": depl.feasible,
                     "opt_feasible": opt.feasible, "ratio": ratio, "p_indep": ev["probability"],
                     "wall_s": wall, "cpu_s": cpu, "switches": _switches(depl),
                     "opt_switches": _switches(opt), "eta": depl.extra["eta"]})
        print(f"  seed {seed}: ratio {ratio:.3f} P {ev['probability']:.4f} {wall:.2f} s", flush=True)
    return rows


def hard_table(generator=random_hard, seed_sets=None, record: list | None = None) -> list[str]:
    """Markdown tables of :func:`hard_rows` per seed set; ``record`` (if given) receives the rows."""
    lines = []
    for name, seeds in seed_sets or (("tuning", HARD_TUNING_SEEDS), ("held-out", HARD_HELDOUT_SEEDS)):
        rows = hard_rows(seeds, generator)
        if record is not None:
            record.extend({**r, "set": name} for r in rows)
        lines += hard_lines(name, seeds, rows)
    return lines


def hard_lines(name: str, seeds, rows: list[dict]) -> list[str]:
    """The markdown table and summary line of one seed set's :func:`hard_rows`."""
    lines = [f"### {name} seeds {seeds[0]}-{seeds[-1]}", "",
             "| seed | pi | feasible (depl/opt) | depl/optimum cost | P[L<=L*] (indep. MC) | "
             "planner wall (s) | planner CPU (s) | switches (depl/opt) | eta |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['pi']} | {r['feasible']}/{r['opt_feasible']} | "
                     f"{r['ratio']:.3f} | {r['p_indep']:.4f} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
                     f"{r['switches']}/{r['opt_switches']} | {r['eta']:.3f} |")
    ratios = [r["ratio"] for r in rows if r["feasible"] and r["opt_feasible"]]
    dep = sum(1 for r in rows if r["feasible"] and r["p_indep"] >= r["pi"] - 0.005)
    worst = max(ratios, default=float("nan"))
    lines += ["", f"- {name}: {len(ratios)} feasible of {len(rows)}; depl/optimum mean "
                  f"{sum(ratios) / max(len(ratios), 1):.4f}, worst {worst:.4f}; "
                  f"dependable (indep. MC >= pi - 0.005) {dep}/{sum(1 for r in rows if r['feasible'])}; "
                  f"planner wall max {max(r['wall_s'] for r in rows):.2f} s, CPU max "
                  f"{max(r['cpu_s'] for r in rows):.2f} s; max switches "
                  f"{max(r['switches'] for r in rows)}", ""]
    return lines


def summary(rows: list[dict]) -> list[str]:
    out = []
    for pi in sorted({r["pi"] for r in rows}):
        by = {r["method"]: r for r in rows if r["pi"] == pi}
        d = by["depl"]
        text = f"- pi={pi}: depl dependable={d['probability'] >= pi - 0.005}"
        if by["full"]["feasible"]:
            text += f", {100 * (1 - d['cost_j'] / by['full']['cost_j']):.1f}% cheaper than full"
        if "optimum (5 sets)" in by:
            text += f", depl/optimum cost = {d['cost_j'] / by['optimum (5 sets)']['cost_j']:.3f}"
        text += f", expectation P={by['expectation']['probability']:.3f}"
        text += f", depl planned in {d['planner_s']:.2f} s"
        out.append(text)
    return out


def scalability(quick: bool) -> list[dict]:
    base = {"clients": 100, "models": 4, "rounds": 200, "eta": 0.05}
    axes = {
        "clients": [10, 100, 1000] if quick else [10, 100, 1000, 10000],
        "rounds": [50, 200] if quick else [50, 100, 200, 500],
        "models": [2, 4] if quick else [2, 4, 6],
        "eta": [0.2, 0.05] if quick else [0.2, 0.05, 0.02, 0.0125],
    }
    points = []
    for axis, values in axes.items():
        for v in values:
            spec = dict(base, **{axis: v}, axis=axis)
            if axis == "clients" and v == 1000:
                spec["rounds"] = 200
            points.append(run_point(spec, timeout=300 if quick else 600))
            print(f"  {axis}={v}: {points[-1].get('seconds', float('nan')):.2f} s, "
                  f"{points[-1].get('peak_mib', float('nan')):.0f} MiB {points[-1].get('note', '')}",
                  flush=True)
    return points


def plot(points: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 4, figsize=(14, 6))
    for col, axis in enumerate(("clients", "rounds", "models", "eta")):
        pts = [p for p in points if p["axis"] == axis]
        xs = [1.0 / p["eta"] if axis == "eta" else p[axis] for p in pts]
        axes[0, col].plot(xs, [p["seconds"] for p in pts], "o-")
        axes[1, col].plot(xs, [p["peak_mib"] for p in pts], "s-", color="tab:red")
        for row in (0, 1):
            axes[row, col].set_xlabel("1/eta" if axis == "eta" else axis)
            if axis in ("clients", "eta"):
                axes[row, col].set_xscale("log")
        axes[0, col].set_ylabel("planner wall time (s)")
        axes[1, col].set_ylabel("peak RSS (MiB)")
    fig.suptitle("DepL planner scalability (base: 100 clients, 4 models, 200 rounds, eta=0.05)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer points, no optimum")
    parser.add_argument("--point", help=argparse.SUPPRESS)
    parser.add_argument("--only", default="paper,hard,deadline,scale",
                        help="comma-separated sections to run: paper, hard, deadline, scale "
                             "(default all)")
    args = parser.parse_args(argv)
    if args.point:
        print(json.dumps(one_point(json.loads(args.point))))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    stem = "planner_bench_quick" if args.quick else "planner_bench"
    md = ["# Planner benchmark" + (" (--quick)" if args.quick else ""), ""]
    if "paper" in only:
        print("(a) paper-like scenario", flush=True)
        rows, lines = paper_table(args.quick)
        print("\n".join(lines + summary(rows)), flush=True)
        md += ["## (a) Paper-like scenario (30 clients, 3 clusters, AlexNet-/MobileNet-like x 4 "
               "compressions, L* = 1.0, deadline 12 h, <= 60 rounds)", ""] + lines + [""] + summary(rows)
    if "hard" in only:
        print("(c) hard random scenarios", flush=True)
        lines = hard_table()
        print("\n".join(lines), flush=True)
        md += ["", "## (c) Hard random scenarios (3-4 variants, cheap single client, switch costs): "
               "DepL vs exhaustive optimum", ""] + lines
    if "deadline" in only:
        print("(d) binding deadlines, activation costs, four variants", flush=True)
        load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
        rows: list[dict] = []
        lines = hard_table(random_deadline, (("tuning", DEADLINE_TUNING_SEEDS),
                                             ("held-out", DEADLINE_HELDOUT_SEEDS)), rows)
        load_end = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
        (RESULTS / f"{stem}_deadline.json").write_text(
            json.dumps({"load_start": load[0], "load_end": load_end[0], "cores": os.cpu_count(),
                        "rows": rows}, indent=1), encoding="utf-8")
        print("\n".join(lines), flush=True)
        md += ["", "## (d) Binding deadlines (three clusters with activation costs, full/p50/p75/p90, "
               "4-5 clients): DepL vs exhaustive optimum", "",
               "Regenerate: `python benchmarks/planner_bench.py --only deadline` (rows also in "
               f"`{stem}_deadline.json`).", "",
               f"Load average (1 min) {load[0]:.1f} at the start, {load_end[0]:.1f} at the end, on "
               f"{os.cpu_count()} cores: wall seconds include waiting for the CPU, CPU seconds do not.",
               ""] + lines
    if "scale" in only:
        print("(b) scalability", flush=True)
        points = scalability(args.quick)
        plot(points, RESULTS / f"{stem}.png")
        md += ["", "## (b) Scalability (fresh process per point; peak RSS includes interpreter + numpy)",
               "", "| axis | clients | models | rounds | 1/eta | planner (s) | peak RSS (MiB) | feasible "
               "| note |",
               "|---|---|---|---|---|---|---|---|---|"]
        for p in points:
            md.append(f"| {p['axis']} | {p['clients']} | {p['models']} | {p['rounds']} | "
                      f"{1 / p['eta']:.0f} | "
                      f"{p['seconds']:.2f} | {p['peak_mib']:.0f} | {p['feasible']} | {p.get('note', '')} |")
        md += ["", f"![scalability]({stem}.png)", ""]
    name = stem if only == {"paper", "hard", "deadline", "scale"} else f"{stem}_{'_'.join(sorted(only))}"
    (RESULTS / f"{name}.md").write_text("\n".join(md), encoding="utf-8")
    print(f"wrote {RESULTS / (name + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
