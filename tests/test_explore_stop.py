"""The federated exploration ends as soon as the merged model meets the target by the stop rule.

In-process grid: a job whose target is easy stops exploring after the first
round whose worst variant's validation loss plus its bootstrap-t margin lies
at or below the target, plans no training round and reports itself met
during the exploration; with ``profile.explore.stop_when_met=false`` the same
job runs its minimum rounds. Both jobs share the seed, so their first
exploration rounds are the same rounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.orchestration.stop_rule import stop_margin_of, target_met  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import run_server  # noqa: E402

N = 3
TARGET = 1.0
JOB = ["simulation=inprocess", f"num_clients={N}", "profile.explore.rounds=3",
       "profile.explore.stop_loss_factor=null", "profile.explore.switch_rounds=[3]",
       "profile.explore.min_points_per_level=2", f"target.loss={TARGET}", "target.prob=0.6",
       "target.max_rounds=4", "tracking.enabled=false", "output.plot=false",
       "planner.mc_trajectories=5000",
       # every client explores (the job was set up on that exploration: on the cheap cluster's clients
       # alone the stop rule first meets the target in round 3)
       "profile.explore.without_tracking=thorough"]


def _run(tmp: Path, name: str, *extra: str) -> dict:
    cfg = compose_config([f"profile.cache_dir={tmp / name / 'cache'}", *JOB, *extra])
    return json.loads(Path(run_server(InProcessGrid(make_client_app(cfg), N), cfg, tmp / name)).read_text())


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The same job with the exploration stopping when met (the default) and running its rounds."""
    tmp = tmp_path_factory.mktemp("explore-stop")
    return _run(tmp, "short"), _run(tmp, "long", "profile.explore.stop_when_met=false")


def _first_met(rounds: list[dict]) -> int | None:
    for r in rounds:
        # No margin is measured above the target (no margin could meet it there).
        margin = r["loss_margin"]
        if r["phase"] == "profile" and margin is not None and r["loss"] + margin <= TARGET:
            return int(r["round"])
    return None


def test_exploration_stops_at_the_first_round_the_stop_rule_meets(jobs):
    short, long = jobs
    first = _first_met(long["rounds"])
    assert first is not None and first < 3, [(r["loss"], r["loss_margin"]) for r in long["rounds"]]
    assert short["summary"]["profile_rounds"] == first == short["summary"]["profile_met_round"]
    assert [r["loss"] for r in short["rounds"]] == [r["loss"] for r in long["rounds"][:first]]
    assert all(r["phase"] == "profile" for r in short["rounds"])
    assert short["profile"]["met_round"] == first and short["plan"]["met_during_exploration"] == first


def test_a_job_met_during_exploration_reports_like_a_met_run(jobs):
    short, long = jobs
    s = short["summary"]
    assert s["status"] == "completed" and s["rounds"] == 0 and s["planned_rounds"] == 0
    assert s["cost_j"] == 0.0 and s["total_energy_j"] == pytest.approx(s["profile_energy_j"])
    assert s["profile_energy_j"] == pytest.approx(sum(r["energy_j"] for r in short["rounds"]))
    assert s["profile_energy_j"] < long["summary"]["profile_energy_j"]
    # The final model is the exploration's, judged as the variant the stop rule read (its worst).
    last = short["rounds"][-1]
    assert s["final_loss"] == pytest.approx(last["loss"]) == max(last["losses"].values())
    assert s["final_test_loss"] <= last["test_loss"] + 1e-12  # the record's: the worst variant's test loss
    assert s["met"] == (s["final_test_loss"] <= TARGET)


def test_with_the_key_false_the_exploration_runs_its_minimum_rounds(jobs):
    _, long = jobs
    assert long["summary"]["profile_rounds"] == 3 and long["summary"]["profile_met_round"] is None


def test_the_stop_rule_is_loss_plus_margin():
    assert target_met(0.5, 0.6, prob=0.9, guarantee="gaussian", loss_margin=0.1)
    assert not target_met(0.5, 0.6, prob=0.9, guarantee="gaussian", loss_margin=0.11)
    assert not target_met(float("nan"), 0.6, prob=0.9, guarantee="gaussian")
    assert target_met(0.6, 0.6, prob=0.9, guarantee="gaussian", loss_margin=0.5, track_mean=True)
    # a plan-regime judged error raises the margin: kappa(0.9) * sqrt(0.01 * 0.5) = 0.0906
    assert stop_margin_of(0.5, prob=0.9, guarantee="gaussian", loss_sem=None, loss_margin=0.01,
                          judged_error=0.01) == pytest.approx(1.2816 * 0.5 ** 0.5 * 0.1, rel=1e-3)
    # Cantelli: the larger of the bootstrap margin and kappa * sqrt(2) * sem
    assert stop_margin_of(0.5, prob=0.9, guarantee="cantelli", loss_sem=0.05, loss_margin=0.01,
                          judged_error=0.0) == pytest.approx(3.0 * 2 ** 0.5 * 0.05)
