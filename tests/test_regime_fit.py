"""The plan regime's fit on a trajectory bank (benchmarks/plan_regime/fit.py): its optimiser.

Protects what a converged fit rests on: the optimiser reaches the minimum of a known score
inside the constants' valid range, keeps the constants it is told to keep, stops at its
evaluation budget, and refuses bad options with a one-line error.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "plan_regime"))

import fit as regime_fit  # noqa: E402

START = {"power": 1.08, "floor": 0.145, "rate_exponent": 0.31, "noise_exponent": 0.55, "oscillation": 0.16,
         "judged_error_factor": 0.754, "oscillation_dof": 3.4, "anchor": "last"}
#: A minimum with the oscillation below its valid range: the best valid point is on the bound.
TARGET = {"power": 1.4, "floor": 0.2, "rate_exponent": 0.45, "noise_exponent": 0.1, "oscillation": -0.05,
          "judged_error_factor": 0.6, "oscillation_dof": 4.0}


def quadratic(calls: list[dict]):
    def score(values: dict, pool) -> float:
        calls.append(values)
        return sum((float(values[k]) - TARGET[k]) ** 2 for k in regime_fit.FITTED)
    return score


def test_the_fit_converges_to_the_best_valid_constants(monkeypatch) -> None:
    calls: list[dict] = []
    monkeypatch.setattr(regime_fit, "score", quadratic(calls))
    out = regime_fit.optimise(START, None, max_evals=4000, restarts=3, box=True)
    assert out["oscillation"] == pytest.approx(1e-4, abs=1e-4)
    for name in (k for k in regime_fit.FITTED if k != "oscillation"):
        assert out[name] == pytest.approx(TARGET[name], abs=2e-3), name
    assert out["anchor"] == "last"
    assert all(v["oscillation"] >= 1e-4 and v["power"] >= 1.001 for v in calls)


def test_fixed_constants_keep_their_values_and_the_budget_holds(monkeypatch) -> None:
    calls: list[dict] = []
    monkeypatch.setattr(regime_fit, "score", quadratic(calls))
    out = regime_fit.optimise(START, None, max_evals=50, fixed=("oscillation_dof", "noise_exponent"))
    assert (out["oscillation_dof"], out["noise_exponent"]) == (3.4, 0.55)
    assert all((v["oscillation_dof"], v["noise_exponent"]) == (3.4, 0.55) for v in calls)
    assert len(calls) <= 51
    assert out["power"] != START["power"]


@pytest.mark.parametrize(("option", "value"), [("--fixed", "oscillation,steps"), ("--max-evals", "0"),
                                               ("--restarts", "-1")])
def test_bad_options_are_refused_in_one_line(option: str, value: str) -> None:
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plan_regime" / "fit.py"), "/nonexistent",
                          "--fit", option, value], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "fit.py:" in run.stderr
