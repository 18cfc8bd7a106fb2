"""A job with no dependable plan says so, and says when the network has not started to learn.

Protects :func:`depl_fl.tracking.plateau.barely_learned` and its clause in the
one-line error of :meth:`strategies.depl_strategy.DepLStrategy.make_initial_plan`:
an exploration that never took the validation loss 10% below the fresh model's
(Flower's quickstart ``Net`` at a small learning rate) points at the learning
rate and the exploration's length, not only at the targets; in a user's own app
(:func:`strategies.user_app.depl_strategy`) the learning rate is the user's
``train`` function's, which no ``train.lr`` override reaches.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from depl_fl.contract.plan import Plan, Targets
from depl_fl.errors import InfeasibleError
from depl_fl.runs.runconfig import compose_config
from depl_fl.task.partitions import geometry
from depl_fl.task.subnets import UserNetwork, network_layout
from depl_fl.tracking.plateau import barely_learned
from strategies.depl_strategy import DepLStrategy
from strategies.user_app import depl_strategy
from tests.user_app_wiring import small_mlp

#: The quickstart ``Net``'s exploration at lr 0.05 on 8x8 digits: 2.30 fresh, about 2.2 after 40 rounds.
PLATEAU = [2.31, 2.30, 2.29, 2.27, 2.25, 2.24, 2.22, 2.21, 2.23, 2.25]
LEARNING = [2.31, 2.25, 2.10, 1.85, 1.60, 1.40]


def test_barely_learned_reads_the_lowest_loss_against_the_fresh_one():
    assert barely_learned(2.30, PLATEAU)
    assert not barely_learned(2.30, LEARNING)
    assert not barely_learned(2.30, [2.30, 2.06])  # 10.4% lower: learning
    assert barely_learned(2.30, [2.30, 2.08])      # 9.6% lower: not yet
    # nothing to judge: unknown fresh loss, no rounds, only failed evaluations
    assert not barely_learned(None, PLATEAU)
    assert not barely_learned(float("nan"), PLATEAU)
    assert not barely_learned(2.30, [])
    assert not barely_learned(2.30, [None, math.nan])
    assert barely_learned(2.30, [None, 2.25, math.nan])


def _strategy(losses: list[float]) -> DepLStrategy:
    cfg = compose_config(["num_clients=2", "simulation=inprocess", "tracking.enabled=false"])
    geo = geometry(cfg)
    strategy = DepLStrategy(network=network_layout(geo), arch=geo.arch, targets=Targets(0.35, 0.9, 300.0),
                            plan=None, plan_fn=None, scenario_fn=lambda props: None, num_clients=2,
                            train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0})
    return _given_exploration(strategy, losses)


def test_the_no_plan_error_names_the_learning_rate_when_the_network_sat_on_its_plateau():
    with pytest.raises(InfeasibleError) as err:
        _strategy(PLATEAU[1:]).make_initial_plan()
    message = str(err.value)
    assert message.startswith("no dependable plan: P[loss <= 0.35] >= 0.9")
    assert "\n" not in message
    assert ("the network barely learned in its 9 exploration rounds (validation loss 2.31 fresh, 2.21 at "
            "best, less than 10% lower): a larger learning rate (train.lr) or more exploration rounds "
            "(profile.explore.max_rounds)") in message


def test_the_no_plan_error_of_a_learning_network_names_only_the_targets():
    with pytest.raises(InfeasibleError) as err:
        _strategy(LEARNING[1:]).make_initial_plan()
    message = str(err.value)
    assert "relax target.loss, target.prob or target.deadline_s" in message
    assert "barely learned" not in message and "train.lr" not in message


def _given_exploration(strategy: DepLStrategy, losses: list[float]) -> DepLStrategy:
    """``strategy`` after an exploration of ``losses`` whose plan is infeasible (no planner call)."""
    strategy.given_plan = Plan(method="depl", feasible=False, rounds=[], predicted={"probability": 0.01})
    strategy.plan_fn = None
    records = [{"round": i + 1, "loss": v} for i, v in enumerate(losses)]
    records[0]["loss_before"] = 2.31
    strategy.profiler = SimpleNamespace(records=records)
    strategy.scenario = SimpleNamespace(loss=SimpleNamespace(initial=losses[-1]))
    return strategy


def test_in_a_users_own_app_the_no_plan_error_points_at_its_train_function_not_train_lr():
    user = depl_strategy(UserNetwork(small_mlp, (4,), "Net"), num_clients=2, compressions=(0.0, 0.5),
                         overrides=["target.loss=0.35", "target.prob=0.9"])
    with pytest.raises(InfeasibleError) as err:
        _given_exploration(user, PLATEAU[1:]).make_initial_plan()
    message = str(err.value)
    assert "the network barely learned in its 9 exploration rounds" in message
    assert "a larger learning rate (in your train function) or more exploration rounds" in message
    assert "train.lr" not in message and "\n" not in message


def test_a_job_reusing_a_cached_profile_gives_the_hint_its_exploration_would_have(tmp_path):
    import json

    from depl_fl.orchestration.profiling import federated_key
    from strategies.federated_profiling import FederatedProfiler

    cfg = compose_config(["num_clients=2", "simulation=inprocess", "tracking.enabled=false",
                          f"profile.cache_dir={tmp_path}"])
    job = SimpleNamespace(properties={"c0": {"cluster": "A", "num-samples": 12},
                                      "c1": {"cluster": "B", "num-samples": 12}})
    explored = _given_exploration(_strategy(PLATEAU[1:]), PLATEAU[1:]).profiler.records
    (tmp_path / f"profile-fed-{federated_key(cfg, job.properties)}.json").write_text(json.dumps(
        {"loss": {"initial": 2.31}, "profile": {"cost": {"rounds": 9}}, "fit_inputs": {"records": explored}}))
    profiler = FederatedProfiler(cfg, None)
    assert profiler.run(job, None, "fresh arrays", None, 1.0, None) == "fresh arrays"
    assert profiler.reused and profiler.records == []  # this job paid for no exploration round

    strategy = _strategy(PLATEAU[1:])
    strategy.profiler = profiler
    with pytest.raises(InfeasibleError) as err:
        strategy.make_initial_plan()
    message = str(err.value)
    assert ("the network barely learned in the 9 exploration rounds of its cached profile (validation loss "
            "2.31 fresh, 2.21 at best, less than 10% lower): a larger learning rate (train.lr)") in message
