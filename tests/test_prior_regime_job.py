"""Another federation's prior shortens a job's exploration through the prior regime, on the in-process grid.

A source job of three clients explores six rounds (no stop); a job of the
same task on four clients takes its results.json as ``profile.prior``. With
``profile.explore.prior_regime`` (the default) the value stop is judged from
round ``prior_rounds`` (2), its plateau guard passes on the prior's trajectory
and every variant's learning-curve rate is read from it: the value stop ends
the exploration before this job's own trajectory could show a rate. The same
job with ``prior_regime: false`` judges only on its own trajectory and
explores longer.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from depl_fl.tracking.plateau import ROUNDS_PAST_PLATEAU

pytest.importorskip("flwr")
pytest.importorskip("torch")

SOURCE = ["simulation=inprocess", "num_clients=3", "profile.explore.rounds=6",
          "profile.explore.stop_loss_factor=null", "profile.explore.stop_when_met=false",
          "profile.explore.switch_rounds=[2]", "profile.explore.min_points_per_level=2",
          "target.loss=0.25", "target.prob=0.6", "target.max_rounds=30", "tracking.enabled=false",
          "output.plot=false", "planner.mc_trajectories=5000"]
# the value stop on, and more rounds while the loss is above 2 x target.loss (up to max_rounds)
JOB = ["simulation=inprocess", "num_clients=4", "profile.explore.rounds=6", "profile.explore.max_rounds=8",
       "profile.explore.stop_loss_factor=2.0", "profile.explore.value_stop=true",
       "profile.explore.switch_rounds=[2]", "profile.explore.min_points_per_level=2",
       "target.loss=0.25", "target.prob=0.6", "target.max_rounds=30", "tracking.enabled=false",
       "output.plot=false", "planner.mc_trajectories=5000"]
RATE_FROM_PRIOR = "the learning curve's rate from the prior's trajectory for"


class _Messages(logging.Handler):
    """The server log's messages of one job."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _run(tmp: Path, name: str, overrides: list[str]) -> tuple[dict, list[str]]:
    """One job's results.json and its server log's messages."""
    from clients.client_app import make_client_app
    from depl_fl.runs.runconfig import compose_config
    from strategies.inprocess_grid import InProcessGrid
    from strategies.server_app import run_server

    cfg = compose_config([f"profile.cache_dir={tmp / name / 'cache'}", *overrides])
    logger = logging.getLogger("depl_fl.server")
    handler, level = _Messages(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        out = run_server(InProcessGrid(make_client_app(cfg), int(cfg["num_clients"])), cfg, tmp / name)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return json.loads(Path(out).read_text()), handler.messages


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The source job's results.json: six exploration rounds on three clients."""
    tmp = tmp_path_factory.mktemp("prior-source")
    results, _ = _run(tmp, "source", SOURCE)
    assert results["summary"]["profile_rounds"] == 6
    return Path(results["profile"]["cache_file"]).parent.parent / "results.json"


@pytest.fixture(scope="module")
def with_regime(source, tmp_path_factory) -> tuple[dict, list[str]]:
    """The job on four clients with the source as its prior (prior_regime: the default)."""
    return _run(tmp_path_factory.mktemp("prior-regime"), "regime", [*JOB, f"profile.prior={source}"])


@pytest.fixture(scope="module")
def without_regime(source, tmp_path_factory) -> tuple[dict, list[str]]:
    """The same job with ``profile.explore.prior_regime=false``."""
    return _run(tmp_path_factory.mktemp("prior-no-regime"), "plain",
                [*JOB, f"profile.prior={source}", "profile.explore.prior_regime=false"])


def test_the_prior_regime_lets_the_value_stop_end_the_exploration_at_prior_rounds(with_regime, source):
    job, _ = with_regime
    profile, summary = job["profile"], job["summary"]
    assert job["config"]["profile"]["explore"]["prior_regime"] is True
    assert profile["prior"]["rounds"] == 6
    assert profile["prior"]["source"] == json.loads(source.read_text())["profile"]["cache_file"]
    # judged from prior_rounds (2) on; stopped by the value stop, not by the target or the rounds' rules
    stop = profile["value_round"]
    assert stop in (2, 3), profile["values"]
    assert summary["profile_rounds"] == summary["profile_value_round"] == stop
    assert summary["profile_met_round"] is None
    judged = profile["values"]
    assert [v["round"] for v in judged] == list(range(2, stop + 1))
    last = judged[-1]
    assert last["plan_j"] <= last["round_j"] + last["next_plan_j"]
    assert all(v["plan_j"] > v["round_j"] + v["next_plan_j"] for v in judged[:-1])
    # before this job's own trajectory could show a rate (the first trained round and three past it)
    assert stop < 1 + ROUNDS_PAST_PLATEAU
    assert summary["status"] == "completed" and summary["planned_rounds"] >= 1


def test_every_variant_read_its_rate_from_the_prior(with_regime):
    job, messages = with_regime
    lines = [m for m in messages if RATE_FROM_PRIOR in m]
    assert lines, messages
    named = lines[-1].split(RATE_FROM_PRIOR, 1)[1].split("(", 1)[0]
    variants = {v.strip() for v in named.split(",")}
    # this job's variants: those its profile fits
    cache = json.loads(Path(job["profile"]["cache_file"]).read_text())
    assert variants == set(cache["loss"]["run"]) and len(variants) >= 2
    assert job["profile"]["rates_from_prior"] == sorted(variants)  # and on the record


def test_without_the_prior_regime_the_same_job_explores_longer(with_regime, without_regime):
    fast, fast_log = with_regime
    slow, slow_log = without_regime
    assert slow["config"]["profile"]["explore"]["prior_regime"] is False
    stop = fast["profile"]["value_round"]
    assert stop is not None, fast["profile"]["values"]
    assert slow["summary"]["profile_rounds"] > stop
    assert slow["summary"]["profile_energy_j"] > fast["summary"]["profile_energy_j"]
    # no round judged before this job's own trajectory can show a rate, no rate taken from the prior
    assert all(v["round"] >= 1 + ROUNDS_PAST_PLATEAU for v in slow["profile"]["values"])
    assert not any(RATE_FROM_PRIOR in m for m in slow_log) and slow["profile"]["rates_from_prior"] == []
    # the same seeded rounds up to the stop: only the exploration's end differs
    assert [r["loss"] for r in slow["rounds"][:stop]] == [r["loss"] for r in fast["rounds"][:stop]]
