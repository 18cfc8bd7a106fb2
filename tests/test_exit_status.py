"""A failed check exits non-zero: ``depl-fl evaluate`` on a plan that is invalid for the scenario
(e.g. made for another one) prints its JSON with ``"valid": false`` and exits 4; a valid plan exits
0, and 3 with ``--require-dependable`` when it misses the target probability."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from depl_fl.cli import main
from depl_fl.errors import INVALID_PLAN_STATUS, InfeasibleError

EXAMPLE = Path(__file__).parent / "data" / "example_scenario.json"
TARGETS = ["--target-loss", "1.5", "--target-prob", "0.9", "--deadline-s", "200"]
QUICK = ["--trajectories", "2000", "--allow-few"]


def _run(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def example_plan(tmp_path_factory) -> Path:
    """A dependable plan made for the example scenario."""
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["plan", str(EXAMPLE), *TARGETS, "--out", str(out)]) == 0
    return out


def _other_scenario(tmp_path: Path) -> Path:
    """The example scenario with its clients renamed: another federation."""
    doc = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    for client in doc["clients"]:
        client["id"] = "node-" + client["id"]
    path = tmp_path / "other.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_status_table_numbers() -> None:
    assert INVALID_PLAN_STATUS == 4 and InfeasibleError.exit_status == 3


def test_plan_for_another_scenario_is_invalid_exit_4_json_kept(tmp_path: Path, example_plan: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    status, out, err = _run(capsys, ["evaluate", str(_other_scenario(tmp_path)), str(example_plan),
                                     *TARGETS, *QUICK])
    assert status == INVALID_PLAN_STATUS
    result = json.loads(out)
    assert result["valid"] is False and result["dependable"] is False
    assert result["errors"] and any("c0" in e for e in result["errors"])
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("depl-fl: invalid plan"), err
    assert f"{len(result['errors'])} error(s)" in lines[0] and "Traceback" not in err


def test_valid_plan_exits_0(example_plan: Path, capsys: pytest.CaptureFixture) -> None:
    status, out, err = _run(capsys, ["evaluate", str(EXAMPLE), str(example_plan), *TARGETS, *QUICK,
                                     "--require-dependable"])
    assert status == 0, err
    assert json.loads(out)["dependable"] is True and err == ""


def test_valid_plan_that_misses_pi_exits_0_or_3_when_required(example_plan: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    # The same plan judged against a much lower target loss: valid, not dependable.
    strict = ["--target-loss", "0.05", "--target-prob", "0.9", "--deadline-s", "200"]
    status, out, err = _run(capsys, ["evaluate", str(EXAMPLE), str(example_plan), *strict, *QUICK])
    result = json.loads(out)
    assert status == 0 and result["valid"] is True and result["dependable"] is False, err
    status, out, err = _run(capsys, ["evaluate", str(EXAMPLE), str(example_plan), *strict, *QUICK,
                                     "--require-dependable"])
    assert status == 3 and json.loads(out)["dependable"] is False
    assert len(err.splitlines()) == 1 and "not dependable" in err


def test_evaluate_help_documents_the_statuses(capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"{INVALID_PLAN_STATUS} it is invalid" in text and "0 the plan is valid" in text
