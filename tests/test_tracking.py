"""Tests for depl_fl.tracking.online: when the re-plan policy fires, and the record format."""

from __future__ import annotations

import json
import math

import pytest

from depl_fl.errors import ScenarioError
from depl_fl.tracking.online import ReplanPolicy, ReplanRecord


def test_behind_target_triggers_only_above_target():
    policy = ReplanPolicy(every_rounds=None)
    assert policy.decide(3, 0.41, 0.35) == "behind target: predicted q=0.41 > 0.35"
    assert policy.decide(3, 0.35, 0.35) is None
    assert policy.decide(3, 0.20, 0.35) is None
    assert policy.decide(3, None, 0.35) is None
    assert policy.decide(3, math.nan, 0.35) is None


def test_margin_tolerates_small_overshoot():
    policy = ReplanPolicy(margin=0.02)
    assert policy.decide(2, 0.36, 0.35) is None
    assert policy.decide(2, 0.38, 0.35) == "behind target: predicted q=0.38 > 0.35 + margin 0.02"


def test_no_overshoot_is_tolerated_when_no_round_is_left():
    policy = ReplanPolicy(margin=0.05, ahead_margin=0.05)
    assert policy.decide(9, 0.37, 0.35, remaining_rounds=3) is None
    assert policy.decide(9, 0.37, 0.35, remaining_rounds=0) == "behind target: predicted q=0.37 > 0.35"
    assert policy.decide(9, 0.35, 0.35, remaining_rounds=0) is None


def test_failed_clients_take_precedence():
    policy = ReplanPolicy(every_rounds=2)
    reason = policy.decide(2, 0.9, 0.35, failed_planned_clients=["c3", "c1"])
    assert reason == "planned clients failed: c1, c3"


def test_periodic_trigger():
    policy = ReplanPolicy(every_rounds=5)
    fired = [k for k in range(1, 21) if policy.decide(k, 0.30, 0.35) is not None]
    assert fired == [5, 10, 15, 20]
    assert policy.decide(5, 0.30, 0.35) == "periodic every 5 rounds"
    assert policy.decide(5, 0.30, 0.35, remaining_rounds=0) is None
    assert all(ReplanPolicy().decide(k, 0.30, 0.35) is None for k in range(1, 21))


def test_ahead_of_target_triggers_below_the_ahead_margin_but_not_on_the_last_round():
    policy = ReplanPolicy(margin=0.05, ahead_margin=0.05)
    assert policy.decide(4, 0.29, 0.35, remaining_rounds=6) == \
        "ahead of target: predicted q=0.29 < 0.35 - margin 0.05"
    assert policy.decide(4, 0.31, 0.35, remaining_rounds=6) is None
    assert policy.decide(4, 0.29, 0.35, remaining_rounds=0) is None
    assert policy.decide(4, math.nan, 0.35, remaining_rounds=6) is None
    assert ReplanPolicy(margin=0.05).decide(4, 0.01, 0.35, remaining_rounds=6) is None
    # behind still wins over everything but failures
    assert policy.decide(4, 0.41, 0.35, remaining_rounds=6).startswith("behind target")


@pytest.mark.parametrize("kwargs, message", [
    ({"ahead_margin": -0.1}, "ahead_margin"),
    ({"ahead_margin": math.nan}, "ahead_margin"),
    ({"ahead_margin": True}, "ahead_margin"),
    ({"every_rounds": 0}, "every_rounds"),
    ({"every_rounds": 2.5}, "every_rounds"),
    ({"margin": -0.1}, "margin"),
    ({"margin": math.inf}, "margin"),
])
def test_invalid_policy(kwargs, message):
    with pytest.raises(ScenarioError, match=message):
        ReplanPolicy(**kwargs)


def test_record_to_dict_is_json():
    record = ReplanRecord(4, "behind target: predicted q=0.41 > 0.35", 6, 8, 0.41, math.nan,
                          feasible=False, planner_seconds=0.25)
    doc = json.loads(json.dumps(record.to_dict(), allow_nan=False))
    assert doc == {"round": 4, "reason": "behind target: predicted q=0.41 > 0.35",
                   "old_remaining_rounds": 6, "new_remaining_rounds": 8,
                   "quantile_before": 0.41, "quantile_after": None,
                   "feasible": False, "planner_seconds": 0.25}
