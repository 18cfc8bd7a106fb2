"""Before/after table of the exploration's stop when met: energy split and the final test losses.

Reads the ``results.json`` of two sweeps of the same jobs (same seeds), one
with ``profile.explore.stop_when_met=false`` (before) and one with ``true``
(after), and writes per seed and in total: the exploration rounds, the round
the stop rule ended the exploration, the exploration and training energy, the
final test loss and whether it met the target (with the Wilson interval of the
share met). No job's decision is involved: the script reads results only.

    python benchmarks/exploration_stop.py BEFORE_DIR AFTER_DIR --out PREFIX
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from depl_fl.runs.report import wilson_interval

FIELDS = ("profile_rounds", "profile_met_round", "profile_energy_j", "cost_j", "total_energy_j",
          "final_test_loss", "met", "rounds", "status", "target_loss", "target_prob")


def load_jobs(folder: Path) -> dict[int, dict[str, Any]]:
    """Per seed, the summary fields of every ``results.json`` under ``folder``."""
    jobs = {}
    for path in sorted(folder.rglob("results.json")):
        summary = json.loads(path.read_text(encoding="utf-8"))["summary"]
        jobs[int(summary["seed"])] = {k: summary.get(k) for k in FIELDS}
    return jobs


def arm_totals(jobs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Sums and shares of one arm."""
    n = len(jobs)
    met = sum(bool(j["met"]) for j in jobs.values())
    low, high = wilson_interval(met, n) if n else (float("nan"), float("nan"))
    return {"jobs": n, "met": met, "met_wilson95": [low, high],
            "exploration_j": sum(float(j["profile_energy_j"] or 0) for j in jobs.values()),
            "training_j": sum(float(j["cost_j"] or 0) for j in jobs.values()),
            "total_j": sum(float(j["total_energy_j"] or 0) for j in jobs.values()),
            "exploration_rounds": sum(int(j["profile_rounds"] or 0) for j in jobs.values()),
            "met_during_exploration": sum(j["profile_met_round"] is not None for j in jobs.values())}


def table(before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]) -> str:
    """Markdown: one row per seed, then the totals."""
    def num(value: Any, fmt: str) -> str:
        return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"

    lines = ["| seed | exploration rounds (before / after) | stopped after | exploration J (before / after) "
             "| training J (before / after) | total J (before / after) | final test loss (before / after) "
             "| met (before / after) |", "|---" * 8 + "|"]
    for seed in sorted(set(before) | set(after)):
        b, a = before.get(seed, {}), after.get(seed, {})
        lines.append(
            f"| {seed} | {num(b.get('profile_rounds'), 'd')} / {num(a.get('profile_rounds'), 'd')} "
            f"| {num(a.get('profile_met_round'), 'd')} "
            f"| {num(b.get('profile_energy_j'), '.1f')} / {num(a.get('profile_energy_j'), '.1f')} "
            f"| {num(b.get('cost_j'), '.1f')} / {num(a.get('cost_j'), '.1f')} "
            f"| {num(b.get('total_energy_j'), '.1f')} / {num(a.get('total_energy_j'), '.1f')} "
            f"| {num(b.get('final_test_loss'), '.4f')} / {num(a.get('final_test_loss'), '.4f')} "
            f"| {b.get('met', '-')} / {a.get('met', '-')} |")
    tb, ta = arm_totals(before), arm_totals(after)
    lines += ["", "| arm | jobs | met (Wilson 95%) | met during exploration | exploration rounds "
              "| exploration J | training J | total J |", "|---" * 8 + "|"]
    for name, t in (("before (stop_when_met=false)", tb), ("after (stop_when_met=true)", ta)):
        lo, hi = t["met_wilson95"]
        lines.append(f"| {name} | {t['jobs']} | {t['met']} ({lo:.2f}-{hi:.2f}) "
                     f"| {t['met_during_exploration']} | {t['exploration_rounds']} "
                     f"| {t['exploration_j']:.1f} | {t['training_j']:.1f} "
                     f"| {t['total_j']:.1f} |")
    if tb["total_j"] > 0:
        lines.append(f"\nTotal energy after / before: {ta['total_j'] / tb['total_j']:.3f}; "
                     "exploration energy after / before: "
                     f"{ta['exploration_j'] / max(tb['exploration_j'], 1e-12):.3f}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.md and OUT.json")
    args = parser.parse_args(argv)
    before, after = load_jobs(args.before), load_jobs(args.after)
    if not before or not after:
        print(f"exploration_stop: no results.json under {args.before if not before else args.after}",
              file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(table(before, after), encoding="utf-8")
    totals = {"before": arm_totals(before), "after": arm_totals(after)}
    doc = {"before": before, "after": after, "totals": totals}
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(args.out.with_suffix(".md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
