"""Every Hydra config group option composes; user-facing keys exist and are validated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("hydra")

from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.runs.runconfig import cluster_assignment, compose_config, conf_dir, validate  # noqa: E402

#: Every config group (a sub-folder of conf/).
GROUPS = tuple(sorted(p.name for p in Path(conf_dir()).iterdir() if p.is_dir()))
#: The groups a user picks an option of (``model=...``); the others hold one option of documented keys.
CHOICE_GROUPS = ("dataset", "model", "clusters", "planner", "simulation", "aggregation")
#: Options that are valid only with another choice (the synthetic features need the MLP).
NEEDS = {("dataset", "synthetic"): ["model=synthetic_mlp"]}


@pytest.mark.parametrize("group,option", [(g, p.stem) for g in GROUPS
                                          for p in sorted((Path(conf_dir()) / g).glob("*.yaml"))])
def test_every_group_option_composes(group, option):
    cfg = compose_config([f"{group}={option}", *NEEDS.get((group, option), [])])
    for key in ("method", "seed", "num_clients"):
        assert key in cfg
    assert set(cfg["target"]) >= {"loss", "prob", "deadline_s"} and "alpha" in cfg["partition"]
    assert cfg[group] is not None


def test_choice_groups_have_options():
    assert set(CHOICE_GROUPS) < set(GROUPS)
    assert {"profile", "tracking", "target", "server"} <= set(GROUPS)
    for group in CHOICE_GROUPS:
        assert len(list((Path(conf_dir()) / group).glob("*.yaml"))) >= 2, group


def undocumented_keys(text: str) -> list[str]:
    """Keys with a value but no comment on their line or on the line above."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        match = re.match(r"^\s*([\w]+):\s*([^#\s][^#]*)?(#.*)?$", line)
        above = lines[i - 1].lstrip().startswith("#") if i else False
        if match and match.group(2) and not match.group(3) and not above:
            found.append(match.group(1))
    return found


@pytest.mark.parametrize("path", sorted(Path(conf_dir()).rglob("*.yaml")), ids=lambda p: p.name)
def test_every_config_key_is_documented(path):
    assert undocumented_keys(path.read_text(encoding="utf-8")) == [], path


def test_an_undocumented_key_is_found():
    assert undocumented_keys("a: 1\n# b\nb: 2\nc: 3  # c\nd:\n  e: 4\n") == ["a", "e"]


@pytest.mark.parametrize("overrides", [
    ["profile.source=inprocess", "profile.rounds=9"], ["tracking.enabled=false"], ["method=full"],
    ["target.loss=0.3"], ["partition.alpha=0.5"], ["profile.explore.rounds=3"], ["server.round_timeout_s=30"],
    ["output.plot=false"], ["faults.clients=[c1]", "faults.kind=scale"], ["train.lr=0.1"], ["resume=true"],
    ["profile.plan_regime.enabled=false"]])
def test_a_key_override_sets_the_key(overrides):
    key, value = overrides[-1].split("=")
    node = compose_config(overrides)
    for part in key.split("."):
        node = node[part]
    assert str(node).lower() == value.lower() or node == float(value)


@pytest.mark.parametrize("override,message", [
    ("method=magic", "method"), ("target.prob=1.5", "target.prob"), ("num_clients=0", "num_clients"),
    ("partition.alpha=-1", "partition.alpha"), ("target.deadline_s=0", "target.deadline_s"),
    ("profile.subset_fractions=[1.0]", "profile.subset_fractions"),
    ("profile.subset_fractions=[0]", "profile.subset_fractions"),
    ("profile.subset_fractions=half", "profile.subset_fractions"),
    ("profile.rounds=0", "profile.rounds"), ("tracking.ahead_margin=-1", "tracking.ahead_margin"),
    ("profile.spread_horizon=1", "profile.spread_horizon"),
    ("profile.spread_horizon=99", "profile.spread_horizon"),
    ("profile.spread_horizon=2.5", "profile.spread_horizon"),
    ("profile.switch_at=[0]", r"profile.switch_at\[0\]: must be >= 1"),
    ("profile.switch_at=[16]", r"profile.switch_at\[0\]: must be <= profile.rounds \(15\)"),
    ("profile.switch_at=[2.5]", "profile.switch_at"), ("profile.switch_at=soon", "profile.switch_at"),
    ("server.round_timeout_s=0", "server.round_timeout_s"),
    ("server.node_wait_timeout_s=-5", "server.node_wait_timeout_s"),
    ("server.round_timeout_s=1e300", "server.round_timeout_s: must be <= 1e"),
    ("server.node_wait_timeout_s=inf", "server.node_wait_timeout_s: must be finite"),
    ("planner.eta=0", "config planner.eta: must be >= 0.001"),
    ("planner.guarantee=hope", "planner.guarantee"), ("target.deadline_s=1e300", "target.deadline_s"),
    ("planner.mc_trajectories=0", "planner.mc_trajectories"),
    ("seed=-1", "config seed"), ("train.batch_size=0", "train.batch_size"),
    ("profile.plan_regime.steps_min=0", "profile.plan_regime.steps_min: must be > 0"),
    ("profile.plan_regime.steps_max=0", "profile.plan_regime.steps_max: must be > 0"),
])
def test_bad_values_are_one_line_errors(override, message):
    with pytest.raises(ScenarioError, match=message) as info:
        compose_config([override])
    assert "\n" not in str(info.value)


def _leaves(node, prefix=""):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


#: The default job's switches and numbers, with a value of the wrong type for each; the cluster
#: table's numbers are checked where the scenario is built (tests/test_bad_input.py).
WRONG_TYPED = [(key, "maybe" if isinstance(value, bool) else "abc")
               for key, value in _leaves(compose_config([]))
               if isinstance(value, (bool, int, float)) and not key.startswith("clusters.")]


@pytest.mark.parametrize("key,value", WRONG_TYPED, ids=[k for k, _ in WRONG_TYPED])
def test_a_wrong_typed_value_of_any_key_is_a_one_line_error(key, value):
    with pytest.raises(ScenarioError, match=re.escape(key)) as info:
        compose_config([f"{key}={value}"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("overrides,message", [
    (["profile.explore.rounds=50"], r"config profile.explore.rounds: must be at most "
                                    r"profile.explore.max_rounds \(40\), got 50"),
    (["profile.explore.rounds=8", "profile.explore.max_rounds=4"], r"profile.explore.rounds: .*got 8"),
    (["profile.prior=p.json", "profile.explore.prior_rounds=5", "profile.explore.max_rounds=4"],
     r"profile.explore.prior_rounds: must be at most profile.explore.max_rounds \(4\), got 5"),
])
def test_an_exploration_that_must_run_more_rounds_than_it_may_is_a_one_line_error(overrides, message):
    with pytest.raises(ScenarioError, match=message) as info:
        compose_config(overrides)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("overrides", [
    ["profile.explore.rounds=4", "profile.explore.max_rounds=4"],
    ["profile.prior=p.json", "profile.explore.max_rounds=4"],   # with a prior, rounds is not read
    ["profile.source=inprocess"],
])
def test_an_exploration_range_that_holds_is_accepted(overrides):
    compose_config(overrides)


def test_a_steps_range_upside_down_is_a_one_line_error():
    with pytest.raises(ScenarioError, match=r"profile.plan_regime.steps_min: must be at most steps_max "
                                            r"\(5.614\)") as info:
        compose_config(["profile.plan_regime.steps_min=6", "profile.plan_regime.steps_max=5.614"])
    assert "\n" not in str(info.value)


def test_unknown_group_option_is_a_one_line_error():
    with pytest.raises(ScenarioError, match="config"):
        compose_config(["model=nope"])


def test_cluster_assignment_follows_fractions():
    classes = {"A": {"fraction": 0.4}, "B": {"fraction": 0.6}}
    assert cluster_assignment(10, classes) == ["A"] * 4 + ["B"] * 6
    assert cluster_assignment(3, classes).count("B") == 2
    with pytest.raises(ScenarioError):
        validate({**compose_config([]), "clusters": {"classes": {"A": {"fraction": 0}}}})


def test_the_frugal_profile_is_the_default_one_with_the_three_exploration_options():
    frugal = compose_config(["profile=frugal"])["profile"]
    spelled = compose_config(["profile.explore.clients=cheapest", "profile.explore.value_stop=true",
                              "profile.plan_regime.rate_window=0.5"])["profile"]
    assert frugal == spelled
    assert frugal != compose_config(["profile=thorough"])["profile"]
