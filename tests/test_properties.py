"""Property tests: random scenarios either plan cleanly or fail with a one-line DeplError."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depl_fl.contract.plan import Plan, Targets
from depl_fl.contract.scenario import Scenario, scenario_from_dict
from depl_fl.contract.semantics import evaluate_plan, plan_errors, round_time
from depl_fl.errors import DeplError, ScenarioError

# derandomize: the same examples on every run, so a CI run is reproducible (the randomness of the
# examples is hypothesis's own, not seeded otherwise).
PROPERTY_SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                             suppress_health_check=[HealthCheck.too_slow])
MC_TRAJECTORIES = 20000


# ---------------------------------------------------------------------------
# Random valid scenarios
# ---------------------------------------------------------------------------
@st.composite
def scenario_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid scenario document: 1-3 clusters, 3-6 clients, 2-3 models."""
    n_clusters = draw(st.integers(1, 3))
    clusters = []
    for c in range(n_clusters):
        levels = [{"flops_per_s": draw(st.floats(1e8, 1e10)),
                   "joules_per_flop": draw(st.floats(1e-11, 1e-9))}
                  for _ in range(draw(st.integers(1, 3)))]
        clusters.append({"id": f"K{c}", "levels": levels,
                         "bytes_per_s": draw(st.floats(1e5, 1e7)),
                         "joules_per_byte": draw(st.floats(0.0, 1e-6)),
                         "activation_joules": draw(st.floats(0.0, 50.0)),
                         "max_clients": draw(st.integers(1, 6))})
    clients = [{"id": f"c{i}", "cluster": f"K{draw(st.integers(0, n_clusters - 1))}",
                "num_samples": draw(st.integers(10, 500))}
               for i in range(draw(st.integers(3, 6)))]
    n_models = draw(st.integers(2, 3))
    compressions = [0.0, 0.5, 0.9][:n_models]
    models = [{"id": f"m{j}", "compression": comp,
               "flops_per_sample": 1e6 * (1.0 - comp) + 1e4,
               "size_bytes": 1e5 * (1.0 - comp) + 1e3}
              for j, comp in enumerate(compressions)]
    run = {}
    for j, comp in enumerate(compressions):
        floor = 0.1 + comp * draw(st.floats(0.0, 0.6))
        top = draw(st.floats(0.05, 0.4))
        run[f"m{j}"] = {"levels": [floor, 1.0, 2.3], "mean": [0.0, top / 3, top],
                        "std": [0.01, draw(st.floats(0.0, 0.05)), draw(st.floats(0.0, 0.1))]}
    switch = [{"from": f"m{a}", "to": f"m{b}", "mean": draw(st.floats(-0.05, 0.2)),
               "std": draw(st.floats(0.0, 0.05))}
              for a in range(n_models) for b in range(n_models)
              if a != b and draw(st.booleans())]
    loss = {"initial": 2.3, "data_exponent_mean": draw(st.floats(0.0, 1.0)),
            "data_exponent_std": draw(st.floats(0.0, 1.0)), "run": run, "switch": switch}
    if draw(st.booleans()):
        loss["reference_samples"] = draw(st.integers(100, 3000))
    return {"version": 1, "local_epochs": draw(st.sampled_from([1, 2])),
            "clusters": clusters, "clients": clients, "models": models, "loss": loss}


def _slowest_round_s(scenario: Scenario) -> float:
    """Upper bound on one round's time: every client, full model, slowest level."""
    from depl_fl.contract.plan import RoundDecision

    heavy = max(scenario.models, key=lambda m: m.flops_per_sample).id
    return max(round_time(scenario, RoundDecision(heavy, (c.id,), {c.cluster: 0}))
               for c in scenario.clients)


@st.composite
def targets_for(draw: st.DrawFn, scenario: Scenario) -> Targets:
    return Targets(target_loss=draw(st.floats(0.3, 2.2)),
                   target_prob=draw(st.sampled_from([0.8, 0.9, 0.95])),
                   deadline_s=_slowest_round_s(scenario) * draw(st.floats(0.5, 80.0)),
                   max_rounds=draw(st.one_of(st.none(), st.integers(1, 60))))


@PROPERTY_SETTINGS
@given(doc=scenario_docs())
def test_generated_scenarios_are_valid_and_round_trip(doc: dict[str, Any]) -> None:
    from depl_fl.contract.scenario import scenario_to_dict

    scenario = scenario_from_dict(doc)
    assert scenario_from_dict(scenario_to_dict(scenario)) == scenario


# ---------------------------------------------------------------------------
# Planner: a plan that is valid and dependable, or a clear refusal
# ---------------------------------------------------------------------------
@PROPERTY_SETTINGS
@given(data=st.data(), doc=scenario_docs(),
       method=st.sampled_from(["depl", "expectation", "full"]))
def test_make_plan_gives_valid_plan_or_clear_error(data: st.DataObject, doc: dict[str, Any],
                                                   method: str) -> None:
    from depl_fl.planner import make_plan

    scenario = scenario_from_dict(doc)
    targets = data.draw(targets_for(scenario))
    try:
        plan = make_plan(scenario, targets, method=method, seed=0)
    except DeplError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert isinstance(plan, Plan)
    if not plan.feasible:
        best = plan.predicted.get("probability")
        assert isinstance(best, (int, float)) and 0.0 <= best <= 1.0
        if method != "expectation":
            # depl/full refuse only when no plan reaches pi; the mean-based baseline
            # refuses when the *mean* misses the target, whatever the probability.
            assert best < targets.target_prob
        return
    assert plan.rounds
    assert plan_errors(scenario, plan.rounds, targets) == []
    result = evaluate_plan(scenario, plan.rounds, targets, n=MC_TRAJECTORIES, seed=12345)
    assert result["valid"] and result["time_s"] <= targets.deadline_s * (1 + 1e-9)
    if method == "expectation":
        return  # the mean-based baseline plans on the mean only and promises no quantile
    # The planner checked P >= pi on its own 20,000 trajectories; an independent
    # sample may differ by Monte Carlo noise only.
    noise = 4.0 * math.sqrt(targets.target_prob * (1 - targets.target_prob) / MC_TRAJECTORIES)
    assert result["probability"] >= targets.target_prob - noise
    assert result["cost_joules"] == pytest.approx(plan.predicted["cost_joules"], rel=1e-6)


# ---------------------------------------------------------------------------
# Invalid scenarios: always a one-line ScenarioError
# ---------------------------------------------------------------------------
def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (dict keys / list indices) inside a JSON document, subtrees included."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, prefix + (index,))
    return out


def _replace(doc: Any, path: tuple, value: Any) -> None:
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def _delete(doc: Any, path: tuple) -> None:
    target = doc
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]


BAD_NUMBERS = st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, -1e-12,
                               "1.0", None, True, [], {}, 10 ** 400])
#: Optional numbers of the contract: null there means "not given" (a default applies), not a bad number.
OPTIONAL_NUMBERS = {("loss", name) for name in ("reference_samples", "coverage_floor_loss", "min_coverage",
                                                "max_uncovered", "judged_error", "eval_dof")}
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10 ** 6, 10 ** 6)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6)


def _mutations(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """Targeted invalid edits of a valid document, each with the field it must name."""
    model = doc["models"][0]["id"]
    return [
        ("clients[0].num_samples", lambda d: _replace(d, ("clients", 0, "num_samples"), 0)),
        ("clients[1].cluster", lambda d: _replace(d, ("clients", 1, "cluster"), "nowhere")),
        ("clients", lambda d: d["clients"].append(copy.deepcopy(d["clients"][0]))),
        ("clusters", lambda d: d["clusters"].append(copy.deepcopy(d["clusters"][0]))),
        ("models", lambda d: d["models"].append(copy.deepcopy(d["models"][-1]))),
        ("loss.run", lambda d: _delete(d, ("loss", "run", model))),
        (f"loss.run.{model}.levels",
         lambda d: _replace(d, ("loss", "run", model, "levels"), [2.3, 1.0, 0.5])),
        (f"loss.run.{model}",
         lambda d: _replace(d, ("loss", "run", model, "std"), [0.1])),
        ("clusters[0].levels[0].flops_per_s",
         lambda d: _replace(d, ("clusters", 0, "levels", 0, "flops_per_s"), float("nan"))),
        ("models[0].size_bytes",
         lambda d: _replace(d, ("models", 0, "size_bytes"), float("inf"))),
        ("loss.initial", lambda d: _replace(d, ("loss", "initial"), -0.5)),
        ("clusters[0].max_clients", lambda d: _replace(d, ("clusters", 0, "max_clients"), 1.5)),
        ("loss.switch[0]", lambda d: d["loss"]["switch"].insert(
            0, {"from": model, "to": model, "mean": 0.0, "std": 0.0})),
    ]


@PROPERTY_SETTINGS
@given(doc=scenario_docs(), choice=st.integers(0, 12))
def test_targeted_mutations_give_one_line_error_naming_the_field(doc: dict[str, Any],
                                                                 choice: int) -> None:
    field, mutate = _mutations(doc)[choice]
    mutate(doc)
    try:
        scenario_from_dict(doc)
    except ScenarioError as exc:
        message = str(exc)
        assert "\n" not in message and field in message, message
    else:
        raise AssertionError(f"mutation of {field} was accepted")


@PROPERTY_SETTINGS
@given(data=st.data(), doc=scenario_docs())
def test_bad_numbers_anywhere_give_scenario_error(data: st.DataObject,
                                                  doc: dict[str, Any]) -> None:
    numeric = [p for p in _paths(doc)
               if isinstance(_get(doc, p), (int, float)) and not isinstance(_get(doc, p), bool)
               and p[0] != "version" and not _negative_allowed(p)]
    path = data.draw(st.sampled_from(numeric))
    bad = BAD_NUMBERS.filter(lambda v: v is not None) if path in OPTIONAL_NUMBERS else BAD_NUMBERS
    _replace(doc, path, data.draw(bad))
    try:
        scenario_from_dict(doc)
    except ScenarioError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        raise AssertionError(f"bad value at {path} was accepted: {_get(doc, path)!r}")


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _negative_allowed(path: tuple) -> bool:
    """Fields where negative values are legal (so -1 is not a bad number there)."""
    if path[0] == "loss" and path[1] in ("data_exponent_mean", "data_exponent_std"):
        return True
    if path[0] == "loss" and path[1] == "run" and path[3] in ("levels", "mean"):
        return True
    return path[0] == "loss" and path[1] == "switch" and path[-1] == "mean"


@PROPERTY_SETTINGS
@given(data=st.data(), doc=scenario_docs())
def test_arbitrary_edits_never_raise_anything_but_scenario_error(data: st.DataObject,
                                                                 doc: dict[str, Any]) -> None:
    path = data.draw(st.sampled_from(_paths(doc)))
    if data.draw(st.booleans()):
        _replace(doc, path, data.draw(JSON_VALUES))
    else:
        _delete(doc, path)
    try:
        scenario = scenario_from_dict(doc)
    except ScenarioError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    # Accepted edits must still give a usable scenario: finite numbers everywhere.
    assert math.isfinite(scenario.loss.initial) and scenario.loss.reference_samples > 0
    assert all(np.isfinite(p.mean).all() for p in scenario.loss.run.values())
