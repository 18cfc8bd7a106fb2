"""benchmarks/plan_regime/emulate.py: the emulated static plan (first round whose predicted quantile meets
L*), the setting-mean oracle's rate factors, the setting-centred oracle's bisection and the per-cell
coverage / calibration it reports."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.benchmark_scripts import load_benchmark

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "plan_regime" / "emulate.py"
emulate = load_benchmark("plan_regime/emulate")


def test_the_plan_is_the_first_round_whose_quantile_meets_the_target_or_none() -> None:
    assert emulate.planned_round([0.9, 0.6, 0.4, 0.35, 0.3], 0.4) == 3
    assert emulate.planned_round([0.9, 0.4], 0.4) == 2  # at the target counts
    assert emulate.planned_round([0.9, 0.6, 0.45], 0.4) is None  # longer than the recorded run
    assert emulate.planned_round([0.3, 0.5], 0.4) == 1  # the first, even if a later round is worse


def test_the_oracle_moves_each_job_to_the_mean_of_the_other_jobs_of_its_setting(monkeypatch) -> None:
    rates = {("a", 0): 0.1, ("a", 1): 0.2, ("a", 2): 0.4, ("b", 3): 0.05}
    jobs = [SimpleNamespace(setting=s, index=i, profiler=SimpleNamespace(trajectories={"full": None}))
            for s, i in rates]
    monkeypatch.setattr(emulate.rate_checks, "fitted_rate",
                        lambda job, regime, model: rates[(job.setting, job.index)])
    factors = emulate.setting_mean_factors(jobs, regime=None)
    # job 0: geometric mean of 0.2 and 0.4 over its own 0.1
    assert factors[0]["full"] == pytest.approx(math.sqrt(0.2 * 0.4) / 0.1)
    assert factors[2]["full"] == pytest.approx(math.sqrt(0.1 * 0.2) / 0.4)
    assert factors[3]["full"] == 1.0  # alone in its setting: keeps its rate


def _rows(outcomes: list[float | None], pi: float = 0.9, jobs: int = 1) -> list[dict]:
    return [{"setting": "a", "job": f"a/seed{i % jobs}", "policy": "full:all", "pi": pi,
             "rounds": None if v is None else 5, "outcome": v} for i, v in enumerate(outcomes)]


def test_a_cell_reports_coverage_calibration_and_the_plans_beyond_the_bank() -> None:
    outcomes = [0.5 + 0.05 * i for i in range(10)]  # 0.50 .. 0.95: all at or below L*
    cell = emulate.summarise(_rows(outcomes + [1.2, None, None]), 0.9)
    assert (cell["runs"], cell["planned"], cell["beyond"]) == (13, 11, 2)
    assert cell["coverage"] == pytest.approx(10 / 11)
    assert cell["wilson"][0] < 10 / 11 < cell["wilson"][1]
    # inverted-CDF 0.9-quantile of 11 outcomes: the 10th smallest
    assert cell["calibration"] == pytest.approx(0.95)
    assert emulate.summarise(_rows([None, None]), 0.9) == {"runs": 2, "beyond": 2, "planned": 0}


def test_a_cell_above_the_target_is_not_calibrated() -> None:
    cell = emulate.summarise(_rows([1.1] * 8 + [0.5] * 2), 0.8)
    assert cell["coverage"] == pytest.approx(0.2)
    assert cell["calibration"] == pytest.approx(1.1)


@pytest.mark.parametrize("args", [["/nonexistent-bank"], ["/nonexistent-bank", "--rate", "oracle"],
                                  ["/nonexistent-bank", "--oscillation", "-1"]])
def test_bad_input_is_one_line_and_exit_2(args: list[str]) -> None:
    done = subprocess.run([sys.executable, str(_PATH), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_the_centring_factor_is_where_the_mean_probit_crosses_zero() -> None:
    calls: list[float] = []

    def mean_probit(log_factor: float) -> float:  # rising, zero at log 0.3
        calls.append(log_factor)
        return math.tanh(2.0 * (log_factor - 0.3))

    found = emulate.centring_log_factor(mean_probit, bounds=(-1.0, 1.0), steps=12)
    assert found == pytest.approx(0.3, abs=2.0 / 2**12)
    assert len(calls) == 2 + 12  # both ends, then one probe per halving
    assert emulate.centring_log_factor(lambda x: x + 1.0, bounds=(-1.0, 1.0)) == pytest.approx(-1.0, abs=1e-3)


def test_a_centre_outside_the_range_is_an_error_not_an_endpoint() -> None:
    with pytest.raises(ValueError, match="does not cross 0"):
        emulate.centring_log_factor(lambda x: x + 2.0, bounds=(-1.0, 1.0))
    with pytest.raises(ValueError, match="does not cross 0"):
        emulate.centring_log_factor(lambda x: -x, bounds=(-1.0, 1.0))  # falling: not a probit of a rate


def test_the_goal_needs_coverage_at_pi_an_interval_covering_it_and_calibration_at_least_0_9() -> None:
    exact = emulate.summarise(_rows([0.5 + 0.05 * i for i in range(9)] + [1.2]), 0.9)  # 9 of 10, q90 0.9
    assert emulate.goal_met(exact, 0.9)
    cautious = emulate.summarise(_rows([0.5] * 10), 0.9)  # 10 of 10 but calibration 0.5
    assert not emulate.goal_met(cautious, 0.9)
    broken = emulate.summarise(_rows([0.5] * 7 + [1.2] * 3), 0.9)  # 7 of 10
    assert not emulate.goal_met(broken, 0.9)
    assert not emulate.goal_met(emulate.summarise(_rows([None]), 0.9), 0.9)  # nothing planned


def test_the_job_bootstrap_resamples_whole_jobs() -> None:
    # two jobs, one all at 0.5, one all at 1.2: a resample holds 0, 1 or 2 copies of each
    rows = _rows([0.5, 1.2] * 20, 0.8, jobs=2)
    by_job = emulate.job_bootstrap(rows, 0.8, draws=400, seed=1)
    assert by_job is not None
    assert by_job["coverage"] == pytest.approx((0.0, 1.0))  # all-miss and all-meet resamples both occur
    assert by_job["calibration"] == pytest.approx((0.5, 1.2))
    # the per-run intervals of the same rows are far narrower: they take 40 independent runs
    wilson = emulate.summarise(rows, 0.8)["wilson"]
    assert wilson[1] - wilson[0] < 0.4
    assert emulate.job_bootstrap(_rows([0.5, 1.2] * 5, 0.8, jobs=1), 0.8) is None  # one job: no interval


def test_identical_jobs_give_the_point_value_as_the_whole_interval() -> None:
    rows = _rows([0.5 + 0.1 * (i % 5) for i in range(30)], 0.8, jobs=3)  # every job holds 0.5 .. 0.9 twice
    by_job = emulate.job_bootstrap(rows, 0.8, draws=200)
    assert by_job["coverage"] == pytest.approx((1.0, 1.0))
    assert by_job["calibration"] == pytest.approx((0.8, 0.8))


def test_a_cell_is_within_reach_of_the_goal_unless_its_job_intervals_exclude_it() -> None:
    def cell(coverage: tuple[float, float], calibration: tuple[float, float]) -> dict:
        return {"planned": 10, "by_job": {"coverage": coverage, "calibration": calibration}}

    assert emulate.goal_within_reach(cell((0.7, 0.95), (0.85, 1.1)), 0.9)
    assert not emulate.goal_within_reach(cell((0.6, 0.85), (0.85, 1.1)), 0.9)  # coverage surely below pi
    assert not emulate.goal_within_reach(cell((0.9, 1.0), (0.7, 0.88)), 0.9)  # surely over-cautious
    assert not emulate.goal_within_reach(cell((0.7, 0.95), (1.02, 1.3)), 0.9)  # surely optimistic
    assert not emulate.goal_within_reach({"planned": 10, "by_job": None}, 0.9)  # one job: no interval
