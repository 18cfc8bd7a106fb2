"""benchmarks/explore_overshoot.py: what the minimum exploration costs jobs that met the target in it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmark_scripts import load_benchmark

explore_overshoot = load_benchmark("explore_overshoot")


def _job(folder: Path, explore_losses: list[float], train_rounds: int, test_loss: float,
         prob: float = 0.8) -> None:
    rounds = [{"round": k + 1, "phase": "profile", "loss": loss, "energy_j": 10.0}
              for k, loss in enumerate(explore_losses)]
    rounds += [{"round": len(explore_losses) + k + 1, "phase": "train", "loss": 0.3, "energy_j": 5.0}
               for k in range(train_rounds)]
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"rounds": rounds, "summary": {
        "target_loss": 0.4, "target_prob": prob, "final_test_loss": test_loss,
        "total_energy_j": sum(r["energy_j"] for r in rounds)}}))


def test_a_job_met_in_the_exploration_counts_the_energy_after_the_round_it_met(tmp_path: Path) -> None:
    _job(tmp_path / "a", [1.0, 0.6, 0.39, 0.3, 0.25], 0, 0.27)       # met at round 3: rounds 4, 5 after
    job = explore_overshoot.load_jobs(tmp_path)[0]
    assert (job.trained, job.first_met, job.energy_after_j, job.total_j) == (False, 3, 20.0, 50.0)


def test_the_table_keeps_planned_and_unplanned_jobs_apart(tmp_path: Path, capsys) -> None:
    _job(tmp_path / "s" / "a", [1.0, 0.35, 0.3], 0, 0.3)              # met at 2, 10 J of 30 after
    _job(tmp_path / "s" / "b", [1.0, 0.9, 0.45, 0.35], 0, 0.5)        # met at 4, nothing after; misses
    _job(tmp_path / "s" / "c", [1.0, 0.9, 0.8], 4, 0.2)               # planned
    assert explore_overshoot.main([str(tmp_path / "s")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| s |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:6] == ["3", "2", "2-4 (median 3)", f"{10 / 70:.1%}"]
    assert cells[6:8] == ["0.500", "1.25"]  # unplanned: 1 of 2 at or below 0.4; 0.8-quantile 0.5 / 0.4
    assert cells[8:10] == ["1.000", "0.50"]  # planned: 0.2 / 0.4


def test_a_missing_or_empty_sweep_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    assert explore_overshoot.main([str(tmp_path / "nowhere")]) == 2
    assert explore_overshoot.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
