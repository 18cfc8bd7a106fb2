"""The sweep analysis scripts: how they read a sweep folder and refuse one without their jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from sweep_io import job_records, write_report  # noqa: E402

SCRIPTS = ["no_plan_reach", "rise_lift_replan", "tracking_stop_margins", "regime_replan",
           "oscillation_replan"]


def _job(folder: Path, record: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(record), encoding="utf-8")


def test_job_records_walk_every_depth_in_path_order(tmp_path: Path) -> None:
    _job(tmp_path / "b" / "0", {"seed": 2})
    _job(tmp_path / "a", {"seed": 1})
    (tmp_path / "a" / "other.json").write_text("{}", encoding="utf-8")
    assert [(p.relative_to(tmp_path).as_posix(), d["seed"]) for p, d in job_records(tmp_path)] == [
        ("a/results.json", 1), ("b/0/results.json", 2)]
    assert list(job_records(tmp_path / "missing")) == []


def test_write_report_makes_the_folder_or_prints(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_report("| a |\n", tmp_path / "deep" / "r.md")
    assert (tmp_path / "deep" / "r.md").read_text(encoding="utf-8") == "| a |\n"
    write_report("| b |\n", None)
    assert capsys.readouterr().out == "| b |\n"


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_sweep_without_the_scripts_jobs_is_refused_in_one_line(script: str, tmp_path: Path) -> None:
    _job(tmp_path / "0", {"summary": {"method": "full"}, "rounds": []})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: no ") and len(proc.stderr.strip().splitlines()) == 1


def test_tracking_stops_are_read_from_the_last_training_round(tmp_path: Path) -> None:
    import tracking_stop_margins

    rounds = [{"phase": "explore", "loss": 1.0, "test_loss": 1.0},
              {"phase": "train", "loss": 0.30, "test_loss": 0.31, "loss_margin": 0.02},
              {"phase": "train", "loss": 0.25, "test_loss": 0.40, "loss_margin": 0.05}]
    _job(tmp_path / "0", {"summary": {"method": "depl", "tracking": True, "seed": 7, "target_prob": 0.9,
                                      "target_loss": 0.35},
                          "rounds": rounds, "replans": [{"reason": "target met by the stop rule"}]})
    _job(tmp_path / "1", {"summary": {"method": "depl", "tracking": False, "seed": 8}, "rounds": rounds})
    assert tracking_stop_margins.stops(tmp_path) == [
        {"seed": 7, "pi": 0.9, "target": 0.35, "by_rule": True, "validation": 0.25, "test": 0.40,
         "margin": 0.05}]
