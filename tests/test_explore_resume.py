"""A job that crashes during its federated exploration rounds resumes from its checkpoint.

In-process grid, no subprocess: the grid "crashes" (raises) while sending the
messages of an exploration round; ``resume=true`` on the same folder continues
the exploration after the last checkpointed round and the finished job equals
an uninterrupted one with the same seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.runs.checkpoint import load_checkpoint  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import run_server  # noqa: E402

N = 3
JOB = ["simulation=inprocess", f"num_clients={N}", "profile.explore.rounds=3",
       "profile.explore.stop_loss_factor=null", "profile.explore.switch_rounds=[3]",
       "profile.explore.stop_when_met=false",
       "profile.explore.min_points_per_level=2", "target.loss=0.9", "target.prob=0.6",
       "target.max_rounds=4", "tracking.enabled=false", "output.plot=false"]


class Crash(Exception):
    """Stands for the process dying in the middle of a round."""


class CrashingGrid(InProcessGrid):
    """An in-process grid that raises :class:`Crash` at its ``crash_at``-th exchange."""

    def __init__(self, *args, crash_at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.crash_at, self.exchanges = crash_at, 0

    def send_and_receive(self, messages, *, timeout=None):  # noqa: D102 - Grid API
        self.exchanges += 1
        if self.exchanges == self.crash_at:
            raise Crash
        return super().send_and_receive(messages, timeout=timeout)


def _cfg(tmp: Path, *extra: str) -> dict:
    return compose_config([f"profile.cache_dir={tmp / 'cache'}", *JOB, *extra])


def _run(cfg: dict, out: Path, grid=None) -> dict:
    grid = grid or InProcessGrid(make_client_app(cfg), N)
    return json.loads(Path(run_server(grid, cfg, out)).read_text())


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """An uninterrupted job and one that crashed in exploration round 3 and was resumed."""
    tmp = tmp_path_factory.mktemp("explore-resume")
    whole = _run(_cfg(tmp / "a"), tmp / "whole")
    cfg = _cfg(tmp / "b")
    # exchanges: 1 the properties query, 2..4 exploration rounds 1..3
    with pytest.raises(Crash):
        _run(cfg, tmp / "crash", CrashingGrid(make_client_app(cfg), N, crash_at=4))
    crashed = json.loads((tmp / "crash" / "results.json").read_text())
    checkpoint = load_checkpoint(tmp / "crash", cfg)
    resumed = _run(_cfg(tmp / "b", "resume=true"), tmp / "crash")
    return whole, crashed, checkpoint, resumed


def test_exploration_rounds_are_checkpointed_as_they_run(jobs):
    _, crashed, checkpoint, _ = jobs
    assert crashed["summary"]["status"] == "running"
    assert [(r["round"], r["phase"]) for r in crashed["rounds"]] == [(1, "profile"), (2, "profile")]
    assert checkpoint["phase"] == "profile" and checkpoint["profiler"]["progress"].done == 2
    assert len(checkpoint["profiler"]["records"]) == 2


def test_resumed_exploration_equals_an_uninterrupted_job(jobs):
    whole, _, _, resumed = jobs
    assert resumed["summary"]["status"] == "completed"
    assert resumed["summary"]["resumed_from"] == 2
    assert [r["round"] for r in resumed["rounds"]] == list(range(1, len(whole["rounds"]) + 1))
    assert [r["phase"] for r in resumed["rounds"]] == [r["phase"] for r in whole["rounds"]]
    for got, want in zip(resumed["rounds"], whole["rounds"], strict=True):
        assert got["model"] == want["model"] and got["clients"] == want["clients"]
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)
    # the same observations, so the same fitted profile and the same plan
    assert resumed["scenario"]["loss"] == whole["scenario"]["loss"]
    assert resumed["plan"]["rounds"] == whole["plan"]["rounds"]
    assert resumed["summary"]["profile_energy_j"] == pytest.approx(whole["summary"]["profile_energy_j"])
    assert resumed["summary"]["final_loss"] == pytest.approx(whole["summary"]["final_loss"], rel=1e-6)

