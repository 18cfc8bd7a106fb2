"""No net gain from switching variants in a circle.

Protects :mod:`depl_fl.tracking.switch_cycles` (the least cycle mean, the common
shift that leaves no cycle a gain, jumps without a gaining cycle untouched),
``profile.plan_regime.switch_cycles`` (checked in one line, exit 2 from a job;
``measured`` keys the profile cache as before; a user's network reads the jumps
without a cycle's gain, every bundled network as measured) and its use in the profile a plan is made
on (:func:`depl_fl.orchestration.profile_fit.with_plan_regime`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from depl_fl.errors import ScenarioError
from depl_fl.orchestration.profile_fit import with_plan_regime
from depl_fl.orchestration.profiling import profile_key
from depl_fl.runs.runconfig import compose_config
from depl_fl.tracking.learning_curve import PlanRegime
from depl_fl.tracking.switch_cycles import cycle_gain_shift, least_cycle_mean, without_cycle_gain

ROOT = Path(__file__).resolve().parent.parent
REGIME = PlanRegime(power=1.08, floor=0.145, rate_exponent=0.31, noise_exponent=0.55, oscillation=0.16,
                    steps_exponent=0.6, reference_steps=3.125, judged_error_factor=0.75, oscillation_dof=3.4)


def _switch(*edges: tuple[str, str, float]) -> list[dict]:
    return [{"from": a, "to": b, "mean": m, "std": 0.03} for a, b, m in edges]


def test_the_least_cycle_mean_of_two_and_three_variants() -> None:
    assert least_cycle_mean({("full", "p50"): -0.0247, ("p50", "full"): -0.0162}) == pytest.approx(-0.02045)
    # every pair's round trip costs, the three-cycle gains: 0.01 - 0.05 + 0.01 over 3
    jumps = {("a", "b"): 0.01, ("b", "a"): 0.06, ("b", "c"): -0.05, ("c", "b"): 0.07,
             ("c", "a"): 0.01, ("a", "c"): 0.05}
    assert least_cycle_mean(jumps) == pytest.approx(-0.01)
    assert least_cycle_mean({("a", "b"): -0.1}) is None  # no switch back: no cycle
    assert least_cycle_mean({}) is None


def _every_cycle_mean(jumps: dict[tuple[str, str], float]) -> float | None:
    """The reference: every simple cycle listed, its mean taken, the least kept."""
    import itertools

    nodes = sorted({n for edge in jumps for n in edge})
    means = []
    for size in range(2, len(nodes) + 1):
        for first, *rest in itertools.combinations(nodes, size):
            for order in itertools.permutations(rest):
                cycle = (first, *order, first)
                edges = list(zip(cycle, cycle[1:], strict=False))
                if all(e in jumps for e in edges):
                    means.append(sum(jumps[e] for e in edges) / len(edges))
    return min(means) if means else None


@pytest.mark.parametrize("seed", range(40))
def test_the_least_cycle_mean_is_that_of_every_cycle_listed(seed: int) -> None:
    import random

    rng = random.Random(seed)
    nodes = [f"v{i}" for i in range(rng.randint(2, 6))]
    jumps = {(a, b): rng.uniform(-0.1, 0.1) for a in nodes for b in nodes if a != b and rng.random() < 0.6}
    expected = _every_cycle_mean(jumps)
    found = least_cycle_mean(jumps)
    assert (found is None) == (expected is None), (jumps, found, expected)
    if expected is not None:
        assert found == pytest.approx(expected, abs=1e-12)


def test_the_shift_removes_exactly_the_gain_of_the_best_cycle() -> None:
    switch = _switch(("full", "p50", -0.0247), ("p50", "full", -0.0162))
    out = without_cycle_gain(switch)
    assert [s["mean"] for s in out] == pytest.approx([-0.0247 + 0.02045, -0.0162 + 0.02045])
    assert out[0]["mean"] + out[1]["mean"] == pytest.approx(0.0, abs=1e-12)  # the round trip gains nothing
    assert [s["std"] for s in out] == [0.03, 0.03]  # the spreads stay as measured
    assert switch[0]["mean"] == -0.0247  # the input is not modified
    three = _switch(("a", "b", 0.01), ("b", "a", 0.06), ("b", "c", -0.05), ("c", "b", 0.07),
                    ("c", "a", 0.01), ("a", "c", 0.05))
    shifted = {(s["from"], s["to"]): s["mean"] for s in without_cycle_gain(three)}
    assert least_cycle_mean(shifted) == pytest.approx(0.0, abs=1e-12)


def test_jumps_without_a_gaining_cycle_are_unchanged() -> None:
    for switch in (_switch(("full", "p50", 0.03), ("p50", "full", -0.01)),  # the round trip costs 0.02
                   _switch(("full", "p50", 0.01), ("p50", "full", -0.01)),  # gains exactly nothing
                   _switch(("full", "p50", -0.2))):                         # one way only
        assert without_cycle_gain(switch) == switch


def test_the_shift_grows_with_the_loop_gain_and_is_zero_without_one() -> None:
    gains = [0.04, 0.02, 0.0, -0.01, -0.03, -0.06]  # round-trip sums
    shifts = [cycle_gain_shift({("a", "b"): g / 2 - 0.01, ("b", "a"): g / 2 + 0.01}) for g in gains]
    assert shifts[:3] == [0.0, 0.0, 0.0]
    assert shifts[3:] == pytest.approx([0.005, 0.015, 0.03])
    assert all(a <= b for a, b in zip(shifts, shifts[1:], strict=False))


def _fitted() -> dict:
    run = {"levels": [0.6, 1.2, 2.3], "mean": [0.1, 0.2, 0.1], "std": [0.1, 0.2, 0.1], "eval_std": [0.05] * 3}
    return {"initial": 2.3, "run": {"full": run, "p50": dict(run)}, "data_exponent_mean": 0.5,
            "data_exponent_std": 0.5, "switch": _switch(("full", "p50", -0.03), ("p50", "full", -0.01))}


def test_the_plan_profile_reads_the_jumps_as_the_regime_says() -> None:
    losses = [2.3, 2.0, 1.7, 1.5, 1.3, 1.2]
    trajectories = {m: (losses, [1.0] * 5) for m in ("full", "p50")}
    measured = with_plan_regime(_fitted(), trajectories, 5, REGIME, 3.125, {}, oscillation=0.2)
    assert measured["switch"] == _fitted()["switch"]
    no_gain = PlanRegime(**{**REGIME.__dict__, "switch_cycles": "no_gain"})
    corrected = with_plan_regime(_fitted(), trajectories, 5, no_gain, 3.125, {}, oscillation=0.2)
    assert [s["mean"] for s in corrected["switch"]] == pytest.approx([-0.01, 0.01])
    assert corrected["run"] == measured["run"]  # only the jumps change


def test_switch_cycles_is_checked_in_one_line_and_measured_keys_the_cache_as_before() -> None:
    raw = {k: getattr(REGIME, k) for k in ("power", "floor", "rate_exponent", "noise_exponent", "oscillation",
                                          "steps_exponent", "reference_steps", "judged_error_factor")}
    assert PlanRegime.from_config(raw).switch_cycles == "measured"
    assert PlanRegime.from_config({**raw, "switch_cycles": "no_gain"}).switch_cycles == "no_gain"
    with pytest.raises(ScenarioError, match="switch_cycles: must be one of measured, no_gain"):
        PlanRegime.from_config({**raw, "switch_cycles": "sometimes"})
    with pytest.raises(ScenarioError, match="profile.plan_regime.switch_cycles") as err:
        compose_config(["profile.plan_regime.switch_cycles=sometimes"])
    assert "\n" not in str(err.value)
    cfg = compose_config(["num_clients=3"])
    assert cfg["profile"]["plan_regime"]["switch_cycles"] == "measured"
    section = {k: v for k, v in cfg["profile"]["plan_regime"].items() if k != "switch_cycles"}
    assert profile_key(cfg) == profile_key({**cfg, "profile": {**cfg["profile"], "plan_regime": section}})
    assert profile_key(compose_config(["num_clients=3", "profile.plan_regime.switch_cycles=no_gain"])) \
        != profile_key(cfg)


def test_a_users_network_reads_the_jumps_without_cycle_gain_every_bundled_one_as_measured() -> None:
    for model in ("digits_cnn", "digits_cnn_all", "digits_resnet", "synthetic_mlp", "alexnet_like",
                  "mobilenet_like"):
        cfg = compose_config([f"model={model}"])
        assert cfg["profile"]["plan_regime"]["switch_cycles"] == "measured", model
    user = ["model=custom", "model.factory=tests.user_nets:mlp"]
    assert compose_config(user)["profile"]["plan_regime"]["switch_cycles"] == "no_gain"
    override = compose_config([*user, "profile.plan_regime.switch_cycles=measured"])
    assert override["profile"]["plan_regime"]["switch_cycles"] == "measured"


def test_a_job_with_a_bad_switch_cycles_exits_2_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    argv = [sys.executable, "-m", "depl_fl.main", "profile.plan_regime.switch_cycles=1.5",
            f"hydra.run.dir={tmp_path / 'job'}"]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("depl-fl")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "profile.plan_regime.switch_cycles" in lines[0]
