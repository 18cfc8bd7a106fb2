"""Tests for depl_fl.runs.report on a hand-made Hydra-like sweep folder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from depl_fl.runs import report
from depl_fl.runs.report import ReportError, build_report, wilson_interval

# depl at (L*=0.35, pi=0.8): 8 of 10 runs reach the target; energies 100, 110, ..., 190.
DEPL_LOSSES = [0.20, 0.25, 0.30, 0.31, 0.33, 0.34, 0.35, 0.29, 0.40, 0.50]
FULL_LOSSES = [0.10, 0.12, 0.14, 0.16]


def write_result(path: Path, **summary) -> None:
    path.mkdir(parents=True, exist_ok=True)
    doc = {"summary": {"target_loss": 0.35, "target_prob": 0.8, "met": None, **summary},
           "rounds": [{"round": 1, "loss": 1.0}]}
    (path / "results.json").write_text(json.dumps(doc), encoding="utf-8")


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "multirun" / "2025-01-01" / "12-00-00"
    for i, loss in enumerate(DEPL_LOSSES):
        write_result(root / str(i), method="depl", seed=i, final_loss=loss, cost_j=100.0 + 10 * i,
                     time_s=50.0 + i, wall_s=2.0)
    for i, loss in enumerate(FULL_LOSSES):
        write_result(root / f"full-{i}", method="full", seed=i, final_loss=loss, cost_j=400.0,
                     time_s=80.0)
    (root / "0" / ".hydra").mkdir()
    (root / "0" / ".hydra" / "config.yaml").write_text("seed: 0\n")
    return tmp_path / "multirun"


def test_wilson_matches_hand_computed_values():
    # 8/10 at 95%: (0.4902, 0.9433), e.g. Newcombe (1998) / any Wilson calculator.
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.49016, abs=1e-4)
    assert high == pytest.approx(0.94332, abs=1e-4)
    # 0/20: lower bound 0, upper z^2 / (n + z^2) = 3.8415 / 23.8415.
    assert wilson_interval(0, 20) == pytest.approx((0.0, 3.841459 / 23.841459), abs=1e-6)
    assert wilson_interval(20, 20)[1] == pytest.approx(1.0)


def test_report_figures_and_files(sweep: Path, tmp_path: Path, capsys):
    out = tmp_path / "out"
    assert report.main([str(sweep), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "| depl | 0.35 | 0.8 | n/a | 10 | 0 | 0.800 | [0.490, 0.943] | yes |" in printed.out
    assert f"wrote {out / 'report.md'}" in printed.out
    assert printed.err == ""

    doc = json.loads((out / "report.json").read_text())
    assert doc["runs"] == 14 and doc["skipped"] == []
    depl, full = doc["groups"]
    assert (depl["method"], full["method"]) == ("depl", "full")
    assert depl["runs"] == 10 and depl["successes"] == 8
    assert depl["probability"] == pytest.approx(0.8)
    assert (depl["wilson_low"], depl["wilson_high"]) == pytest.approx((0.49016, 0.94332), abs=1e-4)
    assert depl["guarantee_met"] is True
    assert depl["energy_mean_j"] == pytest.approx(145.0)
    # Linear-interpolated 95th percentile of 100..190: position 8.55 -> 180 + 0.55 * 10.
    assert depl["energy_p95_j"] == pytest.approx(185.5)
    assert depl["time_mean_s"] == pytest.approx(54.5)
    assert depl["wall_mean_s"] == pytest.approx(2.0)
    assert full["probability"] == pytest.approx(1.0)
    assert full["energy_vs_depl"] == pytest.approx(400.0 / 145.0)
    assert full["wall_mean_s"] is None

    table = (out / "report.md").read_text()
    assert "| full | 0.35 | 0.8 | n/a | 4 | 0 | 1.000 |" in table and "| 2.759 |" in table
    for name in ("final_loss_cdf.png", "energy.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_default_out_and_target_groups(sweep: Path):
    extra = sweep / "other"
    for i, loss in enumerate([0.5, 0.7, math.inf]):
        write_result(extra / str(i), method="depl", final_loss=loss, cost_j=10.0, target_loss=0.6,
                     target_prob=0.9)
    result = build_report(sweep)
    assert (sweep / "report.md").is_file() and (sweep / "final_loss_cdf.png").is_file()
    groups = [(g["method"], g["target_loss"], g["target_prob"], g["successes"], g["runs"])
              for g in result["groups"]]
    assert groups == [("depl", 0.35, 0.8, 8, 10), ("full", 0.35, 0.8, 4, 4), ("depl", 0.6, 0.9, 1, 3)]
    assert result["groups"][2]["guarantee_met"] is False


def test_malformed_file_is_skipped_with_warning(sweep: Path, tmp_path: Path, capsys):
    bad = sweep / "broken"
    bad.mkdir()
    (bad / "results.json").write_text("{not json", encoding="utf-8")
    write_result(sweep / "nocost", method="depl", final_loss=0.1)
    assert report.main([str(sweep), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert any("broken" in line and "malformed JSON at line 1" in line for line in err)
    assert any("nocost" in line and "summary.cost_j is missing" in line for line in err)
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    assert doc["runs"] == 14 and len(doc["skipped"]) == 2


def test_bad_sweep_folders_are_one_line_errors(tmp_path: Path):
    with pytest.raises(ReportError, match="not found or not a directory"):
        build_report(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="no results.json found"):
        build_report(tmp_path / "empty")
    write_result(tmp_path / "bad" / "0", method="depl", final_loss=0.1, cost_j=1.0, target_prob=1.5)
    with pytest.raises(ReportError, match=r"none of the 1 results.json.*target_prob must be in \(0, 1\)"):
        build_report(tmp_path / "bad")


def test_cli_dispatches_report(sweep: Path, tmp_path: Path, capsys):
    from depl_fl.cli import main as cli_main

    assert cli_main(["report", str(sweep), "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "report.json").is_file()
    assert cli_main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not found or not a directory" in err
    assert report.main([]) == 2


def test_tracking_runs_are_labelled_and_depl_with_tracking_is_the_energy_reference(tmp_path: Path):
    root = tmp_path / "sweep"
    for i in range(4):
        write_result(root / f"d{i}", method="depl", tracking=True, final_loss=0.3, cost_j=100.0)
        write_result(root / f"s{i}", method="depl", tracking=False, final_loss=0.3, cost_j=50.0)
        write_result(root / f"e{i}", method="expectation", tracking=False, final_loss=0.2 + 0.1 * i,
                     cost_j=20.0)
        write_result(root / f"t{i}", method="expectation", tracking=True, final_loss=0.3, cost_j=30.0)
    rows = {g["method"]: g for g in build_report(root)["groups"]}
    assert set(rows) == {"depl", "depl+tracking", "expectation", "expectation+tracking"}
    assert rows["expectation"]["successes"] == 2 and rows["expectation+tracking"]["successes"] == 4
    assert rows["expectation"]["energy_vs_depl"] == pytest.approx(0.2)
    assert rows["depl"]["energy_vs_depl"] == pytest.approx(0.5)
    write_result(root / "bad", method="depl", tracking="yes", final_loss=0.3, cost_j=1.0)
    assert len(build_report(root)["skipped"]) == 1


@pytest.mark.parametrize("status", ["running", "interrupted"])
def test_unfinished_run_is_skipped_not_judged(sweep: Path, tmp_path: Path, capsys, status: str):
    # An interrupted run's last loss already meets the target: it must not count as a success.
    write_result(sweep / "stopped", method="depl", final_loss=0.1, cost_j=1.0, status=status)
    assert report.main([str(sweep), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stopped" in err[0] and f"summary.status is {status}" in err[0]
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    assert doc["runs"] == 14 and len(doc["skipped"]) == 1
    assert doc["groups"][0]["successes"] == 8


def test_run_without_final_loss_counts_as_failure(tmp_path: Path):
    root = tmp_path / "sweep"
    for i in range(4):
        write_result(root / str(i), method="depl", final_loss=0.2, cost_j=1.0, deadline_s=100.0)
    # A diverged run: NaN is written as null (or the key is missing altogether).
    write_result(root / "4", method="depl", final_loss=None, cost_j=1.0, deadline_s=100.0)
    write_result(root / "5", method="depl", cost_j=1.0, deadline_s=100.0)
    doc = build_report(root)
    (row,) = doc["groups"]
    assert row["runs"] == 6 and row["successes"] == 4 and row["no_final_loss"] == 2
    assert row["probability"] == pytest.approx(4 / 6) and doc["skipped"] == []


def test_runs_with_different_deadlines_are_not_pooled(tmp_path: Path):
    root = tmp_path / "sweep"
    for i in range(3):
        write_result(root / f"short{i}", method="depl", final_loss=0.5, cost_j=1.0, deadline_s=50.0)
        write_result(root / f"long{i}", method="depl", final_loss=0.2, cost_j=2.0, deadline_s=500.0)
    doc = build_report(root)
    rows = {row["deadline_s"]: row for row in doc["groups"]}
    assert set(rows) == {50.0, 500.0}
    assert rows[50.0]["probability"] == 0.0 and rows[500.0]["probability"] == 1.0
    assert "| depl | 0.35 | 0.8 | 50 | 3 |" in doc["table"]


def test_skipped_files_are_listed_with_the_reason_in_report_md(sweep: Path):
    bad = sweep / "bad" / "results.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json", encoding="utf-8")
    build_report(sweep)
    text = (sweep / "report.md").read_text(encoding="utf-8")
    assert "## Skipped files" in text and str(bad) in text and "malformed JSON" in text


# --------------------------------------------------------------------------- calibration
def test_calibration_is_the_inverted_cdf_quantile_over_the_target():
    from depl_fl.runs.report import calibration

    # 8th of 10 sorted losses is 0.35: the 0.8-quantile sits exactly on L* = 0.35.
    value, low, high = calibration(DEPL_LOSSES, 0.8, 0.35)
    assert value == pytest.approx(1.0)
    assert low is not None and high is not None and low <= value <= high
    # pi = 0.5: the 5th of the sorted losses (0.31).
    assert calibration(DEPL_LOSSES, 0.5, 0.35)[0] == pytest.approx(0.31 / 0.35)
    assert calibration([0.2], 0.9, 0.4) == (pytest.approx(0.5), None, None)


def test_calibration_agrees_with_coverage_on_random_sweeps():
    import numpy as np

    from depl_fl.runs.report import calibration

    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(2, 40))
        losses = rng.lognormal(-1.0, 0.4, n)
        prob, target = float(rng.choice([0.8, 0.9, 0.95])), float(rng.uniform(0.2, 0.6))
        coverage = float(np.mean(losses <= target))
        assert (calibration(losses, prob, target, n_resamples=50)[0] <= 1.0) == (coverage >= prob)


def test_calibration_interval_is_seeded_and_covers_the_true_quantile():
    import numpy as np

    from depl_fl.runs.report import calibration

    losses = np.random.default_rng(11).uniform(0.0, 1.0, 600)
    first = calibration(losses, 0.9, 0.5, seed=3)
    assert calibration(losses, 0.9, 0.5, seed=3) == first
    value, low, high = first
    assert low < 1.8 < high and high - low < 0.2 and low <= value <= high  # true q_0.9 / 0.5 = 1.8


def test_report_judges_the_test_loss_and_shows_calibration(tmp_path: Path):
    root = tmp_path / "sweep"
    for i in range(5):  # validation looks fine, the test split does not
        write_result(root / f"v{i}", method="depl", final_loss=0.1, final_test_loss=0.3 + 0.02 * i,
                     cost_j=10.0)
    write_result(root / "old", method="expectation", final_loss=0.2, cost_j=10.0)
    write_result(root / "diverged", method="full", final_loss=math.nan, cost_j=10.0)
    result = build_report(root)
    rows = {g["method"]: g for g in result["groups"]}
    assert rows["depl"]["successes"] == 3 and rows["depl"]["loss_split"] == "test"
    assert rows["depl"]["calibration"] == pytest.approx(0.36 / 0.35)  # 4th of 5 at pi = 0.8
    assert rows["expectation"]["loss_split"] == "validation"
    assert rows["full"]["calibration"] == math.inf
    doc = json.loads((root / "report.json").read_text())
    assert {g["method"]: g["calibration"] for g in doc["groups"]}["full"] is None
    assert "| calibration | 95% bootstrap |" in result["table"]
    text = (root / "report.md").read_text()
    assert "| 1.029 | [" in text and "Calibration = empirical" in text
