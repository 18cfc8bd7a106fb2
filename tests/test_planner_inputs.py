"""The planner's answers to edge inputs: met targets, honest probabilities, extreme values, eta."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from depl_fl.contract.plan import Targets
from depl_fl.contract.scenario import scenario_from_dict
from depl_fl.contract.semantics import evaluate_plan
from depl_fl.planner import make_plan

EXAMPLE = Path(__file__).resolve().parent / "data" / "example_scenario.json"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "depl_fl.cli", *args], capture_output=True,
                          text=True, timeout=300)


def _plan_cli(scenario: Path, out: Path, *extra: str, target: str = "1.0") -> subprocess.CompletedProcess:
    return _cli("plan", str(scenario), "--target-loss", target, "--target-prob", "0.95",
                "--deadline-s", "100", "--max-rounds", "60", "--out", str(out), *extra)


@pytest.mark.parametrize("method", ["depl", "full", "expectation", "optimum"])
def test_target_met_at_the_start_gives_a_zero_round_plan(tmp_path, method):
    out = tmp_path / "plan.json"
    proc = _plan_cli(EXAMPLE, out, "--method", method, target="2.3")   # initial loss 2.3
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(out.read_text())
    assert plan["feasible"] is True and plan["rounds"] == []
    assert plan["predicted"]["probability"] == 1.0 and plan["predicted"]["cost_joules"] == 0.0


def test_plan_probability_agrees_with_evaluate_within_its_stated_error(tmp_path):
    out = tmp_path / "plan.json"
    proc = _plan_cli(EXAMPLE, out)
    assert proc.returncode == 0, proc.stderr
    assert "+-" in proc.stdout
    plan = json.loads(out.read_text())
    p, se = plan["predicted"]["probability"], plan["predicted"]["probability_stderr"]
    assert se == pytest.approx(math.sqrt(p * (1 - p) / 20000))
    evals = []
    for seed in (1, 2, 3):
        ev = _cli("evaluate", str(EXAMPLE), str(out), "--target-loss", "1.0", "--target-prob", "0.95",
                  "--deadline-s", "100", "--max-rounds", "60", "--seed", str(seed))
        assert ev.returncode == 0, ev.stderr
        evals.append(json.loads(ev.stdout))
    for ev in evals:
        assert ev["probability_stderr"] == pytest.approx(
            math.sqrt(ev["probability"] * (1 - ev["probability"]) / ev["trajectories"]))
    mean_eval = sum(ev["probability"] for ev in evals) / len(evals)
    # two independent estimates: their difference has std sqrt(se^2 + se^2 / 3)
    assert abs(p - mean_eval) <= 3.0 * math.sqrt(se ** 2 + se ** 2 / 3)
    assert plan["planner_info"]["search_probability"] >= 0.95


def test_reported_probability_is_not_the_search_stream():
    raw = json.loads(EXAMPLE.read_text())
    scen = scenario_from_dict(raw)
    targets = Targets(1.0, 0.9, 100.0, 60)
    plan = make_plan(scen, targets, seed=3)
    info = plan.extra["planner_info"]
    assert info["check_seed"] != info["seed"]
    ev = evaluate_plan(scen, plan.rounds, targets, n=20000, seed=info["check_seed"])
    assert ev["probability"] == pytest.approx(plan.predicted["probability"])
    assert plan.predicted["probability"] >= 0.9


EXTREMES = {
    "flops_per_s": lambda d: [lv.update(flops_per_s=1e-300) for c in d["clusters"] for lv in c["levels"]],
    "joules_per_flop": lambda d: [lv.update(joules_per_flop=1e300) for c in d["clusters"]
                                  for lv in c["levels"]],
    "reference_samples": lambda d: d["loss"].update(reference_samples=1e300),
    "reference_samples_tiny": lambda d: d["loss"].update(reference_samples=1e-300),
    "initial": lambda d: d["loss"].update(initial=1e300),
    "run": lambda d: [p.update(std=[1e300] * len(p["std"])) for p in d["loss"]["run"].values()],
    "num_samples": lambda d: [c.update(num_samples=10 ** 300) for c in d["clients"]],
}


@pytest.mark.parametrize("name", list(EXTREMES))
@pytest.mark.parametrize("method", ["depl", "expectation"])
def test_extreme_finite_values_give_one_line_errors(tmp_path, name, method):
    raw = copy.deepcopy(json.loads(EXAMPLE.read_text()))
    EXTREMES[name](raw)
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(raw))
    proc = _plan_cli(path, tmp_path / "plan.json", "--method", method)
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1
    else:  # a valid answer is fine too
        assert proc.returncode in (0, 3), proc.stderr


@pytest.mark.parametrize("eta", ["1e-9", "0", "-1", "2"])
def test_eta_out_of_range_is_a_clear_error(tmp_path, eta):
    proc = _plan_cli(EXAMPLE, tmp_path / "plan.json", "--eta", eta)
    assert proc.returncode == 2
    assert "--eta" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_eta_is_chosen_and_recorded(tmp_path):
    out = tmp_path / "plan.json"
    assert _plan_cli(EXAMPLE, out).returncode == 0
    auto = json.loads(out.read_text())
    assert 0.001 <= auto["eta"] <= 1 and auto["planner_info"]["eta_source"] == "auto"
    assert _plan_cli(EXAMPLE, out, "--eta", "0.1").returncode == 0
    user = json.loads(out.read_text())
    assert user["eta"] == 0.1 and user["planner_info"]["eta_source"] == "user"


@pytest.mark.parametrize("method", ["depl", "full", "expectation", "optimum"])
def test_a_one_round_horizon_plans_without_a_switch_point(method):
    # max_rounds = 1 leaves no room for a switch (k1 >= 1 and k2 >= 1); found by the property test.
    run = {"levels": [0.1, 1.0, 2.3], "mean": [0.0, 0.25 / 3, 0.25], "std": [0.01, 0.0, 0.0]}
    scen = scenario_from_dict({
        "version": 1, "local_epochs": 1,
        "clusters": [{"id": "K0", "levels": [{"flops_per_s": 1e8, "joules_per_flop": 1e-11}],
                      "bytes_per_s": 1e5, "joules_per_byte": 0.0, "activation_joules": 0.0,
                      "max_clients": 1}],
        "clients": [{"id": f"c{i}", "cluster": "K0", "num_samples": 10} for i in range(3)],
        "models": [{"id": "m0", "compression": 0.0, "flops_per_sample": 1.01e6, "size_bytes": 1.01e5},
                   {"id": "m1", "compression": 0.5, "flops_per_sample": 5.1e5, "size_bytes": 5.1e4}],
        "loss": {"initial": 2.3, "data_exponent_mean": 0.0, "data_exponent_std": 0.0,
                 "run": {"m0": run, "m1": run}, "switch": []}})
    plan = make_plan(scen, Targets(2.1, 0.8, 100.0, 1), method=method, seed=0)
    assert plan.feasible and len(plan.rounds) == 1
    assert evaluate_plan(scen, plan.rounds, Targets(2.1, 0.8, 100.0, 1), n=2000)["probability"] >= 0.8
