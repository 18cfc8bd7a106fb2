"""Planning time of DepL on the paper-like scenario at pi = 0.8, 0.9, 0.95.

Run ``python benchmarks/planner_speed.py [--repeats N]``. Each pi is planned
``N`` times in this process (every call builds its own context, nothing is
shared between calls); the table gives the process CPU time and wall time of
the first call and the minimum over the calls (the minimum is the least
disturbed by other load), the plan's cost and probability, and a fingerprint
of its rounds (equal fingerprints = identical plans). Writes
``benchmarks/results/planner_speed.md``. The goal is <= 1 s per plan.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from scenarios import paper_like  # noqa: E402

from depl_fl.planner import make_plan  # noqa: E402

PIS = (0.8, 0.9, 0.95)


def fingerprint(plan) -> str:
    """Short hash of the plan's rounds (model, clients, levels of every round)."""
    rounds = [(r.model, list(r.clients), sorted(r.levels.items())) for r in plan.rounds]
    return hashlib.sha1(json.dumps(rounds).encode()).hexdigest()[:12]


def measure(pi: float, repeats: int) -> dict:
    """Plan ``repeats`` times at ``pi``; CPU and wall seconds of each call."""
    scen, targets = paper_like(pi)
    cpu, wall, plan = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        plan = make_plan(scen, targets)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return {"pi": pi, "cpu": cpu, "wall": wall, "rounds": len(plan.rounds),
            "cost": plan.predicted["cost_joules"], "probability": plan.predicted["probability"],
            "fingerprint": fingerprint(plan)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="plans per pi (default 3)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        print("--repeats: must be >= 1", file=sys.stderr)
        return 2
    rows = [measure(pi, args.repeats) for pi in PIS]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = ["# DepL planning time, paper-like scenario", "",
             f"{args.repeats} plans per pi in one process; load average at the end {load:.1f} "
             f"on {os.cpu_count()} cores.", "",
             "| pi | CPU first (s) | CPU min (s) | wall first (s) | wall min (s) | rounds | cost (kJ) "
             "| P (indep. MC) | plan fingerprint |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['pi']} | {r['cpu'][0]:.3f} | {min(r['cpu']):.3f} | {r['wall'][0]:.3f} | "
                     f"{min(r['wall']):.3f} | {r['rounds']} | {r['cost'] / 1e3:.2f} | "
                     f"{r['probability']:.4f} | {r['fingerprint']} |")
    print("\n".join(lines))
    out = HERE / "results" / "planner_speed.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
