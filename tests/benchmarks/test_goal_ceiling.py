"""benchmarks/goal_ceiling.py: the ceiling on how often any static planner can show the per-cell goal."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from depl_fl.runs.report import wilson_interval
from tests.benchmark_scripts import load_benchmark

goal_ceiling = load_benchmark("goal_ceiling")

plan_pit = load_benchmark("plan_pit")


@pytest.mark.parametrize("runs,prob", [(20, 0.8), (40, 0.8), (40, 0.9), (100, 0.95), (30, 0.9)])
def test_the_coverage_window_is_every_count_with_coverage_and_a_wilson_interval_around_pi(runs, prob) -> None:
    low, high = goal_ceiling.coverage_window(runs, prob)
    for k in range(runs + 1):
        iv = wilson_interval(k, runs)
        inside = k / runs >= prob and iv[0] <= prob <= iv[1]
        assert inside == (low <= k <= high), k


def test_forty_runs_at_pi_08_leave_32_to_36_successes() -> None:
    assert goal_ceiling.coverage_window(40, 0.8) == (32, 36)
    assert goal_ceiling.coverage_window(20, 0.9) == (18, 20)  # 20/20 still covers 0.9


def test_the_window_ceiling_is_the_largest_binomial_mass_of_the_window() -> None:
    chance, best_p = goal_ceiling.window_ceiling(40, 0.8)

    def mass(p: float) -> float:
        return sum(math.comb(40, k) * p ** k * (1 - p) ** (40 - k) for k in range(32, 37))

    assert chance == pytest.approx(mass(best_p), abs=1e-9)
    assert all(mass(p) <= chance + 1e-9 for p in np.linspace(0.5, 1.0, 501))
    assert 0.6 < chance < 0.8  # a window about two binomial sds wide cannot hold much more
    assert goal_ceiling.window_ceiling(20, 0.95)[0] == pytest.approx(1.0)  # the window reaches n


def test_the_row_wise_goal_agrees_with_plan_pits_goal() -> None:
    rng = np.random.default_rng(3)
    for prob in (0.8, 0.9, 0.95):
        # cells of spread losses, each cell at its own offset: some meet L* 0.35, some do not
        cells = 0.35 * rng.uniform(0.55, 1.0, size=(300, 1)) * rng.gamma(30.0, 1 / 30, size=(300, 40))
        rowwise = goal_ceiling.goal_met_many(cells, prob, 0.35)
        single = np.array([plan_pit.meets_goal(c, prob, 0.35)[2] for c in cells])
        assert np.array_equal(rowwise, single)
        assert 0 < rowwise.sum() < len(cells)  # both outcomes occur: the comparison is not vacuous


def test_a_cautious_cell_and_an_optimistic_cell_both_miss_the_goal() -> None:
    cautious = np.full((1, 40), 0.2)
    optimistic = np.concatenate([np.full(30, 0.3), np.full(10, 0.5)])[None, :]
    on_target = np.concatenate([np.full(34, 0.33), np.full(6, 0.5)])[None, :]
    assert not goal_ceiling.goal_met_many(cautious, 0.8, 0.35)[0]     # 40/40: Wilson excludes 0.8
    assert not goal_ceiling.goal_met_many(optimistic, 0.8, 0.35)[0]   # 30/40 < 0.8
    assert goal_ceiling.goal_met_many(on_target, 0.8, 0.35)[0]        # 34/40, quantile 0.33 / 0.35


def test_the_trend_residual_recovers_the_noise_around_a_smooth_trend() -> None:
    rng = np.random.default_rng(0)
    rounds = np.arange(4000)
    trend = 0.35 * (1 + 0.2 * np.sin(rounds / 400))  # stays within 0.7-1.3 x L*
    noisy = goal_ceiling.trend_residuals(trend + rng.normal(0, 0.035, rounds.size), 0.35)
    assert noisy.std() == pytest.approx(0.1, rel=0.08)  # sd 0.035 = 0.1 x L*
    assert goal_ceiling.trend_residuals(trend, 0.35).std() < 0.005
    far = goal_ceiling.trend_residuals(np.full(50, 1.0), 0.35)
    assert far.size == 0  # no round near the target: nothing counted


def _report(path: Path, groups: list[tuple[str, float, int, int, float | None]]) -> Path:
    """A report with Wilson intervals as ``depl-fl report`` gives them, calibration intervals +-0.1."""
    rows = []
    for m, p, n, k, c in groups:
        low, high = wilson_interval(k, n)
        rows.append({"method": m, "target_prob": p, "target_loss": 0.35, "runs": n, "successes": k,
                     "calibration": c, "calibration_low": c - 0.1, "calibration_high": c + 0.1,
                     "wilson_low": low, "wilson_high": high})
    path.write_text(json.dumps({"groups": rows}))
    return path


def test_measured_cells_are_judged_by_the_whole_goal_and_tracking_is_left_out(tmp_path: Path) -> None:
    report = _report(tmp_path / "r.json", [("depl", 0.8, 40, 34, 0.95), ("depl", 0.8, 40, 36, 0.89),
                                           ("depl", 0.9, 30, 30, 0.92), ("depl", 0.95, 20, 18, 0.97),
                                           ("depl+tracking", 0.8, 40, 34, 0.95)])
    cells = goal_ceiling.measured_cells([report])
    assert [c["met"] for c in cells] == [True, False, True, False]
    # off the goal only where an interval rules it out: none here (18/20 at 0.95: Wilson [0.70, 0.97])
    assert [c["off"] for c in cells] == [False, False, False, False]


def test_a_cell_is_significantly_off_when_wilson_excludes_pi_or_calibration_misses_the_window(
        tmp_path: Path) -> None:
    report = _report(tmp_path / "r.json", [("depl", 0.8, 40, 40, 0.85), ("depl", 0.8, 40, 34, 0.7),
                                           ("depl", 0.8, 40, 34, 1.15), ("depl", 0.8, 40, 34, 0.85)])
    assert [c["off"] for c in goal_ceiling.measured_cells([report])] == [True, True, True, False]


def test_bad_command_lines_are_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert goal_ceiling.main(["--reports", str(tmp_path / "none.json")]) == 2
    assert goal_ceiling.main(["--runs", "1"]) == 2
    assert goal_ceiling.main(["--bank", str(tmp_path)]) == 2
    assert goal_ceiling.main(["--reports", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("error: ") for line in err)


def test_the_bank_oscillation_is_per_setting_and_keeps_every_client_policies_apart(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    trend = np.linspace(0.5, 0.25, 400)  # passes through 0.7-1.3 x L* = 0.245-0.455
    for name, clients, sd in (("full_all", "all", 0.035), ("p50_c0+c1", "c0+c1", 0.07)):
        job = tmp_path / "d9" / "seed1"
        job.mkdir(parents=True, exist_ok=True)
        (job / "job.json").write_text("{}")
        noise = rng.normal(0, sd, trend.size)
        (job / f"{name}.json").write_text(json.dumps({
            "setting": "d9", "overrides": "num_clients=4 target.loss=0.35", "set": clients,
            "val": (trend + noise).tolist(), "test": (trend + noise).tolist()}))
    row = next(line for line in goal_ceiling.bank_oscillation(tmp_path) if line.startswith("| d9 |"))
    every_policy, every_client = (float(x) for x in row.strip("|").split("|")[1:3])
    assert every_client == pytest.approx(0.1, rel=0.12)      # sd 0.035 = 0.1 x L*
    assert every_policy == pytest.approx(math.sqrt((0.1 ** 2 + 0.2 ** 2) / 2), rel=0.12)  # both runs pooled
