"""Compare two jobs' ``results.json`` round by round (e.g. the same job on Ray and in process).

Prints one line per round: the validation loss, the clients' train loss, the test
loss and the energy of each job, and what differs in the round's record (the
planned / replied / rejected clients, the model, the groups' losses, the
per-client reply records apart from measured wall times). Exit status 0 when
every compared figure agrees bit for bit, 1 otherwise.

Usage::

    python benchmarks/results_diff.py A/results.json B/results.json [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: Reply fields that are measured wall times (they differ between any two runs).
MEASURED = {"train_time_s", "reply_time_s", "arrival_s", "level_cpus", "level_cpu_mask"}
#: Round fields that are measured wall times (``train_time_s``: the slowest reply's measured training).
WALL = {"wall_s", "comparable_wall_s", "steps_s", "train_time_s"}


def _replies(rec: dict[str, Any]) -> dict[str, Any]:
    return {cid: {k: v for k, v in (r or {}).items() if k not in MEASURED}
            for cid, r in (rec.get("replies") or {}).items()}


def round_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Names of the fields of two round records that differ (measured wall times left out)."""
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in WALL:
            continue
        if key == "replies":
            if _replies(a) != _replies(b):
                diffs.append("replies")
        elif a.get(key) != b.get(key):
            diffs.append(key)
    return diffs


def _fmt(value: Any) -> str:
    return f"{value:.6f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--rounds", type=int, default=None, help="compare at most this many rounds")
    args = parser.parse_args(argv)
    ra = json.loads(args.a.read_text())["rounds"]
    rb = json.loads(args.b.read_text())["rounds"]
    n = min(len(ra), len(rb)) if args.rounds is None else min(len(ra), len(rb), args.rounds)
    same = True
    print("round phase | loss A / B | train loss A / B | test loss A / B | energy A / B | differs")
    for a, b in zip(ra[:n], rb[:n], strict=True):
        diffs = round_differences(a, b)
        same = same and not diffs
        print(f"{a.get('round')} {a.get('phase', 'train')} | {_fmt(a.get('loss'))} / {_fmt(b.get('loss'))} | "
              f"{_fmt(a.get('train_loss'))} / {_fmt(b.get('train_loss'))} | "
              f"{_fmt(a.get('test_loss'))} / {_fmt(b.get('test_loss'))} | "
              f"{_fmt(a.get('energy_j'))} / {_fmt(b.get('energy_j'))} | {', '.join(diffs) or '-'}")
    print(f"{n} rounds compared ({len(ra)} / {len(rb)} recorded): "
          + ("identical" if same else "they differ"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
