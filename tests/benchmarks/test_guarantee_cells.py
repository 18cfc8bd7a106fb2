"""benchmarks/guarantee_cells.py: each guarantee cell judged, and the committed tables regenerate."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
guarantee_cells = load_benchmark("guarantee_cells")


def _group(successes: int, runs: int, pi: float, wilson: tuple[float, float],
           calibration: float | None, interval: tuple[float | None, float | None]) -> dict:
    return {"method": "depl", "target_prob": pi, "successes": successes, "runs": runs,
            "probability": successes / runs, "wilson_low": wilson[0], "wilson_high": wilson[1],
            "calibration": calibration, "calibration_low": interval[0], "calibration_high": interval[1],
            "energy_mean_j": 1.0, "total_energy_mean_j": 2.0}


def test_a_cell_inside_both_intervals_is_not_off_and_meets_the_goal() -> None:
    not_off, meets, why = guarantee_cells.verdict(_group(36, 40, 0.9, (0.77, 0.96), 0.95, (0.85, 1.1)))
    assert (not_off, meets, why) == (True, True, "")


def test_over_caution_and_broken_promises_are_significant_either_way() -> None:
    # every run met L*, calibration interval wholly below 0.9: significantly over-cautious
    assert guarantee_cells.verdict(_group(10, 10, 0.9, (0.72, 1.0), 0.76, (0.69, 0.80)))[:2] == (False, False)
    assert "calibration below 0.9" in guarantee_cells.verdict(
        _group(10, 10, 0.9, (0.72, 1.0), 0.76, (0.69, 0.80)))[2]
    # Wilson interval below pi: the promise is broken
    off = guarantee_cells.verdict(_group(28, 40, 0.9, (0.55, 0.82), 1.2, (1.05, 1.3)))
    assert off[0] is False and "Wilson below pi" in off[2] and "calibration above 1" in off[2]
    # coverage below pi within its interval: not significantly off, but the goal is missed
    assert guarantee_cells.verdict(_group(31, 40, 0.8, (0.63, 0.88), 1.12, (0.88, 1.2)))[:2] == (True, False)


def test_an_infinite_calibration_counts_as_above_one_only_when_its_interval_is() -> None:
    # too many runs without a final loss: no upper bound; the lower bound decides
    unbounded = _group(18, 20, 0.95, (0.70, 0.97), None, (0.56, None))
    assert guarantee_cells.verdict(unbounded)[:2] == (True, False)
    assert guarantee_cells.verdict(_group(12, 20, 0.95, (0.39, 0.78), None, (None, None)))[0] is False


@pytest.mark.parametrize("table", ["cells.md", "tracking_cells.md"])
def test_the_committed_tables_regenerate_from_the_committed_reports(
        table: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    committed = ROOT / "benchmarks" / "results" / "settings" / table
    text = committed.read_text()
    command = next(line for line in text.splitlines() if line.startswith("`python "))
    args = shlex.split(command.strip("`"))[2:]
    monkeypatch.chdir(ROOT)
    assert guarantee_cells.main(args + ["--out", str(tmp_path / table)]) == 0
    assert (tmp_path / table).read_text() == text


def test_a_missing_report_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert guarantee_cells.main([f"x={tmp_path / 'none.json'}"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
