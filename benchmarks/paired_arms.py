"""Two arms of a sweep seed by seed: each job's exploration, training and total energy, and the paired change.

Reads ``SWEEP/<setting>-<arm>/depl/**/results.json`` (one job per seed, as
``benchmarks/exploration_by_cost.sh`` writes them) for two arms and writes one
table per setting: per seed each arm's exploration J (rounds), training J
(rounds), total J and final test loss, then the paired summary (mean and
median change of the total, exploration and training energy of ``A`` against
``B``, the seeds where ``A`` cost less). Reads results only.

    python benchmarks/paired_arms.py SWEEP --arms A B --out PREFIX SETTING [SETTING ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def arm_jobs(folder: Path) -> dict[int, dict[str, Any]]:
    """Each job's summary under ``folder``, by seed."""
    jobs = {}
    for path in sorted(folder.rglob("results.json")):
        summary = json.loads(path.read_text(encoding="utf-8"))["summary"]
        jobs[int(summary["seed"])] = summary
    return jobs


def paired_change(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], key: str) -> list[float]:
    """``a[seed][key] - b[seed][key]`` over the seeds both arms ran, in seed order."""
    return [float(a[s][key]) - float(b[s][key]) for s in sorted(set(a) & set(b))]


def _loss(summary: dict[str, Any]) -> str:
    loss = summary.get("final_test_loss")
    return "-" if loss is None else f"{loss:.3f}"


def setting_table(name: str, a_name: str, b_name: str, a: dict[int, dict[str, Any]],
                  b: dict[int, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """One setting's markdown table and its paired figures."""
    lines = [f"## {name}", "",
             f"| seed | {a_name}: exploration J (rounds) | training J (rounds) | total J | test loss "
             f"| {b_name}: exploration J (rounds) | training J (rounds) | total J | test loss |",
             "|---|---|---|---|---|---|---|---|---|"]
    for seed in sorted(set(a) & set(b)):
        cells = []
        for s in (a[seed], b[seed]):
            cells += [f"{s['profile_energy_j']:.1f} ({s['profile_rounds']})",
                      f"{s['cost_j']:.1f} ({s['rounds']})", f"{s['total_energy_j']:.1f}", _loss(s)]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    total = paired_change(a, b, "total_energy_j")
    figures = {"seeds": len(total), "cheaper": sum(d < 0 for d in total),
               "total_mean": statistics.mean(total) if total else None,
               "total_median": statistics.median(total) if total else None}
    for key, label in (("profile_energy_j", "exploration_mean"), ("cost_j", "training_mean")):
        change = paired_change(a, b, key)
        figures[label] = statistics.mean(change) if change else None
    if total:
        lines += ["", f"{a_name} - {b_name}, per job: total {figures['total_mean']:+.1f} J mean, "
                      f"{figures['total_median']:+.1f} J median; "
                      f"exploration {figures['exploration_mean']:+.1f} J, "
                      f"training {figures['training_mean']:+.1f} J (means); {a_name} cheaper on "
                      f"{figures['cheaper']} of {figures['seeds']} seeds."]
    return "\n".join(lines) + "\n", figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("settings", nargs="+")
    parser.add_argument("--arms", nargs=2, required=True, metavar=("A", "B"))
    parser.add_argument("--out", type=Path, required=True, help="PREFIX of PREFIX.md and PREFIX.json")
    args = parser.parse_args(argv)
    a_name, b_name = args.arms
    parts, doc = [], {}
    for name in args.settings:
        a, b = (arm_jobs(args.sweep / f"{name}-{arm}" / "depl") for arm in args.arms)
        if not a or not b:
            print(f"paired_arms: no jobs of {name}-{a_name} or {name}-{b_name} under {args.sweep}",
                  file=sys.stderr)
            return 2
        text, figures = setting_table(name, a_name, b_name, a, b)
        parts.append(text)
        doc[name] = figures
    command = (f"python benchmarks/paired_arms.py {args.sweep} --arms {a_name} {b_name} --out {args.out} "
               + " ".join(args.settings))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(f"# {a_name} against {b_name}, seed by seed\n\n    {command}\n\n"
                                           + "\n".join(parts))
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "settings": doc}, indent=2)
                                             + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
