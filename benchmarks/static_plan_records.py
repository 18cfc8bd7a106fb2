"""What a sweep's static plans were made from and what they predicted, one row per arm.

Reads every ``SWEEP/<arm>/depl`` whose jobs ran static plans
(``tracking.enabled=false``) and writes per arm: how many jobs found no
dependable plan (status ``infeasible``) or failed, the exploration (rounds,
value stops, the loss of its last round, the jobs whose learning-curve rate
came from the prior, ``profile.rates_from_prior``), the plan (training
rounds, the rate the plan was made with: the profile's predicted loss decrease per round at
L* for the plan's last model, the planner's predicted pi-quantile of the final loss, its recorded
probability) and the outcome (final test loss, its ratio to the predicted
quantile, how many runs ended above it). The planner's quantile is the one
each job recorded; ``benchmarks/plan_pit.py`` samples the plans again for
the PIT. Reads results only.

    python benchmarks/static_plan_records.py SWEEP --out FILE.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sweep_io import job_records, write_report


def _last_exploration_loss(doc: dict[str, Any]) -> float | None:
    losses = [r.get("loss") for r in doc.get("rounds", []) if r.get("phase") == "profile"]
    return float(losses[-1]) if losses and losses[-1] is not None else None


def _rate_at_target(doc: dict[str, Any]) -> float | None:
    rounds = (doc.get("plan") or {}).get("rounds")
    if not rounds:
        return None
    run = doc["scenario"]["loss"]["run"][rounds[-1]["model"]]
    return float(np.interp(doc["summary"]["target_loss"], run["levels"], run["mean"]))


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def arm_row(name: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one arm's static jobs (see module doc)."""
    summaries = [d["summary"] for d in docs]
    planned = [s for s in summaries if s.get("status") == "completed"]
    predicted = [s["predicted"].get("loss_quantile") for s in planned]
    finals = [s.get("final_test_loss") for s in planned]
    pairs = [(f, q) for f, q in zip(finals, predicted, strict=True) if f is not None and q is not None]
    return {"arm": name, "jobs": len(docs), "target_loss": summaries[0]["target_loss"],
            "target_prob": summaries[0]["target_prob"],
            "infeasible": sum(s.get("status") == "infeasible" for s in summaries),
            "failed": sum(s.get("status") == "failed" for s in summaries),
            "exploration_rounds": _mean([s.get("profile_rounds") for s in summaries]),
            "value_stops": sum(s.get("profile_value_round") is not None for s in summaries),
            "last_exploration_loss": _mean([_last_exploration_loss(d) for d in docs]),
            "rate_from_prior": sum(bool((d.get("profile") or {}).get("rates_from_prior")) for d in docs),
            "training_rounds": _mean([s.get("rounds") for s in planned]),
            "rate_at_target": _mean([_rate_at_target(d) for d in docs
                                     if d["summary"].get("status") == "completed"]),
            "predicted_quantile": _mean(predicted),
            "predicted_probability": _mean([s["predicted"].get("probability") for s in planned]),
            "final_test_loss": _mean(finals),
            "final_over_predicted": _mean([f / q for f, q in pairs]),
            "above_predicted": sum(f > q for f, q in pairs), "compared": len(pairs)}


def _f(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The table of :func:`arm_row` rows."""
    lines = ["# Static plans: what they were made from and what they predicted (means per job)", "",
             "| arm | L* | pi | jobs | no dependable plan / failed | exploration rounds | value stops | "
             "last exploration loss | rate from the prior | training rounds | rate at L* | "
             "predicted pi-quantile | "
             "predicted P | final test loss | final / predicted | above predicted |",
             "|---" * 16 + "|"]
    for r in rows:
        lines.append(
            f"| {r['arm']} | {r['target_loss']} | {r['target_prob']} | {r['jobs']} | {r['infeasible']} / "
            f"{r['failed']} | {_f(r['exploration_rounds'], '.1f')} | {r['value_stops']} | "
            f"{_f(r['last_exploration_loss'])} | {r['rate_from_prior']} | "
            f"{_f(r['training_rounds'], '.1f')} | {_f(r['rate_at_target'], '.4f')} | "
            f"{_f(r['predicted_quantile'])} | "
            f"{_f(r['predicted_probability'])} | {_f(r['final_test_loss'])} | "
            f"{_f(r['final_over_predicted'], '.2f')} | {r['above_predicted']}/{r['compared']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="folder of <arm>/depl sweeps")
    parser.add_argument("--out", type=Path, default=None, help="Markdown file to write (default: stdout)")
    args = parser.parse_args(argv)
    rows = []
    for folder in sorted(p for p in args.sweep.glob("*/depl") if p.is_dir()):
        docs = [doc for _, doc in job_records(folder) if doc["summary"].get("tracking") is False]
        if docs:
            rows.append(arm_row(folder.parent.name, docs))
    if not rows:
        print(f"static_plan_records: no static job under {args.sweep}/<arm>/depl", file=sys.stderr)
        return 2
    write_report(to_markdown(rows), args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
