"""Where explorations end against their fitted trend: how often the last loss is a dip or a spike.

Reads the logs of jobs with ``profile.plan_regime.anchor: trend`` (a sweep's output as
``benchmarks/guarantee_sweep.sh`` keeps it, ``SWEEP.a.log``): each job logs, per variant, the
trend fitted through its exploration and the exploration's last measured loss
(:mod:`depl_fl.tracking.exploration_trend`). Each distinct exploration counts once (jobs that
differ only in pi or tracking repeat theirs exactly; jobs that reused a cached one log none): last
loss minus trend, for the variant whose trend is highest (the one the plan starts from).

    python benchmarks/exploration_trend_offsets.py LOG [LOG ...] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

LINE = re.compile(r"(\S+)'s trend at the exploration's end ([0-9.eE+-]+) \+- ([0-9.eE+-]+) "
                  r"\(last loss ([0-9.eE+-]+)\)")


def exploration_ends(log: Path) -> list[tuple[float, float, float]]:
    """``(trend, its standard error, last loss)`` per job in ``log``: of the variant with the highest
    trend among the job's consecutive variant lines."""
    out: list[tuple[float, float, float]] = []
    seen: set[str] = set()
    for m in LINE.finditer(log.read_text(encoding="utf-8", errors="replace")):
        row = (float(m.group(2)), float(m.group(3)), float(m.group(4)))
        if m.group(1) in seen or not out:  # a variant seen again: the next job
            seen = set()
            out.append(row)
        seen.add(m.group(1))
        out[-1] = max(out[-1], row)
    return out


def summary(ends: list[tuple[float, float, float]]) -> list[str]:
    offsets = np.array([last - trend for trend, _, last in ends])
    ratios = np.array([last / trend for trend, _, last in ends])
    lines = ["| explorations | last < trend - 0.1 (a dip) | last > trend + 0.1 "
             "| last > trend + 0.7 (a spike) | median last - trend | median last / trend "
             "| median standard error of the trend |",
             "|---|---|---|---|---|---|---|",
             f"| {len(ends)} | {int(np.sum(offsets < -0.1))} | {int(np.sum(offsets > 0.1))} | "
             f"{int(np.sum(offsets > 0.7))} | {np.median(offsets):+.3f} | {np.median(ratios):.2f} | "
             f"{np.median([se for _, se, _ in ends]):.3f} |"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    # jobs that differ only in what the exploration does not read (pi, tracking) repeat it exactly
    ends = sorted({e for log in args.logs for e in exploration_ends(log)})
    folders = " ".join(map(str, args.logs))
    if not ends:
        raise SystemExit(f"no fitted exploration trend in {folders}")
    command = f"python benchmarks/exploration_trend_offsets.py {folders}"
    text = "\n".join(["# Where explorations end against their fitted trend", "", f"`{command}`", "",
                      *summary(ends), ""])
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
