"""Do setting features explain where a setting's runs fall in their predictions? (a lead, not a model)

Why. Static plans are over-cautious in some settings and optimistic in others
because the loss model's centre is off by a setting-level offset (the mean
probit of the runs' PIT: above 0, the runs end worse than predicted) that one
fitted spread has to absorb. The job's own fitted rate does not explain it
(``plan_regime/rate_checks.py``), nor would its setting's mean rate
(``plan_regime/emulate.py --rate setting-mean``). This script asks whether the
setting's features (number of clients, Dirichlet alpha, target L*) do, on
every setting measured so far: the four bank settings (fixed policies, every
horizon; ``results/plan_regime/fit.json``) and the six static sweeps (planned
runs; ``results/settings/pit-pooled-all.md``). It fits the offset by least
squares on each feature set and scores it by leave-one-setting-out error.
Ten settings of two kinds: a lead for a model to test on fresh settings, not
a correction to apply.

    python benchmarks/setting_offsets.py [--out benchmarks/results/settings/setting_offsets.md]
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sweep_io import save_and_print  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: (clients, alpha, L*) of each setting, as its bank or sweep script ran it.
FEATURES = {
    "bank d1": (8, 0.5, 0.4), "bank d2": (14, 0.4, 0.35), "bank d3": (10, 1.0, 0.3),
    "bank d4": (12, 0.25, 0.5),  # plan_regime/bank.py commands (README of the bank)
    "g10": (10, 0.5, 0.35), "g12": (12, 0.5, 0.45), "g6": (6, 0.5, 0.4),
    "g16": (16, 0.3, 0.3),  # settings_sweep.sh
    "g8": (8, 1.0, 0.3), "g20": (20, 0.4, 0.4),  # settings_extra.sh
}
NAMES = ("clients", "alpha", "L*")


def bank_offsets(fit_json: Path) -> dict[str, float]:
    """Mean PIT probit per bank setting under the configured constants (the last check of ``fit.json``)."""
    table = json.loads(fit_json.read_text())["checks"][-1]["table"]
    return {f"bank {k.split()[1]}": float(v["probit_mean"]) for k, v in table.items()
            if k.startswith("setting ") and len(k.split()) == 2}  # not "setting d1, horizon K<=5"


def sweep_offsets(pooled_md: Path) -> dict[str, float]:
    """Mean PIT probit per sweep from the per-sweep table of ``plan_pit.py --pooled``."""
    rows = re.findall(r"^\| `[^`]*/(g\d+)/static` \| \d+ \| ([+-]?\d+\.\d+) \|", pooled_md.read_text(), re.M)
    return {name: float(value) for name, value in rows}


def loo_rmse(x: np.ndarray, y: np.ndarray) -> float:
    """Leave-one-out root mean square error of least squares of ``y`` on ``x`` (with an intercept)."""
    design = np.column_stack([np.ones(len(y)), x]) if x.size else np.ones((len(y), 1))
    errors = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        beta = np.linalg.lstsq(design[keep], y[keep], rcond=None)[0]
        errors.append(y[i] - design[i] @ beta)
    return float(np.sqrt(np.mean(np.square(errors))))


def report(offsets: dict[str, float]) -> str:
    names = [n for n in FEATURES if n in offsets]
    x = np.array([FEATURES[n] for n in names], dtype=float)
    y = np.array([offsets[n] for n in names])
    lines = ["# Setting offsets against setting features", "",
             "Offset: mean probit of the runs' PIT in their own predictions (above 0: worse than predicted). "
             "Fits: least squares with an intercept; LOO: leave-one-setting-out root mean square error "
             f"(no feature: {loo_rmse(np.empty((len(y), 0)), y):.3f}; spread of the offsets {y.std():.3f}). "
             "The best of seven feature sets chosen on ten settings: its LOO error is optimistic too.", "",
             "| setting | clients | alpha | L* | offset |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {f[0]:g} | {f[1]:g} | {f[2]:g} | {offsets[n]:+.3f} |"
              for n, f in zip(names, x, strict=True)]
    lines += ["", "| features | correlation(s) | coefficients (intercept first) | LOO rmse |",
              "|---|---|---|---|"]
    for size in (1, 2, 3):
        for cols in itertools.combinations(range(3), size):
            sub = x[:, cols]
            corr = ", ".join(f"{np.corrcoef(sub[:, j], y)[0, 1]:+.2f}" for j in range(size))
            beta = np.linalg.lstsq(np.column_stack([np.ones(len(y)), sub]), y, rcond=None)[0]
            lines.append(f"| {' + '.join(NAMES[c] for c in cols)} | {corr} | "
                         f"{', '.join(f'{b:+.3f}' for b in beta)} | {loo_rmse(sub, y):.3f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "settings" / "setting_offsets.md")
    args = parser.parse_args()
    offsets = {**bank_offsets(RESULTS / "plan_regime" / "fit.json"),
               **sweep_offsets(RESULTS / "settings" / "pit-pooled-all.md")}
    missing = [n for n in FEATURES if n not in offsets]
    if missing:
        print(f"error: no offset found for {', '.join(missing)}", file=sys.stderr)
        return 2
    text = report(offsets)
    save_and_print(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
