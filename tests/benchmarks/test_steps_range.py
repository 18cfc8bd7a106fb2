"""benchmarks/plan_regime/steps_range.py: the local steps a trajectory bank's settings ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

steps_range = load_benchmark("plan_regime/steps_range")


def _job(folder: Path, samples: list[int], policies: dict[str, list[int]]) -> None:
    folder.mkdir(parents=True)
    clients = [{"id": f"c{i}", "num_samples": n} for i, n in enumerate(samples)]
    doc = {"config": {"train": {"local_epochs": 1, "batch_size": 32}}, "scenario": {"clients": clients}}
    (folder / "job.json").write_text(json.dumps(doc))
    (folder / "profile.json").write_text("{}")
    for name, ids in policies.items():
        (folder / f"{name}.json").write_text(json.dumps({"clients": [f"c{i}" for i in ids]}))


def test_a_jobs_steps_are_its_mean_clients_and_its_policies_sets(tmp_path: Path) -> None:
    _job(tmp_path / "d1" / "seed1", [64, 128, 192], {"full_all": [0, 1, 2], "p50_B": [2]})
    federation, sets = steps_range.job_steps(tmp_path / "d1" / "seed1")
    assert federation == pytest.approx(4.0)
    assert sorted(sets) == pytest.approx([4.0, 6.0])


def test_the_bank_range_is_printed_against_the_configured_one(tmp_path: Path, capsys) -> None:
    _job(tmp_path / "d1" / "seed1", [96, 96], {"full_all": [0, 1]})
    _job(tmp_path / "d2" / "seed1", [160, 160], {"full_all": [0, 1]})
    assert steps_range.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| d1 | 1 | 3.0000-3.0000 |" in out and "| d2 | 1 | 5.0000-5.0000 |" in out
    assert "federation steps 3.0000-5.0000; configured steps_min None, steps_max None" in out  # opt-in
    held = "model.regime.steps_min=3.207 model.regime.steps_max=5.614"
    assert steps_range.main([str(tmp_path), "--overrides", held]) == 0
    assert "configured steps_min 3.207, steps_max 5.614" in capsys.readouterr().out


def test_a_folder_without_bank_jobs_exits_2(tmp_path: Path, capsys) -> None:
    assert steps_range.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
