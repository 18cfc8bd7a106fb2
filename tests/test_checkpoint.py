"""Checkpoint files, atomic writes, results.json status and the controller state round trip."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.runs.checkpoint import (
    CHECKPOINT_FILE,
    FlushPacer,
    atomic_write_text,
    first_difference,
    flush_file,
    load_checkpoint,
    save_checkpoint,
)
from depl_fl.runs.results import mark_interrupted, write_results

CFG = {"seed": 0, "method": "depl", "resume": False, "target": {"loss": 0.5, "prob": 0.9},
       "server": {"round_timeout_s": 600}}


def test_atomic_write_replaces_whole_file_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "sub" / "results.json"
    atomic_write_text(path, "first")
    atomic_write_text(path, "second")
    assert path.read_text() == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["results.json"]


def test_atomic_write_failure_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    atomic_write_text(path, "old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_checkpoint_round_trip_and_resume_flag_ignored(tmp_path):
    state = {"w": np.arange(6.0).reshape(2, 3)}
    save_checkpoint(tmp_path, CFG, {"rounds_done": 2, "global_state": state})
    doc = load_checkpoint(tmp_path, {**CFG, "resume": True})
    assert doc["rounds_done"] == 2
    np.testing.assert_array_equal(doc["global_state"]["w"], state["w"])
    assert "python" in doc["random"] and "numpy" in doc["random"]


def test_resume_with_other_config_names_the_key(tmp_path):
    save_checkpoint(tmp_path, CFG, {"rounds_done": 1})
    other = {**CFG, "target": {"loss": 0.4, "prob": 0.9}, "resume": True}
    with pytest.raises(ScenarioError, match="target.loss"):
        load_checkpoint(tmp_path, other)


def test_resume_without_checkpoint_is_a_one_line_error(tmp_path):
    with pytest.raises(ScenarioError, match="no checkpoint") as err:
        load_checkpoint(tmp_path, CFG)
    # each entry point's own way to name the folder (output.dir is refused in a Hydra job)
    assert "hydra.run.dir=PATH in a Hydra job, ++output.dir=PATH with flwr run" in str(err.value)
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"not a pickle")
    with pytest.raises(ScenarioError, match="unreadable"):
        load_checkpoint(tmp_path, CFG)


def test_resume_of_a_job_stopped_before_its_first_round_says_there_is_nothing_to_resume(tmp_path):
    # what an interrupt during the first exploration round leaves: results.json, no checkpoint
    (tmp_path / "results.json").write_text(json.dumps({"summary": {"rounds": 0, "status": "interrupted"}}))
    with pytest.raises(ScenarioError) as err:
        load_checkpoint(tmp_path, CFG)
    message = str(err.value)
    assert message == (f"resume: no checkpoint {tmp_path / CHECKPOINT_FILE} (its job stopped "
                       "(interrupted) before a round was checkpointed: nothing to resume; run it again "
                       "without resume=true)")
    # a finished job's record does not explain a missing checkpoint: the folder advice stays
    (tmp_path / "results.json").write_text(json.dumps({"summary": {"rounds": 4, "status": "completed"}}))
    with pytest.raises(ScenarioError, match="name the interrupted job's folder"):
        load_checkpoint(tmp_path, CFG)


def test_first_difference():
    assert first_difference({"a": {"b": 1}}, {"a": {"b": 1}}) is None
    assert first_difference({"a": {"b": 1}}, {"a": {"b": 2}}) == "a.b"
    assert first_difference({"a": 1}, {"a": 1, "c": 2}) == "c"


def test_mark_interrupted_keeps_rounds_and_sets_status(tmp_path):
    doc = {"version": 1, "summary": {"status": "running", "rounds": 2},
           "rounds": [{"round": 1}, {"round": 2}]}
    write_results(doc, tmp_path, plot=False)
    mark_interrupted(tmp_path)
    out = json.loads((tmp_path / "results.json").read_text())
    assert out["summary"]["status"] == "interrupted" and len(out["rounds"]) == 2


def test_mark_interrupted_without_results_writes_minimal_document(tmp_path):
    mark_interrupted(tmp_path)
    out = json.loads((tmp_path / "results.json").read_text())
    assert out["summary"]["status"] == "interrupted" and out["rounds"] == []


def test_mark_interrupted_does_not_undo_completed(tmp_path):
    write_results({"version": 1, "summary": {"status": "completed"}, "rounds": []}, tmp_path, plot=False)
    mark_interrupted(tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["summary"]["status"] == "completed"


def _scenario():
    from pathlib import Path

    from depl_fl.contract.scenario import scenario_from_dict

    return scenario_from_dict(json.loads((Path(__file__).parent / "data" / "example_scenario.json")
                                         .read_text()))


def test_a_checkpoint_pickles_a_scenario_once_and_loads_the_objects_it_saved(tmp_path):
    import pickle

    from depl_fl.runs.checkpoint import checkpoint_bytes

    scenario = _scenario()
    doc = {"scenario": scenario, "controller": {"scenario": scenario, "records": [{"loss": 1.0}]}}
    back = pickle.loads(checkpoint_bytes(doc))
    assert back["scenario"] == scenario and back["scenario"] is back["controller"]["scenario"]
    assert back["controller"]["records"] == [{"loss": 1.0}]
    assert pickle.loads(checkpoint_bytes(doc))["scenario"] == scenario  # from the kept bytes
    other = dataclasses.replace(scenario, local_epochs=3)
    assert pickle.loads(checkpoint_bytes({"scenario": other}))["scenario"].local_epochs == 3
    save_checkpoint(tmp_path, CFG, {"rounds_done": 1, "scenario": scenario})
    assert load_checkpoint(tmp_path, CFG)["scenario"] == scenario


def test_steady_entries_are_pickled_again_only_when_they_change(monkeypatch, tmp_path):
    import pickle

    import depl_fl.runs.checkpoint as checkpoint

    made: list[object] = []
    dumps = pickle.dumps
    monkeypatch.setattr(checkpoint.pickle, "dumps", lambda obj, **kw: made.append(obj) or dumps(obj, **kw))
    properties = {f"c{i}": {"cluster": "a", "num-samples": i} for i in range(50)}
    for rounds_done in (1, 2, 3):  # the same content in a new dict every round, as a job writes it
        doc = {"rounds_done": rounds_done, "properties": {k: dict(v) for k, v in properties.items()}}
        assert pickle.loads(checkpoint.checkpoint_bytes(doc)) == doc
    assert made == [properties]  # pickled once, for the first round
    properties["c7"]["num-samples"] = 99  # a changed value is pickled again
    doc = {"rounds_done": 4, "properties": properties}
    assert pickle.loads(checkpoint.checkpoint_bytes(doc))["properties"]["c7"]["num-samples"] == 99
    assert len(made) == 2
    save_checkpoint(tmp_path, CFG, doc)
    assert load_checkpoint(tmp_path, CFG)["properties"] == properties


def test_the_compact_results_text_is_jsons_with_the_scenario_encoded_once():
    from depl_fl.runs.results import compact_json

    section = {"clients": [{"id": f"c{i}", "num_samples": i} for i in range(5)]}
    doc = {"version": 1, "summary": {"met": True, "loss": 0.25}, "scenario": section, "config": {"a": [1]}}
    assert compact_json(doc) == json.dumps(doc, allow_nan=False)
    assert compact_json(doc) == json.dumps(doc, allow_nan=False)  # from the kept text
    changed = {**doc, "scenario": {"clients": []}}
    assert compact_json(changed) == json.dumps(changed, allow_nan=False)
    with pytest.raises(ValueError):
        compact_json({**doc, "summary": {"loss": float("nan")}})


def test_every_rewrite_of_the_rounds_is_the_whole_documents_text_earlier_rounds_encoded_once():
    from depl_fl.runs.results import RoundsMemo, _finite_or_none, compact_json, job_rounds

    memo = RoundsMemo()
    profile = [{"round": 1, "loss": 2.0, "groups": [{"model": "full"}]}]
    train: list[dict] = []

    def check() -> list[dict]:
        rounds = memo.section(profile, train)
        assert rounds == _finite_or_none(job_rounds(profile, train))
        doc = {"summary": {"rounds": len(train)}, "rounds": rounds, "scenario": {"clients": []}}
        assert compact_json(doc, memo) == json.dumps(doc, allow_nan=False)
        return rounds

    check()
    for k in range(1, 4):
        train.append({"round": k, "loss": 1.0 / k, "loss_margin": float("nan"), "replied": ["c1"]})
        first = check()
        train[-1]["steps_s"] = {"write": 0.01}  # the last round changes once it is written
        second = check()
        assert second[-1]["steps_s"] == {"write": 0.01}
        assert all(a is b for a, b in zip(first[:-1], second[:-1], strict=True))  # final: reused
        assert second[-1]["round"] == k + 1 and second[-1]["loss_margin"] is None
    train[0] = {**train[0], "loss": 9.0}  # another record at a kept place (a resumed job's) is made again
    assert check()[1]["loss"] == 9.0


def _counted_fsync(monkeypatch):
    calls: list[int] = []
    real = os.fsync

    def fsync(fd):
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_a_per_round_write_need_not_be_flushed_and_still_replaces_whole(tmp_path, monkeypatch):
    calls = _counted_fsync(monkeypatch)
    path = tmp_path / "results.json"
    atomic_write_text(path, "first", durable=False)
    atomic_write_text(path, "second", durable=False)
    assert path.read_text() == "second" and calls == []
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    atomic_write_text(path, "third")  # durable by default
    assert path.read_text() == "third" and len(calls) == 1
    save_checkpoint(tmp_path, CFG, {"round": 1}, durable=False)
    assert len(calls) == 1 and load_checkpoint(tmp_path, CFG)["round"] == 1
    assert flush_file(tmp_path / CHECKPOINT_FILE) and len(calls) == 2
    assert not flush_file(tmp_path / "missing.pkl")


def test_the_flush_pacer_flushes_the_first_write_after_every_interval():
    now = [100.0]
    pacer = FlushPacer(30.0, clock=lambda: now[0])
    seen = []
    for t in (101.0, 129.9, 130.0, 131.0, 159.0, 161.0):
        now[0] = t
        seen.append(pacer.due())
    assert seen == [False, False, True, False, False, True]
    assert FlushPacer(0.0).due()  # no interval: every write


def test_resume_point_counts_rounds_as_the_summary_does():
    from depl_fl.orchestration.checkpointing import resume_point

    assert resume_point(21, 8) == "round 21 (8 exploration + 13 training rounds)"
    assert resume_point(21, 8, finished=True) == ("round 21 (8 exploration + 13 training rounds); "
                                                  "the job had already finished: no round left to run")
    assert resume_point(2, 2) == "round 2 (2 exploration rounds)"  # killed during the exploration
    assert resume_point(5, 0) == "round 5 (5 training rounds)"  # a cached profile: no exploration round


def test_device_keys_may_change_on_resumption(tmp_path):
    """A job checkpointed on the CPU (or before the device keys existed) resumes on a GPU machine."""
    cpu = {**CFG, "train": {"lr": 0.05, "device": "cpu"}, "simulation": {"client_num_gpus": 0}}
    save_checkpoint(tmp_path, {**CFG, "train": {"lr": 0.05}, "simulation": {}}, {"rounds_done": 1})
    assert load_checkpoint(tmp_path, cpu)["rounds_done"] == 1
    gpu = {**cpu, "train": {"lr": 0.05, "device": "cuda"}, "simulation": {"client_num_gpus": 0.5}}
    assert load_checkpoint(tmp_path, gpu)["rounds_done"] == 1
    with pytest.raises(ScenarioError, match="config train.lr differs"):
        load_checkpoint(tmp_path, {**gpu, "train": {"lr": 0.1, "device": "cuda"}})
