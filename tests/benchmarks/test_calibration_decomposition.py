"""benchmarks/calibration_decomposition.py: one term of the loss model changed at a time on a recorded
plan, the cell's sources of margin, and its bad-input exits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.benchmark_scripts import load_benchmark

dec = load_benchmark("calibration_decomposition")


def _doc(actual: float = 0.3, judged: float = 0.004) -> dict:
    """A static job's results.json: version-2 scenario with an oscillation and a judged error, a plan."""
    scenario = {
        "version": 2, "local_epochs": 1,
        "clusters": [{"id": "A", "levels": [{"flops_per_s": 2e10, "joules_per_flop": 1e-10}],
                      "bytes_per_s": 1.25e6, "joules_per_byte": 2e-7, "activation_joules": 5.0,
                      "max_clients": 8}],
        "clients": [{"id": "c0", "cluster": "A", "num_samples": 100, "label_histogram": [50, 50]},
                    {"id": "c1", "cluster": "A", "num_samples": 100, "label_histogram": [90, 10]}],
        "models": [{"id": "full", "compression": 0.0, "flops_per_sample": 3e7, "size_bytes": 4e5}],
        "loss": {"initial": 0.8, "reference_samples": 200, "data_exponent_mean": 0.3,
                 "data_exponent_std": 0.5, "judged_error": judged, "eval_dof": 3.4,
                 "run": {"full": {"levels": [0.0, 0.5, 1.0], "mean": [0.0, 0.05, 0.1],
                                  "std": [0.0, 0.1, 0.14], "eval_std": [0.0, 0.07, 0.098]}},
                 "switch": []}}
    plan = {"rounds": [{"model": "full", "clients": ["c1"], "levels": {"A": 0}}] * 6,
            "predicted": {"loss_quantile": 0.38}}
    summary = {"method": "depl", "tracking": False, "status": "completed", "seed": 3, "target_prob": 0.9,
               "target_loss": 0.4, "final_test_loss": actual, "profile_met_round": None}
    return {"summary": summary, "plan": plan, "scenario": scenario, "replans": 0, "profile": {}}


def test_scaling_the_oscillation_keeps_the_walks_own_spread() -> None:
    loss = _doc()["scenario"]["loss"]
    loss["run"]["full"]["std"] = [0.01, 0.12, 0.16]  # a walk spread of its own beside the oscillation
    walk = np.array(loss["run"]["full"]["std"]) ** 2 - 2 * np.array(loss["run"]["full"]["eval_std"]) ** 2
    for factor in (0.0, 0.5, 2.0):
        out = dec.scaled_oscillation(loss, factor)["run"]["full"]
        assert out["eval_std"] == pytest.approx([factor * v for v in loss["run"]["full"]["eval_std"]])
        assert np.square(out["std"]) - 2 * np.square(out["eval_std"]) == pytest.approx(walk)
    assert loss["run"]["full"]["eval_std"] == [0.0, 0.07, 0.098]  # the input is left as it was


def test_each_term_changes_the_prediction_the_way_it_says() -> None:
    doc = _doc()
    terms = dec.variant_losses(doc, cached=None, osc=None, bank_median=0.041)
    assert set(terms) == {"model", "no judged error", "normal oscillation", "no oscillation", "no coverage",
                          "oscillation without the set's size"}
    q = {t: np.quantile(dec.predicted(doc, loss, start, 0, plain_ratio=t == "no coverage"), 0.9)
         for t, (loss, start) in terms.items()}
    spread = {t: np.std(dec.predicted(doc, loss, start, 0, plain_ratio=t == "no coverage"))
              for t, (loss, start) in terms.items()}
    assert spread["no judged error"] < spread["model"]
    assert spread["no oscillation"] < spread["no judged error"]
    assert spread["oscillation without the set's size"] < spread["model"]  # the set has r < 1
    assert q["no oscillation"] < q["model"]
    # a normal oscillation of the same variance has a higher 0.9-quantile than the Student-t one
    assert q["normal oscillation"] > q["model"]
    # at its plain ratio the set (which covers its labels only partly) learns faster
    assert np.median(dec.predicted(doc, *terms["no coverage"], 0, plain_ratio=True)) < \
        np.median(dec.predicted(doc, *terms["model"], 0))


def test_the_jobs_own_oscillation_replaces_the_constant_in_proportion() -> None:
    doc = _doc()
    osc = {"steps": 3.0, "constant": 0.2, "in_range": 0.2, "measured": 0.05, "measured_at_reference": 0.05,
           "steps_factor": 1.0}
    terms = dec.variant_losses(doc, cached=None, osc=osc, bank_median=0.041)
    own = terms["own oscillation"][0]["run"]["full"]["eval_std"]
    assert own == pytest.approx([0.25 * v for v in doc["scenario"]["loss"]["run"]["full"]["eval_std"]])
    excess = terms["oscillation with own excess"][0]["run"]["full"]["eval_std"]
    factor = np.sqrt(0.2**2 - 0.041**2 + 0.05**2) / 0.2
    assert excess == pytest.approx([factor * v for v in doc["scenario"]["loss"]["run"]["full"]["eval_std"]])
    grown = dec.variant_losses(doc, cached=None, osc={**osc, "steps_factor": 1.6}, bank_median=0.041)
    at_reference = grown["oscillation at reference steps"][0]["run"]["full"]["eval_std"]
    constant = doc["scenario"]["loss"]["run"]["full"]["eval_std"]
    assert at_reference == pytest.approx([v / 1.6 for v in constant])
    beside = grown["curve error beside own oscillation"][0]["run"]["full"]["eval_std"]
    factor = np.sqrt((0.2 / 1.6) ** 2 - 0.041**2 + 0.05**2) / 0.2
    assert beside == pytest.approx([factor * v for v in constant])
    held = dec.variant_losses(doc, cached=None, osc={**osc, "in_range": 0.15}, bank_median=0.041)
    within = held["oscillation within the steps range"][0]["run"]["full"]["eval_std"]
    assert within == pytest.approx([0.75 * v for v in constant])
    inside = terms["oscillation within the steps range"][0]["run"]["full"]["eval_std"]
    assert inside == pytest.approx(constant)


def test_the_steps_range_option_reads_the_configured_range_and_refuses_a_bad_one() -> None:
    assert dec._steps_range(None) == (3.207, 5.614)
    assert dec._steps_range("3,6") == (3.0, 6.0)
    assert dec._steps_range("6,3") is None
    assert dec._steps_range("3") is None


def test_a_cell_splits_jobs_met_in_exploration_from_planned_ones(tmp_path: Path) -> None:
    planned = [dec.job_row(tmp_path, _doc(actual=a), 0.041) for a in (0.2, 0.25, 0.3, 0.35, 0.5)]
    met = _doc(actual=0.33)
    met["summary"]["profile_met_round"] = 7
    met["plan"] = {"rounds": []}
    rows = [*planned, dec.job_row(tmp_path, met, 0.041)]
    sources, terms, figures = dec.cell_lines("x", 0.9, rows)
    assert figures["planned"] == 5 and figures["met_in_exploration"] == 1 and figures["finished"] == 6
    assert figures["plan_slack_median"] == pytest.approx(0.38 / 0.4)
    model = figures["terms"]["model"]
    above = sum(r["actual"] > r["terms"]["model"]["quantile"] for r in planned)
    assert model["above"] == above and model["runs"] == 5
    assert model["actual_quantile"] == pytest.approx(0.5)  # the inverted-CDF 0.9-quantile of 5 runs
    assert sources[0].startswith("| x | 0.9 | 6 |") and len(terms) == len(figures["terms"])


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys) -> None:
    assert dec.main([str(tmp_path / "absent")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert dec.main([str(tmp_path)]) == 2
    assert "no finished static DepL job" in capsys.readouterr().err
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "results.json").write_text(json.dumps(_doc()))
    assert dec.main([str(tmp_path), "--bank-median", "-1"]) == 2
    assert dec.main([str(tmp_path), "--out", str(tmp_path / "out" / "dec")]) == 0
    text = (tmp_path / "out" / "dec.md").read_text()
    assert f"| {tmp_path.name} | 0.9 | 1 |" in text  # one row per sweep folder and pi
    saved = json.loads((tmp_path / "out" / "dec.json").read_text())
    assert saved["jobs"][0]["terms"]["model"]["quantile"] > 0.0


def test_the_bank_check_refuses_a_bank_without_the_settings(tmp_path: Path, capsys) -> None:
    check = load_benchmark("calibration_bank_check")
    (tmp_path / "d1").mkdir()
    assert check.main([str(tmp_path), "--settings", "d1,d2"]) == 2
    assert "has no folder for every setting" in capsys.readouterr().err
    assert check.main([str(tmp_path), "--settings", "d1"]) == 2  # a setting folder without jobs
    assert "no bank job" in capsys.readouterr().err
