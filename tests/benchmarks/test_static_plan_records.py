"""benchmarks/static_plan_records.py: what a sweep's static plans were made from and what they predicted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports its sibling sweep_io


records = load_benchmark("static_plan_records")


def _job(folder: Path, seed: int, *, tracking: bool = False, status: str = "completed",
         losses: tuple[float, ...] = (2.0, 1.0), quantile: float | None = 0.4, final: float | None = 0.3,
         rates_from_prior: tuple[str, ...] = (), rate_scale: float = 1.0) -> None:
    predicted = {} if quantile is None else {"loss_quantile": quantile, "probability": 0.92}
    doc = {"summary": {"seed": seed, "tracking": tracking, "status": status, "target_loss": 0.45,
                       "target_prob": 0.9, "profile_rounds": len(losses), "profile_value_round": None,
                       "rounds": 5, "predicted": predicted, "final_test_loss": final},
           "rounds": [{"phase": "profile", "loss": v} for v in losses] + [{"phase": "train", "loss": 0.1}],
           "profile": {"rates_from_prior": list(rates_from_prior)},
           "plan": None if quantile is None else {"rounds": [{"model": "m"}] * 5},
           "scenario": {"loss": {"run": {"m": {"levels": [0.3, 0.6], "mean": [0.01, 0.03 * rate_scale]}}}}}
    (folder / f"job{seed}").mkdir(parents=True)
    (folder / f"job{seed}" / "results.json").write_text(json.dumps(doc))


def test_an_arm_row_reads_the_plans_and_their_outcomes(tmp_path: Path) -> None:
    arm = tmp_path / "s-static-prior" / "depl"
    _job(arm, 1, losses=(2.0, 0.8), quantile=0.40, final=0.30, rates_from_prior=("full",))
    _job(arm, 2, losses=(2.0, 1.2, 0.6), quantile=0.44, final=0.50, rate_scale=2.0)  # above its quantile
    _job(arm, 3, status="infeasible", quantile=None, final=None)  # no dependable plan
    _job(tmp_path / "s-prior" / "depl", 1, tracking=True)  # a tracking arm: not a row
    out = tmp_path / "records.md"
    assert records.main([str(tmp_path), "--out", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())
    assert [r["arm"] for r in rows] == ["s-static-prior"]
    row = rows[0]
    assert (row["jobs"], row["infeasible"], row["rate_from_prior"]) == (3, 1, 1)
    assert (row["above_predicted"], row["compared"]) == (1, 2)
    assert row["exploration_rounds"] == pytest.approx(7 / 3)
    assert row["last_exploration_loss"] == pytest.approx((0.8 + 0.6 + 1.0) / 3)
    # the decrease per round at L* 0.45, halfway between the levels: 0.02 and 0.035
    assert row["rate_at_target"] == pytest.approx(0.0275)
    assert row["final_over_predicted"] == pytest.approx((0.30 / 0.40 + 0.50 / 0.44) / 2)
    assert "| s-static-prior | 0.45 | 0.9 | 3 | 1 / 0 |" in out.read_text()


def test_a_sweep_without_static_jobs_is_one_line_and_status_2(tmp_path: Path, capsys) -> None:
    _job(tmp_path / "s-default" / "depl", 1, tracking=True)
    assert records.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("static_plan_records:")
