"""The patience stop: a tracked job whose validation loss stopped improving ends and says so."""

from __future__ import annotations

import math

import pytest

from depl_fl.tracking.stall import rounds_since_best, stall_reason, stalled
from tests.two_clusters import feed_losses, steady_controller, two_cluster_setting

START = 2.0


def test_fires_when_the_lowest_loss_is_old_enough():
    assert stalled([1.9, 1.95, 1.97, 1.99], START, 3)  # lowest at round 1, three rounds ago
    assert rounds_since_best([1.9, 1.95, 1.97, 1.99], START) == 3


def test_the_start_counts_so_a_run_that_never_gets_below_it_stops():
    assert stalled([2.1, 2.4, 2.2], START, 3)
    assert rounds_since_best([2.1, 2.4, 2.2], START) == 3


def test_does_not_fire_while_the_loss_still_improves_now_and_then():
    assert not stalled([1.9, 1.95, 1.8, 1.85], START, 3)
    assert not stalled([2.1, 2.2], START, 3)  # too few rounds yet
    assert not stalled([], START, 1)


def test_a_tie_is_no_improvement():
    assert rounds_since_best([1.9, 1.9, 1.9], START) == 2


def test_non_finite_losses_never_improve():
    assert stalled([1.9, math.nan, math.inf, -math.inf], START, 3)
    assert rounds_since_best([math.nan, 1.5], START) == 0
    # No finite reference at all: the rounds so far count from the start.
    assert rounds_since_best([math.nan, math.nan], None) == 2
    assert rounds_since_best([math.nan, 2.5, 2.6], math.nan) == 1


def test_off():
    assert not stalled([3.0] * 50, START, None)


def test_rejects_a_patience_below_one():
    with pytest.raises(ValueError, match="positive integer"):
        stalled([3.0], START, 0)


def test_the_reason_names_the_lowest_loss_and_the_rounds():
    assert stall_reason(20, 2.3026) == "validation loss not below its lowest so far (2.303) for 20 rounds"


@pytest.fixture()
def setting():
    return two_cluster_setting(more_rounds_than=3)


def _controller(setting, rounds, tracking=True):
    ctl = steady_controller(setting, tracking=tracking, stall_rounds=rounds)
    ctl.fresh_loss = 2.3
    ctl.start_loss = START
    return ctl


def _feed(ctl, losses):
    return feed_losses(ctl, losses, START)


def test_the_controller_stops_once_the_lowest_loss_is_the_patience_old(setting):
    ctl = _feed(_controller(setting, 2), [1.9, 1.95, 1.97, 1.8])
    assert ctl.rounds_done == 3 and ctl.next_decision() is None
    assert ctl.stalled and ctl.stop_reason == stall_reason(2, 1.9)
    assert ctl.records[-1]["stopped"] == ctl.stop_reason
    assert not any(r.get("stopped") for r in ctl.records[:-1])
    assert ctl.take_notes()[-1] == f"round 3: {ctl.stop_reason}; stopping"


def test_the_controller_stops_a_job_that_never_gets_below_its_start(setting):
    ctl = _feed(_controller(setting, 2), [2.1, 2.05, 1.7])
    assert ctl.rounds_done == 2 and ctl.stop_reason == stall_reason(2, START)


@pytest.mark.parametrize("rounds,tracking", [(None, True), (2, False)])
def test_the_controller_runs_on_with_the_stop_off_or_without_tracking(setting, rounds, tracking):
    ctl = _feed(_controller(setting, rounds, tracking), [2.1, 2.2, 2.3, 2.4])
    assert ctl.rounds_done == 4 and ctl.stop_reason is None and not ctl.stalled


def test_the_controller_runs_on_while_the_loss_improves(setting):
    ctl = _feed(_controller(setting, 2), [1.9, 1.95, 1.8, 1.85])
    assert ctl.rounds_done == 4 and ctl.stop_reason is None


def test_the_key_is_checked_and_read_only_with_tracking():
    from depl_fl.errors import ScenarioError
    from depl_fl.runs.runconfig import compose_config

    assert compose_config([])["tracking"]["stall_rounds"] == 50
    assert compose_config(["tracking.stall_rounds=null"])["tracking"]["stall_rounds"] is None
    for bad in ("0", "-3", "2.5", "abc"):
        with pytest.raises(ScenarioError, match="tracking.stall_rounds"):
            compose_config([f"tracking.stall_rounds={bad}"])
    refused = "tracking.stall_rounds=3: not read when tracking.enabled=false"
    with pytest.raises(ScenarioError, match=refused):
        compose_config(["tracking.enabled=false", "tracking.stall_rounds=3"])


def test_a_stalled_job_stops_says_so_and_exits_like_an_unmet_job(tmp_path):
    """Non-IID synthetic clients that do not learn: the job stops as stalled, says why, exits 0."""
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
                           "num_clients=20", "simulation=inprocess", "dataset.alpha=0", "dataset.beta=0",
                           "target.loss=0.5", "tracking.diverge_rounds=null", "tracking.stall_rounds=2",
                           "output.plot=false", f"profile.cache_dir={tmp_path / 'cache'}",
                           f"hydra.run.dir={tmp_path / 'job'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "job" / "results.json").read_text())
    s = doc["summary"]
    train = [r for r in doc["rounds"] if r["phase"] == "train"]
    losses = [r["loss"] for r in train]
    assert s["status"] == "stalled" and s["met"] is False
    assert s["stop_reason"] == stall_reason(2, min([s["initial_loss"], *losses]))
    assert train[-1]["stopped"] == s["stop_reason"] and not any(r.get("stopped") for r in train[:-1])
    assert stalled(losses, s["initial_loss"], 2) and not stalled(losses[:-1], s["initial_loss"], 2)
    assert s["rounds"] == len(train)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.endswith("; stopping")]
    assert lines == [f"[depl] round {len(train)}: {s['stop_reason']}; stopping"]
    # It ends with its lowest validation loss's model (tracking.early_stop_model: best), never the last.
    from depl_fl.tracking.best_model import best_candidate

    best, loss = best_candidate(losses, s["initial_loss"])
    assert best < len(train) and s["final_model_round"] == s["profile_rounds"] + best
    assert s["final_loss"] == loss
    assert s["final_test_loss"] == (train[best - 1]["test_loss"] if best else s["initial_test_loss"])
    assert [line for line in proc.stdout.splitlines() if "stall stop: ending with" in line]
