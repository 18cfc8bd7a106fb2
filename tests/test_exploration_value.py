"""The exploration's value stop, the rule: one more round is explored only while it can pay for itself.

The three energies, the loss one more round reaches, an infeasible plan
(``tests/test_explore_value_stop.py`` runs it in a job).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from depl_fl.orchestration.exploration_value import (
    ExplorationValue,
    exploration_value,
    look_ahead_loss,
    next_loss,
    plan_energy,
    value_settings,
)


def _plan(cost: float | None) -> SimpleNamespace:
    return SimpleNamespace(feasible=cost is not None, predicted={"cost_joules": cost} if cost else {})


def test_stop_when_the_round_costs_more_than_it_saves():
    assert ExplorationValue(plan_j=30.0, round_j=20.0, next_plan_j=10.0).stop()  # saves 20 = its cost
    assert not ExplorationValue(plan_j=30.1, round_j=20.0, next_plan_j=10.0).stop()
    assert ExplorationValue(plan_j=30.1, round_j=20.0, next_plan_j=10.0).saving_j == pytest.approx(20.1)
    assert not ExplorationValue(plan_j=math.inf, round_j=1e9, next_plan_j=0.0).stop()  # no dependable plan
    assert ExplorationValue(plan_j=5.0, round_j=1.0, next_plan_j=math.inf).stop()  # none after it


def test_next_loss_is_the_last_loss_minus_the_mean_of_the_last_two_decreases():
    assert next_loss([2.5, 2.0, 1.5, 1.3]) == pytest.approx(1.3 - (0.5 + 0.2) / 2)
    assert next_loss([2.0, 1.5]) == pytest.approx(1.0)  # one round: its decrease
    assert next_loss([1.0, 0.9, 1.2]) == pytest.approx(1.2)  # rounds that rose predict no decrease
    assert next_loss([1.0, 0.6, 0.2]) == 0.0  # never below 0
    assert next_loss([0.8]) == pytest.approx(0.8)


def test_the_value_plans_from_the_loss_at_hand_and_from_the_next_one():
    asked = []

    def plan(loss: float) -> SimpleNamespace:
        asked.append(round(loss, 9))
        return _plan(100.0 * loss)

    value = exploration_value(plan, round_j=12.0, trajectory=[2.0, 1.0, 0.7])
    assert asked == [0.7, 0.05]  # 0.7 minus the mean of the last two decreases, (2.0 - 0.7) / 2
    assert (value.plan_j, value.round_j, value.next_plan_j) == pytest.approx((70.0, 12.0, 5.0))
    assert not value.stop()  # the round saves 65 J for 12 J
    slow = exploration_value(lambda loss: _plan(50.0 + 10.0 * loss), round_j=15.0, trajectory=[2.0, 1.0])
    assert slow.stop()  # the round saves 10 J for 15 J
    assert slow.to_dict() == pytest.approx({"plan_j": 60.0, "round_j": 15.0, "next_plan_j": 50.0})


def test_the_look_ahead_is_floored_at_the_target_loss():
    assert look_ahead_loss([2.0, 1.0, 0.7], 0.45) == pytest.approx(0.45)  # 0.05 by the straight line
    assert look_ahead_loss([2.0, 1.6, 1.3], 0.45) == pytest.approx(next_loss([2.0, 1.6, 1.3]))
    assert look_ahead_loss([2.0, 1.0, 0.7], 0.0) == pytest.approx(0.05)  # no floor: as before
    asked = []

    def plan(loss: float) -> SimpleNamespace:  # 12 J above the target, 3 J at it, no round below it
        asked.append(round(loss, 9))
        cost = 12.0 if loss > 0.45 else 3.0 if loss == 0.45 else 0.0
        return SimpleNamespace(feasible=True, predicted={"cost_joules": cost})

    unfloored = exploration_value(plan, round_j=10.0, trajectory=[2.0, 1.0, 0.7])
    assert unfloored.next_plan_j == 0.0 and not unfloored.stop()  # 12 J against 10 J + nothing
    floored = exploration_value(plan, round_j=10.0, trajectory=[2.0, 1.0, 0.7], floor=0.45)
    assert asked == [0.7, 0.05, 0.7, 0.45] and floored.next_plan_j == 3.0
    assert floored.stop()  # 12 J against 10 J + 3 J


def test_no_dependable_plan_now_never_stops():
    value = exploration_value(lambda loss: _plan(None), round_j=1.0, trajectory=[2.0, 1.0])
    assert value.plan_j == math.inf and not value.stop()
    assert exploration_value(lambda loss: None, round_j=1.0, trajectory=[2.0, 1.0]).stop() is False
    assert plan_energy(None) == math.inf


def test_the_value_stop_needs_the_stop_when_met_switch():
    assert value_settings({}) == (False, 4)  # opt-in
    assert value_settings({"value_stop": True}) == (True, 4)
    assert value_settings({"value_stop": False, "value_from_round": 2}) == (False, 2)
    assert value_settings({"stop_when_met": False, "value_stop": True})[0] is False
