"""benchmarks/plan_pit.py: the predicted-against-actual table behind the calibration figures."""

from __future__ import annotations

import json
from pathlib import Path

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import scenario_from_dict
from depl_fl.contract.semantics import simulate_final_losses
from tests.benchmark_scripts import load_benchmark

plan_pit = load_benchmark("plan_pit")

SCENARIO = {
    "version": 1,
    "clusters": [{"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9}], "bytes_per_s": 1e6}],
    "clients": [{"id": "c0", "cluster": "A", "num_samples": 200},
                {"id": "c1", "cluster": "A", "num_samples": 200}],
    "models": [{"id": "full", "flops_per_sample": 1e6, "size_bytes": 1e4}],
    "loss": {"initial": 2.0, "reference_samples": 400, "data_exponent_mean": 0.5, "data_exponent_std": 0.5,
             "run": {"full": {"levels": [0.0, 3.0], "mean": [0.1, 0.1], "std": [0.1, 0.1]}}},
}
PLAN = [{"model": "full", "clients": ["c0", "c1"], "levels": {"A": 0}}] * 10
TARGET = 1.2


def _write_sweep(root: Path, runs: int, shift: float) -> None:
    """``runs`` static jobs whose final test loss is a draw of the plan's own prediction plus ``shift``."""
    rounds = [RoundDecision(r["model"], tuple(r["clients"]), r["levels"]) for r in PLAN]
    truth = simulate_final_losses(scenario_from_dict(SCENARIO), rounds, runs, 12345)
    for seed in range(runs):
        job = root / f"job{seed}"
        job.mkdir(parents=True)
        doc = {"scenario": SCENARIO, "plan": {"rounds": PLAN}, "replans": [],
               "summary": {"seed": seed, "target_prob": 0.9, "target_loss": TARGET,
                           "final_test_loss": float(truth[seed]) + shift}}
        (job / "results.json").write_text(json.dumps(doc))


def _row(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("| 0.9 |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_outcomes_drawn_from_the_prediction_are_calibrated(tmp_path: Path, capsys) -> None:
    _write_sweep(tmp_path, 60, 0.0)
    assert plan_pit.main([str(tmp_path)]) == 0
    row = _row(capsys.readouterr().out)
    assert row[1] == "60"
    deciles = [int(x) for x in row[2].split()]
    assert sum(deciles) == 60 and max(deciles) <= 14  # roughly uniform: 6 expected per decile
    assert float(row[3]) <= 0.25  # share above the predicted 0.9-quantile, 0.1 expected
    exact_median = float(row[5].split()[0])
    assert 0.8 < exact_median < 1.2


def test_outcomes_above_the_prediction_show_in_the_pit_and_the_share_above(tmp_path: Path, capsys) -> None:
    _write_sweep(tmp_path, 30, 5.0)
    assert plan_pit.main([str(tmp_path), "--out", str(tmp_path / "pit.md")]) == 0
    row = _row(capsys.readouterr().out)
    assert [int(x) for x in row[2].split()][-1] == 30
    assert float(row[3]) == 1.0
    assert float(row[4]) > float(row[5].split()[0]) + 3.0  # far above what an exact model shows
    assert (tmp_path / "pit.md").read_text().count("| 0.9 |") == 1


def test_a_missing_or_empty_sweep_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    assert plan_pit.main([str(tmp_path / "nowhere")]) == 2
    assert plan_pit.main([str(tmp_path)]) == 2
    assert plan_pit.main([str(tmp_path), "--runs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)


def test_the_goal_needs_coverage_calibration_and_a_wilson_interval_around_pi() -> None:
    import numpy as np

    target = 1.0
    exact = np.array([0.5] * 36 + [0.95, 0.97, 1.5, 1.6])  # 38/40 met, 0.95-quantile 0.97
    assert plan_pit.meets_goal(exact, 0.95, target) == (True, True, True)
    short = np.array([0.5] * 37 + [1.5, 1.6, 1.7])  # 37/40 < 0.95
    assert plan_pit.meets_goal(short, 0.95, target)[0] is False
    cautious = np.array([0.5] * 40)  # every run met: calibration 0.5, and [0.91, 1] misses pi = 0.8
    assert plan_pit.meets_goal(cautious, 0.8, target) == (True, False, False)
    covered_only = np.array([0.5] * 34 + [0.85] * 6)  # 0.9-quantile 0.85: coverage 1.0 misses pi = 0.9
    assert plan_pit.meets_goal(covered_only, 0.9, target) == (True, False, False)


def test_the_table_says_how_often_an_exact_model_meets_the_goal(tmp_path: Path, capsys) -> None:
    _write_sweep(tmp_path, 40, 0.0)
    assert plan_pit.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = _row(out)
    assert row[6] in ("yes", "no")
    shares = [float(x) for x in row[7].split(" / ")]
    assert all(0.0 <= x <= 1.0 for x in shares) and shares[2] <= min(shares[:2])
    best = float(row[8].split()[0])
    assert shares[2] <= best <= 1.0  # the prediction itself (factor 1) is one of the models searched
    assert "An exact model meets the whole goal in every cell above with probability" in out


def test_more_runs_narrow_what_an_exact_model_shows(tmp_path: Path, capsys) -> None:
    _write_sweep(tmp_path, 20, 0.0)
    assert plan_pit.main([str(tmp_path)]) == 0
    few = _row(capsys.readouterr().out)
    assert plan_pit.main([str(tmp_path), "--runs", "400"]) == 0
    out = capsys.readouterr().out
    many = _row(out)
    assert "Redraws with 400 runs per cell" in out
    width = [float(r[5].split("[")[1].split(",")[1].rstrip("]")) - float(r[5].split("[")[1].split(",")[0])
             for r in (few, many)]
    assert width[1] < 0.6 * width[0]


def test_pooled_sweeps_of_different_targets_give_one_share_with_its_wilson_interval(tmp_path: Path,
                                                                                    capsys) -> None:
    _write_sweep(tmp_path / "a", 40, 0.0)
    _write_sweep(tmp_path / "b", 40, 5.0)
    assert plan_pit.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 2  # targets may differ: --pooled
    assert plan_pit.main(["--pooled", str(tmp_path / "a"), "--runs", "100"]) == 2
    assert [line.split(":")[0] for line in capsys.readouterr().err.strip().splitlines()] == ["error"] * 2
    assert plan_pit.main(["--pooled", str(tmp_path / "a")]) == 0
    alone = _row(capsys.readouterr().out)
    assert plan_pit.main(["--pooled", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    both = _row(capsys.readouterr().out)
    assert alone[1] == "40" and both[1] == "80"
    share_alone, share_both = float(alone[3].split()[0]), float(both[3].split()[0])
    assert share_alone <= 0.25 and abs(share_both - (share_alone + 1.0) / 2) < 1e-9  # b: all above
    low, high = (float(x) for x in both[3].split("[")[1].rstrip("]").split(","))
    assert low < share_both < high and both[4] == "0.10"


def test_pooled_without_any_planned_job_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    assert plan_pit.main(["--pooled", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no static job")


def _shape(text: str, sweep: Path) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| `{sweep}` |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_pooled_table_gives_each_sweeps_offset_and_spread_in_predicted_units(tmp_path: Path,
                                                                            capsys) -> None:
    calibrated, worse = tmp_path / "calibrated", tmp_path / "worse"
    _write_sweep(calibrated, 80, 0.0)
    _write_sweep(worse, 40, 5.0)
    assert plan_pit.main(["--pooled", str(calibrated), str(worse)]) == 0
    out = capsys.readouterr().out
    runs, mean, sd, ratio = _shape(out, calibrated)[1:]
    assert runs == "80" and abs(float(mean)) < 0.35 and 0.75 < float(sd) < 1.25
    assert 0.85 < float(ratio) < 1.15
    runs, mean, _, ratio = _shape(out, worse)[1:]
    assert runs == "40" and float(mean) > 3.0 and float(ratio) > 2.0  # every run far above its prediction


def test_the_pooled_report_shows_a_bias_that_grows_with_the_plan_length(tmp_path: Path, capsys) -> None:
    """Short plans drawn from their prediction, long ones all far above it: only the long bin drifts."""
    _write_sweep(tmp_path / "short", 40, 0.0)
    _write_sweep(tmp_path / "long", 40, 5.0)
    for path in (tmp_path / "long").rglob("results.json"):
        doc = json.loads(path.read_text())
        doc["plan"]["rounds"] = PLAN * 6  # 60 rounds (the 41-80 bin) of a slower run profile
        doc["scenario"]["loss"]["run"]["full"]["mean"] = [0.02, 0.02]
        path.write_text(json.dumps(doc))
    assert plan_pit.main(["--pooled", str(tmp_path / "short"), str(tmp_path / "long")]) == 0
    lines = capsys.readouterr().out.splitlines()
    short = next(line for line in lines if line.startswith("| 1-10 |")).strip("|").split("|")
    long_ = next(line for line in lines if line.startswith("| 41-80 |")).strip("|").split("|")
    assert short[1].strip() == "40" and long_[1].strip() == "40"
    assert abs(float(short[2].split()[0])) < 0.5 and float(long_[2].split()[0]) > 3.0
    assert float(short[4]) <= 0.25 and float(long_[4]) == 1.0 and float(long_[5]) == 0.1
    assert not any(line.startswith("| 11-20 |") for line in lines)  # bins without runs are left out


def test_the_pooled_report_shows_an_offset_that_rises_with_the_fitted_rate(tmp_path: Path, capsys) -> None:
    """Half the jobs fitted 1.5 x the rate and end far above their prediction: only their bin drifts."""
    _write_sweep(tmp_path, 40, 0.0)
    for seed in range(20):
        path = tmp_path / f"job{seed}" / "results.json"
        doc = json.loads(path.read_text())
        doc["scenario"]["loss"]["run"]["full"]["mean"] = [0.15, 0.15]  # 1.5 x the rate the outcomes follow
        doc["summary"]["final_test_loss"] += 5.0
        path.write_text(json.dumps(doc))
    assert plan_pit.main(["--pooled", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    low = next(line for line in lines if line.startswith("| < 0.85 |")).strip("|").split("|")
    high = next(line for line in lines if line.startswith("| >= 1.15 |")).strip("|").split("|")
    assert low[1].strip() == "20" and high[1].strip() == "20"  # 0.1 and 0.15 against a median of 0.125
    assert abs(float(low[2].split()[0])) < 0.7 and float(high[2].split()[0]) > 3.0
    assert float(high[4]) == 1.0 and int(high[6]) == 10


def test_tracking_and_unfinished_jobs_are_left_out(tmp_path: Path, capsys) -> None:
    _write_sweep(tmp_path, 60, 0.0)
    for name, extra in (("tracked", {"tracking": True}), ("running", {"status": "running"}),
                        ("stopped", {"status": "interrupted"})):
        doc = json.loads((tmp_path / "job0" / "results.json").read_text())
        doc["summary"].update(extra, final_test_loss=50.0)
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(doc))
    assert plan_pit.main([str(tmp_path)]) == 0
    assert _row(capsys.readouterr().out)[1] == "60"
