"""Does the plan's learning curve follow the run, by where the exploration stopped?

Why. The federated exploration runs until its loss is within
``profile.explore.stop_loss_factor`` x L* (or a round cap), so that the
plan's learning curve extrapolates little. Where the cap stops it far above
that, the exploration has seen mostly the early plateau of training, and the
curve fitted through it (its two-point rate) may not say how fast the plan's
rounds will go. For every static job of each sweep given, this script compares
the plan's *mean* learning curve (the profile's run mean, followed from the
exploration's last loss with no noise) with the run's own validation losses:

- the loss drop over the first 10 planned rounds, run over mean curve;
- the rounds to the target: the first planned round whose validation loss is
  at or below L* against the rounds the mean curve needs from the same start.

Per sweep it prints the medians, and the exploration's last loss over L*
(how far the plan extrapolated). Decisions read no test loss here either: the
script only reads ``results.json`` files.

    python benchmarks/exploration_plateau.py SWEEP_DIR [SWEEP_DIR ...] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sweep_io import save_and_print  # noqa: E402

#: Planned rounds over which the loss drop is compared.
DROP_ROUNDS = 10
#: Rounds after which the mean curve is deemed not to reach the target.
MAX_CURVE_ROUNDS = 1000


def mean_curve(start: float, levels: Sequence[float], means: Sequence[float], rounds: int) -> list[float]:
    """The loss after each of ``rounds`` rounds when every round decreases it by the run mean at its level."""
    out, loss = [], float(start)
    for _ in range(rounds):
        loss -= float(np.interp(loss, levels, means))
        out.append(loss)
    return out


def rounds_to(start: float, levels: Sequence[float], means: Sequence[float], target: float) -> int | None:
    """Rounds the mean curve needs from ``start`` to reach ``target`` (None: not within the limit)."""
    loss = float(start)
    for k in range(1, MAX_CURVE_ROUNDS + 1):
        loss -= float(np.interp(loss, levels, means))
        if loss <= target:
            return k
    return None


def job_row(doc: dict) -> dict | None:
    """The comparison for one static job with at least ``DROP_ROUNDS + 1`` planned rounds (else None)."""
    if doc["summary"].get("tracking"):
        return None
    rounds = doc["rounds"]
    explored = [r for r in rounds if r.get("phase") == "profile"]
    planned = [r for r in rounds if r.get("phase") != "profile"]
    if not explored or len(planned) < DROP_ROUNDS + 1:
        return None
    run = doc["scenario"]["loss"]["run"][planned[0]["model"]]
    target = float(doc["summary"]["target_loss"])
    start = float(explored[-1]["loss"])
    reached = float(np.mean([r["loss"] for r in planned[DROP_ROUNDS - 1:DROP_ROUNDS + 1]]))
    curve_drop = start - mean_curve(start, run["levels"], run["mean"], DROP_ROUNDS)[-1]
    first = next((i for i, r in enumerate(planned, start=1) if r["loss"] <= target), None)
    return {"explored": len(explored), "start_over_target": start / target,
            "drop_ratio": (start - reached) / curve_drop if curve_drop > 0 else float("nan"),
            "run_rounds": first, "curve_rounds": rounds_to(start, run["levels"], run["mean"], target)}


def sweep_rows(sweep: Path) -> list[dict]:
    rows = []
    for path in sorted(sweep.rglob("results.json")):
        row = job_row(json.loads(path.read_text()))
        if row is not None:
            rows.append(row)
    return rows


def summary_line(name: str, rows: list[dict]) -> str:
    def median(key: str) -> float:
        values = [r[key] for r in rows if r[key] is not None]
        return float(np.nanmedian(values)) if values else float("nan")

    explored = sorted({r["explored"] for r in rows})
    return (f"| {name} | {len(rows)} | {explored[0]}-{explored[-1]} | {median('start_over_target'):.2f} | "
            f"{median('drop_ratio'):.2f} | {median('run_rounds'):.0f} | {median('curve_rounds'):.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = ["| sweep | static jobs | exploration rounds | exploration's last loss / L* | "
             f"{DROP_ROUNDS}-round drop, run / mean curve | rounds to L*: run | mean curve |",
             "|---|---|---|---|---|---|---|"]
    for sweep in args.sweeps:
        if not sweep.is_dir():
            print(f"error: {sweep} is not a sweep directory", file=sys.stderr)
            return 2
        rows = sweep_rows(sweep)
        if not rows:
            print(f"error: no static job with {DROP_ROUNDS + 1} planned rounds under {sweep}",
                  file=sys.stderr)
            return 2
        lines.append(summary_line(str(sweep), rows))
    text = "\n".join(lines) + "\n"
    save_and_print(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
