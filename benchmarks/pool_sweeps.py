"""Pool the jobs of one target probability from several sweeps into one folder, for ``depl-fl report``.

Each job's ``results.json`` (and nothing else) is copied to ``INTO/<sweep index>/<job index>/``,
so that ``depl-fl report INTO`` counts them as one sweep: the cells of seeds run at different times
(for example a first set of seeds and new seeds added later), stated as pooled.

    python benchmarks/pool_sweeps.py --prob 0.95 --into multirun/pooled SWEEP_DIR [SWEEP_DIR ...]

Refuses to write into a folder that is not empty (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def jobs(sweep: Path, prob: float) -> list[Path]:
    """The ``results.json`` files under ``sweep`` whose job targets ``prob``, in path order."""
    out = []
    for path in sorted(sweep.rglob("results.json")):
        summary = json.loads(path.read_text(encoding="utf-8")).get("summary") or {}
        if summary.get("target_prob") is not None and abs(float(summary["target_prob"]) - prob) < 1e-9:
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--prob", type=float, required=True)
    parser.add_argument("--into", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.into.exists() and any(args.into.iterdir()):
        print(f"error: --into {args.into}: not empty", file=sys.stderr)
        return 2
    missing = [str(s) for s in args.sweeps if not s.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    total = 0
    for i, sweep in enumerate(args.sweeps):
        found = jobs(sweep, args.prob)
        for j, path in enumerate(found):
            target = args.into / str(i) / str(j)
            target.mkdir(parents=True)
            shutil.copyfile(path, target / "results.json")
        print(f"{sweep}: {len(found)} jobs at pi {args.prob:g}")
        total += len(found)
    print(f"{total} jobs pooled into {args.into}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
