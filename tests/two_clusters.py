"""The example scenario's federation on two clusters (A, and B with an activation cost) and six clients.

``plan_regime=True`` gives it what a measured plan-regime profile has: an
evaluation oscillation (Student-t, ``eval_dof``) and a judged error (contract
version 2).
"""

from __future__ import annotations

import json
from pathlib import Path

from depl_fl.contract.scenario import Scenario, scenario_from_dict

DATA = Path(__file__).parent / "data" / "example_scenario.json"


def two_cluster_scenario(plan_regime: bool = False) -> Scenario:
    """The example scenario with clusters A and B and clients ``c0..c5`` (150-200 samples)."""
    doc = json.loads(DATA.read_text())
    base = doc["clusters"][0]
    doc["clusters"] = [dict(base, id="A"), dict(base, id="B", activation_joules=5.0)]
    doc["clients"] = [{"id": f"c{i}", "cluster": "AB"[i % 2], "num_samples": 150 + 10 * i}
                      for i in range(6)]
    doc["loss"].pop("reference_samples", None)
    if plan_regime:
        for profile in doc["loss"]["run"].values():
            profile["eval_std"] = [0.5 * s for s in profile["std"]]
        doc["loss"]["eval_dof"] = 3.4
        doc["loss"]["judged_error"] = 5e-5
        doc["version"] = 2
    return scenario_from_dict(doc)


def two_cluster_setting(target_loss: float = 1.5, deadline_s: float = 400.0,
                        more_rounds_than: int | None = None):
    """The scenario above with a target, its DepL plan and the planner that re-plans it (seed 0).

    ``more_rounds_than``, where given, asserts the plan has more rounds than that. Returns
    ``(scenario, targets, plan, planner)``, the shape the run controller's tests take.
    """
    from depl_fl.contract.plan import Targets
    from depl_fl.planner import make_plan

    scenario = two_cluster_scenario()
    targets = Targets(target_loss=target_loss, target_prob=0.9, deadline_s=deadline_s)

    def planner(scn, tgt, start):
        return make_plan(scn, tgt, method="depl", seed=0, start=start)

    plan = planner(scenario, targets, None)
    assert plan.feasible
    if more_rounds_than is not None:
        assert len(plan.rounds) > more_rounds_than
    return scenario, targets, plan, planner


def steady_controller(setting, **keys):
    """A run controller on ``setting`` (:func:`two_cluster_setting`'s tuple) that never re-plans.

    The re-planning margin (10) is far beyond any loss the tests feed, so only the
    early stops that ``keys`` (further ``RunController`` keywords) name can end it.
    """
    from depl_fl.orchestration.controller import RunController
    from depl_fl.tracking.online import ReplanPolicy

    scenario, targets, plan, planner = setting
    return RunController(scenario, targets, plan, planner=planner,
                         replan_policy=ReplanPolicy(margin=10.0, ahead_margin=None), **keys)


def feed_losses(ctl, losses, before: float):
    """Record one planned round per loss of ``losses`` on the run controller ``ctl``, until it stops.

    ``before`` is the loss the first round starts from; every client replies. Returns ``ctl``.
    """
    for loss in losses:
        decision = ctl.next_decision()
        if decision is None:
            break
        ctl.record(decision, before, loss, accuracy=0.1, wall_s=0.1, replied=list(decision.clients),
                   rejected=[])
        before = loss
    return ctl
