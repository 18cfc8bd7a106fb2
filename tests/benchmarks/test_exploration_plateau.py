"""benchmarks/exploration_plateau.py: the plan's mean learning curve against the run it planned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "exploration_plateau.py"
plateau = load_benchmark("exploration_plateau")

#: A run mean proportional to the loss above a floor of 0: a 10% drop per round.
LEVELS, MEANS = [0.0, 10.0], [0.0, 1.0]


def test_the_mean_curve_follows_the_run_mean_at_each_level() -> None:
    assert plateau.mean_curve(1.0, LEVELS, MEANS, 3) == pytest.approx([0.9, 0.81, 0.729])
    assert plateau.rounds_to(1.0, LEVELS, MEANS, 0.5) == 7  # 0.9**7 = 0.478
    assert plateau.rounds_to(1.0, [0.0, 10.0], [0.0, 0.0], 0.5) is None  # a flat curve never gets there


def _doc(planned_losses: list[float], explored: int = 3, tracking: bool = False) -> dict:
    rounds = [{"phase": "profile", "loss": 2.0 - 0.1 * k} for k in range(explored - 1)]
    rounds.append({"phase": "profile", "loss": 1.0})
    rounds += [{"phase": "train", "model": "p50", "loss": v} for v in planned_losses]
    return {"summary": {"tracking": tracking, "target_loss": 0.5},
            "scenario": {"loss": {"run": {"p50": {"levels": LEVELS, "mean": MEANS}}}}, "rounds": rounds}


def test_a_run_that_follows_its_curve_scores_one_and_a_faster_run_more() -> None:
    curve = plateau.mean_curve(1.0, LEVELS, MEANS, 30)
    exact = plateau.job_row(_doc(curve))
    assert exact["drop_ratio"] == pytest.approx(1.0, rel=0.06)  # rounds 10-11 averaged against round 10
    assert exact["run_rounds"] == exact["curve_rounds"] == 7
    assert exact["start_over_target"] == pytest.approx(2.0) and exact["explored"] == 3
    fast = plateau.job_row(_doc(plateau.mean_curve(1.0, LEVELS, [0.0, 2.0], 30)))  # 20% a round
    assert fast["drop_ratio"] == pytest.approx((1 - 0.8**10) / (1 - 0.9**10), rel=0.06)
    assert (fast["run_rounds"], fast["curve_rounds"]) == (4, 7)


def test_tracked_and_short_jobs_are_left_out() -> None:
    assert plateau.job_row(_doc([0.9] * 30, tracking=True)) is None
    assert plateau.job_row(_doc([0.9] * 10)) is None  # fewer than 11 planned rounds


def test_a_sweep_is_read_and_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    job = tmp_path / "sweep" / "0_seed=1"
    job.mkdir(parents=True)
    (job / "results.json").write_text(json.dumps(_doc(plateau.mean_curve(1.0, LEVELS, MEANS, 20))))
    done = subprocess.run([sys.executable, str(_PATH), str(tmp_path / "sweep")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "| 1 | 3-3 | 2.00 |" in done.stdout
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "missing", tmp_path / "empty"):
        done = subprocess.run([sys.executable, str(_PATH), str(bad)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2
        assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
