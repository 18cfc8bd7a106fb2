"""Where a plan reads the exploration's rate: at ``r = 1`` after an exploration on part of the federation.

``profile.plan_regime.rate_at_full: always`` (the default) reads the learning curve's rate of an
exploration whose rounds trained less than the whole federation (the cheapest clusters, or
``profile.explore.max_clients`` of the clients) at ``r = 1``, over the mean ``r_eff**a`` of its rounds;
rounds on every client measure it there (factor exactly 1). ``cheapest`` converts only an exploration
on the cheapest clusters, as jobs did before the option.
"""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.errors import DeplError, ScenarioError
from depl_fl.orchestration.profile_fit import plan_regime_of, reads_rate_at_full
from depl_fl.runs.runconfig import compose_config
from depl_fl.tracking.learning_curve import PlanRegime, ratio_factor
from strategies.federated_profiling import FederatedProfiler

LOSSES = [2.3, 2.1, 1.7, 1.3, 1.0, 0.8, 0.7]
CAPPED = [0.1, 0.12, 0.09, 0.11, 0.1, 0.1]  # max_clients=100 of 1,000 clients: r_eff about 0.1
RUN = {"levels": [0.6, 1.2, 2.3], "mean": [0.1, 0.2, 0.1], "std": [0.1, 0.2, 0.1], "eval_std": [0.05] * 3}


def _profile(overrides: list[str], ratios: list[float]) -> dict:
    """The plan's loss profile ``finish_fit`` makes from one trajectory per variant with ``ratios``."""
    cfg = compose_config(["num_clients=4", *overrides])
    profiler = FederatedProfiler(cfg, None)
    profiler.trajectories = {m: (list(LOSSES), list(ratios)) for m in ("full", "p50")}
    profiler.records, profiler.sem_points = [{}] * len(ratios), {}
    measured = {"initial": 2.3, "run": {"full": dict(RUN), "p50": dict(RUN)}, "data_exponent_mean": 0.5,
                "data_exponent_std": 0.5}
    props = {f"c{i}": {"num-samples": 100} for i in range(4)}
    return profiler.finish_fit(measured, props, plan_regime_of(cfg))


def test_a_capped_explorations_factor_is_its_mean_r_eff_power_and_all_clients_give_exactly_one():
    a = 0.31
    assert ratio_factor(CAPPED, a) == pytest.approx(float(np.mean([r**a for r in CAPPED])))
    assert 0.45 < ratio_factor(CAPPED, a) < 0.5
    assert ratio_factor([1.0] * 6, a) == 1.0
    assert ratio_factor([1.0 - 1e-12] * 6, a) == 1.0


def _reads(*overrides: str) -> bool:
    cfg = compose_config(["num_clients=4", *overrides])
    return reads_rate_at_full(plan_regime_of(cfg), cfg)


def test_the_default_reads_every_explorations_rate_at_full_and_cheapest_only_the_cheapest_clusters():
    assert compose_config(["num_clients=4"])["profile"]["plan_regime"]["rate_at_full"] == "always"
    assert _reads("profile=thorough") and _reads("profile=thorough", "profile.explore.max_clients=2")
    before = "profile.plan_regime.rate_at_full=cheapest"
    assert not _reads(before, "profile=thorough", "profile.explore.max_clients=2")
    assert _reads(before, "profile=frugal")


def test_a_section_recorded_before_the_option_reads_as_those_jobs_ran():
    section = dict(compose_config(["num_clients=4"])["profile"]["plan_regime"])
    del section["rate_at_full"]
    assert PlanRegime.from_config(section).rate_at_full == "cheapest"
    with pytest.raises(ScenarioError, match=r"^profile.plan_regime.rate_at_full: must be one of always, "):
        PlanRegime.from_config({**section, "rate_at_full": "sometimes"})


def test_a_bad_value_is_refused_in_one_line():
    with pytest.raises(DeplError, match="profile.plan_regime.rate_at_full") as err:
        compose_config(["num_clients=4", "profile.plan_regime.rate_at_full=yes"])
    assert "\n" not in str(err.value)


def test_a_capped_exploration_plans_its_rate_at_full_and_the_old_setting_keeps_it_as_measured():
    thorough = ["profile=thorough", "profile.plan_regime.anchor=last"]
    converted = _profile(thorough, CAPPED)["run"]["p50"]
    as_measured = _profile([*thorough, "profile.plan_regime.rate_at_full=cheapest"], CAPPED)["run"]["p50"]
    curve = (np.array(converted["levels"]) <= LOSSES[-1] + 1e-9) & (np.array(as_measured["mean"]) > 0.0)
    assert curve.sum() >= 3
    ratio = np.array(converted["mean"])[curve] / np.array(as_measured["mean"])[curve]
    assert np.allclose(ratio, 1.0 / ratio_factor(CAPPED, 0.31))  # the whole exploration (rate_window 1)


def test_an_exploration_on_every_client_plans_the_same_profile_either_way():
    thorough = ["profile=thorough", "profile.plan_regime.anchor=trend"]
    ones = [1.0] * (len(LOSSES) - 1)
    before = [*thorough, "profile.plan_regime.rate_at_full=cheapest"]
    assert _profile(thorough, ones) == _profile(before, ones)


def test_a_refit_from_the_cache_follows_the_setting_not_the_recorded_job():
    """The bank refits (``benchmarks/plan_regime/fit.py``) a job recorded before the option with the
    regime of the fit's own configuration."""
    data = [[f"c{i}", "A", 100, None] for i in range(4)]
    observations = [{"round": k, "model": m, "previous_model": m if k > 1 else None,
                     "loss_before": LOSSES[k - 1], "loss_after": LOSSES[k], "sample_fraction": CAPPED[k - 1]}
                    for k in range(1, len(LOSSES)) for m in ("full", "p50")]
    cached = {"profile": {"data": data}, "fit_inputs": {
        "fresh_loss": 2.3, "observations": observations, "pilot_sets": [],
        "trajectories": {m: [LOSSES, CAPPED] for m in ("full", "p50")}, "sem_points": {},
        "records": [{}] * len(CAPPED)}}
    recorded = compose_config(["num_clients=4", "profile=thorough", "profile.explore.max_clients=2",
                               "profile.plan_regime.anchor=last"])
    del recorded["profile"]["plan_regime"]["rate_at_full"]
    means = {}
    for mode in ("always", "cheapest"):
        fit = compose_config(["num_clients=4", "profile.plan_regime.anchor=last",
                              f"profile.plan_regime.rate_at_full={mode}"])
        profiler, obs, fresh, props = FederatedProfiler.restored(recorded, cached)
        profile = profiler.finish_fit(profiler.measured_fit(obs, fresh, props), props, plan_regime_of(fit))
        means[mode] = np.array(profile["run"]["p50"]["mean"])
    curve = (np.array(profile["run"]["p50"]["levels"]) <= LOSSES[-1] + 1e-9) & (means["cheapest"] > 0.0)
    assert curve.sum() >= 3
    assert np.allclose(means["always"][curve] / means["cheapest"][curve], 1.0 / ratio_factor(CAPPED, 0.31))


def test_the_cache_keys_the_rate_the_profile_was_made_with():
    from depl_fl.orchestration.profiling import profile_key

    def without_it(cfg: dict) -> dict:
        regime = {k: v for k, v in cfg["profile"]["plan_regime"].items() if k != "rate_at_full"}
        return {**cfg, "profile": {**cfg["profile"], "plan_regime": regime}}

    before = compose_config(["num_clients=4", "profile.plan_regime.rate_at_full=cheapest"])
    assert profile_key(before) == profile_key(without_it(before))  # caches made before the option stay valid
    assert profile_key(compose_config(["num_clients=4"])) != profile_key(before)
