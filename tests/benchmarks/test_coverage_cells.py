"""benchmarks/plan_regime/coverage_cells.py: in-sample coverage per setting and policy, and the
exploration's local steps against the federation's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
coverage_cells = load_benchmark("plan_regime/coverage_cells")


class _Job:
    """The two things of a bank job the steps ratio reads: its name and its clients' sample counts."""

    def __init__(self, name: str, samples: dict[str, int]) -> None:
        self.name, self.samples = name, samples

    steps_ratio = coverage_cells.fit.Job.steps_ratio


def test_the_explorations_steps_ratio_is_its_rounds_mean_sample_count_over_the_federations(tmp_path) -> None:
    job = _Job("s/seed1", {"a": 10, "b": 30, "c": 20})  # federation mean 20
    records = [{"phase": "profile", "clients": ["a", "b"]},  # mean 20: ratio 1
               {"phase": "profile", "clients": ["b"]},  # 30: ratio 1.5
               {"phase": "plan", "clients": ["a"]}]  # a plan round: not the exploration's
    (tmp_path / "s" / "seed1").mkdir(parents=True)
    (tmp_path / "s" / "seed1" / "profile.json").write_text(json.dumps({"fit_inputs": {"records": records}}))
    assert coverage_cells.exploration_steps_ratio(job, tmp_path) == 1.25


def test_each_cell_counts_its_own_outcomes_against_its_own_quantiles() -> None:
    # one cell whose outcomes all lie below every prediction, one whose outcomes all lie above
    table = {("s1", "full:top10"): [[1.0, 1.0, 1.0, 0.0]] * 4,
             ("s2", "full:top10"): [[0.0, 0.0, 0.0, 1.0]] * 2 + [[1.0, 1.0, 1.0, 0.5]] * 2}
    text = coverage_cells.markdown(table, {"s1": [1.0]}, "label")
    rows = [line for line in text.splitlines() if line.startswith(("| s1 ", "| s2 "))]
    assert rows[0].startswith("| s1 | full:top10 | 4 | 1.000 | 1.000 | 1.000 |")
    assert rows[1].startswith("| s2 | full:top10 | 4 | 0.500 | 0.500 | 0.500 |")
    assert rows[0].endswith("| 4 0 0 0 0 0 0 0 0 0 |")
    # every outcome below every prediction: the probit of a PIT half a trajectory above 0
    assert np.isclose(float(rows[0].split("|")[7]), coverage_cells.fit.pit_probit(0.0), atol=0.01)
    assert float(rows[0].split("|")[7]) < -2.5
    assert "- s1: 1.000" in text


def test_a_missing_fit_is_refused_in_one_line(tmp_path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plan_regime" / "coverage_cells.py"),
                           str(tmp_path), str(tmp_path / "fit.json")], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no such fit.json" in done.stderr
