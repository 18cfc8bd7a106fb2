"""CPU time of the exploration's data-exponent search, on this checkout and on an earlier revision.

The profile fit of a federated exploration (``measured_fit``) searches the
data exponents ``a`` and ``b`` over a 31 x 31 grid
(:func:`depl_fl.tracking.estimation.fit_data_exponents`); the value stop runs
that fit after every judged exploration round. This script reads the
observations a profile cache file records (``fit_inputs``), times the search
in this checkout and in ``depl_fl/tracking/estimation.py`` as of ``--before``
(a git revision, loaded from ``git show``), in turns in one process, and checks
that both give the same exponents for every file.

Usage: ``python benchmarks/exponent_fit_cost.py --before REV [--repeats 3] [--out FILE.md] CACHE.json ...``
(cache files as a job writes them: ``profile.cache_dir=DIR`` then ``DIR/profile-fed-*.json``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from depl_fl.tracking import estimation  # noqa: E402


def module_at(revision: str) -> ModuleType:
    """``depl_fl/tracking/estimation.py`` as of ``revision``, imported under another name."""
    source = subprocess.run(["git", "show", f"{revision}:depl_fl/tracking/estimation.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "estimation_before.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("estimation_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["estimation_before"] = module
    spec.loader.exec_module(module)
    return module


def search(module: ModuleType, inputs: dict[str, Any], repeats: int) -> tuple[Any, float]:
    """The exponents ``module`` finds on the recorded observations; the least CPU seconds of ``repeats``."""
    observations = [module.LossObservation(**o) for o in inputs["observations"]]
    models = sorted({o.model for o in observations})
    best, found = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        try:
            found = module.fit_data_exponents(observations, models, min_points_per_level=4)
        except Exception as exc:  # noqa: BLE001 - a refusal is a result both codes must share
            found = f"{type(exc).__name__}: {exc}"
        best = min(best, time.process_time() - start)
    return found, best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--before", required=True, help="git revision to compare with")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    before = module_at(args.before)
    rows = ["| cache file | observations | exponents (a, b) | CPU s before | CPU s now | same |",
            "|---|---|---|---|---|---|"]
    same_all = True
    for path in args.files:
        inputs = json.loads(path.read_text(encoding="utf-8"))["fit_inputs"]
        old, t_old = search(before, inputs, args.repeats)
        new, t_new = search(estimation, inputs, args.repeats)
        same_all &= old == new
        name = f"{path.parent.parent.name}/{path.name}"
        rows.append(f"| `{name}` | {len(inputs['observations'])} | {new} | {t_old:.2f} | {t_new:.2f} | "
                    f"{'yes' if old == new else 'NO'} |")
    text = "\n".join([f"Data-exponent search, `--before {args.before}` against this checkout "
                      f"(least CPU seconds of {args.repeats}):", "", *rows, ""])
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0 if same_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
