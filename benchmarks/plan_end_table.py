"""Per seed, jobs of arms that differ in ``tracking.plan_end``: test loss, met, rounds, rounds past the plan.

Reads every ``results.json`` under each ``LABEL=FOLDER`` (one job per seed) and
writes one Markdown table with a column group per arm, then per arm the seeds
that met L* (final test loss <= L*) and the mean total energy. "past plan" counts
the training rounds run after a used-up plan went on (round records with
``past_plan``). Reads results only.

    python benchmarks/plan_end_table.py plan=DIR stop_rule=DIR [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sweep_io import labelled_folders, save_and_print  # noqa: E402


def arm_jobs(folder: Path) -> dict[int, dict[str, Any]]:
    """Each job's summary under ``folder`` by seed, with ``past_plan``: its rounds run past the plan."""
    jobs = {}
    for path in sorted(folder.rglob("results.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        summary = dict(doc["summary"])
        summary["past_plan"] = sum(1 for r in doc.get("rounds", []) if r.get("past_plan"))
        jobs[int(summary["seed"])] = summary
    return jobs


def _above_own_quantile(job: dict[str, Any]) -> bool | None:
    """Whether the final test loss lies above the initial plan's predicted pi-quantile (None: unknown)."""
    loss, q = job.get("final_test_loss"), (job.get("predicted") or {}).get("loss_quantile")
    return None if loss is None or q is None else float(loss) > float(q)


def _cell(job: dict[str, Any] | None) -> list[str]:
    if job is None:
        return ["-"] * 5
    loss = job.get("final_test_loss")
    return ["-" if loss is None else f"{loss:.3f}", "yes" if job.get("met") else "no", str(job.get("rounds")),
            str(job["past_plan"]), f"{float(job['total_energy_j']):.1f}"]


def table(arms: dict[str, dict[int, dict[str, Any]]]) -> str:
    """The per-seed table and the per-arm totals, as Markdown."""
    labels = list(arms)
    head = ["seed"] + [f"{label} {col}" for label in labels
                       for col in ("test loss", "met", "rounds", "past plan", "total J")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for seed in sorted(set().union(*arms.values())):
        cells = [str(seed)] + [c for label in labels for c in _cell(arms[label].get(seed))]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for label in labels:
        jobs = list(arms[label].values())
        met = sum(1 for j in jobs if j.get("met"))
        mean = statistics.fmean(float(j["total_energy_j"]) for j in jobs) if jobs else float("nan")
        above = [j for j in jobs if _above_own_quantile(j) is not None]
        lines.append(f"- {label}: {met}/{len(jobs)} met L*, mean total energy {mean:.1f} J, "
                     f"{sum(j['past_plan'] for j in jobs)} rounds past the plan in "
                     f"{sum(1 for j in jobs if j['past_plan'])} jobs; final test loss above the initial "
                     f"plan's predicted pi-quantile: {sum(1 for j in above if _above_own_quantile(j))}"
                     f"/{len(above)}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="+", help="LABEL=FOLDER")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    pairs = labelled_folders(args.arms, "plan_end_table: expected LABEL=FOLDER with an existing folder, "
                                        "got {item!r}")
    if pairs is None:
        return 2
    arms = {label: arm_jobs(folder) for label, folder in pairs}
    text = table(arms)
    save_and_print(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
