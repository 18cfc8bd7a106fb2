"""Several runs of ``benchmarks/scale_bench.py`` side by side: DepL's and FedAvg's server time per round.

A server-time ratio moves with the machine's load from one run to the next
(FedAvg's by several milliseconds), so code changes are compared on runs made
back to back, each code in turn. This script reads each run's ``scale.json``
and tabulates, per federation size and run, DepL's and FedAvg's server CPU
milliseconds per training round, their ratio, DepL's parts that FedAvg does
not have, and the load average of each run.

Usage: ``python benchmarks/scale_runs_table.py LABEL=DIR [LABEL=DIR ...] --out DIR`` (each ``DIR``
holding a ``scale.json``) writes ``runs.json`` and ``runs.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: DepL's parts of the server's round that FedAvg's round has no counterpart of.
DEPL_ONLY = ("planning", "plan_check", "tracking", "checkpoint")


def rows_of(label: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per federation size of a run's ``scale.json``: both strategies' figures and their ratio."""
    by = {(r["strategy"], r["clients"]): r for r in doc["rows"]}
    out = []
    for n in sorted({c for _, c in by}):
        d, f = by.get(("depl", n)), by.get(("fedavg", n))
        if d is None or f is None:
            continue
        out.append({"run": label, "clients": n, "depl_ms": 1000 * d["server_cpu_s_per_round"],
                    "fedavg_ms": 1000 * f["server_cpu_s_per_round"],
                    "ratio": d["server_cpu_s_per_round"] / f["server_cpu_s_per_round"],
                    "depl_only_ms": {k: 1000 * d["server_parts"].get(k, 0.0) for k in DEPL_ONLY},
                    "evaluation_ms": (1000 * d["server_parts"].get("evaluation", 0.0),
                                      1000 * f["server_parts"].get("evaluation", 0.0)),
                    "load": (d["load_average"], f["load_average"])})
    return out


def write(rows: list[dict[str, Any]], out: Path, command: str) -> Path:
    """``runs.json`` and ``runs.md``: the rows grouped by federation size, in the order given."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1))
    lines = ["# Server CPU time per training round, run by run", "",
             f"Regenerate: `{command}`. Each run is one `python benchmarks/scale_bench.py` (its docstring "
             "says what is timed), made back to back in the order listed; load: the 1-minute load average "
             "at the end of DepL's and of FedAvg's job.", "",
             "| clients | run | DepL ms | FedAvg ms | ratio | DepL only: " + ", ".join(DEPL_ONLY)
             + " ms | evaluation ms DepL / FedAvg | load |",
             "|---|---|---|---|---|---|---|---|"]
    for n in sorted({r["clients"] for r in rows}):
        for r in (r for r in rows if r["clients"] == n):
            only = " / ".join(f"{r['depl_only_ms'][k]:.1f}" for k in DEPL_ONLY)
            lines.append(f"| {n} | {r['run']} | {r['depl_ms']:.1f} | {r['fedavg_ms']:.1f} | {r['ratio']:.2f} "
                         f"| {only} | {r['evaluation_ms'][0]:.1f} / {r['evaluation_ms'][1]:.1f} "
                         f"| {r['load'][0]:.1f} / {r['load'][1]:.1f} |")
    path = out / "runs.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="LABEL=DIR, DIR holding a scale.json")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for run in args.runs:
        label, _, folder = run.partition("=")
        path = Path(folder) / "scale.json"
        if not label or not folder or not path.is_file():
            print(f"scale_runs_table: expected LABEL=DIR with DIR/scale.json, got {run!r}", file=sys.stderr)
            raise SystemExit(2)
        rows += rows_of(label, json.loads(path.read_text()))
    command = "python benchmarks/scale_runs_table.py " + " ".join(args.runs) + f" --out {args.out}"
    print(write(rows, args.out, command))


if __name__ == "__main__":
    main()
