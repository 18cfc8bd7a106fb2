"""An interrupted job keeps every record it made: resumed, it reports what an uninterrupted job reports.

In-process grid, no subprocess. A job "crashes" (raises) either while the
messages of a round are out (the grid raises at its ``crash_at``-th exchange)
or right after its ``k``-th checkpoint (the round is written, the next one not
started); ``resume=true`` on the same folder finishes it. Its results.json then
equals the uninterrupted job's with the same seed in every record: the
exploration and training rounds (models, clients, losses, energies, bytes,
rejections, stop marks), the exploration's outcome, re-plans, plan, scenario,
summary (status, stop reason, costs) and config, except

* what the resumption itself says: ``summary.resumed_from`` and ``config.resume``;
* wall-clock times (:data:`WALL_CLOCK_KEYS`): measured durations of the
  process that ran a step, different in every run, and after a crash also
  without the time lost between the last checkpoint and the crash.

Both jobs of a comparison use the same profile cache folder (emptied before
each), so that the recorded cache path is the same too.
"""

from __future__ import annotations

import json
import pickle
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

import strategies.server_app as server_app  # noqa: E402
from clients.client_app import make_client_app  # noqa: E402
from depl_fl.runs.checkpoint import CHECKPOINT_FILE, load_checkpoint  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import run_server  # noqa: E402

N = 3
#: Digits, 3 clients, 3 exploration rounds, then a plan of a few training rounds with tracking
#: (one re-plan): 3 exploration + 3 training rounds.
TRAIN_JOB = ["simulation=inprocess", f"num_clients={N}", "profile.explore.rounds=3",
             "profile.explore.stop_loss_factor=null", "profile.explore.switch_rounds=[3]",
             "profile.explore.stop_when_met=false", "profile.explore.min_points_per_level=2",
             "target.loss=0.35", "target.prob=0.6", "target.max_rounds=6", "tracking.enabled=true",
             "output.plot=false"]
#: Every client sends twice its weights: the merged model gets worse than the fresh one and the
#: exploration's divergence stop ends the job after exploration round 2 (status diverged, no plan).
DIVERGING_JOB = [*TRAIN_JOB, "profile.explore.rounds=4", "profile.explore.switch_rounds=[4]",
                 "tracking.diverge_rounds=2", "faults.clients=[c0,c1,c2]", "faults.kind=scale",
                 "faults.scale=2.0"]
#: Record keys whose values are wall-clock durations (see the module docstring).
WALL_CLOCK_KEYS = frozenset({"wall_s", "steps_s", "train_time_s", "reply_time_s", "comparable_wall_s",
                             "measured_time_s", "planner_seconds"})
#: What a resumed job reports differently on purpose.
RESUMPTION_KEYS = {"summary.resumed_from", "config.resume"}


class Crash(Exception):
    """Stands for the process dying."""


class CrashingGrid(InProcessGrid):
    """An in-process grid that raises :class:`Crash` at its ``crash_at``-th exchange (None: never).

    Exchange 1 is the properties query; exploration and training rounds follow, one exchange each.
    """

    def __init__(self, *args, crash_at: int | None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.crash_at, self.exchanges = crash_at, 0

    def send_and_receive(self, messages, *, timeout=None):  # noqa: D102 - Grid API
        self.exchanges += 1
        if self.exchanges == self.crash_at:
            raise Crash
        return super().send_and_receive(messages, timeout=timeout)


@contextmanager
def crash_after_checkpoint(k: int | None) -> Iterator[None]:
    """Jobs started inside raise :class:`Crash` right after writing their ``k``-th checkpoint."""
    if k is None:
        yield
        return
    make = server_app._checkpointer

    def crashing(cfg, out_dir, clock):
        on_round, written = make(cfg, out_dir, clock), []

        def on_round_then_crash(*args):
            on_round(*args)
            written.append(1)
            if len(written) == k:
                raise Crash

        return on_round_then_crash

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_app, "_checkpointer", crashing)
        yield


def _cfg(tmp: Path, job: list[str], *extra: str) -> dict:
    return compose_config([f"profile.cache_dir={tmp / 'cache'}", *job, *extra])


def _run(cfg: dict, out: Path, crash_at: int | None = None) -> dict:
    grid = CrashingGrid(make_client_app(cfg), N, crash_at=crash_at)
    return json.loads(Path(run_server(grid, cfg, out)).read_text())


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def run_through(tmp: Path, job: list[str]) -> dict:
    """The uninterrupted job (its profile cache removed afterwards)."""
    shutil.rmtree(tmp / "cache", ignore_errors=True)
    doc = _run(_cfg(tmp, job), tmp / "whole")
    shutil.rmtree(tmp / "cache", ignore_errors=True)
    return doc


def crash(tmp: Path, job: list[str], name: str, *, crash_at: int | None = None,
          after_checkpoint: int | None = None) -> Path:
    """Run ``job`` into ``tmp/name`` until it crashes; the folder (results.json and checkpoint)."""
    shutil.rmtree(tmp / "cache", ignore_errors=True)
    out = tmp / name
    with crash_after_checkpoint(after_checkpoint), pytest.raises(Crash):
        _run(_cfg(tmp, job), out, crash_at=crash_at)
    return out


def resume(tmp: Path, job: list[str], out: Path) -> dict:
    """The crashed job of ``out`` resumed to its end."""
    return _run(_cfg(tmp, job, "resume=true"), out)


def differences(a: Any, b: Any, path: str = "", *, additions: bool = True) -> list[str]:
    """Dotted paths where two results documents differ, wall-clock keys (:data:`WALL_CLOCK_KEYS`) skipped.

    ``additions=False``: a key only in ``b`` is no difference (``b`` is ``a`` written on).
    """
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | (set(b) if additions else set())):
            if key in WALL_CLOCK_KEYS:
                continue
            name = f"{path}.{key}" if path else str(key)
            out += ([name] if key not in a or key not in b
                    else differences(a[key], b[key], name, additions=additions))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path} (length {len(a)} vs {len(b)})"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]", additions=additions)]
    return [] if a == b else [path]


def test_differences_names_every_differing_record_but_wall_clock_ones():
    a = {"rounds": [{"loss": 1.0, "wall_s": 2.0, "steps_s": {"write": 0.1}}],
         "summary": {"stop_reason": None}}
    assert differences(a, json.loads(json.dumps(a))) == []
    b = {"rounds": [{"loss": 1.5, "wall_s": 9.0}], "summary": {}}
    assert differences(a, b) == ["rounds[0].loss", "summary.stop_reason"]
    assert differences(a, {**a, "rounds": []}) == ["rounds (length 1 vs 0)"]
    marked = {**a, "rounds": [{"loss": 1.0, "stopped": "why"}]}
    assert differences(a, marked) == ["rounds[0].stopped"]
    assert differences(a, marked, additions=False) == []
    assert differences(marked, a, additions=False) == ["rounds[0].stopped"]


# ------------------------------------------------------------------ a job that trains after exploring
#: Where the job is interrupted: name -> ``(exchange it crashes in, checkpoint it crashes after,
#: rounds written by then)``. Checkpoints 1-3 follow the exploration rounds, 4 the plan (no
#: training round yet), 5-7 the training rounds; exchanges 2-4 are the exploration rounds, 5-7
#: the training rounds.
INTERRUPTIONS = {
    "during exploration round 2": (3, None, 1),
    "right after the plan": (None, 4, 3),
    "during training round 2": (6, None, 4),
    "after the last round": (None, 7, 6),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The uninterrupted job, and a folder to interrupt it in."""
    tmp = tmp_path_factory.mktemp("resume-records")
    whole = run_through(tmp, TRAIN_JOB)
    return tmp, whole


def test_the_job_compared_explores_plans_trains_and_replans(trained):
    _, whole = trained
    phases = [r["phase"] for r in whole["rounds"]]
    assert phases == ["profile"] * 3 + ["train"] * 3
    assert whole["summary"]["status"] == "completed" and whole["replans"]


def _interrupted_and_resumed(trained, name: str) -> tuple[dict, dict, dict, dict]:
    """The uninterrupted job, the crashed one's results.json and checkpoint, and the resumed job."""
    tmp, whole = trained
    crash_at, after, written = INTERRUPTIONS[name]
    out = crash(tmp, TRAIN_JOB, name.replace(" ", "-"), crash_at=crash_at, after_checkpoint=after)
    crashed, checkpoint = _results(out), load_checkpoint(out, _cfg(tmp, TRAIN_JOB))
    assert len(crashed["rounds"]) == written  # interrupted where the name says
    return whole, crashed, checkpoint, resume(tmp, TRAIN_JOB, out)


def _assert_keeps_every_record(whole: dict, crashed: dict, resumed: dict) -> None:
    assert crashed["summary"]["status"] == "running"
    assert resumed["summary"]["resumed_from"] == len(crashed["rounds"])
    assert set(differences(whole, resumed)) == RESUMPTION_KEYS, differences(whole, resumed)
    # what the crashed job had written is kept (marks added later, such as a stop, aside)
    assert differences(crashed["rounds"], resumed["rounds"][:len(crashed["rounds"])], additions=False) == []


def test_a_job_interrupted_during_its_exploration_keeps_every_record(trained):
    whole, crashed, checkpoint, resumed = _interrupted_and_resumed(trained, "during exploration round 2")
    # exploration round 1 was checkpointed as it ran: the job goes on with round 2
    assert [(r["round"], r["phase"]) for r in crashed["rounds"]] == [(1, "profile")]
    assert checkpoint["phase"] == "profile" and checkpoint["profiler"]["progress"].done == 1
    assert len(checkpoint["profiler"]["records"]) == 1
    _assert_keeps_every_record(whole, crashed, resumed)


def test_a_job_interrupted_twice_keeps_every_record(trained):
    """Interrupted during exploration round 2, resumed, interrupted again during training round 2."""
    tmp, whole = trained
    out = crash(tmp, TRAIN_JOB, "twice", crash_at=3)
    # the resumed job's exchanges: 1 the properties query, 2-3 exploration rounds 2-3, 4-5 training rounds
    with pytest.raises(Crash):
        _run(_cfg(tmp, TRAIN_JOB, "resume=true"), out, crash_at=5)
    crashed = _results(out)
    assert [r["phase"] for r in crashed["rounds"]] == ["profile"] * 3 + ["train"]
    _assert_keeps_every_record(whole, crashed, resume(tmp, TRAIN_JOB, out))


@pytest.mark.parametrize("name", [n for n in INTERRUPTIONS if n != "during exploration round 2"])
def test_a_job_interrupted_after_exploring_keeps_every_record(trained, name):
    whole, crashed, checkpoint, resumed = _interrupted_and_resumed(trained, name)
    assert checkpoint["phase"] == "train"
    _assert_keeps_every_record(whole, crashed, resumed)


# ------------------------------------------------------------------ the exploration's divergence stop
@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume-diverged")
    return tmp, run_through(tmp, DIVERGING_JOB)


@pytest.mark.parametrize("crash_at,after_checkpoint", [(3, None), (None, 2)],
                         ids=["during exploration round 2", "after the stopping round"])
def test_a_job_the_exploration_stopped_keeps_its_stop_reason(diverged, crash_at, after_checkpoint):
    """The stop is decided again from the checkpointed rounds, before any further round."""
    tmp, whole = diverged
    summary = whole["summary"]
    assert summary["status"] == "diverged" and summary["stop_reason"] and summary["planned_rounds"] == 0
    assert whole["rounds"][-1]["stopped"] == summary["stop_reason"] and len(whole["rounds"]) == 2
    out = crash(tmp, DIVERGING_JOB, f"crash-{crash_at}-{after_checkpoint}", crash_at=crash_at,
                after_checkpoint=after_checkpoint)
    crashed = _results(out)
    assert "stopped" not in crashed["rounds"][-1]  # written before the stop was decided
    _assert_keeps_every_record(whole, crashed, resume(tmp, DIVERGING_JOB, out))


# ------------------------------------------------------------------ the measured cost model
#: The wall clock and the costs fitted from the exploration rounds' measured times: the plan's
#: costs are fitted once, when the scenario is built after the exploration.
MEASURED_JOB = [*TRAIN_JOB, "cost.clock=wall", "cost.source=measured"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A measured-cost job crashed in training round 2: its folder, and a copy with a checkpoint as
    written before the cost report was kept (no ``cost_report`` entry)."""
    tmp = tmp_path_factory.mktemp("resume-measured")
    out = crash(tmp, MEASURED_JOB, "crashed", crash_at=6)
    legacy = tmp / "legacy"
    shutil.copytree(out, legacy)
    doc = pickle.loads((legacy / CHECKPOINT_FILE).read_bytes())
    assert doc["phase"] == "train" and doc.pop("cost_report")["used"] == "measured"
    (legacy / CHECKPOINT_FILE).write_bytes(pickle.dumps(doc, protocol=5))
    return tmp, out, legacy


def test_a_job_resumed_after_its_plan_keeps_its_measured_cost_report(measured):
    """Timed by the wall clock, the job is not compared with another run: the record it had made is."""
    tmp, out, _ = measured
    crashed = _results(out)
    assert crashed["cost"]["used"] == "measured" and crashed["cost"]["fit"]
    resumed = resume(tmp, MEASURED_JOB, out)
    assert resumed["summary"]["status"] == "completed"
    assert resumed["cost"] == crashed["cost"]
    assert resumed["scenario"] == crashed["scenario"]  # the fitted costs the plan was made with


def test_a_checkpoint_without_a_cost_report_still_resumes(measured):
    """A checkpoint written before the cost report was kept: the job finishes, reporting the
    costs as it was built (the table), as it did then."""
    tmp, _, legacy = measured
    crashed = _results(legacy)
    resumed = resume(tmp, MEASURED_JOB, legacy)
    assert resumed["summary"]["status"] == "completed"
    assert resumed["summary"]["resumed_from"] == len(crashed["rounds"])
    assert resumed["cost"] == {"source": "measured", "clock": "wall", "used": "table"}
    assert differences(crashed["rounds"], resumed["rounds"][:len(crashed["rounds"])], additions=False) == []
