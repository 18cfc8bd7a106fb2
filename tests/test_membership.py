"""Elastic membership: lost clients leave the plan and every prediction at once, late ones join,
reply timeouts follow the modelled round time; the controller's state survives a checkpoint."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from depl_fl.contract.plan import Plan, RoundDecision, Targets
from depl_fl.contract.scenario import scenario_from_dict
from depl_fl.contract.semantics import round_time
from depl_fl.orchestration.checkpointing import controller_state, restore_controller
from depl_fl.orchestration.controller import RunController
from depl_fl.orchestration.membership import admit_clients, drop_clients, round_timeout_s
from depl_fl.planner import make_plan
from depl_fl.tracking.online import ReplanPolicy

DATA = Path(__file__).parent / "data" / "example_scenario.json"


def _scenario(num_clients: int = 6):
    doc = json.loads(DATA.read_text())
    base = doc["clusters"][0]
    doc["clusters"] = [dict(base, id="A"), dict(base, id="B", activation_joules=5.0)]
    doc["clients"] = [{"id": f"c{i}", "cluster": "AB"[i % 2], "num_samples": 150 + 10 * i}
                      for i in range(num_clients)]
    doc["loss"]["reference_samples"] = 1000
    return scenario_from_dict(doc)


def _planner(scn, tgt, start):
    return make_plan(scn, tgt, method="depl", seed=0, start=start)


@pytest.fixture()
def setting():
    scenario = _scenario()
    targets = Targets(target_loss=1.5, target_prob=0.9, deadline_s=400.0)
    plan = _planner(scenario, targets, None)
    assert plan.feasible and len(plan.rounds) >= 2
    return scenario, targets, plan


def test_drop_clients_removes_them_empty_rounds_and_unused_levels():
    scenario = _scenario()
    rounds = [RoundDecision("full", ("c0", "c1"), {"A": 0, "B": 1}),
              RoundDecision("full", ("c1",), {"B": 1}),
              RoundDecision("full", ("c2", "c4"), {"A": 1})]
    kept = drop_clients(rounds, {"c1"}, scenario)
    assert kept == [RoundDecision("full", ("c0",), {"A": 0}), rounds[2]]
    assert drop_clients(rounds, set(), scenario) == rounds


def test_dead_client_leaves_plan_and_prediction_even_when_replan_is_infeasible(setting):
    scenario, targets, plan = setting

    def infeasible(scn, tgt, start):
        return Plan(method="depl", feasible=False, rounds=[], predicted={"probability": 0.1})

    ctl = RunController(scenario, targets, plan, planner=infeasible, tracking=True,
                        replan_policy=ReplanPolicy(margin=10.0))
    first = ctl.next_decision()
    victim = first.clients[0]
    rec = ctl.record(first, 2.3, 2.1, accuracy=0.2, wall_s=1.0,
                     replied=[c for c in first.clients if c != victim], rejected=[victim])
    assert victim in ctl.dropped_clients
    assert all(victim not in r.clients for r in ctl.rounds[1:])
    # The prediction after the round already excludes the victim's data:
    assert rec["predicted_quantile"] == pytest.approx(ctl.predict(2.1, first.model, ctl.rounds[1:]))
    assert ctl.replans and ctl.replans[-1]["feasible"] is False
    assert rec["at_risk"] is True and ctl.at_risk is True


def test_feasible_replan_clears_the_risk(setting):
    scenario, targets, plan = setting
    ctl = RunController(scenario, targets, plan, planner=_planner, tracking=True,
                        replan_policy=ReplanPolicy(margin=10.0))
    ctl.at_risk = True
    first = ctl.next_decision()
    victim = first.clients[0]
    rec = ctl.record(first, 2.3, 2.1, accuracy=0.2, wall_s=1.0,
                     replied=[c for c in first.clients if c != victim], rejected=[victim])
    assert rec["replanned"] is True and rec["at_risk"] is False
    assert all(victim not in r.clients for r in ctl.rounds[1:])


def test_admit_clients_keeps_the_loss_model():
    small, big = _scenario(4), _scenario(6)
    joined, ids = admit_clients(small, big.clients)
    assert ids == ["c4", "c5"] and [c.id for c in joined.clients] == [f"c{i}" for i in range(6)]
    assert joined.loss == small.loss
    assert admit_clients(joined, big.clients)[1] == []


def test_round_timeout_follows_modelled_round_time():
    scenario = _scenario()
    decision = RoundDecision("full", ("c0", "c1"), {"A": 0, "B": 0})
    modelled = round_time(scenario, decision)
    assert round_timeout_s(scenario, decision, factor=2.0, slack_s=10.0, cap_s=1e9) == \
        pytest.approx(10.0 + 2.0 * modelled)
    assert round_timeout_s(scenario, decision, factor=2.0, slack_s=10.0, cap_s=5.0) == 5.0


def test_controller_state_survives_pickle_and_restores(setting):
    scenario, targets, plan = setting
    ctl = RunController(scenario, targets, plan, planner=_planner, tracking=True)
    first = ctl.next_decision()
    ctl.record(first, 2.3, 2.0, accuracy=0.3, wall_s=1.0, replied=list(first.clients), rejected=[])
    saved = pickle.loads(pickle.dumps(controller_state(ctl)))
    assert "planner" not in saved
    fresh = RunController(scenario, targets, plan, planner=_planner, tracking=True)
    restore_controller(fresh, saved)
    assert fresh.planner is _planner
    assert fresh.rounds_done == 1 and fresh.records == ctl.records
    assert fresh.next_decision() == ctl.next_decision()
    assert fresh.elapsed_s == ctl.elapsed_s
    assert fresh.estimator.num_observations == ctl.estimator.num_observations == 1
    assert fresh.estimator.loss_model() == ctl.estimator.loss_model()
