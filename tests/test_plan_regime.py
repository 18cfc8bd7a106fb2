"""The plan regime: the learning curve below the exploration, the judged error and the t oscillation.

Protects: the contract's version-2 fields ``judged_error`` and ``eval_dof`` and
the set-scaled oscillation (docs/CONTRACT_V2.md), the planner's moments of
them, and the learning-curve profile of :mod:`depl_fl.tracking.learning_curve`.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest

from depl_fl.contract.plan import RELAXED_DEADLINE_FACTOR, RoundDecision, Targets, relief_text
from depl_fl.contract.scenario import scenario_from_dict, scenario_to_dict
from depl_fl.contract.semantics import (
    effective_ratio,
    judged_losses,
    judged_probability,
    simulate_final_losses,
)
from depl_fl.errors import ScenarioError
from depl_fl.planner import PlanStart, make_plan
from depl_fl.planner.quantile import LossPropagator, propagate
from depl_fl.tracking.learning_curve import (
    PlanRegime,
    curve_levels,
    effective_floor,
    plan_regime_run,
    rate_coefficient,
)

BASE = {
    "version": 2,
    "clusters": [{"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9}],
                  "bytes_per_s": 1e6}],
    "clients": [{"id": f"c{i}", "cluster": "A", "num_samples": 100} for i in range(4)],
    "models": [{"id": "full", "flops_per_sample": 1e6, "size_bytes": 1e4}],
    "loss": {"initial": 0.6, "data_exponent_mean": 0.3, "data_exponent_std": 0.5,
             "run": {"full": {"levels": [0.0, 0.1, 1.0], "mean": [0.0, 0.0, 0.09],
                              "std": [0.0, 0.05, 0.15], "eval_std": [0.0, 0.03, 0.1]}}},
}
REGIME = PlanRegime(power=1.08, floor=0.145, rate_exponent=0.31, noise_exponent=0.55, oscillation=0.16,
                    steps_exponent=0.6, reference_steps=3.125, judged_error_factor=0.75, oscillation_dof=3.4)


def _scenario(**loss: object):
    doc = copy.deepcopy(BASE)
    doc["loss"].update(loss)
    return scenario_from_dict(doc)


def _rounds(clients: tuple[str, ...], k: int) -> list[RoundDecision]:
    return [RoundDecision("full", clients, {"A": 0})] * k


# -- contract: the fields --------------------------------------------------------------------------
def test_judged_error_and_eval_dof_round_trip_and_are_version_2_only() -> None:
    scen = _scenario(judged_error=0.01, eval_dof=3.4)
    assert scen.loss.judged_error == 0.01 and scen.loss.eval_dof == 3.4
    again = scenario_from_dict(scenario_to_dict(scen))
    assert again.loss == scen.loss
    doc = copy.deepcopy(BASE)
    doc["version"] = 1
    doc["loss"]["run"]["full"].pop("eval_std")
    doc["loss"].update(judged_error=0.01, eval_dof=3.4)
    assert scenario_from_dict(doc).loss.judged_error is None  # a version-1 extra: ignored


@pytest.mark.parametrize("field, value, message", [
    ("judged_error", -0.1, "loss.judged_error"),
    ("eval_dof", 2.0, "loss.eval_dof"),
    ("eval_dof", "many", "loss.eval_dof"),
])
def test_bad_plan_regime_fields_are_one_line_errors(field: str, value: object, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as err:
        _scenario(**{field: value})
    assert "\n" not in str(err.value)


# -- contract: the semantics -----------------------------------------------------------------------
def test_judged_error_adds_its_variance_even_to_a_plan_of_no_round() -> None:
    scen = _scenario(judged_error=0.02)
    walk = np.full(200_000, 0.5)
    judged = judged_losses(scen, None, walk, np.random.default_rng(1))
    assert judged.mean() == pytest.approx(0.5, abs=2e-3)
    assert judged.var() == pytest.approx(0.02 * 0.5, rel=0.03)
    zero_rounds = simulate_final_losses(scen, [], 100_000, 2)
    assert zero_rounds.std() == pytest.approx(math.sqrt(0.02 * 0.6), rel=0.03)
    plain = simulate_final_losses(_scenario(), [], 10, 2)
    assert np.all(plain == 0.6)  # without the field a plan of no round is judged at its start


def test_oscillation_scales_with_the_last_sets_data_ratio() -> None:
    scen = _scenario()
    walk = np.full(200_000, 1.0)  # eval_std 0.1 at loss 1
    rng = np.random.default_rng(3)
    for clients in [("c0", "c1", "c2", "c3"), ("c0",)]:
        last = _rounds(clients, 1)[-1]
        expected = 0.1 * effective_ratio(scen, clients) ** -0.5
        assert judged_losses(scen, last, walk, rng).std() == pytest.approx(expected, rel=0.02)


def test_student_t_oscillation_keeps_its_std_and_has_the_heavier_tail() -> None:
    normal, heavy = _scenario(), _scenario(eval_dof=3.4)
    last = _rounds(("c0", "c1", "c2", "c3"), 1)[-1]
    walk = np.full(400_000, 1.0)
    a = judged_losses(normal, last, walk, np.random.default_rng(4)) - 1.0
    b = judged_losses(heavy, last, walk, np.random.default_rng(4)) - 1.0
    assert b.std() == pytest.approx(a.std(), rel=0.05)
    assert np.quantile(b, 0.999) > 1.3 * np.quantile(a, 0.999)
    assert np.quantile(b, 0.8) < np.quantile(a, 0.8)  # narrower core for the same std


@pytest.mark.parametrize("dof", [None, 3.4])
def test_judged_probability_integrates_what_judged_losses_samples(dof: float | None) -> None:
    scen = _scenario(judged_error=0.01, eval_dof=dof)
    last = _rounds(("c0", "c1"), 1)[-1]
    walk = np.random.default_rng(5).uniform(0.2, 0.6, 200_000)
    sampled = judged_losses(scen, last, walk, np.random.default_rng(6))
    for target in (0.3, 0.45, 0.6):
        sampled_share = np.mean(sampled <= target)
        assert judged_probability(scen, last, walk, target) == pytest.approx(sampled_share, abs=4e-3)


# -- planner -------------------------------------------------------------------------------------------
def test_propagated_moments_carry_the_judged_error_and_the_set_scaled_oscillation() -> None:
    scen = _scenario(judged_error=0.01)
    for clients in [("c0", "c1", "c2", "c3"), ("c1",)]:
        rounds = _rounds(clients, 6)
        mean, var = propagate(scen, rounds)
        mc = simulate_final_losses(scen, rounds, 200_000, 8)
        assert mean == pytest.approx(mc.mean(), abs=0.01)
        assert math.sqrt(var) == pytest.approx(mc.std(), rel=0.08)


def test_no_round_is_not_enough_when_the_judged_error_could_miss_the_target() -> None:
    targets = Targets(0.62, 0.9, 1e6, 30)
    plain = make_plan(_scenario(), targets, method="depl", seed=0, mc_trajectories=20_000)
    judged = make_plan(_scenario(judged_error=0.02), targets, method="depl", seed=0, mc_trajectories=20_000)
    assert plain.rounds == [] and plain.feasible
    assert judged.rounds and judged.feasible
    prop = LossPropagator(_scenario(judged_error=0.02))
    assert prop.start_quantile(0.6, 0.0, 1.2816) == pytest.approx(0.6 + 1.2816 * math.sqrt(0.012))


# -- the learning curve ----------------------------------------------------------------------------
def test_rate_coefficient_puts_the_power_law_through_both_ends_of_the_trajectory() -> None:
    first, last, rounds, power, floor = 2.3, 0.7, 12, 1.5, 0.1
    c = rate_coefficient(first, last, rounds, power, floor)
    alpha = 1.0 / (power - 1.0)
    # L_k = f + A (k + k0)**-alpha with dL/dk = -c (L - f)**p: integrate from the end backwards
    t_end = alpha / (c * (last - floor) ** (power - 1.0))
    amplitude = (last - floor) * t_end ** alpha
    t_start = t_end - rounds
    assert floor + amplitude * t_start ** -alpha == pytest.approx(first, rel=1e-9)
    assert rate_coefficient(0.7, 0.7, rounds, power, floor) == pytest.approx(1e-6)  # no progress


def test_curve_levels_span_floor_to_above_the_last_loss_and_the_floor_yields() -> None:
    levels = curve_levels(0.6, 0.145)
    assert levels[0] == 0.0 and levels[1] == pytest.approx(0.145) and levels[-1] == pytest.approx(0.75)
    assert all(b > a for a, b in zip(levels, levels[1:], strict=False))
    assert effective_floor(0.145, 0.2) == pytest.approx(0.1)  # the exploration got lower: half of it


def test_plan_regime_run_is_the_curve_below_and_the_measured_profile_above() -> None:
    measured = {"levels": [0.5, 1.0, 2.0], "mean": [0.1, 0.3, 0.2], "std": [0.2, 0.3, 0.2],
                "eval_std": [0.1, 0.3, 0.1]}
    run = plan_regime_run(measured, 2.3, 0.6, 12, REGIME, 0.16)
    levels = np.array(run["levels"])
    top = 1.25 * 0.6
    curve = levels <= top + 1e-9
    assert list(levels[~curve]) == [1.0, 2.0]
    c = rate_coefficient(2.3, 0.6, 12, REGIME.power, REGIME.floor)
    expected = c * np.maximum(levels[curve] - REGIME.floor, 0.0) ** REGIME.power
    assert np.allclose(np.array(run["mean"])[curve], expected)
    assert np.allclose(np.array(run["eval_std"])[curve], 0.16 * np.sqrt(levels[curve]))
    assert all(2 * e * e <= s * s * (1 + 1e-12) for e, s in zip(run["eval_std"], run["std"], strict=True))
    doc = copy.deepcopy(BASE)
    doc["loss"]["run"]["full"] = run
    scenario_from_dict(doc)  # a valid version-2 profile


def test_plan_regime_constants_are_checked() -> None:
    raw = {"power": 1.08, "floor": 0.145, "rate_exponent": 0.31, "noise_exponent": 0.55, "oscillation": 0.16,
           "steps_exponent": 0.6, "reference_steps": 3.125, "judged_error_factor": 0.75,
           "oscillation_dof": 3.4}
    assert PlanRegime.from_config(raw) == REGIME
    for key, value in [("power", 1.0), ("oscillation_dof", 2.0), ("floor", -1.0)]:
        with pytest.raises(ScenarioError, match=f"plan_regime.{key}"):
            PlanRegime.from_config({**raw, key: value})
    with pytest.raises(ScenarioError, match="missing floor"):
        PlanRegime.from_config({k: v for k, v in raw.items() if k != "floor"})
    assert REGIME.oscillation_at(2 * 3.125) == pytest.approx(0.16 * 2 ** 0.6)



def test_the_steps_factor_is_the_power_law_inside_the_fitted_range_and_constant_beyond() -> None:
    bounded = dataclasses.replace(REGIME, steps_min=3.2, steps_max=5.6)
    for steps in (3.2, 3.125 * 1.3, 4.5, 5.6):
        assert bounded.steps_factor(steps) == REGIME.steps_factor(steps)
    assert bounded.steps_factor(7.5) == REGIME.steps_factor(5.6) < REGIME.steps_factor(7.5)
    assert bounded.steps_factor(45.0) == REGIME.steps_factor(5.6)
    assert bounded.steps_factor(1.0) == REGIME.steps_factor(3.2) > REGIME.steps_factor(1.0)
    assert bounded.oscillation_at(9.0) == pytest.approx(0.16 * (5.6 / 3.125) ** 0.6)
    only_top = dataclasses.replace(REGIME, steps_max=5.6)
    assert only_top.steps_factor(1.0) == REGIME.steps_factor(1.0)
    assert only_top.steps_factor(9.0) == REGIME.steps_factor(5.6)


def test_the_steps_range_is_read_from_the_config_and_absent_means_unbounded() -> None:
    raw = {"power": 1.08, "floor": 0.145, "rate_exponent": 0.31, "noise_exponent": 0.55, "oscillation": 0.16,
           "steps_exponent": 0.6, "reference_steps": 3.125, "judged_error_factor": 0.75,
           "oscillation_dof": 3.4}
    assert PlanRegime.from_config(raw).steps_max is None
    read = PlanRegime.from_config({**raw, "steps_min": 3.2, "steps_max": 5.6})
    assert (read.steps_min, read.steps_max) == (3.2, 5.6)


@pytest.mark.parametrize(("low", "high", "message"), [
    (6.0, 5.0, r"steps_min: must be at most steps_max, got 6.0 > 5.0"),
    (0.0, 5.0, r"steps_min: must be null or a number > 0, got 0.0"),
    (3.0, math.inf, r"steps_max: must be null or a number > 0, got inf"),
])
def test_a_bad_steps_range_is_a_one_line_error(low: float, high: float, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as err:
        dataclasses.replace(REGIME, steps_min=low, steps_max=high)
    assert "\n" not in str(err.value)


# -- tracking in the plan regime: the trend filter and stopping --------------------------------------
def test_trend_update_weighs_the_measured_loss_by_the_oscillation() -> None:
    from depl_fl.tracking.trend import Trend, update

    prior = Trend(0.5, 0.01)
    assert update(prior, 0.8, 0.0) == Trend(0.8, 0.0)  # no oscillation: the measured loss is the trend
    half = update(prior, 0.8, 0.01)
    assert half.mean == pytest.approx(0.65) and half.var == pytest.approx(0.005)
    assert update(prior, 0.8, 0.09).mean == pytest.approx(0.5 + 0.3 * 0.1)


def test_trend_prediction_follows_the_profile_and_adds_process_noise() -> None:
    from depl_fl.tracking import trend

    loss = _scenario().loss
    after = trend.predict(loss, trend.Trend(1.0, 0.0), "full", "full", 1.0)
    assert after.mean == pytest.approx(1.0 - 0.09)
    drift = max((trend.RATE_UNCERTAINTY * 0.09) ** 2, trend.DRIFT_SHARE ** 2 * 0.1 ** 2)
    walk = 0.15 ** 2 - 2 * 0.1 ** 2
    assert after.var == pytest.approx(walk + drift)


def _regime_controller(tracking: bool = True):
    from depl_fl.orchestration.controller import RunController

    scen = _scenario(judged_error=0.002, initial=0.8)
    targets = Targets(0.35, 0.9, 1e6, 40)

    def planner(s, t, start):
        return make_plan(s, t, method="depl", seed=0, start=start, mc_trajectories=20_000)

    plan = planner(scen, targets, None)
    assert plan.feasible and len(plan.rounds) > 3
    return RunController(scen, targets, plan, planner=planner, tracking=tracking, loss_sem=0.03), plan


def test_one_oscillating_round_moves_the_trend_a_little_and_triggers_no_replan() -> None:
    ctl, plan = _regime_controller()
    first = ctl.next_decision()
    rec = ctl.record(first, 0.8, 0.95, accuracy=None, wall_s=0.0, replied=list(first.clients), rejected=[])
    assert rec["replanned"] is False and ctl.replans == []
    assert 0.7 < rec["trend_loss"] < 0.8  # mostly the prediction, a little of the measured rise
    assert len(ctl.rounds) == len(plan.rounds)


def test_tracking_stops_when_the_measured_loss_judged_meets_the_target() -> None:
    ctl, plan = _regime_controller()
    first = ctl.next_decision()
    # 0.30 + 1.2816 * sqrt(2 * 0.03**2) = 0.354 > 0.35: not yet
    rec = ctl.record(first, 0.8, 0.30, accuracy=None, wall_s=0.0, replied=list(first.clients), rejected=[])
    assert not any(r["reason"].startswith("target met") for r in ctl.replans)
    second = ctl.next_decision()
    rec = ctl.record(second, 0.30, 0.28, accuracy=None, wall_s=0.0, replied=list(second.clients), rejected=[])
    assert rec["replanned"] is True and ctl.replans[-1]["reason"].startswith("target met")
    assert ctl.next_decision() is None
    static, _ = _regime_controller(tracking=False)
    first = static.next_decision()
    static.record(first, 0.8, 0.1, accuracy=None, wall_s=0.0, replied=list(first.clients), rejected=[])
    assert static.next_decision() is not None  # a static plan runs as planned


def test_the_rate_is_measured_on_the_last_share_of_the_exploration():
    from depl_fl.orchestration.profile_fit import rate_span

    losses = [2.6, 2.23, 2.04, 1.62, 1.41]
    assert rate_span(losses, 4, 1.0) == (2.6, 1.41, 4)  # the whole trajectory, from the fresh loss
    assert rate_span(losses, 4, 0.5) == (2.04, 1.41, 2)  # the plateau of the first rounds left out
    assert rate_span(losses, 4, 0.3) == (2.04, 1.41, 2)  # ceil(1.2) rounds
    assert rate_span(losses[:2], 1, 0.5) == (2.6, 2.23, 1)  # at least one round
    regime = PlanRegime(1.08, 0.145, 0.31, 0.55, 0.16, 0.6, 3.125, 0.754)
    whole = rate_coefficient(2.6, 1.41, 4, regime.power, 0.145)
    late = rate_coefficient(*rate_span(losses, 4, 0.5), regime.power, 0.145)
    assert late > whole  # the later rounds descend faster than the plateau-diluted average


def test_a_rate_window_starting_above_the_fresh_loss_reads_from_the_fresh_loss():
    """A learning rate far too large (20 synthetic clients at lr 0.5): the loss rises from 3.5 to 924 and
    recovers to 17.9. The rise is no progress: the curve through it must not fall to 0 in one round."""
    from depl_fl.orchestration.profile_fit import rate_span

    rising = [3.525, 40.29, 923.9, 21.33, 17.6, 17.85]
    assert rate_span(rising, 5, 0.5) == (3.525, 17.85, 3)
    assert rate_span(rising, 5, 1.0) == (3.525, 17.85, 5)
    assert rate_span([2.3, 2.5, 1.9, 1.6], 3, 0.5) == (2.3, 1.6, 2)  # a rise the run recovered from
    regime = PlanRegime(1.1876, 0.4034, 0.4895, 0.1015, 0.0112, 0.6, 3.125, 0.1374)
    measured = {"levels": [0.4, 3.0, 30.0], "mean": [0.0, 1.0, 5.0], "std": [0.1, 0.1, 0.1]}
    run = plan_regime_run(measured, *rate_span(rising, 5, 0.5), regime, 0.0112)
    at_last = [mu for lv, mu in zip(run["levels"], run["mean"], strict=True) if 0.4034 < lv <= 1.25 * 17.85]
    assert at_last and max(at_last) < 1e-3  # no progress to plan with, not a drop to 0


# -- a trend start: the measured levels above the curve ----------------------------------------------
#: The residual network's exploration (seed 5): the raw losses swing up by 0.6 around a loss of 1.1, which
#: the measured profile above the curve reads as a mean rise.
RISING = {"levels": [1.103, 1.855, 2.29], "mean": [-0.6, 0.78, 0.002], "std": [0.8, 0.6, 0.007],
          "eval_std": [0.0, 0.0, 0.0]}
SWINGING = PlanRegime(power=1.005, floor=0.0425, rate_exponent=0.15, noise_exponent=0.93,
                      oscillation=0.5, steps_exponent=0.6, reference_steps=3.125, judged_error_factor=0.75,
                      oscillation_dof=5.0)


def _swinging_run(no_rise_above: bool) -> dict[str, list[float]]:
    return plan_regime_run(RISING, 2.3, 0.88, 8, SWINGING, 0.54, rate=0.076, floor=0.0425,
                           no_rise_above=no_rise_above)


def test_a_trend_start_reads_no_measured_rise_above_the_curve() -> None:
    kept, lifted = _swinging_run(False), _swinging_run(True)
    top = 1.25 * 0.88
    at_top = lifted["mean"][lifted["levels"].index(max(v for v in lifted["levels"] if v <= top + 1e-9))]
    above = [i for i, v in enumerate(lifted["levels"]) if v > top + 1e-9]
    assert [kept["mean"][i] for i in above] == [-0.6, 0.78, 0.002]
    assert [lifted["mean"][i] for i in above] == [at_top, 0.78, at_top]
    assert kept["std"] == lifted["std"] and kept["levels"] == lifted["levels"]
    below = [i for i in range(len(kept["levels"])) if i not in above]
    assert [kept["mean"][i] for i in below] == [lifted["mean"][i] for i in below]


def test_a_measured_rise_above_the_curve_caps_a_trend_starts_probability_and_lifting_it_plans() -> None:
    start = PlanStart(loss_mean=0.88, loss_std=0.38)
    results = {}
    for no_rise_above in (False, True):
        doc = copy.deepcopy(BASE)
        doc["loss"].update(initial=0.88, eval_dof=5.0)
        doc["loss"]["run"]["full"] = _swinging_run(no_rise_above)
        scen = scenario_from_dict(doc)
        results[no_rise_above] = [make_plan(scen, Targets(0.35, 0.95, deadline), start=start, seed=1)
                                  for deadline in (10.0, 100.0)]
    kept, lifted = results[False], results[True]
    # The mass of the start's spread caught above the curve never comes down: ten times the deadline
    # does not reach 0.95.
    assert not kept[0].feasible and not kept[1].feasible
    assert kept[1].predicted["probability"] < 0.95
    assert lifted[0].feasible and lifted[0].predicted["probability"] >= 0.95
    assert lifted[0].predicted["time_s"] < 10.0


def test_no_plan_says_whether_more_deadline_makes_one() -> None:
    start = PlanStart(loss_mean=0.88, loss_std=0.38)

    def plans(no_rise_above: bool, deadline: float):
        doc = copy.deepcopy(BASE)
        doc["loss"].update(initial=0.88, eval_dof=5.0)
        doc["loss"]["run"]["full"] = _swinging_run(no_rise_above)
        scen = scenario_from_dict(doc)
        targets = Targets(0.35, 0.95, deadline)
        longer = Targets(0.35, 0.95, deadline * RELAXED_DEADLINE_FACTOR)
        return (targets, make_plan(scen, targets, start=start, seed=1),
                make_plan(scen, longer, start=start, seed=1))

    targets, best, relaxed = plans(False, 10.0)  # a ceiling of the loss model: time does not bind
    text = relief_text(best, relaxed, targets)
    reach = best.predicted["probability"]
    assert "more deadline alone does not make one" in text and f"target.prob below {reach:.3g}" in text
    targets, best, relaxed = plans(True, 2.0)  # the deadline binds: a longer one has a plan
    assert not best.feasible and relaxed.feasible
    need = relaxed.predicted["time_s"] - 2.0
    assert relief_text(best, relaxed, targets) == (
        f"; with {RELAXED_DEADLINE_FACTOR:g}x the deadline a plan exists: a target.deadline_s longer by at "
        f"least {need:.0f} s makes one")
    assert relief_text(best, None, targets) == ""
