"""Per seed, the model a job ended with (``tracking.early_stop_model``) beside its last round's.

Reads every ``results.json`` under ``FOLDER`` (one job per seed) and writes one
Markdown table: the job's status and training rounds, the training round whose
model it ended with (``final_model_round`` less the exploration rounds; 0: the
model the training started from) with that model's validation and test loss,
the last training round's validation and test loss (what the job would report
with ``tracking.early_stop_model=last``: no decision reads the choice, so every
round is the same under both values), whether each met L* (test loss <= L*) and
the total energy. Then the seeds that met L* under each. Reads results only.

    python benchmarks/early_stop_model_table.py FOLDER [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sweep_io import save_and_print  # noqa: E402


def job_row(doc: dict[str, Any]) -> dict[str, Any]:
    """One job's figures: the model it ended with and its last training round's."""
    summary = doc["summary"]
    train = [r for r in doc.get("rounds", []) if r.get("phase") == "train"]
    last = train[-1] if train else None
    final = int(summary.get("final_model_round") or 0) - int(summary.get("profile_rounds") or 0)
    target = float(summary["target_loss"])
    last_test = last.get("test_loss") if last is not None else summary.get("final_test_loss")
    return {"seed": int(summary["seed"]), "status": summary.get("status"), "rounds": int(summary["rounds"]),
            "final_round": final, "final_val": summary.get("final_loss"),
            "final_test": summary.get("final_test_loss"), "met": bool(summary.get("met")),
            "last_val": last["loss"] if last is not None else summary.get("final_loss"),
            "last_test": last_test, "last_met": last_test is not None and float(last_test) <= target,
            "total_j": float(summary["total_energy_j"])}


def _num(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    """The per-seed table and the totals, as Markdown."""
    head = ["seed", "status", "rounds", "ended with round", "its validation", "its test loss", "met",
            "last round's validation", "last round's test loss", "last met", "total J"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda row: row["seed"]):
        which = "last" if r["final_round"] == r["rounds"] else str(r["final_round"])
        lines.append("| " + " | ".join([
            str(r["seed"]), str(r["status"]), str(r["rounds"]), which, _num(r["final_val"]),
            _num(r["final_test"]), "yes" if r["met"] else "no", _num(r["last_val"]), _num(r["last_test"]),
            "yes" if r["last_met"] else "no", f"{r['total_j']:.1f}"]) + " |")
    lines.append("")
    changed = [r for r in rows if r["final_round"] != r["rounds"]]
    lines.append(f"- the model each job ended with: {sum(r['met'] for r in rows)}/{len(rows)} met L*; "
                 f"the last round's: {sum(r['last_met'] for r in rows)}/{len(rows)}; "
                 f"{len(changed)} of {len(rows)} jobs ended with an earlier round's model")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"early_stop_model_table: no folder {args.folder}", file=sys.stderr)
        return 2
    rows = [job_row(json.loads(path.read_text(encoding="utf-8")))
            for path in sorted(args.folder.rglob("results.json"))]
    text = table(rows)
    save_and_print(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
