"""An exploration on the cheapest clusters: which clients it draws, the rate it hands the plan, a job.

``profile.explore.clients: cheapest`` (opt-in) explores on the clients of the
clusters where a round of the largest variant costs least per sample; the
learning curve's rate measured there is read at ``r = 1`` through the rounds'
``r_eff``. The default (``all``) keeps every client and the rate as measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from depl_fl.contract.scenario import scenario_from_dict
from depl_fl.errors import DeplError
from depl_fl.orchestration.exploration import cheapest_clients, cheapest_levels, round_cost
from depl_fl.orchestration.profile_fit import with_plan_regime
from depl_fl.tracking.learning_curve import PlanRegime, plan_regime_run, ratio_factor

REGIME = PlanRegime(power=1.08, floor=0.145, rate_exponent=0.31, noise_exponent=0.55, oscillation=0.16,
                    steps_exponent=0.6, reference_steps=3.125, judged_error_factor=0.754)


def _scenario(samples_a: int = 250, joules_a: float = 2e-8, activation_a: float = 5.0):
    """Two A clients (costly per FLOP) and three B clients (cheap), two variants."""
    levels = [{"flops_per_s": 1e8, "joules_per_flop": 5e-9}, {"flops_per_s": 2e8, "joules_per_flop": 1e-8}]
    return scenario_from_dict({
        "version": 1,
        "clusters": [
            {"id": "A", "levels": [{"flops_per_s": 2e8, "joules_per_flop": joules_a}],
             "bytes_per_s": 1e6, "joules_per_byte": 1e-6, "activation_joules": activation_a},
            {"id": "B", "levels": levels, "bytes_per_s": 2.5e5, "joules_per_byte": 5e-7,
             "activation_joules": 1.0}],
        "clients": [{"id": f"a{i}", "cluster": "A", "num_samples": samples_a} for i in range(2)]
        + [{"id": f"b{i}", "cluster": "B", "num_samples": 200} for i in range(3)],
        "models": [{"id": "full", "compression": 0.0, "flops_per_sample": 2e6, "size_bytes": 1.5e5},
                   {"id": "p50", "compression": 0.5, "flops_per_sample": 5e5, "size_bytes": 4e4}],
        "loss": {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.0, 0.1], "std": [0.01, 0.05]}
                                         for m in ("full", "p50")}},
    })


# ---------------------------------------------------------------------------
# Which clients explore
# ---------------------------------------------------------------------------
def test_the_cheapest_cluster_per_sample_explores_and_its_round_costs_less():
    scenario = _scenario()
    clients = [c.id for c in scenario.clients]
    levels = cheapest_levels(scenario)
    assert levels == {"A": 0, "B": 0}
    pool = cheapest_clients(scenario, clients, levels, "full", 2)
    assert pool == ["b0", "b1", "b2"]
    from depl_fl.contract.plan import RoundDecision

    every, _ = round_cost(scenario, [RoundDecision("full", tuple(clients), levels)])
    cheap, _ = round_cost(scenario, [RoundDecision("full", tuple(pool), levels)])
    # A: 2 x (250 x 2e6 x 2e-8 + 0.3) + 5 = 25.6 J; B: 3 x (200 x 2e6 x 5e-9 + 0.15) + 1 = 7.45 J
    assert every == pytest.approx(25.6 + 7.45) and cheap == pytest.approx(7.45)


def test_clusters_are_added_cheapest_first_until_every_variant_has_a_client():
    scenario = _scenario()
    clients = [c.id for c in scenario.clients]
    levels = cheapest_levels(scenario)
    assert cheapest_clients(scenario, clients, levels, "full", 4) == clients  # B alone holds 3
    assert cheapest_clients(scenario, clients, levels, "full", 9) == clients  # never more than all
    assert cheapest_clients(scenario, ["a0", "a1", "b0"], levels, "full", 2) == ["a0", "a1", "b0"]
    # A cheaper per sample than B (cheap FLOPs, no activation): A explores
    flipped = _scenario(samples_a=400, joules_a=1e-9, activation_a=0.0)
    assert cheapest_clients(flipped, clients, cheapest_levels(flipped), "full", 2) == ["a0", "a1"]


# ---------------------------------------------------------------------------
# The rate the plan gets
# ---------------------------------------------------------------------------
def test_the_ratio_factor_is_one_on_every_client_and_the_mean_power_otherwise():
    assert ratio_factor([1.0, 1.0, 1.0 - 1e-12], 0.31) == 1.0
    assert ratio_factor([], 0.31) == 1.0
    assert ratio_factor([0.5, 0.25], 0.5) == pytest.approx((0.5**0.5 + 0.5) / 2)
    assert ratio_factor([0.6, 1.0], 0.31) == pytest.approx((0.6**0.31 + 1.0) / 2)


def test_a_rate_measured_on_a_subset_is_read_at_r_one():
    measured = {"levels": [1.0, 2.0], "mean": [0.3, 0.2], "std": [0.3, 0.2]}
    at_one = plan_regime_run(measured, 2.3, 0.6, 4, REGIME, 0.16)
    subset = plan_regime_run(measured, 2.3, 0.6, 4, REGIME, 0.16, ratio_factor=0.8)
    curve = np.array(at_one["levels"]) <= 0.75 + 1e-9
    assert np.allclose(np.array(subset["mean"])[curve], np.array(at_one["mean"])[curve] / 0.8)
    assert subset["mean"][-1] == at_one["mean"][-1] == 0.2  # the measured levels above stay as fitted
    assert subset["std"] == at_one["std"]


def test_with_plan_regime_divides_by_the_window_rounds_r_eff_only_when_asked():
    fitted = {"run": {"p50": {"levels": [1.0, 2.0], "mean": [0.3, 0.2], "std": [0.3, 0.2]}},
              "data_exponent_mean": 0.5, "data_exponent_std": 0.5}
    losses = [2.3, 2.0, 1.4, 0.9, 0.6]
    every = with_plan_regime(fitted, {"p50": (losses, [1.0] * 4)}, 4, REGIME, 3.125, {}, 0.5, True)
    subset = with_plan_regime(fitted, {"p50": (losses, [1.0, 1.0, 0.5, 0.6])}, 4, REGIME, 3.125, {}, 0.5,
                              True)
    factor = (0.5**0.31 + 0.6**0.31) / 2  # the last half (2 rounds) only
    ratio = np.array(subset["run"]["p50"]["mean"][2:5]) / np.array(every["run"]["p50"]["mean"][2:5])
    assert np.allclose(ratio, 1.0 / factor)
    first_half = with_plan_regime(fitted, {"p50": (losses, [0.5, 0.5, 1.0, 1.0])}, 4, REGIME, 3.125, {},
                                  0.5, True)
    assert first_half["run"]["p50"]["mean"] == every["run"]["p50"]["mean"]
    as_measured = with_plan_regime(fitted, {"p50": (losses, [1.0, 1.0, 0.5, 0.6])}, 4, REGIME, 3.125, {}, 0.5)
    assert as_measured["run"]["p50"]["mean"] == every["run"]["p50"]["mean"]


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------
def test_clients_all_keeps_the_cache_key_and_another_choice_is_refused():
    from depl_fl.orchestration.profiling import federated_key
    from depl_fl.runs.runconfig import compose_config

    cfg = compose_config(["num_clients=3", "profile=thorough"])
    assert cfg["profile"]["explore"]["clients"] == "all"
    props = {f"c{i}": {"cluster": "A", "num-samples": 10 + i, "partition-id": i} for i in range(3)}
    without = {**cfg, "profile": {**cfg["profile"], "explore": {
        k: v for k, v in cfg["profile"]["explore"].items() if k != "clients"}}}
    assert federated_key(cfg, props) == federated_key(without, props)
    cheap = compose_config(["num_clients=3", "profile.explore.clients=cheapest"])
    assert federated_key(cheap, props) != federated_key(cfg, props)
    with pytest.raises(DeplError, match="profile.explore.clients"):
        compose_config(["num_clients=3", "profile.explore.clients=fastest"])


# ---------------------------------------------------------------------------
# In a job
# ---------------------------------------------------------------------------
N = 5
JOB = ["simulation=inprocess", f"num_clients={N}", "profile.explore.rounds=3",
       "profile.explore.stop_loss_factor=null", "profile.explore.stop_when_met=false",
       "profile.explore.switch_rounds=[2]", "profile.explore.min_points_per_level=2", "target.loss=0.6",
       "target.prob=0.6", "target.max_rounds=20", "tracking.enabled=false", "output.plot=false",
       "planner.mc_trajectories=5000"]


def _run(tmp: Path, name: str, *extra: str) -> dict:
    from clients.client_app import make_client_app
    from depl_fl.runs.runconfig import compose_config
    from strategies.inprocess_grid import InProcessGrid
    from strategies.server_app import run_server

    cfg = compose_config([f"profile.cache_dir={tmp / name / 'cache'}", *JOB, *extra])
    out = run_server(InProcessGrid(make_client_app(cfg), N), cfg, tmp / name)
    return json.loads(Path(out).read_text())


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    pytest.importorskip("flwr")
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("explore-cheap")
    return (_run(tmp, "cheap", "profile.explore.clients=cheapest"),
            _run(tmp, "all", "profile.explore.clients=all"))


def test_a_job_explores_on_the_cheap_cluster_only_and_pays_less(jobs):
    cheap, every = jobs
    clusters = {c["id"]: c["cluster"] for c in cheap["scenario"]["clients"]}
    explored = [r for r in cheap["rounds"] if r["phase"] == "profile"]
    assert len(explored) == 3 and all(clusters[c] == "B" for r in explored for c in r["clients"])
    assert {c for r in explored for c in r["clients"]} == {c for c, k in clusters.items() if k == "B"}
    everyone = {clusters[c] for r in every["rounds"] if r["phase"] == "profile" for c in r["clients"]}
    assert everyone == {"A", "B"}
    assert cheap["summary"]["profile_energy_j"] < 0.5 * every["summary"]["profile_energy_j"]
    s = cheap["summary"]
    assert s["status"] == "completed"
    assert s["total_energy_j"] == pytest.approx(s["profile_energy_j"] + s["cost_j"])


def test_the_old_group_sizes_and_plateau_rounds_keep_the_cache_key_and_a_bad_choice_is_refused():
    from depl_fl.orchestration.profiling import federated_key
    from depl_fl.runs.runconfig import compose_config

    props = {f"c{i}": {"cluster": "A", "num-samples": 10 + i, "partition-id": i} for i in range(3)}
    old = compose_config(["num_clients=3", "profile.explore.group_sizes=random",
                          "profile.explore.plateau_rounds=3"])
    without = {**old, "profile": {**old["profile"], "explore": {
        k: v for k, v in old["profile"]["explore"].items() if k not in ("group_sizes", "plateau_rounds")}}}
    assert federated_key(old, props) == federated_key(without, props)
    for other in ("profile.explore.group_sizes=by_cost", "profile.explore.plateau_rounds=2"):
        changed = compose_config(["num_clients=3", "profile.explore.group_sizes=random",
                                  "profile.explore.plateau_rounds=3", other])
        assert federated_key(changed, props) != federated_key(old, props)
    with pytest.raises(DeplError, match="profile.explore.group_sizes"):
        compose_config(["num_clients=3", "profile.explore.group_sizes=largest"])
