"""Where tracking stopped: the validation loss, its stop margin and the test loss at the stop round.

Tracking stops a run at the first round whose validation loss plus the stop margin (the
bootstrap-t pi-quantile of test - validation, ``depl_fl/tracking/split_margin.py``) meets L*. Per pi,
over the tracking jobs of a sweep: how many stopped by that rule, at how many stops the test loss
lay more than the margin above the validation loss (promised for one look at most 1 - pi; the rule
looks every round and stops at the first that passes), and how many ended above L*.

    python benchmarks/tracking_stop_margins.py SWEEP_DIR [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sweep_io import job_records, write_report


def stops(sweep: Path) -> list[dict[str, Any]]:
    """The last training round of every tracking DepL job of ``sweep``."""
    out = []
    for _, doc in job_records(sweep):
        s = doc.get("summary") or {}
        train = [r for r in doc.get("rounds") or [] if r.get("phase") == "train"]
        if s.get("method") != "depl" or not s.get("tracking") or not train:
            continue
        last = train[-1]
        by_rule = any("target met" in str(p.get("reason", "")) for p in doc.get("replans") or [])
        out.append({"seed": s["seed"], "pi": s["target_prob"], "target": s["target_loss"], "by_rule": by_rule,
                    "validation": last["loss"], "test": last["test_loss"], "margin": last.get("loss_margin")})
    return out


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    from depl_fl.runs.report import wilson_interval

    lines = [f"`{command}`", "",
             "| π | tracking jobs with a training round | stopped by the rule "
             "| test - validation > margin at the stop [95% Wilson] | promised at most (one look) "
             "| test > L* "
             "| those stops (seed: validation, test, margin) |", "|---|---|---|---|---|---|---|"]
    for pi in sorted({r["pi"] for r in rows}):
        cell = [r for r in rows if r["pi"] == pi]
        ruled = [r for r in cell if r["by_rule"] and r["margin"] is not None]
        over = [r for r in ruled if r["test"] - r["validation"] > r["margin"]]
        low, high = wilson_interval(len(over), len(ruled)) if ruled else (float("nan"), float("nan"))
        missed = sum(r["test"] > r["target"] for r in cell)
        where = "; ".join(f"{r['seed']}: {r['validation']:.3f}, {r['test']:.3f}, {r['margin']:.3f}"
                          for r in sorted(over, key=lambda r: r["seed"]))
        lines.append(f"| {pi:g} | {len(cell)} | {len(ruled)} | {len(over)}/{len(ruled)} "
                     f"[{low:.2f}, {high:.2f}] | {1 - pi:.2f} | {missed} | {where or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = stops(args.sweep)
    if not rows:
        print(f"error: no tracking DepL job with a training round under {args.sweep}", file=sys.stderr)
        return 2
    text = markdown(rows, f"python benchmarks/tracking_stop_margins.py {args.sweep}")
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
