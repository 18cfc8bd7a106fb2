"""What a used-up plan does (``tracking.plan_end``): end the job, or go on until the stop rule is met."""

from __future__ import annotations

import dataclasses

import pytest

from depl_fl.contract.plan import Plan
from depl_fl.contract.semantics import round_time
from depl_fl.errors import ScenarioError
from depl_fl.orchestration.controller import RunController
from depl_fl.tracking.online import ReplanPolicy
from tests.two_clusters import two_cluster_setting

#: Far above the target 1.5: every prediction with rounds left is behind it, no model meets it.
HIGH = 2.2
#: The stop rule's measured margin: a loss NEAR (1.45) judged with no round left lies under the target
#: (no re-plan), but NEAR + MARGIN does not meet it; MET + MARGIN does.
MARGIN, NEAR, MET = 0.1, 1.45, 1.35


def _empty_plan_planner(calls):
    """A stub planner whose re-plan finds the target met from the trend (a feasible empty plan)."""
    def planner(scenario, targets, start):
        calls.append(start)
        return Plan(method="depl", feasible=True, rounds=[], predicted={})
    return planner


def _controller(plan_end, *, margin=0.05, max_rounds=None, deadline_rounds=None, planner=None):
    scenario, targets, plan, _ = two_cluster_setting()
    short = dataclasses.replace(plan, rounds=list(plan.rounds[:2]))
    deadline = targets.deadline_s if deadline_rounds is None else \
        deadline_rounds * round_time(scenario, short.rounds[-1])
    targets = dataclasses.replace(targets, max_rounds=max_rounds, deadline_s=deadline)
    kwargs = {} if plan_end is None else {"plan_end": plan_end}
    return RunController(scenario, targets, short, tracking=True,
                         planner=planner if planner is not None else _empty_plan_planner([]),
                         replan_policy=ReplanPolicy(margin=margin, ahead_margin=None), **kwargs)


def _run(ctl, losses, before=2.3):
    """Record a round per loss while the controller has one; the round records."""
    recs = []
    for loss in losses:
        decision = ctl.next_decision()
        if decision is None:
            break
        recs.append(ctl.record(decision, before, loss, accuracy=0.5, wall_s=0.1,
                               replied=list(decision.clients), rejected=[], loss_margin=MARGIN))
        before = loss
    return recs


def test_a_behind_target_used_up_plan_goes_on_until_the_stop_rule_is_met():
    ctl = _controller("stop_rule")
    recs = _run(ctl, [HIGH, NEAR])
    assert recs[0]["predicted_quantile"] > 1.55  # the plan's last prediction with a round left: behind
    assert recs[1]["predicted_quantile"] <= 1.5 and not recs[1]["replanned"]  # judged met: no re-plan
    assert ctl.next_decision() == ctl.rounds[1]  # the last round's decision once more
    assert recs[-1]["past_plan"]["judged_quantile"] > 1.55
    assert [n for n in ctl.take_notes() if "going on one round at a time" in n]
    more = _run(ctl, [NEAR, NEAR, MET, NEAR])  # MET meets the stop rule: the job ends there
    assert [r["loss"] for r in more] == [NEAR, NEAR, MET]
    assert ctl.rounds_done == 5 and ctl.next_decision() is None
    assert all(r.get("past_plan") for r in more[:2]) and "past_plan" not in more[-1]
    assert not [n for n in ctl.take_notes() if "going on" in n]  # one line when it starts, not every round


def test_a_dependable_used_up_plan_ends_as_before():
    ctl = _controller("stop_rule", margin=1.0)  # HIGH's prediction lies within 1.5 + 1.0
    recs = _run(ctl, [HIGH, NEAR, NEAR])
    assert len(recs) == 2 and ctl.next_decision() is None and "past_plan" not in recs[-1]


def test_a_model_meeting_the_stop_rule_at_the_plans_end_ends_it():
    ctl = _controller("stop_rule")
    assert len(_run(ctl, [HIGH, MET, HIGH])) == 2 and ctl.next_decision() is None


@pytest.mark.parametrize("limit", ["max_rounds", "deadline"])
def test_the_round_cap_and_the_deadline_end_the_rounds_past_the_plan(limit):
    # Room for exactly one round past the two planned ones.
    room = {"max_rounds": 3} if limit == "max_rounds" else {"deadline_rounds": 3.5}
    ctl = _controller("stop_rule", **room)
    recs = _run(ctl, [HIGH] + [NEAR] * 5)
    assert len(recs) == 3 and ctl.next_decision() is None
    assert recs[1]["past_plan"] and "past_plan" not in recs[2]


def test_a_dependable_replan_past_the_plan_replaces_the_one_round_continuation():
    _, _, _, real = two_cluster_setting()
    calls = []

    def planner(scenario, targets, start):  # the trend meets the target once, then the real planner
        calls.append(start)
        return _empty_plan_planner([])(scenario, targets, start) if len(calls) == 1 else \
            real(scenario, targets, start)

    ctl = _controller("stop_rule", planner=planner)
    assert _run(ctl, [HIGH, NEAR])[-1]["past_plan"]
    rec = _run(ctl, [1.52])[0]  # behind with no round left (1.52 > 1.5): the real planner re-plans
    assert rec["loss_flag"] is None and len(calls) == 2
    assert rec["replanned"] and "past_plan" not in rec and ctl.replans[-1]["new_remaining_rounds"] >= 1
    assert ctl.continuation_quantile == rec["predicted_quantile_after_replan"] <= 1.55
    # The re-plan's rounds are dependable: once they are used up the job ends, met or not.
    left = len(ctl.rounds) - ctl.rounds_done
    assert len(_run(ctl, [NEAR] * (left + 2))) == left and ctl.next_decision() is None


@pytest.mark.parametrize("plan_end", [None, "plan"])
def test_plan_ends_the_job_when_the_rounds_are_used_up(plan_end):
    calls = []
    ctl = _controller(plan_end, planner=_empty_plan_planner(calls))
    recs = _run(ctl, [HIGH] + [NEAR] * 3)
    assert len(recs) == 2 and ctl.next_decision() is None and ctl.plan_end == "plan"
    assert not any("past_plan" in r for r in recs) and calls  # it re-planned, and kept the leftover round
    reference = _run(_controller("stop_rule"), [HIGH, NEAR])
    strip = [{k: v for k, v in r.items() if k not in ("past_plan", "wall_s")} for r in reference]
    assert [{k: v for k, v in r.items() if k != "wall_s"} for r in recs] == strip


def test_a_bad_plan_end_is_refused():
    from depl_fl.runs.runconfig import compose_config

    assert compose_config([])["tracking"]["plan_end"] == "plan"
    assert compose_config(["tracking.plan_end=stop_rule"])["tracking"]["plan_end"] == "stop_rule"
    with pytest.raises(ScenarioError, match="plan_end"):
        compose_config(["tracking.plan_end=forever"])
    with pytest.raises(ScenarioError, match="plan_end"):
        compose_config(["tracking.enabled=false", "tracking.plan_end=stop_rule"])
    with pytest.raises(ValueError, match="plan_end"):
        _controller("forever")
