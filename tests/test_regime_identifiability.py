"""The identifiability check of the learning curve's floor and power (benchmarks/plan_regime/).

Protects the synthetic fit the check rests on: a noise-free exploration gives its known
constants back, and its curve is the plan regime's own (the same decrease per round).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "plan_regime"))

from identifiability import curve, fit, rounds_to  # noqa: E402

from depl_fl.tracking.learning_curve import rate_coefficient  # noqa: E402


@pytest.mark.parametrize(("floor", "power"), [(0.14, 1.08), (0.05, 1.5), (0.25, 1.2)])
def test_a_noise_free_exploration_gives_its_constants_back(floor: float, power: float) -> None:
    losses = curve(floor, power, 2.3, 0.7, 10, np.arange(11, dtype=float))
    assert losses[0] == pytest.approx(2.3) and losses[-1] == pytest.approx(0.7)
    assert fit(losses) == pytest.approx((floor, power), abs=1e-9)


def test_the_synthetic_curve_decreases_as_the_plan_regime_predicts() -> None:
    floor, power = 0.145, 1.08
    c = rate_coefficient(2.3, 0.7, 10, power, floor)
    k = np.array([10.0, 10.001])
    slope = -np.diff(curve(floor, power, 2.3, 0.7, 10, k))[0] / 0.001
    assert slope == pytest.approx(c * (0.7 - floor) ** power, rel=1e-3)
    steps = rounds_to(0.35, floor, power, 2.3, 0.7, 10)
    assert curve(floor, power, 2.3, 0.7, 10, np.array([10.0 + steps]))[0] == pytest.approx(0.35)
    assert rounds_to(0.1, floor, power, 2.3, 0.7, 10) == float("inf")
