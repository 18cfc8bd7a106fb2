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
    next_loss,
    plan_energy,
    value_settings,
)


def _plan(cost: float | None) -> SimpleNamespace:
    return SimpleNamespace(feasible=cost is not None, predicted={"cost_joules": cost} if cost else {})


def test_stop_when_the_round_costs_more_than_it_can_save():
    assert ExplorationValue(plan_j=30.0, round_j=20.0, floor_j=10.0).stop()  # saves at most 20 = its cost
    assert not ExplorationValue(plan_j=30.1, round_j=20.0, floor_j=10.0).stop()
    assert ExplorationValue(plan_j=30.1, round_j=20.0, floor_j=10.0).saving_bound_j == pytest.approx(20.1)
    assert not ExplorationValue(plan_j=math.inf, round_j=1e9, floor_j=0.0).stop()  # no dependable plan


def test_next_loss_is_the_last_loss_minus_the_last_decrease():
    assert next_loss([2.0, 1.5, 1.2]) == pytest.approx(0.9)
    assert next_loss([1.0, 1.2]) == pytest.approx(1.2)  # a round that rose predicts no decrease
    assert next_loss([1.0, 0.4]) == 0.0  # never below 0
    assert next_loss([0.8]) == pytest.approx(0.8)


def test_the_value_plans_from_the_loss_at_hand_and_the_floor_from_the_next_one():
    asked = []

    def plan(method: str, loss: float) -> SimpleNamespace:
        asked.append((method, round(loss, 9)))
        return _plan(100.0 * loss if method == "depl" else 40.0 * loss)

    value = exploration_value(plan, round_j=12.0, trajectory=[2.0, 1.0, 0.7], method="depl")
    assert asked == [("depl", 0.7), ("expectation", 0.4)]
    assert (value.plan_j, value.round_j, value.floor_j) == pytest.approx((70.0, 12.0, 16.0))
    assert not value.stop()  # 70 > 12 + 16: one more round may still save up to 54 J
    cheap = exploration_value(lambda m, loss: _plan(25.0 if m == "depl" else 10.0), round_j=15.0,
                              trajectory=[2.0, 1.0], method="depl")
    assert cheap.stop() and cheap.to_dict() == {"plan_j": 25.0, "round_j": 15.0, "floor_j": 10.0}


def test_no_dependable_plan_never_stops_and_an_infeasible_floor_counts_zero():
    value = exploration_value(lambda m, loss: _plan(None), round_j=1.0, trajectory=[2.0, 1.0])
    assert value.plan_j == math.inf and not value.stop()
    floorless = exploration_value(lambda m, loss: _plan(5.0) if m == "depl" else None, round_j=4.0,
                                  trajectory=[2.0, 1.0])
    assert floorless.floor_j == 0.0 and not floorless.stop()  # 5 > 4 + 0
    assert plan_energy(None) == math.inf


def test_the_value_stop_needs_the_stop_when_met_switch():
    assert value_settings({}) == (True, 4)
    assert value_settings({"value_stop": False, "value_from_round": 2}) == (False, 2)
    assert value_settings({"stop_when_met": False})[0] is False
