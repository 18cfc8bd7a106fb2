"""The oscillation a job's own exploration measures, and how it widens the plan regime's constant.

Protects :mod:`depl_fl.tracking.oscillation` (the difference-based estimator
recovers a known oscillation from synthetic trajectories; the combination
never goes below the constant), ``profile.plan_regime.explored_oscillation``
(checked in one line) and its use in the profile a plan is made on
(:func:`depl_fl.orchestration.profile_fit.with_plan_regime`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.orchestration.profile_fit import plan_oscillation, with_plan_regime
from depl_fl.runs.runconfig import compose_config
from depl_fl.tracking.learning_curve import PlanRegime
from depl_fl.tracking.oscillation import combined_oscillation, difference_oscillation

REGIME = PlanRegime(power=1.08, floor=0.145, rate_exponent=0.31, noise_exponent=0.55, oscillation=0.16,
                    steps_exponent=0.6, reference_steps=3.125, judged_error_factor=0.75, oscillation_dof=3.4,
                    explored_oscillation=0.073)


def _trend(rounds: int, floor: float = 0.1, start: float = 2.3, k0: float = 8.0, alpha: float = 1.5):
    """A power-law learning curve ``floor + A (k + k0)**-alpha`` from ``start`` (2.3 to 0.58 in 14 rounds)."""
    k = np.arange(rounds + 1, dtype=float)
    amplitude = (start - floor) * k0 ** alpha
    return floor + amplitude * (k + k0) ** -alpha


def _trajectories(m: float, count: int, rounds: int, ratio: float, b: float, seed: int,
                  dof: float | None = None):
    """``count`` trajectories of a known oscillation ``m sqrt(T) ratio**-b`` (normal or Student-t)."""
    rng = np.random.default_rng(seed)
    trend = _trend(rounds)
    out = []
    for _ in range(count):
        z = rng.standard_normal(trend.size) if dof is None else \
            rng.standard_t(dof, trend.size) * math.sqrt((dof - 2.0) / dof)
        out.append((list(np.maximum(trend + m * np.sqrt(trend) * ratio ** -b * z, 0.0)), [ratio] * rounds))
    return out


@pytest.mark.parametrize("m, ratio", [(0.2, 1.0), (0.05, 1.0), (0.2, 0.3)])
def test_the_estimator_recovers_a_known_oscillation(m: float, ratio: float) -> None:
    estimate = difference_oscillation(_trajectories(m, 400, 14, ratio, 0.55, seed=1), noise_exponent=0.55)
    assert estimate is not None and estimate.differences == 400 * 13
    # the trend's own curvature adds a little (largest on the small oscillation)
    assert estimate.coefficient == pytest.approx(m, rel=0.06)
    assert estimate.coefficient >= m * 0.97


def test_a_heavy_tailed_oscillation_is_recovered_by_its_standard_deviation() -> None:
    estimate = difference_oscillation(_trajectories(0.2, 2000, 14, 1.0, 0.55, seed=2, dof=3.4), 0.55)
    assert estimate is not None and estimate.coefficient == pytest.approx(0.2, rel=0.08)


def test_one_jobs_exploration_separates_a_network_that_oscillates_three_times_more() -> None:
    # two variants' trajectories of 12 rounds each, as one exploration measures them
    quiet = [difference_oscillation(_trajectories(0.05, 2, 12, 1.0, 0.55, seed=s), 0.55).coefficient
             for s in range(200)]
    loud = [difference_oscillation(_trajectories(0.15, 2, 12, 1.0, 0.55, seed=s), 0.55).coefficient
            for s in range(200, 400)]
    assert np.quantile(quiet, 0.9) < np.quantile(loud, 0.1)


def test_a_smooth_trend_measures_almost_nothing_and_a_line_nothing() -> None:
    line = [(list(2.0 - 0.1 * np.arange(12)), [1.0] * 11)]
    assert difference_oscillation(line, 0.55).coefficient == pytest.approx(0.0, abs=1e-12)
    # the trend's curvature is the estimator's upward bias: small on the usual descent, 0.04 on one
    # that halves the loss in three rounds
    assert difference_oscillation([(list(_trend(14)), [1.0] * 14)], 0.55).coefficient < 0.02
    assert difference_oscillation([(list(_trend(14, k0=4.0)), [1.0] * 14)], 0.55).coefficient < 0.045


def test_too_short_or_inconsistent_trajectories() -> None:
    assert difference_oscillation([([2.3, 2.0], [1.0])], 0.55) is None
    assert difference_oscillation([], 0.55) is None
    with pytest.raises(ScenarioError, match="3 losses need 2 ratios, got 1") as err:
        difference_oscillation([([2.3, 2.0, 1.8], [1.0])], 0.55)
    assert "\n" not in str(err.value)
    with pytest.raises(ScenarioError, match="finite"):
        difference_oscillation([([2.3, float("nan"), 1.8], [1.0, 1.0])], 0.55)


def test_the_combination_adds_only_the_excess_over_the_reference() -> None:
    assert combined_oscillation(0.16, 0.05, 0.073) == 0.16  # a network like the bank's keeps the constant
    assert combined_oscillation(0.16, 0.073, 0.073) == 0.16
    assert combined_oscillation(0.16, 0.2, 0.073) == pytest.approx(math.sqrt(0.16**2 + 0.2**2 - 0.073**2))
    assert combined_oscillation(0.16, None, 0.073) == 0.16
    assert combined_oscillation(0.16, 0.4, None) == 0.16  # no reference: the constant as it is
    with pytest.raises(ScenarioError, match="measured must be a number >= 0"):
        combined_oscillation(0.16, -0.1, 0.073)


def test_the_reference_is_checked_in_one_line() -> None:
    raw = {"power": 1.08, "floor": 0.145, "rate_exponent": 0.31, "noise_exponent": 0.55, "oscillation": 0.16,
           "steps_exponent": 0.6, "reference_steps": 3.125, "judged_error_factor": 0.75,
           "oscillation_dof": 3.4, "explored_oscillation": 0.073}
    assert PlanRegime.from_config(raw) == REGIME
    assert PlanRegime.from_config({**raw, "explored_oscillation": None}).explored_oscillation is None
    with pytest.raises(ScenarioError, match="explored_oscillation: must be null or a number >= 0"):
        PlanRegime.from_config({**raw, "explored_oscillation": -0.1})
    for value in ("-0.1", "many"):
        with pytest.raises(ScenarioError, match="profile.plan_regime.explored_oscillation") as err:
            compose_config([f"profile.plan_regime.explored_oscillation={value}"])
        assert "\n" not in str(err.value)
    assert compose_config(["profile.plan_regime.explored_oscillation=0.073"])["profile"]["plan_regime"][
        "explored_oscillation"] == 0.073


def _fitted() -> dict:
    run = {"levels": [0.6, 1.2, 2.3], "mean": [0.1, 0.2, 0.1], "std": [0.1, 0.2, 0.1], "eval_std": [0.05] * 3}
    return {"initial": 2.3, "run": {"full": dict(run), "p50": dict(run)}, "data_exponent_mean": 0.5,
            "data_exponent_std": 0.5}


def test_the_profile_widens_its_oscillation_where_the_exploration_oscillates_more() -> None:
    steps = 3.125
    loud = dict(zip(("full", "p50"), _trajectories(0.3, 2, 12, 1.0, 0.55, seed=5), strict=True))
    quiet = dict(zip(("full", "p50"), _trajectories(0.02, 2, 12, 1.0, 0.55, seed=6), strict=True))
    measured = difference_oscillation(loud.values(), 0.55).coefficient
    expected = math.sqrt(0.16**2 + measured**2 - 0.073**2)
    assert plan_oscillation(loud, REGIME, steps) == pytest.approx(expected)
    assert plan_oscillation(quiet, REGIME, steps) == pytest.approx(0.16)
    off = PlanRegime(**{**REGIME.__dict__, "explored_oscillation": None})
    assert plan_oscillation(loud, off, steps) == pytest.approx(0.16)
    # at other local steps the reference scales with the constant
    assert plan_oscillation(quiet, REGIME, 2 * steps) == pytest.approx(0.16 * 2**0.6)
    for trajectories, o in [(loud, expected), (quiet, 0.16)]:
        last = trajectories["full"][0][-1]
        profile = with_plan_regime(_fitted(), trajectories, 12, REGIME, steps, {})
        run = profile["run"]["full"]
        below = [(lv, e) for lv, e in zip(run["levels"], run["eval_std"], strict=True) if lv <= 1.25 * last]
        assert below and all(e == pytest.approx(o * math.sqrt(lv)) for lv, e in below)


def test_the_widening_is_opt_in_and_off_keys_the_profile_cache_as_before() -> None:
    from depl_fl.orchestration.profiling import profile_key
    from depl_fl.runs.runconfig import compose_config

    cfg = compose_config(["num_clients=3"])
    assert cfg["profile"]["plan_regime"]["explored_oscillation"] is None
    regime = {k: v for k, v in cfg["profile"]["plan_regime"].items() if k != "explored_oscillation"}
    without = {**cfg, "profile": {**cfg["profile"], "plan_regime": regime}}
    assert profile_key(cfg) == profile_key(without)
    widened = compose_config(["num_clients=3", "profile.plan_regime.explored_oscillation=0.073"])
    assert profile_key(widened) != profile_key(cfg)
