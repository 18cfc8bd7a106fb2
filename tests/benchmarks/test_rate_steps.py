"""The rate-against-local-steps analysis (benchmarks/analysis/rate_steps.py) and fit.py's steps prototype.

Protects what the analysis' figures rest on: the local steps per client, the learning curve's constants
read back from a plan-regime run profile, the regression with one intercept per setting, and that the
prototype's optional constant is fitted only when asked for.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "analysis"))
sys.path.insert(0, str(ROOT / "benchmarks" / "plan_regime"))

import fit as regime_fit  # noqa: E402
import rate_steps  # noqa: E402


def test_local_steps_count_the_last_partial_batch() -> None:
    assert rate_steps.client_steps([32, 33, 64, 10], 2, 32).tolist() == [2.0, 4.0, 4.0, 2.0]


def test_the_curve_constants_come_back_from_a_run_profile() -> None:
    from depl_fl.tracking.learning_curve import PlanRegime, plan_regime_run, rate_coefficient

    regime = PlanRegime.from_config({"power": 1.4, "floor": 0.2, "rate_exponent": 0.5, "noise_exponent": 0.1,
                                     "oscillation": 0.05, "steps_exponent": 0.0, "reference_steps": 1.0,
                                     "judged_error_factor": 0.5})
    measured = {"levels": [1.0, 2.0], "mean": [0.1, 0.2], "std": [0.1, 0.1]}
    profile = plan_regime_run(measured, 2.0, 0.8, 10, regime, 0.05)
    c, floor = rate_steps.curve_constants(profile, regime.power)
    assert floor == pytest.approx(0.2)
    assert c == pytest.approx(rate_coefficient(2.0, 0.8, 10, 1.4, 0.2), rel=1e-9)


def test_the_regression_recovers_slopes_under_setting_intercepts() -> None:
    rng = np.random.default_rng(0)
    x1, x2 = rng.normal(size=200), rng.normal(size=200)
    groups = ["a"] * 100 + ["b"] * 100
    y = 0.4 * x1 - 0.7 * x2 + np.where(np.array(groups) == "a", 1.0, -3.0) + rng.normal(scale=0.01, size=200)
    y[5] = np.nan
    out = rate_steps.ols(y, {"x1": x1, "x2": x2}, groups)
    assert out["n"] == 199
    assert out["coef"]["x1"] == pytest.approx(0.4, abs=0.01)
    assert out["coef"]["x2"] == pytest.approx(-0.7, abs=0.01)
    assert out["r2_within"] > 0.99


def test_the_steps_exponent_is_fitted_only_when_given(monkeypatch) -> None:
    seen: list[dict] = []

    def score(values: dict, pool) -> float:
        seen.append(dict(values))
        return (float(values.get(regime_fit.STEPS_KEY, 0.0)) - 0.8) ** 2 + (float(values["power"]) - 1.3) ** 2

    monkeypatch.setattr(regime_fit, "score", score)
    start = {"power": 1.08, "floor": 0.145, "rate_exponent": 0.31, "noise_exponent": 0.55,
             "oscillation": 0.16, "judged_error_factor": 0.754, "oscillation_dof": 3.4}
    plain = regime_fit.optimise(start, None, max_evals=50)
    assert regime_fit.STEPS_KEY not in plain and all(regime_fit.STEPS_KEY not in v for v in seen)
    fitted = regime_fit.optimise({**start, regime_fit.STEPS_KEY: 0.5}, None, max_evals=2000, restarts=2)
    assert fitted[regime_fit.STEPS_KEY] == pytest.approx(0.8, abs=0.01)
