"""The exploration's value stop and prior in a job on the in-process grid.

The value stop ends the exploration at the first judged round (off the fresh
model's plateau) whose recorded energies say one more round could not pay for
itself, before its minimum rounds; the same job without the exploration's
stops runs them. A job of another federation (more clients) with the first
job's profile as its prior explores only its ``prior_rounds`` and fits the
prior's observations with its own, with tracking's default (frugal) exploration
too; a profile made without the prior is never reused with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

N = 3
JOB = ["simulation=inprocess", "profile.explore.rounds=6",
       "profile.explore.stop_loss_factor=null", "profile.explore.switch_rounds=[2]",
       "profile.explore.min_points_per_level=2", "profile.explore.value_from_round=2",
       "target.loss=0.25", "target.prob=0.6", "target.max_rounds=30", "tracking.enabled=false",
       "output.plot=false", "planner.mc_trajectories=5000",
       # every client explores (the job was set up on that exploration: on the cheap cluster's clients
       # alone the job plans no training round)
       "profile.explore.without_tracking=thorough"]


def _run(tmp: Path, name: str, *extra: str, clients: int = N) -> dict:
    from clients.client_app import make_client_app
    from depl_fl.runs.runconfig import compose_config
    from strategies.inprocess_grid import InProcessGrid
    from strategies.server_app import run_server

    cfg = compose_config([f"profile.cache_dir={tmp / name / 'cache'}", f"num_clients={clients}", *JOB,
                          *extra])
    out = run_server(InProcessGrid(make_client_app(cfg), clients), cfg, tmp / name)
    return json.loads(Path(out).read_text())


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The same job with the exploration's stops (the value stop is opt-in) and without them."""
    tmp = tmp_path_factory.mktemp("explore-value")
    return (_run(tmp, "value", "profile.explore.value_stop=true"),
            _run(tmp, "plain", "profile.explore.stop_when_met=false"))


def test_the_fit_that_ended_the_exploration_is_the_profile_the_job_plans_on(tmp_path, monkeypatch):
    """The value stop fits the profile after a round; when it stops there, the final fit has the same
    inputs and is not computed again (each fit is over a new set of observations)."""
    from strategies.federated_profiling import FederatedProfiler

    fitted_over: list[int] = []
    measured_fit = FederatedProfiler.measured_fit

    def counted(self, observations, fresh_loss, properties):
        fitted_over.append(len(observations))
        return measured_fit(self, observations, fresh_loss, properties)

    monkeypatch.setattr(FederatedProfiler, "measured_fit", counted)
    doc = _run(tmp_path, "value-fits", "profile.explore.value_stop=true")
    assert doc["summary"]["profile_value_round"] is not None  # the value stop ended the exploration
    assert len(fitted_over) == len(doc["profile"]["values"]) >= 1
    assert len(set(fitted_over)) == len(fitted_over), fitted_over


@pytest.fixture(scope="module")
def prior_job(jobs, tmp_path_factory):
    """A federation of four clients with the plain job's profile (its results.json) as the prior."""
    tmp = tmp_path_factory.mktemp("explore-prior")
    _, plain = jobs
    results = Path(plain["profile"]["cache_file"]).parent.parent / "results.json"
    return _run(tmp, "prior", f"profile.prior={results}", "profile.explore.prior_rounds=1",
                "profile.explore.value_stop=false", clients=4), plain


@pytest.fixture(scope="module")
def prior_in_plain_cache(jobs, tmp_path_factory):
    """The plain job's federation and configuration again, in the plain job's cache folder, with the
    value job's profile as its prior."""
    tmp = tmp_path_factory.mktemp("explore-prior-cache")
    value, plain = jobs
    cache = Path(plain["profile"]["cache_file"]).parent
    results = Path(value["profile"]["cache_file"]).parent.parent / "results.json"
    return _run(tmp, "again", "profile.explore.stop_when_met=false", f"profile.prior={results}",
                f"profile.cache_dir={cache}"), plain


@pytest.fixture(scope="module")
def tracking_prior_job(jobs, tmp_path_factory):
    """The default exploration with tracking (auto: the frugal one) and the plain job's profile as its
    prior, on a federation of four clients."""
    tmp = tmp_path_factory.mktemp("explore-prior-tracking")
    _, plain = jobs
    results = Path(plain["profile"]["cache_file"]).parent.parent / "results.json"
    return _run(tmp, "tracking", f"profile.prior={results}", "tracking.enabled=true", clients=4), plain


def test_the_exploration_ends_at_the_first_round_one_more_could_not_pay_for(jobs):
    value, plain = jobs
    judged = value["profile"]["values"]
    stop = value["summary"]["profile_value_round"]
    assert stop is not None and stop < 6, judged
    assert value["summary"]["profile_met_round"] is None  # the value stop came first
    assert value["summary"]["profile_rounds"] == stop == value["profile"]["value_round"]
    # judged from value_from_round on, once the trajectory left the fresh model's plateau (a level and a
    # rate need three rounds after the first trained one)
    rounds = [v["round"] for v in judged]
    assert rounds == list(range(rounds[0], stop + 1)) and rounds[0] >= 4
    last = judged[-1]
    assert last["plan_j"] <= last["round_j"] + last["next_plan_j"]
    assert all(v["plan_j"] > v["round_j"] + v["next_plan_j"] for v in judged[:-1])
    # the round's energy is the last exploration round's
    assert last["round_j"] == pytest.approx(value["rounds"][stop - 1]["energy_j"])
    # the same rounds as the job without the stop, which runs its minimum rounds
    assert [r["loss"] for r in value["rounds"][:stop]] == [r["loss"] for r in plain["rounds"][:stop]]
    assert plain["summary"]["profile_rounds"] == 6 and plain["summary"]["profile_value_round"] is None
    assert value["summary"]["profile_energy_j"] < plain["summary"]["profile_energy_j"]


def test_the_job_then_runs_the_plan_it_judged(jobs):
    value, _ = jobs
    s = value["summary"]
    assert s["status"] == "completed" and s["planned_rounds"] >= 1
    assert s["total_energy_j"] == pytest.approx(s["profile_energy_j"] + s["cost_j"])


def test_a_prior_is_only_calibrated(prior_job):
    job, plain = prior_job
    cache = json.loads(Path(job["profile"]["cache_file"]).read_text())
    own = len(cache["fit_inputs"]["observations"])
    prior = job["profile"]["prior"]
    assert prior["observations"] == len(json.loads(Path(plain["profile"]["cache_file"]).read_text())
                                        ["fit_inputs"]["observations"]) > own
    assert prior["source"] == plain["profile"]["cache_file"] and prior["rounds"] == 6
    # the minimum rounds are prior_rounds (1), not rounds (6)
    assert job["summary"]["profile_rounds"] == 1
    assert cache["task"] == {"dataset": "digits", "arch": "digits_cnn"}


def test_a_profile_made_without_the_prior_is_not_reused_with_it(prior_in_plain_cache):
    job, plain = prior_in_plain_cache
    # the same federation and configuration, the same cache folder: only the prior differs
    assert job["config"]["num_clients"] == plain["config"]["num_clients"]
    assert job["summary"]["profile_reused"] is False
    assert job["summary"]["profile_rounds"] == job["config"]["profile"]["explore"]["prior_rounds"] == 2
    assert job["profile"]["cache_file"] != plain["profile"]["cache_file"]
    assert Path(job["profile"]["cache_file"]).parent == Path(plain["profile"]["cache_file"]).parent


def test_a_prior_with_the_default_exploration_of_tracking(tracking_prior_job):
    job, plain = tracking_prior_job
    explore = job["config"]["profile"]["explore"]
    # auto resolved to the frugal exploration, and the prior taken
    assert (explore["clients"], explore["value_stop"]) == ("cheapest", True)
    assert job["config"]["profile"]["plan_regime"]["rate_window"] == 0.5
    assert job["profile"]["prior"]["source"] == plain["profile"]["cache_file"]
    # prior_rounds (2) at least instead of rounds (6), then no more (no stop_loss_factor); the value stop,
    # judged from round prior_rounds (2) with prior_regime, records no judgement on this tiny federation
    assert job["summary"]["profile_rounds"] == 2
    assert job["profile"]["values"] == [] and job["summary"]["profile_value_round"] is None
    s = job["summary"]
    assert s["tracking"] is True and s["status"] == "completed"
    assert s["total_energy_j"] == pytest.approx(s["profile_energy_j"] + s["cost_j"])
