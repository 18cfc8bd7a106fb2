"""benchmarks/early_stop_model_table.py: the model a job ended with beside its last round's."""

from __future__ import annotations

from tests.benchmark_scripts import load_benchmark

table_script = load_benchmark("early_stop_model_table")


def _doc(seed, final_model_round, final_test, met, status="stalled"):
    rounds = [{"phase": "profile", "loss": 2.0}] + [
        {"phase": "train", "loss": v, "test_loss": t} for v, t in [(0.3, 0.32), (0.2, 0.30), (0.4, 0.36)]]
    return {"summary": {"seed": seed, "status": status, "rounds": 3, "profile_rounds": 1,
                        "final_model_round": final_model_round, "final_loss": 0.2,
                        "final_test_loss": final_test, "met": met, "target_loss": 0.35,
                        "total_energy_j": 10.0}, "rounds": rounds}


def test_rows_name_the_training_round_and_the_last_rounds_figures():
    row = table_script.job_row(_doc(0, 3, 0.30, True))
    assert row["final_round"] == 2 and row["final_test"] == 0.30 and row["met"]
    assert row["last_val"] == 0.4 and row["last_test"] == 0.36 and not row["last_met"]
    text = table_script.table([row, table_script.job_row(_doc(1, 4, 0.36, False, "completed"))])
    assert "| 0 | stalled | 3 | 2 | 0.200 | 0.300 | yes | 0.400 | 0.360 | no | 10.0 |" in text
    assert "| 1 | completed | 3 | last |" in text
    assert "the model each job ended with: 1/2 met L*; the last round's: 0/2; 1 of 2 jobs" in text
