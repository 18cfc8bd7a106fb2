"""Contract (docs/FORMATS.md): scenario and plan files round-trip and keep their meaning."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from depl_fl.contract.plan import Plan, RoundDecision, load_plan, plan_from_dict, plan_to_dict, save_plan
from depl_fl.contract.scenario import load_scenario, save_scenario, scenario_from_dict, scenario_to_dict

EXAMPLE = Path(__file__).parent / "data" / "example_scenario.json"


@pytest.fixture()
def example_doc() -> dict:
    return json.loads(EXAMPLE.read_text(encoding="utf-8"))


def test_example_scenario_fields_have_their_meaning(example_doc: dict) -> None:
    scenario = scenario_from_dict(example_doc)
    cluster = scenario.cluster("A")
    assert [lv.flops_per_s for lv in cluster.levels] == [2e10, 4e10]
    assert [lv.joules_per_flop for lv in cluster.levels] == [1e-10, 3e-10]
    assert (cluster.bytes_per_s, cluster.joules_per_byte) == (1.25e6, 2e-7)
    assert (cluster.activation_joules, cluster.max_clients) == (50.0, 8)
    assert scenario.client("c0").cluster == "A" and scenario.client("c0").num_samples == 180
    assert scenario.model("p75").compression == 0.75
    assert scenario.model("full").flops_per_sample == 3.0e7
    assert scenario.loss.initial == 2.30 and scenario.loss.reference_samples == 1797
    assert scenario.loss.run["full"].mean_at(1.0) == pytest.approx(0.08)
    # Linear interpolation between levels 1.0 and 2.3, clamped at the ends.
    assert scenario.loss.run["full"].mean_at(1.65) == pytest.approx((0.08 + 0.35) / 2)
    assert scenario.loss.run["full"].std_at(5.0) == pytest.approx(0.08)
    assert scenario.loss.run["p75"].mean_at(0.0) == pytest.approx(0.0)
    assert scenario.loss.switch[("full", "p75")].mean == pytest.approx(0.10)
    assert scenario.loss.switch[("p75", "full")].std == pytest.approx(0.02)


def test_scenario_file_round_trip(tmp_path: Path) -> None:
    scenario = load_scenario(EXAMPLE)
    out = tmp_path / "again.json"
    save_scenario(scenario, out)
    again = load_scenario(out)
    assert again == scenario
    assert scenario_to_dict(again) == scenario_to_dict(scenario)
    # The written file is plain JSON (no NaN/Infinity literals) with the contract's version.
    doc = json.loads(out.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    assert doc["version"] == 1


def _reject_constant(name: str) -> None:
    raise AssertionError(f"non-standard JSON constant {name} written")


def test_extra_fields_are_accepted_and_ignored(example_doc: dict) -> None:
    noisy = copy.deepcopy(example_doc)
    noisy["comment"] = "made by hand"
    noisy["clusters"][0]["location"] = "rack 3"
    noisy["clusters"][0]["levels"][0]["name"] = "eco"
    noisy["clients"][0]["partition_id"] = 7
    noisy["models"][0]["arch"] = "digits_cnn"
    noisy["loss"]["fitted_on"] = "2024-01-01"
    noisy["loss"]["run"]["full"]["r2"] = 0.97
    noisy["loss"]["switch"][0]["samples"] = 12
    assert scenario_from_dict(noisy) == scenario_from_dict(example_doc)
    # Top-level extras survive a save, nested ones are simply dropped.
    assert scenario_to_dict(scenario_from_dict(noisy))["comment"] == "made by hand"


def test_reference_samples_defaults_to_total_samples(example_doc: dict) -> None:
    doc = copy.deepcopy(example_doc)
    doc["clients"] = [{"id": "c0", "cluster": "A", "num_samples": 180},
                      {"id": "c1", "cluster": "A", "num_samples": 70},
                      {"id": "c2", "cluster": "A", "num_samples": 5}]
    del doc["loss"]["reference_samples"]
    assert scenario_from_dict(doc).loss.reference_samples == 255


def test_optional_fields_have_documented_defaults(example_doc: dict) -> None:
    doc = copy.deepcopy(example_doc)
    del doc["version"], doc["local_epochs"], doc["loss"]["switch"]
    scenario = scenario_from_dict(doc)
    assert scenario.version == 1 and scenario.local_epochs == 1
    assert scenario.loss.switch == {}


def test_plan_file_round_trip(tmp_path: Path) -> None:
    plan = Plan(method="depl", feasible=True,
                rounds=[RoundDecision("full", ("c0",), {"A": 1}),
                        RoundDecision("p75", ("c0",), {"A": 0})],
                predicted={"cost_joules": 12.5, "time_s": 3.0, "loss_quantile": 0.3,
                           "probability": 0.96},
                planner_seconds=0.25)
    out = tmp_path / "plan.json"
    save_plan(plan, out)
    again = load_plan(out)
    assert again == plan
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert set(doc) == {"version", "method", "feasible", "rounds", "predicted", "planner_seconds"}
    assert doc["rounds"][1] == {"model": "p75", "clients": ["c0"], "levels": {"A": 0}}


def test_design_example_plan_parses_with_extras() -> None:
    doc = {"version": 1, "method": "depl", "feasible": True,
           "rounds": [{"model": "p75", "clients": ["c0", "c3"], "levels": {"A": 0},
                       "note": "ignored"}],
           "predicted": {"cost_joules": 0.0, "time_s": 0.0, "loss_quantile": 0.0,
                         "probability": 0.0},
           "planner_seconds": 0.0, "generator": "hand"}
    plan = plan_from_dict(doc)
    assert plan.rounds == [RoundDecision("p75", ("c0", "c3"), {"A": 0})]
    assert plan.extra == {"generator": "hand"}
    assert plan_to_dict(plan)["generator"] == "hand"


# ---------------------------------------------------------------------------
# The command: exit statuses and outputs of ``depl-fl plan`` / ``evaluate``
# ---------------------------------------------------------------------------
def _cli(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[int, str, str]:
    from depl_fl.cli import main

    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_plan_then_evaluate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    targets = ["--target-loss", "1.5", "--target-prob", "0.9", "--deadline-s", "200"]
    out = tmp_path / "plan.json"
    status, stdout, stderr = _cli(capsys, ["plan", str(EXAMPLE), *targets, "--out", str(out)])
    assert status == 0, stderr
    assert stderr == "" and len(stdout.splitlines()) == 1 and str(out) in stdout
    plan = load_plan(out)
    assert plan.feasible and plan.method == "depl" and plan.rounds
    status, stdout, stderr = _cli(capsys, ["evaluate", str(EXAMPLE), str(out), *targets])
    assert status == 0, stderr
    result = json.loads(stdout)
    assert {"valid", "errors", "probability", "loss_quantile", "cost_joules", "time_s",
            "rounds"} <= set(result)
    assert result["valid"] and result["rounds"] == len(plan.rounds)
    assert result["probability"] >= 0.9 - 4 * (0.9 * 0.1 / 20000) ** 0.5
    assert result["time_s"] <= 200
    assert result["cost_joules"] == pytest.approx(plan.predicted["cost_joules"], rel=1e-6)


def test_cli_plan_without_dependable_plan_exits_3(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "plan.json"
    status, stdout, stderr = _cli(capsys, ["plan", str(EXAMPLE), "--target-loss", "0.05",
                                           "--target-prob", "0.99", "--deadline-s", "5",
                                           "--out", str(out)])
    assert status == 3
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("depl-fl: no dependable plan: best reachable probability ")
    assert ", target 0.99 (target loss 0.05" in lines[0]
    assert "4x the deadline" in lines[0]  # whether more deadline makes a plan
    plan = load_plan(out)
    assert plan.feasible is False
    assert 0.0 <= plan.predicted["probability"] < 0.99


def test_cli_evaluate_invalid_plan_exits_4_with_valid_false(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"rounds": [
        {"model": "p75", "clients": ["c0"], "levels": {"A": 0}},
        {"model": "full", "clients": ["c0", "ghost"], "levels": {"A": 9}}]}), encoding="utf-8")
    status, stdout, stderr = _cli(capsys, ["evaluate", str(EXAMPLE), str(plan), "--target-loss", "1",
                                           "--target-prob", "0.9", "--deadline-s", "100"])
    assert status == 4
    assert len(stderr.splitlines()) == 1 and "invalid plan" in stderr
    result = json.loads(stdout)
    assert result["valid"] is False and result["probability"] is None
    assert any("ghost" in e for e in result["errors"])
    assert any("out of range" in e for e in result["errors"])


def test_cli_evaluate_allow_few(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"rounds": [{"model": "full", "clients": ["c0"],
                                            "levels": {"A": 1}}]}), encoding="utf-8")
    status, stdout, _ = _cli(capsys, ["evaluate", str(EXAMPLE), str(plan), "--target-loss", "2.2",
                                      "--target-prob", "0.5", "--deadline-s", "10",
                                      "--trajectories", "500", "--allow-few", "--seed", "3"])
    assert status == 0
    result = json.loads(stdout)
    assert result["trajectories"] == 500 and result["time_s"] == pytest.approx(0.775)
    assert result["cost_joules"] == pytest.approx(1.62 + 0.16 + 50.0)


def test_cli_delegates_profile_and_report(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture) -> None:
    import sys
    import types

    seen: list[list[str]] = []
    fake = types.ModuleType("depl_fl.orchestration.profiling")
    fake.main = lambda argv: seen.append(list(argv)) or 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "depl_fl.orchestration.profiling", fake)
    status, _, _ = _cli(capsys, ["profile", "--arch", "digits_cnn", "x.json"])
    assert status == 7 and seen == [["--arch", "digits_cnn", "x.json"]]

    monkeypatch.setitem(sys.modules, "depl_fl.runs.report", None)  # makes the import fail
    status, _, stderr = _cli(capsys, ["report", "runs/"])
    assert status == 2
    assert stderr.splitlines() == ["depl-fl: 'report' is not available "
                                   "(depl_fl.runs.report is missing)"]


def test_shortfall_names_the_independent_check_when_the_search_reached_pi() -> None:
    from depl_fl.contract.plan import Plan, shortfall_text

    short = Plan(method="depl", feasible=False, rounds=[], predicted={"probability": 0.41})
    assert shortfall_text(short, 0.95) == "best reachable probability 0.41"
    # The search's own stream reached pi, the independent check did not: no "0.954 < 0.95".
    edge = Plan(method="depl", feasible=False, rounds=[], predicted={"probability": 0.954})
    text = shortfall_text(edge, 0.95)
    assert "0.954" in text and "independent check" in text and "<" not in text
    assert shortfall_text(Plan(method="depl", feasible=False, rounds=[], predicted={}), 0.9) == \
        "best reachable probability unknown"


def test_relief_names_what_would_make_a_plan_exist() -> None:
    from depl_fl.contract.plan import CLI_KNOBS, Plan, Targets, relief_text

    def plan(p: float | None, feasible: bool = False, time_s: float = 0.0) -> Plan:
        predicted = {"time_s": time_s} if p is None else {"probability": p, "time_s": time_s}
        return Plan(method="depl", feasible=feasible, rounds=[], predicted=predicted)

    targets = Targets(0.35, 0.95, 100.0)
    assert relief_text(plan(0.9), None, targets) == ""
    assert relief_text(plan(0.9), plan(0.96, True, 250.0), targets) == (
        "; with 4x the deadline a plan exists: a target.deadline_s longer by at least 150 s makes one")
    # A ceiling: the longer deadline reaches no more.
    assert relief_text(plan(0.939), plan(0.941), targets) == (
        "; 4x the deadline reaches 0.941: more deadline alone does not make one, a target.prob below "
        "0.939 or a higher target.loss may")
    # Still growing: a much longer deadline may; the options' names in the CLI's line.
    assert relief_text(plan(0.2), plan(0.63), targets, CLI_KNOBS) == (
        "; 4x the deadline reaches 0.63, not enough: a much longer --deadline-s, a --target-prob below "
        "0.2 or a higher --target-loss may")
    # Nothing reachable at the deadline: no probability worth naming.
    assert relief_text(plan(0.0), plan(0.0002), targets) == (
        "; 4x the deadline reaches 0.0002: more deadline alone does not make one, a higher target.loss may")
    assert relief_text(plan(0.5), plan(None), targets) == "; 4x the deadline does not make one either"


def test_relief_names_the_round_cap_when_the_best_plan_uses_every_round_it_allows() -> None:
    from depl_fl.contract.plan import CLI_KNOBS, Plan, RoundDecision, Targets, relief_text

    def plan(p: float, rounds: int) -> Plan:
        decision = RoundDecision("full", ("c0",), {"A": 0})
        return Plan(method="depl", feasible=False, rounds=[decision] * rounds,
                    predicted={"probability": p, "time_s": 40.0})

    capped = Targets(0.35, 0.95, 3600.0, max_rounds=5)
    assert relief_text(plan(0.4234, 5), plan(0.4234, 5), capped, CLI_KNOBS) == (
        "; 4x the deadline reaches 0.4234: more deadline alone does not make one, a larger --max-rounds, "
        "a --target-prob below 0.423 or a higher --target-loss may")
    assert relief_text(plan(0.2, 5), plan(0.63, 5), capped) == (
        "; 4x the deadline reaches 0.63, not enough: a much longer target.deadline_s, a larger "
        "target.max_rounds, a target.prob below 0.2 or a higher target.loss may")
    # A cap the best plan does not reach is not what binds: not named.
    roomy = Targets(0.05, 0.95, 3600.0, max_rounds=30)
    assert "max-rounds" not in relief_text(plan(0.4682, 11), plan(0.4682, 11), roomy, CLI_KNOBS)


def test_relaxed_targets_ask_for_a_longer_deadline_only_after_a_search() -> None:
    from depl_fl.contract.plan import MAX_DEADLINE_S, RELAXED_DEADLINE_FACTOR, Plan, Targets, relaxed_targets

    searched = Plan(method="depl", feasible=False, rounds=[], predicted={"probability": 0.5})
    refused = Plan(method="depl", feasible=False, rounds=[], predicted={}, extra={"reason": "no round fits"})
    targets = Targets(0.35, 0.95, 100.0)
    longer = relaxed_targets(searched, targets)
    assert longer == Targets(0.35, 0.95, 100.0 * RELAXED_DEADLINE_FACTOR)
    assert relaxed_targets(refused, targets) is None
    assert relaxed_targets(searched, Targets(0.35, 0.95, MAX_DEADLINE_S)).deadline_s == MAX_DEADLINE_S


def test_a_round_cap_that_binds_is_named_in_the_infeasible_message(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    # The same targets plan fine without a cap (test_cli_plan_then_evaluate); one round is
    # too few, and the error must say which limit the user can relax.
    targets = ["--target-loss", "1.5", "--target-prob", "0.9", "--deadline-s", "200"]
    out = tmp_path / "plan.json"
    status, _, stderr = _cli(capsys, ["plan", str(EXAMPLE), *targets, "--max-rounds", "1",
                                      "--out", str(out)])
    assert status == 3
    assert "deadline 200 s, max_rounds 1, method depl" in stderr
    from depl_fl.contract.plan import Targets

    assert Targets(0.3, 0.8, 170.5).limits_text() == "within 170.5 s"
    assert Targets(0.3, 0.8, 170.5, 40).limits_text() == "within 170.5 s and 40 rounds (max_rounds)"
