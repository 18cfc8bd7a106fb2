"""DepL's total energy split into exploration and training against full's, per setting, with its guarantee.

Reads ``SWEEP/<setting>/report.json`` (``depl-fl report`` of the setting's
``depl`` and ``full`` multiruns) and the jobs' ``results.json`` and writes
one row per setting: how DepL ran its plans (static or tracking), DepL's
mean exploration, training and total energy, full's training and total,
DepL's total over full's (mean, and the median job's; the goal: at most
0.15), the exploration's stops (rounds, met by the stop rule, value stop),
and per method the coverage P[L <= L*] with its 95% Wilson interval and the
calibration (empirical pi-quantile of the final test losses / L*) with its
95% bootstrap interval. Then the share of DepL's static runs above their own
plan's predicted pi-quantile, pooled over the static settings
(``benchmarks/plan_pit.py --pooled``). Reads results only.

    python benchmarks/exploration_energy.py SWEEP --out PREFIX
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The goal on DepL's total energy, as a share of full's.
ENERGY_GOAL = 0.15


def _jobs(folder: Path) -> list[dict[str, Any]]:
    paths = sorted(folder.rglob("results.json"))
    return [json.loads(p.read_text(encoding="utf-8"))["summary"] for p in paths]


def _group(report: dict[str, Any], *methods: str) -> dict[str, Any] | None:
    return next((g for g in report["groups"] if g["method"] in methods), None)


def setting_row(folder: Path) -> dict[str, Any]:
    """The figures of one setting folder (``depl/``, ``full/``, ``report.json``)."""
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    depl, full = _group(report, "depl", "depl+tracking"), _group(report, "full")
    jobs = _jobs(folder / "depl")
    config = {}
    first = next(iter(sorted((folder / "depl").rglob("results.json"))), None)
    if first is not None:
        cfg = json.loads(first.read_text(encoding="utf-8"))["config"]
        config = {"num_clients": cfg["num_clients"], "alpha": cfg["partition"]["alpha"],
                  "target_loss": cfg["target"]["loss"], "target_prob": cfg["target"]["prob"]}

    def cell(g: dict[str, Any] | None) -> dict[str, Any] | None:
        if g is None:
            return None
        return {k: g.get(k) for k in ("runs", "successes", "probability", "wilson_low", "wilson_high",
                                      "calibration", "calibration_low", "calibration_high", "energy_mean_j",
                                      "profile_energy_mean_j", "total_energy_mean_j", "no_final_loss")}

    row = {"setting": folder.name, **config, "plans": _plans(depl), "depl": cell(depl), "full": cell(full),
           "exploration_rounds_mean": float(np.mean([j["profile_rounds"] for j in jobs])) if jobs else None,
           "met_during_exploration": sum(j.get("profile_met_round") is not None for j in jobs),
           "value_stops": sum(j.get("profile_value_round") is not None for j in jobs), "jobs": len(jobs)}
    if depl and full and full["total_energy_mean_j"]:
        row["total_vs_full_total"] = depl["total_energy_mean_j"] / full["total_energy_mean_j"]
        row["total_vs_full_training"] = depl["total_energy_mean_j"] / full["energy_mean_j"]
        totals = [j["total_energy_j"] for j in jobs if j.get("total_energy_j") is not None]
        if totals:
            row["total_vs_full_total_median"] = float(np.median(totals)) / full["total_energy_mean_j"]
    return row


def _plans(depl: dict[str, Any] | None) -> str | None:
    """``static`` or ``tracking``: how DepL's jobs ran their plans (the report's method name says)."""
    if depl is None:
        return None
    return "tracking" if depl["method"].endswith("+tracking") else "static"


def _f(x: Any, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def guarantee_cell(c: dict[str, Any] | None) -> str:
    if c is None:
        return "- | -"
    return (f"{c['successes']}/{c['runs']} [{_f(c['wilson_low'], '.2f')}, {_f(c['wilson_high'], '.2f')}] | "
            f"{_f(c['calibration'], '.3f')} [{_f(c['calibration_low'], '.2f')}, "
            f"{_f(c['calibration_high'], '.2f')}]")


def markdown(rows: list[dict[str, Any]], pooled: str, command: str) -> str:
    lines = ["# DepL's total energy against full's, on settings nothing was tuned on", "",
             f"    {command}", "",
             "DepL at the row's pi, full (tracking off) at pi 0.9, `simulation=inprocess`, modelled joules "
             "(means per job; the median column: the "
             "median job's total over full's mean total). Plans: static (`tracking.enabled=false`) or "
             "tracking (re-planned, stops training once the target is met). Coverage: share of runs "
             "whose final test loss <= L*, 95% Wilson interval; calibration: empirical pi-quantile "
             "of the final test losses / L*, 95% bootstrap interval (< 1 over-cautious).", "",
             "| setting | plans | clients | alpha | L* | pi | DepL exploration J | DepL training J "
             "| DepL total J "
             "| full training J | full total J | DepL total / full total | median / full total "
             "| DepL total / full training | exploration rounds (mean) | met in exploration | value stops |",
             "|---" * 17 + "|"]
    for r in rows:
        d, f = r["depl"] or {}, r["full"] or {}
        lines.append(
            f"| {r['setting']} | {r.get('plans') or '-'} | {r.get('num_clients', '-')} | "
            f"{r.get('alpha', '-')} | "
            f"{r.get('target_loss', '-')} | {r.get('target_prob', '-')} | "
            f"{_f(d.get('profile_energy_mean_j'))} | "
            f"{_f(d.get('energy_mean_j'))} | {_f(d.get('total_energy_mean_j'))} | "
            f"{_f(f.get('energy_mean_j'))} | {_f(f.get('total_energy_mean_j'))} | "
            f"{_f(r.get('total_vs_full_total'), '.3f')} | {_f(r.get('total_vs_full_total_median'), '.3f')} | "
            f"{_f(r.get('total_vs_full_training'), '.3f')} | "
            f"{_f(r['exploration_rounds_mean'], '.2f')} | {r['met_during_exploration']}/{r['jobs']} | "
            f"{r['value_stops']}/{r['jobs']} |")
    lines += ["", "| setting | DepL coverage [Wilson] | DepL calibration [bootstrap] "
              "| full coverage [Wilson] | full calibration [bootstrap] |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {guarantee_cell(r['depl'])} | {guarantee_cell(r['full'])} |")
    goal = [r for r in rows if r.get("total_vs_full_total") is not None]
    met = sum(r["total_vs_full_total"] <= ENERGY_GOAL for r in goal)
    lines += ["", f"Energy goal (DepL's mean total <= {ENERGY_GOAL} x full's) met on {met} of {len(goal)} "
              "rows.", "",
              "## DepL's static runs against their own predicted 0.9-quantile, pooled", "", pooled]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="PREFIX of PREFIX.md and PREFIX.json")
    args = parser.parse_args(argv)
    folders = sorted(p.parent for p in args.sweep.glob("*/report.json"))
    if not folders:
        print(f"exploration_energy: no <setting>/report.json under {args.sweep}", file=sys.stderr)
        return 2
    rows = [setting_row(f) for f in folders]
    static = [f for f, r in zip(folders, rows, strict=True) if r.get("plans") == "static"]
    pooled = "(no static arm in this sweep)"
    if static:
        pit = subprocess.run([sys.executable, str(Path(__file__).with_name("plan_pit.py")), "--pooled",
                              *[str(f / "depl") for f in static]],
                             capture_output=True, text=True, check=False)
        pooled = pit.stdout if pit.returncode == 0 else f"(plan_pit.py failed: {pit.stderr.strip()[-300:]})"
    command = f"python benchmarks/exploration_energy.py {args.sweep} --out {args.out}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"command": command, "settings": rows}
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(rows, pooled, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
