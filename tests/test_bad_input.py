"""Bad input through the real command line: exit status 2 and exactly one stderr line naming the field."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from depl_fl.cli import main

EXAMPLE = Path(__file__).parent / "data" / "example_scenario.json"
TARGETS = ["--target-loss", "1.0", "--target-prob", "0.9", "--deadline-s", "100"]
GOOD_PLAN = {"version": 1, "method": "depl", "feasible": True,
             "rounds": [{"model": "full", "clients": ["c0"], "levels": {"A": 1}}]}


def _example() -> dict:
    return json.loads(EXAMPLE.read_text(encoding="utf-8"))


def _set(path: tuple, value: object) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def _append(path: tuple, value: object) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        target = doc
        for key in path:
            target = target[key]
        target.append(copy.deepcopy(value))
    return mutate


def _delete(path: tuple) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return mutate


NAN, INF = float("nan"), float("inf")

# (case id, mutation of the example scenario, text the error line must contain)
SCENARIO_CASES = [
    ("duplicate-cluster", _append(("clusters",), _example()["clusters"][0]), "clusters"),
    ("duplicate-client", _append(("clients",), {"id": "c0", "cluster": "A", "num_samples": 5}),
     "clients"),
    ("duplicate-model", _append(("models",), _example()["models"][1]), "models"),
    ("client-unknown-cluster", _set(("clients", 0, "cluster"), "Z"), "clients[0].cluster"),
    ("run-unknown-model", _set(("loss", "run", "p99"), _example()["loss"]["run"]["p75"]),
     "loss.run.p99"),
    ("switch-unknown-model", _set(("loss", "switch", 0, "to"), "p99"), "loss.switch[0].to"),
    ("model-without-profile", _delete(("loss", "run", "p75")), "loss.run"),
    ("negative-samples", _set(("clients", 0, "num_samples"), -3), "clients[0].num_samples"),
    ("fractional-samples", _set(("clients", 0, "num_samples"), 2.5), "clients[0].num_samples"),
    ("negative-joules", _set(("clusters", 0, "levels", 0, "joules_per_flop"), -1e-10),
     "clusters[0].levels[0].joules_per_flop"),
    ("zero-speed", _set(("clusters", 0, "levels", 1, "flops_per_s"), 0),
     "clusters[0].levels[1].flops_per_s"),
    ("nan-speed", _set(("clusters", 0, "levels", 0, "flops_per_s"), NAN),
     "clusters[0].levels[0].flops_per_s"),
    ("inf-size", _set(("models", 0, "size_bytes"), INF), "models[0].size_bytes"),
    ("minus-inf-initial", _set(("loss", "initial"), -INF), "loss.initial"),
    ("nan-run-mean", _set(("loss", "run", "full", "mean", 1), NAN), "loss.run.full.mean[1]"),
    ("negative-run-std", _set(("loss", "run", "full", "std", 0), -0.1), "loss.run.full.std[0]"),
    ("nan-switch-std", _set(("loss", "switch", 1, "std"), NAN), "loss.switch[1].std"),
    ("nan-exponent", _set(("loss", "data_exponent_mean"), NAN), "loss.data_exponent_mean"),
    ("zero-capacity", _set(("clusters", 0, "max_clients"), 0), "clusters[0].max_clients"),
    ("string-number", _set(("clusters", 0, "bytes_per_s"), "fast"), "clusters[0].bytes_per_s"),
    ("bool-number", _set(("models", 1, "flops_per_sample"), True), "models[1].flops_per_sample"),
    ("compression-one", _set(("models", 1, "compression"), 1.0), "models[1].compression"),
    ("levels-not-ascending", _set(("loss", "run", "full", "levels"), [0.1, 2.3, 1.0]),
     "loss.run.full.levels"),
    ("levels-repeated", _set(("loss", "run", "p75", "levels"), [0.4, 0.4, 2.3]),
     "loss.run.p75.levels"),
    ("mean-length", _set(("loss", "run", "full", "mean"), [0.0, 0.35]), "loss.run.full"),
    ("std-length", _set(("loss", "run", "p75", "std"), [0.01, 0.03, 0.08, 0.1]), "loss.run.p75"),
    ("missing-clients", _delete(("clients",)), "clients"),
    ("model-not-object", _set(("models", 0), None), "models[0]"),
    ("client-not-object", _set(("clients", 0), "c0"), "clients[0]"),
    ("empty-models", _set(("models",), []), "models"),
    ("clusters-not-list", _set(("clusters",), {"A": 1}), "clusters"),
    ("self-switch", _set(("loss", "switch", 0, "to"), "full"), "loss.switch[0]"),
    ("wrong-version", _set(("version",), 3), "version"),
]


def _run(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _assert_one_line_error(status: int, err: str, needle: str) -> None:
    assert status == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("depl-fl"), lines[0]
    assert needle in lines[0], lines[0]
    assert "Traceback" not in err


def _plan_or_evaluate_fails(capsys, tmp_path: Path, command: str, doc: dict, needle: str) -> Path:
    """Run ``depl-fl plan`` or ``evaluate`` on ``doc``: one-line error naming ``needle``, no stdout."""
    scenario = tmp_path / "scenario.json"
    # allow_nan writes the NaN/Infinity literals that Python's json module reads back.
    scenario.write_text(json.dumps(doc, allow_nan=True), encoding="utf-8")
    plan = tmp_path / "plan.json"
    if command == "plan":
        argv = ["plan", str(scenario), *TARGETS, "--out", str(plan)]
    else:
        plan.write_text(json.dumps(GOOD_PLAN), encoding="utf-8")
        argv = ["evaluate", str(scenario), str(plan), *TARGETS]
    status, out, err = _run(capsys, argv)
    _assert_one_line_error(status, err, needle)
    assert out == ""
    return plan


@pytest.mark.parametrize("command", ["plan", "evaluate"])
@pytest.mark.parametrize("case, mutate, needle", SCENARIO_CASES,
                         ids=[c[0] for c in SCENARIO_CASES])
def test_bad_scenario_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                         command: str, case: str,
                                         mutate: Callable[[dict], None], needle: str) -> None:
    doc = _example()
    mutate(doc)
    plan = _plan_or_evaluate_fails(capsys, tmp_path, command, doc, needle)
    if command == "plan":
        assert not plan.exists()


def _example_v2() -> dict:
    doc = _example()
    doc["version"] = 2
    doc["clients"].append({"id": "c1", "cluster": "A", "num_samples": 90})
    doc["clients"][0]["label_histogram"] = [90, 60, 30]
    doc["clients"][1]["label_histogram"] = [0, 30, 60]
    return doc


# Version-2 fields (docs/CONTRACT_V2.md), mutations of _example_v2().
V2_CASES = [
    ("histogram-length", _set(("clients", 1, "label_histogram"), [1, 2]), "clients[1].label_histogram"),
    ("histogram-negative", _set(("clients", 0, "label_histogram", 1), -1),
     "clients[0].label_histogram[1]"),
    ("histogram-zero", _set(("clients", 0, "label_histogram"), [0, 0, 0]), "clients[0].label_histogram"),
    ("histogram-string", _set(("clients", 0, "label_histogram"), "abc"), "clients[0].label_histogram"),
    ("shares-length", _set(("loss", "label_shares"), [1, 1]), "clients[0].label_histogram"),
    ("shares-nan", _set(("loss", "label_shares"), [1, NAN, 1]), "loss.label_shares[1]"),
    ("threshold-above-1", _set(("loss", "coverage_threshold"), 1.5), "loss.coverage_threshold"),
    ("floor-negative", _set(("loss", "coverage_floor_loss"), -1), "loss.coverage_floor_loss"),
    ("min-coverage-above-1", _set(("loss", "min_coverage"), 1.2), "loss.min_coverage"),
    ("max-uncovered-negative", _set(("loss", "max_uncovered"), -0.1), "loss.max_uncovered"),
    ("eval-std-length", _set(("loss", "run", "full", "eval_std"), [0.0, 0.01]), "loss.run.full.eval_std"),
    ("eval-std-negative", _set(("loss", "run", "full", "eval_std"), [0.0, -0.01, 0.0]),
     "loss.run.full.eval_std[1]"),
    ("eval-std-above-std", _set(("loss", "run", "p75", "eval_std"), [0.0, 0.03, 0.0]),
     "loss.run.p75.eval_std"),
    ("eval-std-scalar", _set(("loss", "run", "full", "eval_std"), 0.01), "loss.run.full.eval_std"),
]


@pytest.mark.parametrize("command", ["plan", "evaluate"])
@pytest.mark.parametrize("case, mutate, needle", V2_CASES, ids=[c[0] for c in V2_CASES])
def test_bad_version_2_field_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                command: str, case: str,
                                                mutate: Callable[[dict], None], needle: str) -> None:
    doc = _example_v2()
    mutate(doc)
    plan = _plan_or_evaluate_fails(capsys, tmp_path, command, doc, needle)
    if command == "plan":
        assert not plan.exists()


def test_good_version_2_example_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    doc = _example_v2()
    doc["loss"]["run"]["full"]["eval_std"] = [0.0, 0.01, 0.02]
    doc["loss"]["coverage_floor_loss"] = 4.0
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(doc), encoding="utf-8")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(GOOD_PLAN), encoding="utf-8")
    status, out, err = _run(capsys, ["evaluate", str(scenario), str(plan), *TARGETS])
    assert status == 0 and err == ""
    assert json.loads(out)["valid"] is True


def test_json_nan_literal_is_rejected_with_clear_message(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    text = EXAMPLE.read_text(encoding="utf-8").replace('"initial": 2.3', '"initial": NaN')
    assert "NaN" in text
    scenario = tmp_path / "scenario.json"
    scenario.write_text(text, encoding="utf-8")
    status, _, err = _run(capsys, ["evaluate", str(scenario), str(scenario), *TARGETS])
    _assert_one_line_error(status, err, "loss.initial")
    assert "finite" in err


@pytest.mark.parametrize("content, needle", [
    ('{"version": 1, "clusters": [', "malformed JSON"),
    ("", "malformed JSON"),
    ("[1, 2, 3]", "expected a JSON object"),
    ("[" * 100000, "malformed JSON"),
    ('{"version": 1' + "0" * 5000 + "}", "malformed JSON"),
    (b"\xff\xfe\x00", "not UTF-8"),
], ids=["truncated", "empty", "not-object", "too-deep", "huge-int", "binary"])
def test_malformed_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture,
                                 content: str | bytes, needle: str) -> None:
    scenario = tmp_path / "scenario.json"
    if isinstance(content, bytes):
        scenario.write_bytes(content)
    else:
        scenario.write_text(content, encoding="utf-8")
    status, _, err = _run(capsys, ["evaluate", str(scenario), str(scenario), *TARGETS])
    _assert_one_line_error(status, err, needle)
    if needle != "expected a JSON object":  # a syntax problem names the file
        assert "scenario.json" in err


@pytest.mark.parametrize("command", ["plan", "evaluate"])
def test_missing_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture,
                               command: str) -> None:
    missing = str(tmp_path / "nope.json")
    argv = (["plan", missing, *TARGETS, "--out", str(tmp_path / "p.json")]
            if command == "plan" else ["evaluate", missing, missing, *TARGETS])
    status, _, err = _run(capsys, argv)
    _assert_one_line_error(status, err, "nope.json")
    assert "cannot read" in err


@pytest.mark.parametrize("plan_doc, needle", [
    ("{not json", "malformed JSON"),
    ({"version": 1}, "plan.rounds"),
    ({"rounds": [{"model": 3, "clients": ["c0"]}]}, "plan.rounds[0].model"),
    ({"rounds": [{"model": "full", "clients": "c0"}]}, "plan.rounds[0].clients"),
    ({"rounds": [{"model": "full", "clients": ["c0"], "levels": {"A": "fast"}}]},
     "plan.rounds[0].levels"),
    ({"rounds": [], "predicted": [1]}, "plan.predicted"),
    ({"rounds": [], "version": 7}, "plan.version"),
], ids=["malformed", "no-rounds", "model-type", "clients-type", "level-type",
        "predicted-type", "version"])
def test_bad_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture,
                       plan_doc: object, needle: str) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(plan_doc if isinstance(plan_doc, str) else json.dumps(plan_doc),
                    encoding="utf-8")
    status, _, err = _run(capsys, ["evaluate", str(EXAMPLE), str(plan), *TARGETS])
    _assert_one_line_error(status, err, needle)


def _targets(loss: str = "1.0", prob: str = "0.9", deadline: str = "100") -> list[str]:
    return ["--target-loss", loss, "--target-prob", prob, "--deadline-s", deadline]


TARGET_CASES = [
    (_targets(prob="0"), "--target-prob"),
    (_targets(prob="1"), "--target-prob"),
    (_targets(prob="1.5"), "--target-prob"),
    (_targets(prob="-0.2"), "--target-prob"),
    (_targets(prob="nan"), "--target-prob"),
    (_targets(prob="abc"), "--target-prob"),
    (_targets(deadline="0"), "--deadline-s"),
    (_targets(deadline="-5"), "--deadline-s"),
    (_targets(deadline="nan"), "--deadline-s"),
    (_targets(deadline="inf"), "--deadline-s"),
    (_targets(deadline="1e308"), "--deadline-s: must be a number in (0, 1e+15]"),
    (_targets(deadline="soon"), "--deadline-s"),
    (_targets(loss="nan"), "--target-loss"),
    (_targets(loss="-1"), "--target-loss"),
    ([*_targets(), "--max-rounds", "0"], "--max-rounds"),
    ([*_targets(), "--max-rounds", "2.5"], "--max-rounds"),
    (_targets()[2:], "--target-loss"),
]


@pytest.mark.parametrize("command", ["plan", "evaluate"])
@pytest.mark.parametrize("targets, needle", TARGET_CASES,
                         ids=[" ".join(c[0]) for c in TARGET_CASES])
def test_bad_targets(tmp_path: Path, capsys: pytest.CaptureFixture, command: str,
                     targets: list[str], needle: str) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(GOOD_PLAN), encoding="utf-8")
    argv = (["plan", str(EXAMPLE), *targets, "--out", str(tmp_path / "out.json")]
            if command == "plan" else ["evaluate", str(EXAMPLE), str(plan), *targets])
    status, out, err = _run(capsys, argv)
    _assert_one_line_error(status, err, needle)
    assert out == ""
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("argv, needle", [
    (["plan", str(EXAMPLE), *TARGETS, "--out", "x.json", "--eta", "nan"], "--eta"),
    (["plan", str(EXAMPLE), *TARGETS, "--out", "x.json", "--eta", "0"], "--eta"),
    (["plan", str(EXAMPLE), *TARGETS, "--out", "x.json", "--method", "magic"], "--method"),
    (["plan", str(EXAMPLE), *TARGETS, "--out", "x.json", "--guarantee", "hope"], "--guarantee"),
    (["plan", str(EXAMPLE), *TARGETS], "--out"),
    (["evaluate", str(EXAMPLE), "p.json", *TARGETS, "--trajectories", "100"], "--trajectories"),
    (["evaluate", str(EXAMPLE), "p.json", *TARGETS, "--trajectories", "many"], "--trajectories"),
    (["evaluate", str(EXAMPLE), "p.json", *TARGETS, "--bogus"], "--bogus"),
    (["evaluate", str(EXAMPLE), "p.json", *TARGETS, "--trajectories", str(10**12)],
     "--trajectories: must be <= 10000000"),
    (["plan", str(EXAMPLE), *TARGETS, "--out", "x.json", "--seed", "-1"], "--seed"),
    (["evaluate", str(EXAMPLE), "p.json", *TARGETS, "--seed", "-5"], "--seed"),
    (["frobnicate"], "frobnicate"),
    ([], "COMMAND"),
])
def test_bad_options(capsys: pytest.CaptureFixture, argv: list[str], needle: str) -> None:
    status, _, err = _run(capsys, argv)
    _assert_one_line_error(status, err, needle)


@pytest.mark.parametrize("eta", ["1.5", "-0.1", "inf", "1e-308", "1e-6"])
def test_eta_outside_unit_interval_is_rejected_before_planning(
        tmp_path: Path, capsys: pytest.CaptureFixture, eta: str) -> None:
    # The scenario file does not exist: the --eta check must come first.
    out = tmp_path / "out.json"
    status, stdout, err = _run(capsys, ["plan", str(tmp_path / "missing.json"), *TARGETS,
                                        "--out", str(out), "--eta", eta])
    _assert_one_line_error(status, err, "--eta: must be in [0.001, 1]")
    assert stdout == ""
    assert not out.exists()


def test_subprocess_shows_no_traceback(tmp_path: Path) -> None:
    doc = _example()
    doc["clients"].append({"id": "c0", "cluster": "A", "num_samples": 10})
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(doc), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "depl_fl.cli", "evaluate", str(scenario), str(scenario),
         *TARGETS], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == ["depl-fl: clients: duplicate id 'c0'"]


def test_unwritable_out_path(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "no" / "such" / "dir" / "plan.json"
    status, _, err = _run(capsys, ["plan", str(EXAMPLE), "--target-loss", "1.5",
                                   "--target-prob", "0.9", "--deadline-s", "200",
                                   "--out", str(out)])
    _assert_one_line_error(status, err, "--out")


@pytest.mark.parametrize("same", ["path", "alias"])
def test_out_naming_the_input_scenario_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                  same: str) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    before = scenario.read_bytes()
    out = str(scenario) if same == "path" else str(tmp_path / "sub" / ".." / "scenario.json")
    (tmp_path / "sub").mkdir()
    status, stdout, err = _run(capsys, ["plan", str(scenario), "--target-loss", "1.5",
                                        "--target-prob", "0.9", "--deadline-s", "200", "--out", out])
    _assert_one_line_error(status, err, "--out")
    assert "refusing to overwrite" in err and stdout == ""
    assert scenario.read_bytes() == before


# Finite but extreme values: a one-line error naming the field, or a valid result; never a traceback.
EXTREME_CASES = [
    (("clusters", 0, "levels", 0, "flops_per_s"), 1e-308, "clusters[0].levels[0]"),
    (("clusters", 0, "levels", 1, "joules_per_flop"), 1e308, "clusters[0].levels[1]"),
    (("clusters", 0, "bytes_per_s"), 1e-308, "clusters[0].bytes_per_s"),
    (("clusters", 0, "activation_joules"), 1e308, "clusters[0].activation_joules"),
    (("models", 0, "flops_per_sample"), 1e308, "clusters[0].levels[0]"),
    (("models", 1, "size_bytes"), 1e308, "clusters[0].bytes_per_s"),
    (("local_epochs",), 1e308, "clusters[0].levels[0]"),
    (("clients", 0, "num_samples"), 10**400, "clients[0].num_samples"),
    (("loss", "initial"), 1e308, "loss.initial"),
    (("loss", "run", "full", "mean", 1), 1e308, "loss.run.full.mean[1]"),
    (("loss", "run", "p75", "std", 2), 1e308, "loss.run.p75.std[2]"),
    (("loss", "run", "full", "levels", 0), -1e308, "loss.run.full.levels[0]"),
    (("loss", "switch", 0, "mean"), -1e308, "loss.switch[0].mean"),
    (("loss", "switch", 1, "std"), 1e308, "loss.switch[1].std"),
    (("loss", "reference_samples"), 1e-308, "loss.data_exponent_mean"),
    (("loss", "data_exponent_mean"), -1e308, "loss.data_exponent_mean"),
    (("loss", "data_exponent_std"), 1e308, "loss.data_exponent_std"),
]


@pytest.mark.parametrize("command", ["plan", "evaluate"])
@pytest.mark.parametrize("path, value, needle", EXTREME_CASES,
                         ids=[".".join(map(str, c[0])) + "=" + str(c[1])[:8] for c in EXTREME_CASES])
def test_extreme_finite_values_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                   command: str, path: tuple, value: float,
                                                   needle: str) -> None:
    doc = _example()
    _set(path, value)(doc)
    _plan_or_evaluate_fails(capsys, tmp_path, command, doc, needle)


@pytest.mark.parametrize("path, value", [
    (("clusters", 0, "levels", 0, "joules_per_flop"), 1e-308),
    (("loss", "run", "full", "std", 1), 1e-308),
    (("loss", "data_exponent_std"), 1e-308),
    (("models", 1, "size_bytes"), 1e-308),
], ids=lambda v: str(v))
def test_tiny_positive_values_give_valid_results(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                 path: tuple, value: float) -> None:
    doc = _example()
    _set(path, value)(doc)
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(doc), encoding="utf-8")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(GOOD_PLAN), encoding="utf-8")
    status, out, err = _run(capsys, ["evaluate", str(scenario), str(plan), *TARGETS,
                                     "--trajectories", "2000", "--allow-few"])
    assert status == 0 and err == "", err
    result = json.loads(out)
    assert result["valid"] and 0.0 <= result["probability"] <= 1.0
    assert math.isfinite(result["cost_joules"]) and math.isfinite(result["time_s"])


@pytest.mark.parametrize("error, needle", [(MemoryError(), "out of memory while planning"),
                                           (OverflowError("int too large"), "overflowed while planning")])
def test_planner_running_out_of_range_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch, error: Exception,
                                                  needle: str) -> None:
    import depl_fl.planner

    def explode(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(depl_fl.planner, "make_plan", explode)
    out = tmp_path / "plan.json"
    status, stdout, err = _run(capsys, ["plan", str(EXAMPLE), *TARGETS, "--out", str(out)])
    _assert_one_line_error(status, err, needle)
    assert stdout == "" and not out.exists()


def test_a_profile_of_exploding_losses_is_refused_naming_the_cause() -> None:
    from depl_fl.orchestration.scenario_builder import diverged_profile

    run = {"levels": [2.3, 1.0], "mean": [-0.1, -0.05], "std": [0.02, 0.01]}
    assert diverged_profile({"initial": 2.3, "run": {"full": run}}) is None
    exploded = {"initial": 6.24e5, "run": {"full": {**run, "std": [0.02, 1.16e6]}}}
    line = diverged_profile(exploded)
    assert line is not None and "\n" not in line
    assert line.startswith("profile: the exploration's losses reach 1.16e+06 (the start model's 6.24e+05)")
    assert "lower the learning rate (train.lr" in line
    not_a_number = {"initial": 2.3, "run": {"p50": {**run, "mean": [float("nan"), 0.0]}}}
    assert diverged_profile(not_a_number) is not None
