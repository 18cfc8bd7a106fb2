"""What the jobs that made the priors cost: one row per prior source (another federation's job).

Reads ``SOURCES/<setting>/results.json`` (each a job whose profile a sweep's
``profile.prior`` names) and writes a Markdown table: the source's
federation (clients, alpha, L*, seed), its exploration (rounds, where it
stopped, energy), its training and total energy, its final test loss, and
how many exploration observations its profile cache holds (what the prior
hands on). These energies are paid once, by another federation; the sweep's
totals do not include them. Reads results only.

    python benchmarks/prior_sources.py SOURCES --out FILE.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sweep_io import write_report


def source_row(name: str, results: Path) -> dict[str, Any]:
    """One prior source's figures from its ``results.json`` (and the cache file it names)."""
    doc = json.loads(results.read_text(encoding="utf-8"))
    summary, cfg, profile = doc["summary"], doc["config"], doc.get("profile") or {}
    cache = Path(str(profile.get("cache_file") or ""))
    observations = None
    if cache.is_file():
        observations = len(json.loads(cache.read_text(encoding="utf-8"))["fit_inputs"]["observations"])
    stop = "value" if summary.get("profile_value_round") else \
        "met" if summary.get("profile_met_round") else "rounds"
    return {"setting": name, "clients": cfg["num_clients"], "alpha": cfg["partition"]["alpha"],
            "target_loss": cfg["target"]["loss"], "seed": cfg["seed"], "tracking": summary.get("tracking"),
            "exploration_rounds": summary.get("profile_rounds"), "stop": stop,
            "exploration_j": summary.get("profile_energy_j"), "training_j": summary.get("cost_j"),
            "total_j": summary.get("total_energy_j"), "final_test_loss": summary.get("final_test_loss"),
            "met": summary.get("met"), "observations": observations}


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The table of :func:`source_row` rows."""
    lines = ["# The priors' sources: another federation's job, made once per setting", "",
             "Not in any arm's total: each source is a job another federation ran before.", "",
             "| setting | source: clients, alpha, L*, seed | exploration rounds (stop) | exploration J | "
             "training J | total J | final test loss (met) | observations handed on |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['clients']}, {r['alpha']}, {r['target_loss']}, {r['seed']} | "
                     f"{r['exploration_rounds']} ({r['stop']}) | {_fmt(r['exploration_j'])} | "
                     f"{_fmt(r['training_j'])} | {_fmt(r['total_j'])} | {_fmt(r['final_test_loss'], 3)} "
                     f"({r['met']}) | {r['observations']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", type=Path, help="folder of <setting>/results.json")
    parser.add_argument("--out", type=Path, required=True, help="Markdown file to write")
    args = parser.parse_args(argv)
    found = sorted(args.sources.glob("*/results.json"))
    if not found:
        print(f"prior_sources: no <setting>/results.json under {args.sources}", file=sys.stderr)
        return 2
    rows = [source_row(p.parent.name, p) for p in found]
    write_report(to_markdown(rows), args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
