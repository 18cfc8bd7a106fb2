"""The divergence stop: a tracked job whose loss stays above the fresh model's stops and says so."""

from __future__ import annotations

import math

import pytest

from depl_fl.tracking.divergence import divergence_reason, diverging
from tests.two_clusters import feed_losses, steady_controller, two_cluster_setting

FRESH = 2.30


def test_fires_when_each_of_the_last_rounds_is_above_the_fresh_loss():
    assert diverging([1.9, 2.4, 2.5, 2.6], FRESH, 3)
    assert diverging([2.31, 2.32], FRESH, 2)


def test_does_not_fire_when_one_of_the_last_rounds_is_at_or_below_the_fresh_loss():
    assert not diverging([2.4, 2.5, 2.2, 2.6], FRESH, 3)
    assert not diverging([2.4, 2.30, 2.6], FRESH, 3)  # equal is not above
    assert not diverging([1.2, 1.1, 1.0], FRESH, 3)


def test_needs_that_many_rounds():
    assert not diverging([2.5, 2.6], FRESH, 3)
    assert not diverging([], FRESH, 1)


def test_off_when_rounds_or_fresh_loss_are_unknown():
    assert not diverging([9.0] * 20, FRESH, None)
    assert not diverging([9.0] * 20, None, 3)
    assert not diverging([9.0] * 20, math.nan, 3)


def test_a_non_finite_loss_counts_as_above():
    assert diverging([2.5, math.nan, math.inf], FRESH, 3)


def test_a_rounds_count_below_one_is_refused():
    with pytest.raises(ValueError, match="rounds"):
        diverging([3.0], FRESH, 0)


def test_the_reason_names_the_fresh_loss_and_the_rounds():
    assert divergence_reason(10, 2.3026) == "validation loss above the fresh model's (2.303) for 10 rounds"


@pytest.fixture()
def setting():
    return two_cluster_setting(more_rounds_than=3)


def _controller(setting, rounds, tracking=True):
    ctl = steady_controller(setting, tracking=tracking, diverge_rounds=rounds)
    ctl.fresh_loss = FRESH
    return ctl


def _feed(ctl, losses):
    return feed_losses(ctl, losses, FRESH)


def test_the_controller_stops_after_the_rounds_above_the_fresh_loss(setting):
    ctl = _feed(_controller(setting, 2), [2.1, 2.4, 2.5, 2.6, 2.7])
    assert ctl.rounds_done == 3 and ctl.next_decision() is None
    assert ctl.stop_reason == divergence_reason(2, FRESH)
    assert ctl.records[-1]["stopped"] == ctl.stop_reason
    assert ctl.take_notes()[-1] == f"round 3: {ctl.stop_reason}; stopping"


@pytest.mark.parametrize("rounds,tracking", [(None, True), (2, False)])
def test_the_controller_runs_on_with_the_stop_off_or_without_tracking(setting, rounds, tracking):
    ctl = _feed(_controller(setting, rounds, tracking), [2.4, 2.5, 2.6, 2.7])
    assert ctl.rounds_done == 4 and ctl.stop_reason is None


def test_the_exploration_stops_on_the_same_rule_with_tracking():
    """The exploration's hook: the merged models' losses against the fresh one, the same reason."""
    from types import SimpleNamespace

    from depl_fl.runs.runconfig import compose_config
    from strategies.federated_profiling import FederatedProfiler

    profiler = FederatedProfiler(compose_config([]), provisional_scenario=None)
    tracked, untracked = (SimpleNamespace(tracking=t, diverge_rounds=2) for t in (True, False))
    assert not profiler._diverging(tracked)  # no round yet
    profiler.records = [{"round": 1, "loss_before": FRESH, "loss": 2.4}, {"round": 2, "loss": 2.1},
                        {"round": 3, "loss": 2.5}]
    assert not profiler._diverging(tracked) and profiler.stop_reason is None
    profiler.records.append({"round": 4, "loss": 2.6})
    assert not profiler._diverging(untracked) and profiler.stop_reason is None
    assert profiler._diverging(tracked)
    assert profiler.stop_reason == divergence_reason(2, FRESH) == profiler.records[-1]["stopped"]
    assert not any(r.get("stopped") for r in profiler.records[:-1])


def test_a_diverging_job_stops_says_so_and_exits_like_an_unmet_job(tmp_path):
    """Synthetic clients with a learning rate far too large: the job stops, results.json says why, exit 0.

    The stop may come in the exploration or in training: the checks hold for the phase it came in.
    """
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("flwr")
    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", "dataset=synthetic", "model=synthetic_mlp",
                           "num_clients=20", "simulation=inprocess", "target.loss=1.3", "train.lr=0.5",
                           "tracking.diverge_rounds=2", "output.plot=false",
                           f"profile.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'job'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "job" / "results.json").read_text())
    s = doc["summary"]
    fresh = doc["rounds"][0]["loss_before"]
    assert s["status"] == "diverged" and s["stop_reason"] == divergence_reason(2, fresh)
    assert s["met"] is False
    last = doc["rounds"][-1]
    assert last["stopped"] == s["stop_reason"] and not any(r.get("stopped") for r in doc["rounds"][:-1])
    phase = [r for r in doc["rounds"] if r["phase"] == last["phase"]]
    assert len(phase) >= 2 and all(r["loss"] > fresh for r in phase[-2:])
    if last["phase"] == "profile":  # no profile fitted, no plan, no training round
        assert s["planned_rounds"] == 0 and s["rounds"] == 0 and s["profile_rounds"] == last["round"]
        where = f"exploration round {last['round']}"
    else:
        where = f"round {last['round'] - s['profile_rounds']}"
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.endswith("; stopping")]
    assert lines == [f"[depl] {where}: {s['stop_reason']}; stopping"]


def test_the_key_is_checked_and_read_only_with_tracking():
    from depl_fl.errors import ScenarioError
    from depl_fl.runs.runconfig import compose_config

    assert compose_config([])["tracking"]["diverge_rounds"] == 10
    assert compose_config(["tracking.diverge_rounds=null"])["tracking"]["diverge_rounds"] is None
    with pytest.raises(ScenarioError, match="tracking.diverge_rounds"):
        compose_config(["tracking.diverge_rounds=0"])
    refused = "tracking.diverge_rounds=3: not read when tracking.enabled=false"
    with pytest.raises(ScenarioError, match=refused):
        compose_config(["tracking.enabled=false", "tracking.diverge_rounds=3"])
