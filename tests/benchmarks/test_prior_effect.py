"""benchmarks/prior_effect.py and prior_sources.py: the seeds a prior changed, and what its sources cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their sibling sweep_io


prior_effect = load_benchmark("prior_effect")
prior_sources = load_benchmark("prior_sources")


def _job(folder: Path, seed: int, profile_j: list[float], losses: list[float], train_j: float,
         rounds: int) -> None:
    records = [{"phase": "profile", "energy_j": e, "loss": v} for e, v in zip(profile_j, losses, strict=True)]
    records += [{"phase": "train", "energy_j": train_j / rounds, "loss": 0.3}] * rounds
    doc = {"summary": {"seed": seed, "profile_rounds": len(profile_j), "rounds": rounds,
                       "profile_energy_j": sum(profile_j), "cost_j": train_j,
                       "total_energy_j": sum(profile_j) + train_j},
           "rounds": records, "config": {"profile": {"explore": {"prior_rounds": 2}}}}
    (folder / f"job{seed}").mkdir(parents=True)
    (folder / f"job{seed}" / "results.json").write_text(json.dumps(doc))


def test_the_seeds_a_prior_changed_and_the_exploration_after_its_rounds(tmp_path: Path) -> None:
    default, prior = tmp_path / "s-default" / "depl", tmp_path / "s-prior" / "depl"
    _job(default, 1, [7.0, 6.0, 5.0, 4.0], [2.2, 2.0, 1.5, 1.0], 20.0, 4)
    _job(prior, 1, [7.0, 6.0, 5.0, 4.0], [2.2, 2.0, 1.5, 1.0], 20.0, 4)  # the same job
    _job(default, 2, [7.0, 6.0, 5.0], [2.4, 1.8, 0.9], 10.0, 2)
    _job(prior, 2, [7.0, 6.0, 5.0], [2.4, 1.8, 0.9], 12.0, 3)  # another plan
    row = prior_effect.pair_row("s", default, prior)
    assert (row["same"], row["seeds"], row["differ"]) == (1, 2, [2])
    # after round 2 (prior_rounds): 5 + 4 J and 5 J of exploration; the losses there 2.0 and 1.8
    assert row["exploration_j_after"] == pytest.approx(7.0)
    assert row["loss_at_prior_rounds"] == pytest.approx(1.9)
    assert row["default_total_j"] == pytest.approx((42.0 + 28.0) / 2)
    assert row["prior_total_j"] == pytest.approx((42.0 + 30.0) / 2)
    out = tmp_path / "effect.md"
    assert prior_effect.main([str(tmp_path), "--out", str(out)]) == 0
    assert "| s | 1/2 (differ: 2) |" in out.read_text()


def test_no_pair_of_arms_is_one_line_and_status_2(tmp_path: Path, capsys) -> None:
    assert prior_effect.main([str(tmp_path), "--out", str(tmp_path / "x.md")]) == 2
    assert prior_sources.main([str(tmp_path), "--out", str(tmp_path / "y.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("prior_effect:") and err[1].startswith("prior_sources:")


def test_a_source_row_says_what_the_source_cost_and_handed_on(tmp_path: Path) -> None:
    cache = tmp_path / "cache.json"
    cache.write_text(json.dumps({"fit_inputs": {"observations": [{}] * 20}}))
    results = tmp_path / "s" / "results.json"
    results.parent.mkdir()
    results.write_text(json.dumps({
        "summary": {"tracking": True, "profile_rounds": 5, "profile_value_round": 5,
                    "profile_met_round": None, "profile_energy_j": 38.4, "cost_j": 164.6,
                    "total_energy_j": 203.0, "final_test_loss": 0.39, "met": True},
        "config": {"num_clients": 8, "partition": {"alpha": 0.5}, "target": {"loss": 0.45}, "seed": 1099},
        "profile": {"cache_file": str(cache)}}))
    row = prior_sources.source_row("s", results)
    assert (row["clients"], row["seed"], row["stop"], row["observations"]) == (8, 1099, "value", 20)
    assert "| s | 8, 0.5, 0.45, 1099 | 5 (value) | 38.4 | 164.6 | 203.0 | 0.390 (True) | 20 |" in \
        prior_sources.to_markdown([row])
