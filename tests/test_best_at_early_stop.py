"""The model a job ends with: its best validated one after the stall or divergence stop, else its last."""

from __future__ import annotations

import dataclasses
import logging
import math
import pickle

import numpy as np
import pytest

from depl_fl.contract.plan import Plan, RoundDecision, Targets
from depl_fl.contract.semantics import round_time
from depl_fl.errors import ScenarioError
from depl_fl.orchestration.controller import RunController
from depl_fl.tracking.best_model import best_candidate
from depl_fl.tracking.online import ReplanPolicy
from tests.two_clusters import feed_losses, steady_controller, two_cluster_setting


# ------------------------------------------------------------------ the rule
def test_the_lowest_finite_validation_loss_wins_and_a_tie_goes_to_the_later_round():
    assert best_candidate([1.5, 1.2, 1.4], 2.0) == (2, 1.2)
    assert best_candidate([2.1, 2.2], 2.0) == (0, 2.0)  # the start model
    assert best_candidate([1.2, 1.3, 1.2], 2.0) == (3, 1.2)
    assert best_candidate([math.nan, 1.5, math.inf], 2.0) == (2, 1.5)
    assert best_candidate([math.nan], None) is None
    assert best_candidate([1.2, 1.4, 1.3], 2.0, first=2) == (3, 1.3)  # rounds since a resume only


# ------------------------------------------------------------------ the controller
START = 2.0


@pytest.fixture()
def setting():
    return two_cluster_setting(more_rounds_than=5)


def _controller(setting, *, stall=None, diverge=None, early="best"):
    ctl = steady_controller(setting, tracking=True, stall_rounds=stall, diverge_rounds=diverge,
                            early_stop_model=early)
    ctl.fresh_loss = ctl.start_loss = START
    return ctl


def test_a_stalled_job_ends_with_its_best_round_and_says_so(setting):
    ctl = feed_losses(_controller(setting, stall=2), [1.9, 1.7, 1.8, 1.75, 1.6], START)
    assert ctl.stalled and ctl.rounds_done == 4
    assert ctl.best_model() == (2, 1.7) and ctl.final_model_round() == 2
    assert ctl.final_model_note() == ("stall stop: ending with round 2's model (validation 1.7), the lowest "
                                      "validation loss since the start model; round 4's was 1.75")


def test_a_diverging_job_may_end_with_the_start_model(setting):
    ctl = feed_losses(_controller(setting, diverge=2), [2.1, 2.4, 2.5], START)
    assert ctl.stop_reason and not ctl.stalled and ctl.rounds_done == 2
    assert ctl.final_model_round() == 0
    assert ctl.final_model_note().startswith("divergence stop: ending with the start model (validation 2)")


def test_last_keeps_the_last_round(setting):
    ctl = feed_losses(_controller(setting, stall=2, early="last"), [1.9, 1.7, 1.8, 1.75], START)
    assert ctl.stalled and ctl.final_model_round() == ctl.rounds_done == 4 and ctl.final_model_note() is None
    assert not ctl.keeps_best() and _controller(setting, stall=2).keeps_best()


# Endings by the stop rule, the plan's end, max_rounds and the deadline: the last model, even though
# the start model (validation 0.5) has the lowest validation loss of all.
HIGH, NEAR, MET, MARGIN = 2.2, 1.45, 1.35, 0.1


def _short(plan_end, *, max_rounds=None, deadline_rounds=None, full_plan=False):
    scenario, targets, plan, _ = two_cluster_setting()
    short = plan if full_plan else dataclasses.replace(plan, rounds=list(plan.rounds[:2]))
    deadline = targets.deadline_s if deadline_rounds is None else \
        deadline_rounds * round_time(scenario, short.rounds[-1])
    targets = dataclasses.replace(targets, max_rounds=max_rounds, deadline_s=deadline)
    ctl = RunController(scenario, targets, short, tracking=True, stall_rounds=50, diverge_rounds=10,
                        planner=lambda *_: Plan(method="depl", feasible=True, rounds=[], predicted={}),
                        replan_policy=ReplanPolicy(margin=0.05 if not full_plan else 10.0, ahead_margin=None),
                        plan_end=plan_end)
    ctl.fresh_loss, ctl.start_loss = 3.0, 0.5
    return ctl


@pytest.mark.parametrize("ending,kwargs,losses,rounds", [
    ("stop rule", {"plan_end": "plan", "full_plan": True}, [HIGH, MET, NEAR], 2),
    ("plan end", {"plan_end": "plan"}, [HIGH, NEAR, NEAR], 2),
    ("max_rounds", {"plan_end": "stop_rule", "max_rounds": 3}, [HIGH] + [NEAR] * 5, 3),
    ("deadline", {"plan_end": "stop_rule", "deadline_rounds": 3.5}, [HIGH] + [NEAR] * 5, 3),
])
def test_every_other_ending_keeps_the_last_model(ending, kwargs, losses, rounds):
    ctl = _short(**kwargs)
    for loss, before in zip(losses, [2.3, *losses][:-1], strict=True):
        decision = ctl.next_decision()
        if decision is None:
            break
        ctl.record(decision, before, loss, accuracy=0.5, wall_s=0.1, replied=list(decision.clients),
                   rejected=[], loss_margin=MARGIN)
    assert ctl.rounds_done == rounds and ctl.next_decision() is None and ctl.stop_reason is None
    assert ctl.best_model() == (0, 0.5)
    assert ctl.final_model_round() == rounds and ctl.final_model_note() is None


def test_a_bad_value_is_refused(setting):
    from depl_fl.runs.runconfig import compose_config

    assert compose_config([])["tracking"]["early_stop_model"] == "best"
    assert compose_config(["tracking.early_stop_model=last"])["tracking"]["early_stop_model"] == "last"
    with pytest.raises(ScenarioError, match="tracking.early_stop_model: must be 'best' or 'last'"):
        compose_config(["tracking.early_stop_model=lowest"])
    with pytest.raises(ScenarioError, match="not read when tracking.enabled=false"):
        compose_config(["tracking.enabled=false", "tracking.early_stop_model=last"])
    with pytest.raises(ValueError, match="early_stop_model"):
        _controller(setting, early="lowest")


def test_a_bad_value_on_the_command_line_is_one_line_exit_2(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "depl_fl.main", "tracking.early_stop_model=lowest",
                           f"hydra.run.dir={tmp_path / 'job'}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "depl-fl: config tracking.early_stop_model: must be 'best' or 'last', got 'lowest'"]


# ------------------------------------------------------------------ the strategy (real in-process rounds)
N = 4
LOSS = {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}
                                for m in ("full", "p50")},
        "switch": [{"from": "full", "to": "p50", "mean": 0.1, "std": 0.05},
                   {"from": "p50", "to": "full", "mean": 0.1, "std": 0.05}]}
#: Validation loss after each round (0: the start model): lowest at round 2; a patience of 3 stops
#: after round 5.
STALLING = [2.0, 1.5, 1.2, 1.3, 1.4, 1.45, 1.5, 1.5]


def _test_loss(rnd: int) -> float:
    return 3.0 + rnd / 100  # a test loss per round that no decision reads


@pytest.fixture(scope="module")
def cfg():
    pytest.importorskip("flwr")
    pytest.importorskip("torch")
    from depl_fl.runs.runconfig import compose_config

    return compose_config([f"num_clients={N}", "simulation=inprocess", "train.lr=0.05",
                           "tracking.stall_rounds=3", "tracking.diverge_rounds=2"])


class Scripted:
    """An evaluate_fn whose validation losses are given per round; keeps the arrays it was shown."""

    def __init__(self, losses):
        self.losses = losses
        self.seen = {}

    def __call__(self, rnd, arrays, compression):
        from flwr.app import MetricRecord

        from strategies.depl_strategy import arrays_to_state

        self.seen[rnd] = arrays_to_state(arrays)
        return MetricRecord({"loss": self.losses[rnd], "accuracy": 0.5, "test-loss": _test_loss(rnd)})


def _job(cfg, losses, *, stall=3, diverge=None, early="best", rounds=7, resume=None, payloads=None):
    """A tracked job of ``rounds`` planned rounds on the in-process grid: ``(strategy, result, evaluate)``.

    A re-plan finds no dependable plan (the plan goes on); ``payloads`` gets the pickled
    checkpoint after every round, ``resume`` is one of them.
    """
    from clients.client_app import make_client_app
    from depl_fl.orchestration.checkpointing import strategy_payload
    from depl_fl.orchestration.scenario_builder import build_scenario, model_docs
    from depl_fl.task.local_update import initial_state
    from depl_fl.task.partitions import geometry
    from depl_fl.task.subnets import network_layout
    from strategies.depl_strategy import DepLStrategy, arrays_to_state, state_to_arrays
    from strategies.inprocess_grid import InProcessGrid

    geo = geometry(cfg)
    models = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    decision = RoundDecision("full", tuple(f"c{i}" for i in range(N)), {"A": 0, "B": 0})
    plan = Plan("given", True, [decision] * rounds)

    def on_round(strategy, arrays, loss):  # what the checkpoint after every round holds
        if payloads is not None:
            payload = strategy_payload(strategy, arrays_to_state(arrays), loss, wall_s=0.0)
            payloads.append(pickle.dumps(payload))

    strategy = DepLStrategy(
        network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e6), plan=plan,
        plan_fn=lambda *_: Plan("given", False, []),
        scenario_fn=lambda props: build_scenario(cfg, props, models, LOSS),
        num_clients=N, train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0},
        node_wait_timeout_s=1.0, tracking=True, replan_policy=ReplanPolicy(margin=10.0, ahead_margin=None),
        stall_rounds=stall, diverge_rounds=diverge, early_stop_model=early, on_round=on_round,
        resume=None if resume is None else pickle.loads(resume))
    evaluate = Scripted(losses)
    initial = state_to_arrays(initial_state(geo, seed=0))
    result = strategy.start(InProcessGrid(make_client_app(cfg), N), initial, evaluate_fn=evaluate)
    return strategy, result, evaluate


def _same(arrays, state) -> bool:
    from strategies.depl_strategy import arrays_to_state

    got = arrays_to_state(arrays)
    return set(got) == set(state) and all(np.array_equal(got[k], state[k]) for k in got)


def _summary(strategy, cfg):
    from depl_fl.runs.results import build_results

    return build_results(strategy, cfg, wall_s=0.0)["summary"]


def test_a_stalled_job_returns_and_reports_its_best_rounds_model(cfg, caplog):
    with caplog.at_level(logging.INFO, logger="depl_fl"):
        strategy, result, evaluate = _job(cfg, STALLING)
    assert strategy.controller.rounds_done == 5 and strategy.controller.stalled
    assert _same(result.arrays, evaluate.seen[2]) and not _same(result.arrays, evaluate.seen[5])
    s = _summary(strategy, cfg)
    assert s["status"] == "stalled" and s["rounds"] == 5 and s["final_model_round"] == 2
    assert s["final_loss"] == 1.2 and s["final_test_loss"] == _test_loss(2)
    assert "stall stop: ending with round 2's model (validation 1.2)" in caplog.text


def test_last_returns_and_reports_the_last_rounds_model(cfg, caplog):
    with caplog.at_level(logging.INFO, logger="depl_fl"):
        strategy, result, evaluate = _job(cfg, STALLING, early="last")
    assert strategy.controller.rounds_done == 5 and strategy.best_arrays is None
    assert _same(result.arrays, evaluate.seen[5])
    s = _summary(strategy, cfg)
    assert s["final_model_round"] == 5 and s["final_loss"] == 1.45 and s["final_test_loss"] == _test_loss(5)
    assert "ending with" not in caplog.text


def test_a_diverging_job_returns_the_start_model(cfg):
    strategy, result, evaluate = _job(cfg, [2.0, 2.1, 2.2, 2.3], stall=None, diverge=2)
    assert strategy.controller.rounds_done == 2 and strategy.controller.stop_reason
    assert _same(result.arrays, evaluate.seen[0])
    s = _summary(strategy, cfg)
    assert s["status"] == "diverged" and s["final_model_round"] == 0
    assert s["final_loss"] == 2.0 and s["final_test_loss"] == _test_loss(0) and s["final_accuracy"] is None


def test_a_used_up_plan_returns_the_last_model(cfg):
    strategy, result, evaluate = _job(cfg, [2.0, 1.2, 1.5, 1.6], rounds=3)
    assert strategy.controller.rounds_done == 3 and strategy.controller.stop_reason is None
    assert _same(result.arrays, evaluate.seen[3])
    assert _summary(strategy, cfg)["final_model_round"] == 3


def test_a_resumed_job_ends_with_the_same_best_model(cfg):
    payloads = []
    whole, whole_result, _ = _job(cfg, STALLING, payloads=payloads)
    after = [pickle.loads(p)["best_model"] for p in payloads]  # after round 0, 1, ..., 5
    assert [b["round"] for b in after] == [0, 1, 2, 2, 2, 2]
    assert [b["state"] is None for b in after] == [True, True, True, False, False, False]
    strategy, result, _ = _job(cfg, STALLING, resume=payloads[3])  # killed after round 3
    assert strategy.resumed_from == 3 and strategy.controller.rounds_done == 5
    from strategies.depl_strategy import arrays_to_state

    assert _same(result.arrays, after[3]["state"])
    assert _same(result.arrays, arrays_to_state(whole_result.arrays))
    assert _summary(strategy, cfg)["final_model_round"] == _summary(whole, cfg)["final_model_round"] == 2


def test_a_checkpoint_without_a_best_model_resumes_with_the_rounds_since(cfg):
    payloads = []
    _job(cfg, STALLING, payloads=payloads)
    doc = pickle.loads(payloads[3])
    del doc["best_model"]  # written before it was kept
    strategy, result, _ = _job(cfg, STALLING, resume=pickle.dumps(doc))
    assert strategy.controller.best_since == 3 and strategy.controller.rounds_done == 5
    assert _same(result.arrays, doc["global_state"])  # round 3's, the lowest of rounds 3-5
    assert _summary(strategy, cfg)["final_model_round"] == 3
