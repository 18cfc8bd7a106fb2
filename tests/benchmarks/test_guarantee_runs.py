"""benchmarks/guarantee_runs.py: how a job ended, read from its results.json."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmark_scripts import load_benchmark

guarantee_runs = load_benchmark("guarantee_runs")


def _doc(status: str = "completed", replans: list | None = None, elapsed: float = 40.0,
         met: bool = True, train_rounds: int = 3) -> dict:
    rounds = [{"round": 1, "phase": "profile", "loss": 2.0}] + [
        {"round": 2 + i, "phase": "train", "loss": 0.3, "loss_margin": 0.04, "test_loss": 0.31}
        for i in range(train_rounds)]
    reason = "patience" if status == "stalled" else None
    return {"summary": {"seed": 7, "status": status, "stop_reason": reason,
                        "final_test_loss": 0.31, "final_loss": 0.3, "met": met, "rounds": train_rounds,
                        "profile_rounds": 1, "replans": len(replans or []), "profile_energy_j": 1.0,
                        "cost_j": 2.0, "total_energy_j": 3.0, "wall_s": 5.0, "target_loss": 0.35,
                        "elapsed_s": elapsed, "deadline_s": 300.0, "profile_met_round": None},
            "rounds": rounds, "replans": replans or []}


def test_a_target_met_replan_at_the_last_round_is_the_stop_rule() -> None:
    assert guarantee_runs.ending(_doc(replans=[{"round": 4, "reason": "target met: the measured loss"}])) \
        == "stop rule"
    # the same re-plan earlier than the last round, or another reason there: the plan ran out
    assert guarantee_runs.ending(_doc(replans=[{"round": 3, "reason": "target met: x"}])) == "plan end"
    assert guarantee_runs.ending(_doc(replans=[{"round": 4, "reason": "behind target: q"}])) == "plan end"


def test_status_and_deadline_endings() -> None:
    assert guarantee_runs.ending(_doc(status="stalled")) == "stalled: patience"
    assert guarantee_runs.ending(_doc(elapsed=300.0)) == "deadline"
    assert guarantee_runs.ending(_doc(train_rounds=0)) == "no training round"


def test_the_table_lists_every_seed_and_each_miss(tmp_path: Path) -> None:
    for seed, met in ((1, True), (2, False)):
        job = tmp_path / f"job{seed}"
        job.mkdir()
        doc = _doc(met=met)
        doc["summary"]["seed"] = seed
        (job / "results.json").write_text(json.dumps(doc))
    out = tmp_path / "runs.md"
    assert guarantee_runs.main([f"cell={tmp_path}", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| 1 | 0.310 | yes |" in text and "| 2 | 0.310 | **no** |" in text
    assert "1/2 met L*" in text and "Misses: seed 2 (" in text and "rule at end" in text
    assert "| passed |" in text  # 0.3 + 0.04 <= 0.35


def test_a_missing_folder_is_refused_with_status_2(tmp_path: Path) -> None:
    assert guarantee_runs.main([f"x={tmp_path / 'none'}"]) == 2
