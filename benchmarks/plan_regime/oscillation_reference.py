"""The oscillation each job's exploration measures, on the bank and on other sweeps.

For every job the exploration's merged trajectories (the fit inputs of its
profile cache file) go through
:func:`depl_fl.tracking.oscillation.difference_oscillation`, and the
coefficient is brought to the regime's reference local steps (divided by
``(steps / reference_steps)**steps_exponent``). Per bank setting and per
sweep: jobs, median, 0.9-quantile and largest coefficient, and the
oscillation the plan would use (:func:`combined_oscillation`, with the
configured ``profile.plan_regime`` constants). The bank's pooled
0.9-quantile is the ``explored_oscillation`` reference of
``conf/profile/default.yaml``.

    python benchmarks/plan_regime/oscillation_reference.py --bank BANK_DIR [--sweep SWEEP_DIR ...] \
        [--out FILE.md] [--json FILE.json]

``BANK_DIR``: the unpacked trajectory bank (``tar -xzf
benchmarks/results/plan_regime/bank.tar.gz`` gives ``bank2/``), one
``profile.json`` and ``job.json`` per seed folder; a sweep: any folder with
``results.json`` files whose profile cache files still exist. No job's
decision is involved: the script reads files only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.sweep_io import write_report  # noqa: E402

QUANTILE = 0.9


def job_oscillation(cfg: dict[str, Any], cached: dict[str, Any],
                    regime: Any) -> tuple[float, float, int] | None:
    """``(coefficient at the reference steps, local steps, differences)`` of one job's exploration
    (``regime``: the plan regime whose noise exponent and steps scaling apply)."""
    from depl_fl.orchestration.profile_fit import local_steps
    from depl_fl.tracking.oscillation import difference_oscillation

    properties = {cid: {"num-samples": n} for cid, _, n, _ in cached["profile"]["data"]}
    steps = local_steps(cfg, properties)
    trajectories = cached["fit_inputs"]["trajectories"].values()
    estimate = difference_oscillation([(t[0], t[1]) for t in trajectories], regime.noise_exponent)
    if estimate is None:
        return None
    return estimate.coefficient / regime.steps_factor(steps), steps, estimate.differences


def _configured() -> dict[str, Any]:
    """The project's configured config (``conf/config.yaml`` with its defaults)."""
    from depl_fl.runs.runconfig import compose_config

    return compose_config()


def bank_jobs(bank: Path, regime: Any) -> dict[str, list[float]]:
    """Per setting of the bank, every job's coefficient at the reference steps."""
    out: dict[str, list[float]] = {}
    for folder in sorted(p.parent for p in bank.glob("*/*/profile.json")):
        cfg = json.loads((folder / "job.json").read_text(encoding="utf-8"))["config"]
        found = job_oscillation(cfg, json.loads((folder / "profile.json").read_text(encoding="utf-8")),
                                regime)
        if found is not None:
            out.setdefault(folder.parent.name, []).append(found[0])
    return out


def cache_file(sweep: Path, name: str) -> Path | None:
    """The profile cache file ``name`` (as a job recorded it, relative to where it ran) as it is, else
    the longest tail of it found under ``sweep`` (a sweep folder moved elsewhere)."""
    path = Path(name)
    if path.exists():
        return path
    parts = path.parts
    return next((sweep / Path(*parts[i:]) for i in range(len(parts)) if (sweep / Path(*parts[i:])).exists()),
                None)


def sweep_jobs(sweep: Path, regime: Any) -> list[dict[str, Any]]:
    """Every job of ``sweep`` with a profile cache file: its seed, pi and coefficient."""
    rows, seen = [], set()
    for path in sorted(sweep.rglob("results.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        name = (doc.get("profile") or {}).get("cache_file")
        cache = cache_file(sweep, name) if name else None
        if cache is None or not cache.exists():
            continue
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if "fit_inputs" not in cached:
            continue
        found = job_oscillation(doc["config"], cached, regime)
        s = doc.get("summary") or {}
        if found is not None and cache not in seen:  # one exploration, however many jobs reused it
            seen.add(cache)
            rows.append({"seed": s.get("seed"), "coefficient": found[0], "local_steps": found[1],
                         "differences": found[2]})
    return rows


def _row(label: str, values: list[float], regime: Any) -> str:
    from depl_fl.tracking.oscillation import combined_oscillation

    v = np.asarray(values, dtype=float)
    used = [combined_oscillation(regime.oscillation, x, regime.explored_oscillation) for x in v]
    widened = sum(u > regime.oscillation for u in used)
    return (f"| {label} | {v.size} | {np.median(v):.3f} | {np.quantile(v, QUANTILE):.3f} | {v.max():.3f} | "
            f"{widened} | {np.median(used):.3f} | {max(used):.3f} |")


def markdown(bank: dict[str, list[float]], sweeps: dict[str, list[dict[str, Any]]], regime: Any,
             command: str) -> str:
    """The per-setting and per-sweep table."""
    pooled = [x for values in bank.values() for x in values]
    lines = ["# The oscillation the explorations measure", "", f"`{command}`", "",
             "Coefficient `m` of `sd = m sqrt(L) r**-b` from the second differences of each job's merged "
             "exploration trajectories, at the regime's reference local steps "
             f"({regime.reference_steps:g}). Configured: oscillation {regime.oscillation:g}, "
             f"explored_oscillation (reference) {regime.explored_oscillation}. `used`: the coefficient the "
             "plan regime uses, `sqrt(o**2 + max(0, m**2 - reference**2))`.", "",
             f"| trajectories | jobs | median m | {QUANTILE:g}-quantile m | largest m | jobs widened | "
             "median used | largest used |",
             "|---|---|---|---|---|---|---|---|"]
    for setting, values in sorted(bank.items()):
        lines.append(_row(f"bank {setting}", values, regime))
    if pooled:
        lines.append(_row("bank, pooled", pooled, regime))
    for name, rows in sweeps.items():
        if rows:
            lines.append(_row(f"`{name}`", [r["coefficient"] for r in rows], regime))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from depl_fl.orchestration.profile_fit import plan_regime_of

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", type=Path, required=True)
    parser.add_argument("--sweep", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    regime = plan_regime_of(_configured())
    bank = bank_jobs(args.bank, regime) if args.bank.is_dir() else {}
    if not bank:
        print(f"error: no bank job (SETTING/SEED/profile.json) under {args.bank}", file=sys.stderr)
        return 2
    missing = [str(s) for s in args.sweep if not s.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    sweeps = {str(s): sweep_jobs(s, regime) for s in args.sweep}
    command = " ".join(["python benchmarks/plan_regime/oscillation_reference.py", f"--bank {args.bank}",
                        *[f"--sweep {s}" for s in args.sweep]])
    text = markdown(bank, sweeps, regime, command)
    pooled = [x for values in bank.values() for x in values]
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "quantile": QUANTILE, "bank_quantile": float(np.quantile(pooled, QUANTILE)),
            "bank": bank, "sweeps": sweeps}, indent=1), encoding="utf-8")
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
