"""Where a prior changed the default job, seed by seed: the same seeds with and without ``profile.prior``.

Reads ``SWEEP/<name>-default/depl`` and ``SWEEP/<name>-prior/depl`` (the arms
of ``benchmarks/exploration_prior.sh``; ``<name>`` with its ``-pi<pi>`` tag)
and pairs their jobs by seed. Per pair of folders: how many seeds ran the same
job in both arms (the same exploration rounds, training rounds and total
energy), the mean exploration rounds and energy of each arm, and, from the
default arm's records, the loss after round ``prior_rounds`` and the
exploration energy spent after it: what the rounds a prior is meant to spare
cost (an upper bound of the saving; a plan from there would train longer).
Reads results only.

    python benchmarks/prior_effect.py SWEEP --out FILE.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sweep_io import write_report


def _jobs(folder: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for path in sorted(folder.rglob("results.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        out[int(doc["summary"]["seed"])] = doc
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    sa, sb = a["summary"], b["summary"]
    return (sa["profile_rounds"] == sb["profile_rounds"] and sa["rounds"] == sb["rounds"]
            and abs(float(sa["total_energy_j"]) - float(sb["total_energy_j"])) < 1e-9)


def _after(doc: dict[str, Any], first: int) -> tuple[float | None, float]:
    """The loss after exploration round ``first`` and the exploration energy after it."""
    profile = [r for r in doc["rounds"] if r.get("phase") == "profile"]
    loss = float(profile[first - 1]["loss"]) if len(profile) >= first else None
    return loss, float(sum(float(r["energy_j"]) for r in profile[first:]))


def pair_row(name: str, default: Path, prior: Path) -> dict[str, Any]:
    """The figures of one pair of arms (see module doc)."""
    a, b = _jobs(default), _jobs(prior)
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError(f"no seed in both {default} and {prior}")
    first = int(a[seeds[0]]["config"]["profile"]["explore"]["prior_rounds"])
    after = [_after(a[s], first) for s in seeds]

    def mean(docs: dict[int, dict[str, Any]], key: str) -> float:
        return float(np.mean([float(docs[s]["summary"][key]) for s in seeds]))

    return {"setting": name, "seeds": len(seeds), "same": sum(_same(a[s], b[s]) for s in seeds),
            "differ": [s for s in seeds if not _same(a[s], b[s])], "prior_rounds": first,
            "default_rounds": mean(a, "profile_rounds"), "prior_rounds_mean": mean(b, "profile_rounds"),
            "default_exploration_j": mean(a, "profile_energy_j"),
            "prior_exploration_j": mean(b, "profile_energy_j"),
            "default_total_j": mean(a, "total_energy_j"), "prior_total_j": mean(b, "total_energy_j"),
            "loss_at_prior_rounds": float(np.mean([v for v, _ in after if v is not None])),
            "exploration_j_after": float(np.mean([j for _, j in after]))}


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The table of :func:`pair_row` rows."""
    lines = ["# Where the prior changed the default job (same seeds, with and without profile.prior)", "",
             "| setting | seeds with the same job | exploration rounds default / prior | exploration J "
             "default / prior | total J default / prior | default: loss after round prior_rounds | "
             "default: exploration J after it |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        differ = ", ".join(str(s) for s in r["differ"]) or "none"
        lines.append(f"| {r['setting']} | {r['same']}/{r['seeds']} (differ: {differ}) | "
                     f"{r['default_rounds']:.1f} / {r['prior_rounds_mean']:.1f} | "
                     f"{r['default_exploration_j']:.1f} / {r['prior_exploration_j']:.1f} | "
                     f"{r['default_total_j']:.1f} / {r['prior_total_j']:.1f} | "
                     f"{r['loss_at_prior_rounds']:.3f} (round {r['prior_rounds']}) | "
                     f"{r['exploration_j_after']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="folder of <name>-default/ and <name>-prior/")
    parser.add_argument("--out", type=Path, required=True, help="Markdown file to write")
    args = parser.parse_args(argv)
    rows = []
    for default in sorted(args.sweep.glob("*-default")):
        name = default.name[: -len("-default")]
        prior = args.sweep / f"{name}-prior"
        if (default / "depl").is_dir() and (prior / "depl").is_dir():
            rows.append(pair_row(name, default / "depl", prior / "depl"))
    if not rows:
        print(f"prior_effect: no <name>-default/depl with <name>-prior/depl under {args.sweep}",
              file=sys.stderr)
        return 2
    write_report(to_markdown(rows), args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
