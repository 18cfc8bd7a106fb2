"""The local steps a trajectory bank's settings ran: the range the plan regime's steps factor holds.

The plan regime's oscillation grows with the local SGD steps of a client of average size
(``(steps / reference_steps)**steps_exponent``, :mod:`depl_fl.tracking.learning_curve`); the
constants are fitted on a bank's settings only, so beyond their steps the power law is not
measured and the factor is held at the range's end (``profile.plan_regime.steps_min`` /
``steps_max``). Per setting of the bank: the jobs' federation steps (``epochs * mean samples /
batch``, as :func:`depl_fl.orchestration.profile_fit.local_steps` reads them; the scenario's
sample counts) and the steps of the sets the recorded policies trained (their clients' mean),
then the whole bank's range against the configured one (``--overrides``: another network's).

    python benchmarks/plan_regime/steps_range.py BANK_DIR [--overrides "model=digits_resnet"]

One process, seconds; exit 2 when BANK_DIR holds no job.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def job_steps(folder: Path) -> tuple[float, list[float]]:
    """``(federation steps, [steps of each recorded policy's set])`` of one bank job."""
    job = json.loads((folder / "job.json").read_text())
    train = job["config"].get("train") or {}
    per_step = float(train.get("local_epochs", 1)) / float(train.get("batch_size", 32))
    samples = {c["id"]: int(c["num_samples"]) for c in job["scenario"]["clients"]}
    sets = []
    for path in sorted(folder.glob("*_*.json")):
        clients = json.loads(path.read_text()).get("clients") or []
        if clients:
            sets.append(per_step * float(np.mean([samples[c] for c in clients])))
    return per_step * float(np.mean(list(samples.values()))), sets


def main(argv: list[str] | None = None) -> int:
    from depl_fl.orchestration.profile_fit import plan_regime_of
    from depl_fl.runs.runconfig import compose_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank", type=Path)
    parser.add_argument("--overrides", default="", help="config overrides naming the bank's network")
    args = parser.parse_args(argv)
    folders = sorted(p for p in args.bank.glob("*/seed*") if (p / "job.json").is_file())
    if not folders:
        print(f"error: no bank job (SETTING/seedN/job.json) under {args.bank}", file=sys.stderr)
        return 2
    regime = plan_regime_of(compose_config(args.overrides.split()))
    print("| setting | jobs | federation steps | policies' set steps |\n|---|---|---|---|")
    every = []
    for setting in sorted({f.parent.name for f in folders}):
        rows = [job_steps(f) for f in folders if f.parent.name == setting]
        federation = [s for s, _ in rows]
        sets = [s for _, ss in rows for s in ss]
        every += federation
        span = f"{min(sets):.2f}-{max(sets):.2f}" if sets else "-"
        print(f"| {setting} | {len(rows)} | {min(federation):.4f}-{max(federation):.4f} | {span} |")
    print(f"\nbank: federation steps {min(every):.4f}-{max(every):.4f}; configured steps_min "
          f"{regime.steps_min}, steps_max {regime.steps_max}, reference_steps {regime.reference_steps:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
