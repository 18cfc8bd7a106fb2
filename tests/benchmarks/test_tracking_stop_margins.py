"""Tracking's stops against their margins (benchmarks/tracking_stop_margins.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tracking_stop_margins  # noqa: E402


def _job(folder: Path, seed: int, validation: float, test: float, margin: float, by_rule: bool = True,
         tracking: bool = True) -> None:
    folder.mkdir(parents=True)
    rounds = [{"phase": "profile", "loss": 1.0, "test_loss": 1.0},
              {"phase": "train", "loss": validation, "test_loss": test, "loss_margin": margin}]
    replans = [{"reason": "target met: the measured loss judged meets pi"}] if by_rule else []
    doc = {"seed": seed, "rounds": rounds, "replans": replans,
           "summary": {"seed": seed, "method": "depl", "tracking": tracking, "target_prob": 0.95,
                       "target_loss": 0.35}}
    (folder / "results.json").write_text(json.dumps(doc), encoding="utf-8")


def test_stops_over_their_margin_and_above_the_target_are_counted(tmp_path: Path) -> None:
    _job(tmp_path / "a", 1, 0.20, 0.43, 0.10)   # over the margin and above L*
    _job(tmp_path / "b", 2, 0.20, 0.25, 0.10)   # within the margin
    _job(tmp_path / "c", 3, 0.30, 0.45, 0.01, by_rule=False)  # ran out of plan: not a stop by the rule
    _job(tmp_path / "d", 4, 0.20, 0.90, 0.10, tracking=False)  # static: not read
    rows = tracking_stop_margins.stops(tmp_path)
    assert sorted(r["seed"] for r in rows) == [1, 2, 3]
    text = tracking_stop_margins.markdown(rows, "cmd")
    line = [row for row in text.splitlines() if row.startswith("| 0.95 |")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:3] == ["3", "2"] and cells[3].startswith("1/2 [") and cells[5] == "2"
    assert cells[6] == "1: 0.200, 0.430, 0.100"


def test_a_sweep_without_tracking_jobs_is_refused(tmp_path: Path, capsys) -> None:
    _job(tmp_path / "d", 4, 0.20, 0.90, 0.10, tracking=False)
    assert tracking_stop_margins.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: no tracking DepL job")
