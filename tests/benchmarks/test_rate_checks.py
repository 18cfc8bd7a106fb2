"""benchmarks/plan_regime/rate_checks.py: the checks behind "the fitted rate does not carry
over" (the learning curve's inverse and the slope of realised on fitted rates)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from depl_fl.tracking.learning_curve import rate_coefficient
from tests.benchmark_scripts import load_benchmark

rate_checks = load_benchmark("plan_regime/rate_checks")

POWER, FLOOR = 1.08, 0.145


def test_the_curve_of_the_profiles_fitted_rate_runs_through_both_ends_of_the_exploration() -> None:
    first, last, rounds = 2.4, 0.65, 15
    rate = rate_coefficient(first, last, rounds, POWER, FLOOR)
    assert rate_checks.curve_loss(first, rate, rounds, POWER, FLOOR) == pytest.approx(last, rel=1e-9)


def test_realised_rate_inverts_the_curve_and_refuses_what_it_cannot_reach() -> None:
    start, rate, rounds = 0.7, 0.09, 9.5
    reached = rate_checks.curve_loss(start, rate, rounds, POWER, FLOOR)
    assert FLOOR < reached < start
    assert rate_checks.realised_rate(start, reached, rounds, POWER, FLOOR) == pytest.approx(rate, rel=1e-9)
    assert rate_checks.realised_rate(start, start + 0.1, rounds, POWER, FLOOR) is None  # the loss rose
    assert rate_checks.realised_rate(start, FLOOR - 0.01, rounds, POWER, FLOOR) is None  # below the floor


def test_the_slope_finds_a_rate_that_carries_over_and_one_that_does_not() -> None:
    rng = np.random.default_rng(3)
    fitted = rng.normal(0.0, 0.2, 200)
    follows = fitted + rng.normal(0.0, 0.05, 200)
    carried = rate_checks.association("s", "full:all", np.column_stack([fitted, follows]))
    noise = rate_checks.association("s", "full:all", np.column_stack([fitted, rng.normal(0.0, 0.3, 200)]))
    assert abs(carried["slope"] - 1.0) < carried["slope_half_width"] < 0.1
    assert carried["correlation"] > 0.9
    assert abs(noise["slope"]) < noise["slope_half_width"]  # the interval covers 0
    assert not math.isnan(noise["slope_half_width"])
