"""How the default jobs' table (benchmarks/byom_default_jobs_table.py) reads one job's results.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from byom_default_jobs_table import summarise_job  # noqa: E402


def _round(phase: str, model: str, down: int, modelled_down: int, groups: list | None = None) -> dict:
    return {"phase": phase, "model": model, "loss": 1.0, "groups": groups or [],
            "bytes_down": down, "bytes_up": 10, "modelled_bytes_down": modelled_down, "modelled_bytes_up": 10}


def _write(tmp_path: Path, rounds: list[dict], **summary: object) -> Path:
    doc = {"seed": 3, "profile": {"wall_s": 2.0},
           "summary": {"target_loss": 0.35, "final_test_loss": 0.3, "met": True, "rounds": 2, "replans": 1,
                       "profile_energy_j": 5.0, "cost_j": 7.0, "total_energy_j": 12.0, "profile_rounds": 1,
                       "wall_s": 3.0, "status": "done", **summary},
           "rounds": rounds}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_a_job_with_every_round_as_modelled_counts_its_training_variants(tmp_path: Path) -> None:
    rounds = [_round("profile", "full+p50", 30, 30),
              _round("train", "p50", 20, 20),
              _round("train", "full+p50", 30, 30, groups=[{"model": "full"}, {"model": "p50"}])]
    job = summarise_job(_write(tmp_path, rounds))
    assert job["bytes_exact"] and job["bytes_rounds"] == 3
    assert job["variants"] == {"p50": 2, "full": 1}
    assert job["met"] and job["rc"] == 0 and job["wall_s"] == 5.0
    assert job["explore_loss"] == 1.0


def test_one_round_off_its_modelled_bytes_fails_the_check(tmp_path: Path) -> None:
    rounds = [_round("profile", "full", 30, 30), _round("train", "p50", 21, 20)]
    assert not summarise_job(_write(tmp_path, rounds))["bytes_exact"]


def test_an_infeasible_job_exits_3_and_a_test_loss_above_the_target_is_not_met(tmp_path: Path) -> None:
    job = summarise_job(_write(tmp_path, [_round("profile", "full", 30, 30)], status="infeasible",
                               final_test_loss=None))
    assert job["rc"] == 3 and not job["met"] and not job["variants"]
    assert not summarise_job(_write(tmp_path, [], final_test_loss=0.36))["met"]
    assert not summarise_job(_write(tmp_path, []))["bytes_exact"]  # no round: nothing was checked
