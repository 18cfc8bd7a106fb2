"""Tests for depl_fl.tracking.estimation: recovery of known l_run / l_sw from synthetic runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from depl_fl.contract.scenario import LossModel, RunProfile, SwitchProfile, scenario_from_dict
from depl_fl.errors import ScenarioError
from depl_fl.tracking.estimation import (
    LossObservation,
    fit_data_exponents,
    fit_loss_profile,
    hat_basis,
    observations_from_trajectory,
)
from depl_fl.tracking.online import OnlineLossEstimator

A_EXP, B_EXP = 0.5, 0.5
TRUE_RUN = {
    "full": RunProfile((0.5, 1.5, 2.5), (0.05, 0.15, 0.30), (0.02, 0.04, 0.06)),
    "p75": RunProfile((0.5, 1.5, 2.5), (0.03, 0.12, 0.25), (0.02, 0.03, 0.05)),
}
TRUE_SWITCH = {("full", "p75"): (0.10, 0.04), ("p75", "full"): (-0.02, 0.03)}
TRUE_MODEL = LossModel(2.5, 1000.0, A_EXP, B_EXP, TRUE_RUN,
                       {k: SwitchProfile(k[0], k[1], *v) for k, v in TRUE_SWITCH.items()})


def simulate(n_traj: int, rounds: int, seed: int, fractions=(0.5, 1.0), a: float = A_EXP,
             b: float = B_EXP) -> list[LossObservation]:
    """Trajectories from the contract semantics: start with one model, switch once."""
    rng = np.random.default_rng(seed)
    observations = []
    for t in range(n_traj):
        first, second = ("full", "p75") if t % 2 == 0 else ("p75", "full")
        switch_at = int(rng.integers(3, rounds))
        models = [first if k < switch_at else second for k in range(rounds)]
        r = rng.choice(fractions, size=rounds)
        loss = [2.5]
        prev = None
        for k, model in enumerate(models):
            value = loss[-1]
            if prev is not None and prev != model:
                mean, std = TRUE_SWITCH[(prev, model)]
                value += rng.normal(mean, std)
            prof = TRUE_RUN[model]
            value -= rng.normal(prof.mean_at(value) * r[k] ** a, prof.std_at(value) * r[k] ** -b)
            loss.append(max(value, 0.0))
            prev = model
        observations += observations_from_trajectory(loss, models, r)
    return observations


@pytest.fixture(scope="module")
def synthetic() -> list[LossObservation]:
    return simulate(n_traj=400, rounds=10, seed=7)


def visited_losses(observations, model):
    losses = np.array([o.loss_before for o in observations if o.model == model and not o.is_switch])
    return np.quantile(losses, np.linspace(0.1, 0.9, 9))


def test_hat_basis_reproduces_interpolation():
    levels = (0.5, 1.5, 2.5)
    values = np.array([0.05, 0.15, 0.30])
    loss = np.array([0.0, 0.5, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(hat_basis(loss, levels) @ values, np.interp(loss, levels, values))


def test_fit_recovers_run_and_switch_with_true_levels(synthetic):
    doc = fit_loss_profile(synthetic, ["full", "p75"], levels=[0.5, 1.5, 2.5],
                           data_exponent_mean=A_EXP, data_exponent_std=B_EXP, min_points_per_level=5)
    for model, truth in TRUE_RUN.items():
        fit = doc["run"][model]
        fitted = RunProfile(tuple(fit["levels"]), tuple(fit["mean"]), tuple(fit["std"]))
        grid = visited_losses(synthetic, model)
        np.testing.assert_allclose(fitted.mean_at(grid), truth.mean_at(grid), atol=0.01)
        np.testing.assert_allclose(fitted.std_at(grid), truth.std_at(grid), rtol=0.2)
    switches = {(s["from"], s["to"]): (s["mean"], s["std"]) for s in doc["switch"]}
    assert set(switches) == set(TRUE_SWITCH)
    for pair, (mean, std) in TRUE_SWITCH.items():
        assert switches[pair][0] == pytest.approx(mean, abs=0.01), pair
        assert switches[pair][1] == pytest.approx(std, rel=0.3), pair
    assert doc["initial"] == pytest.approx(2.5)


def test_fit_with_automatic_levels_is_accepted_by_scenario(synthetic):
    doc = fit_loss_profile(synthetic, ["full", "p75"], reference_samples=1000,
                           data_exponent_mean=A_EXP, data_exponent_std=B_EXP)
    for model, truth in TRUE_RUN.items():
        fit = doc["run"][model]
        assert all(b > a for a, b in zip(fit["levels"], fit["levels"][1:], strict=False))
        assert len(fit["levels"]) == len(fit["mean"]) == len(fit["std"]) >= 3
        fitted = RunProfile(tuple(fit["levels"]), tuple(fit["mean"]), tuple(fit["std"]))
        grid = visited_losses(synthetic, model)
        np.testing.assert_allclose(fitted.mean_at(grid), truth.mean_at(grid), atol=0.015)
    scenario = scenario_from_dict({
        "clusters": [{"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9}],
                      "bytes_per_s": 1e6}],
        "clients": [{"id": "c0", "cluster": "A", "num_samples": 1000}],
        "models": [{"id": "full", "flops_per_sample": 1e6, "size_bytes": 1e4},
                   {"id": "p75", "compression": 0.75, "flops_per_sample": 3e5, "size_bytes": 3e3}],
        "loss": doc,
    })
    assert scenario.loss.reference_samples == 1000
    assert set(scenario.loss.switch) == set(TRUE_SWITCH)


def test_sparse_levels_are_pooled_and_std_is_floored():
    # Five noiseless identical rounds: one level survives, std sits on the floor.
    obs = observations_from_trajectory([2.0, 1.9, 1.8, 1.7, 1.6, 1.5], ["full"] * 5)
    doc = fit_loss_profile(obs, ["full"], levels=[0.1, 1.0, 1.75, 2.3], std_floor=1e-3)
    run = doc["run"]["full"]
    assert len(run["levels"]) == 1
    assert run["mean"][0] == pytest.approx(0.1)
    assert run["std"][0] == pytest.approx(1e-3)
    assert doc["switch"] == []


def test_fit_errors_are_one_line():
    obs = observations_from_trajectory([2.0, 1.9], ["full"])
    with pytest.raises(ScenarioError, match="model 'p75' has no observed run round"):
        fit_loss_profile(obs, ["full", "p75"])
    with pytest.raises(ScenarioError, match="unknown model 'x'"):
        fit_loss_profile(observations_from_trajectory([2.0, 1.9], ["x"]), ["full"])
    with pytest.raises(ScenarioError, match="sample_fraction must be > 0"):
        LossObservation(1, "full", None, 2.0, 1.9, 0.0)
    with pytest.raises(ScenarioError, match="expected 3 losses"):
        observations_from_trajectory([2.0, 1.9], ["full", "full"])


def wrong_prior() -> LossModel:
    """Means 60% too high, stds right, switch mean off by 0.1."""
    run = {m: RunProfile(p.levels, tuple(1.6 * v for v in p.mean), p.std) for m, p in TRUE_RUN.items()}
    switch = {k: SwitchProfile(k[0], k[1], v[0] + 0.1, v[1]) for k, v in TRUE_SWITCH.items()}
    return LossModel(2.5, 1000.0, A_EXP, B_EXP, run, switch)


def test_online_estimator_narrows_and_moves_towards_truth(synthetic):
    prior = wrong_prior()
    few, many = OnlineLossEstimator(prior, prior_strength=5), OnlineLossEstimator(prior, prior_strength=5)
    for obs in synthetic[:3 * 10]:
        few.observe(obs)
    for obs in synthetic:
        many.observe(obs)
    assert many.num_observations == len(synthetic)
    untouched = OnlineLossEstimator(prior).loss_model()
    m_few, m_many = few.loss_model(), many.loss_model()
    for model, truth in TRUE_RUN.items():
        grid = visited_losses(synthetic, model)
        err_prior = np.abs(prior.run[model].mean_at(grid) - truth.mean_at(grid)).mean()
        err_few = np.abs(m_few.run[model].mean_at(grid) - truth.mean_at(grid)).mean()
        err_many = np.abs(m_many.run[model].mean_at(grid) - truth.mean_at(grid)).mean()
        assert err_many < err_few < err_prior
        assert err_many < 0.015
        # Predictive std: wider with few observations, close to the truth with many.
        assert np.all(m_few.run[model].std_at(grid) > m_many.run[model].std_at(grid))
        assert np.all(untouched.run[model].std_at(grid) > np.asarray(TRUE_RUN[model].std_at(grid)))
        np.testing.assert_allclose(m_many.run[model].std_at(grid), truth.std_at(grid), rtol=0.25)
    for pair, (mean, std) in TRUE_SWITCH.items():
        assert abs(m_many.switch[pair].mean - mean) < 0.015
        assert abs(m_many.switch[pair].mean - mean) < abs(prior.switch[pair].mean - mean)
        assert m_many.switch[pair].std == pytest.approx(std, rel=0.35)
    summary = many.summary()
    assert summary["observations"] == len(synthetic)
    assert {(s["from"], s["to"]) for s in summary["switch"]} == set(TRUE_SWITCH)
    assert all(s["count"] > 100 for s in summary["switch"])


def test_online_estimator_few_switch_observations_are_wider(synthetic):
    prior = wrong_prior()
    pair = ("full", "p75")
    switch_obs = [o for o in synthetic if o.is_switch and (o.previous_model, o.model) == pair]
    run_obs = [o for o in synthetic if not o.is_switch]
    few, many = OnlineLossEstimator(prior), OnlineLossEstimator(prior)
    for obs in run_obs:
        few.observe(obs)
        many.observe(obs)
    for obs in switch_obs[:3]:
        few.observe(obs)
    for obs in switch_obs:
        many.observe(obs)
    few_stderr = next(s["mean_stderr"] for s in few.summary()["switch"] if (s["from"], s["to"]) == pair)
    many_stderr = next(s["mean_stderr"] for s in many.summary()["switch"] if (s["from"], s["to"]) == pair)
    assert few_stderr > 3 * many_stderr
    assert few.loss_model().switch[pair].std > many.loss_model().switch[pair].std


def test_online_estimator_keeps_the_version_2_fields(synthetic):
    """Re-plans see the prior's label-coverage fields and its evaluation noise (never > std / sqrt 2)."""
    eval_std = {m: tuple(0.7 * v / np.sqrt(2.0) for v in p.std) for m, p in TRUE_RUN.items()}
    prior = replace(TRUE_MODEL, run={m: replace(p, eval_std=eval_std[m]) for m, p in TRUE_RUN.items()},
                    label_shares=(0.5, 0.5), coverage_floor_loss=4.0, min_coverage=0.8, max_uncovered=0.0)
    est = OnlineLossEstimator(prior)
    for obs in synthetic[:200]:
        est.observe(obs)
    model = est.loss_model()
    assert (model.label_shares, model.coverage_floor_loss, model.min_coverage, model.max_uncovered) == \
        ((0.5, 0.5), 4.0, 0.8, 0.0)
    for m, run in model.run.items():
        assert run.eval_std is not None
        assert np.all(np.asarray(run.eval_std) <= np.asarray(run.std) / np.sqrt(2.0) + 1e-12)
        assert np.all(np.asarray(run.eval_std) <= np.asarray(eval_std[m]) + 1e-12)
    assert est.loss_model().run["full"].std != prior.run["full"].std  # the posterior did refine


def test_online_estimator_rejects_unknown_model():
    est = OnlineLossEstimator(TRUE_MODEL)
    with pytest.raises(ScenarioError, match="unknown model 'p50'"):
        est.observe(LossObservation(1, "p50", None, 2.0, 1.9))
    with pytest.raises(ScenarioError, match="prior_strength"):
        OnlineLossEstimator(TRUE_MODEL, prior_strength=0)


@pytest.mark.parametrize("a, b", [(0.25, 0.9), (0.8, 0.2)])
def test_data_exponents_are_recovered_from_two_sample_fractions(a, b):
    observations = simulate(n_traj=300, rounds=10, seed=11, fractions=(0.3, 1.0), a=a, b=b)
    fitted_a, fitted_b = fit_data_exponents(observations, ["full", "p75"])
    assert fitted_a == pytest.approx(a, abs=0.1)
    assert fitted_b == pytest.approx(b, abs=0.15)


@pytest.mark.parametrize("seed, min_points", [(5, 10), (6, 4), (7, 2)])
def test_the_exponent_search_scores_every_pair_as_a_fit_of_its_own_would(seed, min_points):
    """The search computes each model's levels once; every pair must score as a separate fit does."""
    from depl_fl.tracking.estimation import _run_log_likelihood, fit_run_profile

    observations = simulate(n_traj=12, rounds=6, seed=seed, fractions=(0.3, 0.6, 1.0), a=0.4, b=0.6)
    grid = (0.0, 0.3, 0.65, 1.0, 1.4)
    runs = [[o for o in observations if o.model == m and not o.is_switch] for m in ("full", "p75")]

    def score(a: float, b: float) -> float:
        return sum(_run_log_likelihood(own, fit_run_profile(own, data_exponent_mean=a, data_exponent_std=b,
                                                            min_points_per_level=min_points), a, b)
                   for own in runs)

    scores = {(a, b): score(a, b) for a in grid for b in grid}
    best = max(scores, key=lambda pair: (scores[pair], -grid.index(pair[0]), -grid.index(pair[1])))
    assert fit_data_exponents(observations, ["full", "p75"], exponent_grid=grid,
                              min_points_per_level=min_points) == best


def test_data_exponents_need_two_sample_fractions():
    observations = simulate(n_traj=20, rounds=5, seed=3, fractions=(1.0,))
    with pytest.raises(ScenarioError, match="two different sample fractions"):
        fit_data_exponents(observations, ["full", "p75"])
    with pytest.raises(ScenarioError, match="exponent_grid"):
        fit_data_exponents(simulate(5, 5, 3), ["full", "p75"], exponent_grid=[-0.5, 0.5])


# ---------------------------------------------------------------------------
# Spread calibration (per-round spread vs spread over many rounds)
# ---------------------------------------------------------------------------
def _linear_trend_runs(n_traj: int, rounds: int, seed: int, walk_std: float, noise_std: float
                       ) -> list[LossObservation]:
    """Loss = a random walk with drift 0.05/round (step std ``walk_std``) + iid evaluation noise."""
    rng = np.random.default_rng(seed)
    observations = []
    for _ in range(n_traj):
        trend = 3.0 - np.concatenate([[0.0], np.cumsum(rng.normal(0.05, walk_std, rounds))])
        observed = trend + rng.normal(0.0, noise_std, rounds + 1)
        observations += observations_from_trajectory(observed, ["full"] * rounds)
    return observations


@pytest.mark.parametrize("walk_std, noise_std, horizon, expected", [
    (0.04, 0.0, 8, 1.0),                            # a true random walk: nothing to calibrate
    (0.0, 0.03, 8, (2 * 0.03**2 / 8) ** 0.5 / (2 * 0.03**2) ** 0.5),   # pure noise: 1/sqrt(h)
    (0.03, 0.03, 6, ((6 * 0.03**2 + 2 * 0.03**2) / 6 / (3 * 0.03**2)) ** 0.5),
])
def test_spread_factor_matches_the_variance_ratio(walk_std, noise_std, horizon, expected):
    obs = _linear_trend_runs(60, 30, seed=3, walk_std=walk_std, noise_std=noise_std)
    doc = fit_loss_profile(obs, ["full"], levels=[0.5, 3.0], data_exponent_mean=0.0,
                           data_exponent_std=0.0, spread_horizon=horizon)
    raw = fit_loss_profile(obs, ["full"], levels=[0.5, 3.0], data_exponent_mean=0.0, data_exponent_std=0.0)
    factor = np.array(doc["run"]["full"]["spread_factor"])
    assert factor == pytest.approx(np.full(2, expected), abs=0.1)
    assert np.array(doc["run"]["full"]["std"]) == pytest.approx(np.array(raw["run"]["full"]["std"]) * factor)
    assert "spread_factor" not in raw["run"]["full"]
    # The calibrated profile is a valid contract document that keeps its factors.
    scen = scenario_from_dict(_scenario_with(doc))
    assert scen.loss.run["full"].spread_factor == pytest.approx(tuple(factor))


def test_calibrated_random_walk_has_the_observed_spread_over_the_horizon():
    """Simulating the calibrated contract over h rounds gives the observed h-round spread."""
    h, noise = 8, 0.03
    obs = _linear_trend_runs(80, 30, seed=5, walk_std=0.01, noise_std=noise)
    doc = fit_loss_profile(obs, ["full"], levels=[0.5, 3.0], data_exponent_mean=0.0,
                           data_exponent_std=0.0, spread_horizon=h)
    std = float(np.mean(doc["run"]["full"]["std"]))
    observed = np.std([obs[i].loss_before - obs[i + h - 1].loss_after
                       for t in range(80) for i in [t * 30 + 5]])
    assert np.sqrt(h) * std == pytest.approx(observed, rel=0.25)
    per_round = float(np.mean(fit_loss_profile(obs, ["full"], levels=[0.5, 3.0], data_exponent_mean=0.0,
                                               data_exponent_std=0.0)["run"]["full"]["std"]))
    assert np.sqrt(h) * per_round > 1.6 * observed  # the uncalibrated walk over-states it


def test_spread_horizon_errors_are_one_line():
    obs = _linear_trend_runs(2, 10, seed=1, walk_std=0.01, noise_std=0.01)
    with pytest.raises(ScenarioError, match="spread horizon"):
        fit_loss_profile(obs, ["full"], spread_horizon=1)
    doc = fit_loss_profile(obs, ["full"], spread_horizon=4)
    levels = len(doc["run"]["full"]["levels"])
    for bad in ([1.0] * (levels + 1), [0.0] * levels, "x"):
        doc["run"]["full"]["spread_factor"] = bad
        with pytest.raises(ScenarioError, match="spread_factor"):
            scenario_from_dict(_scenario_with(doc))


def test_online_estimator_keeps_the_calibration():
    """Per-round residuals fed to a calibrated prior do not inflate it back to the per-round spread."""
    raw_std, factor = 0.06, 0.5
    levels, mean = (0.5, 3.0), (0.05, 0.05)
    calibrated = LossModel(3.0, 1000.0, 0.0, 0.0,
                           {"full": RunProfile(levels, mean, (raw_std * factor,) * 2, (factor, factor))}, {})
    plain = LossModel(3.0, 1000.0, 0.0, 0.0, {"full": RunProfile(levels, mean, (raw_std * factor,) * 2)}, {})
    obs = _linear_trend_runs(1, 200, seed=9, walk_std=raw_std, noise_std=0.0)
    kept, inflated = OnlineLossEstimator(calibrated), OnlineLossEstimator(plain)
    for o in obs:
        kept.observe(o)
        inflated.observe(o)
    kept_std = np.array(kept.loss_model().run["full"].std)
    assert kept_std == pytest.approx(np.full(2, raw_std * factor), rel=0.2)
    assert np.array(inflated.loss_model().run["full"].std) == pytest.approx(np.full(2, raw_std), rel=0.2)
    assert kept.loss_model().run["full"].spread_factor == (factor, factor)


def _scenario_with(loss_doc: dict) -> dict:
    return {
        "version": 1,
        "clusters": [{"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9}],
                      "bytes_per_s": 1e6, "joules_per_byte": 1e-7, "activation_joules": 1.0,
                      "max_clients": 2}],
        "clients": [{"id": "c0", "cluster": "A", "num_samples": 100}],
        "models": [{"id": "full", "compression": 0.0, "flops_per_sample": 1e6, "size_bytes": 1e4}],
        "loss": {"initial": 3.0, **loss_doc},
    }


def test_a_switch_seen_too_rarely_keeps_at_least_the_run_spread():
    from depl_fl.contract.scenario import RunProfile
    from depl_fl.tracking.estimation import SWITCH_MIN_POINTS, LossObservation, fit_switch_profile

    profile = RunProfile((0.5, 2.0), (0.05, 0.1), (0.08, 0.12))
    # Two switch rounds that agree: the sample variance is below the run variance.
    two = [LossObservation(k, "full", "p50", 1.0, after, 1.0) for k, after in ((4, 0.6), (8, 0.61))]
    mean, std = fit_switch_profile(two, profile)
    assert mean == pytest.approx(-(0.395 - float(profile.mean_at(1.0 + mean))), abs=1e-6)
    assert std == pytest.approx(float(profile.std_at(1.0 + mean)), rel=1e-6)   # not the 1e-3 floor
    many = [LossObservation(k, "full", "p50", 1.0, 0.6 + 0.002 * k, 1.0) for k in range(SWITCH_MIN_POINTS)]
    assert fit_switch_profile(many, profile)[1] < 0.01   # enough rounds: their own (small) spread


def _set_change_rounds(beta: float, gamma: float, n: int, seed: int) -> tuple[list, dict]:
    """Rounds on new sets drawn from the contract: L' = L + g (beta + gamma Z) - (mu r^a + sigma r^-b X)."""
    from depl_fl.tracking.set_shift import SetChangeRound

    run = {"full": RunProfile((0.0, 3.0), (0.0, 0.3), (0.01, 0.05))}
    rng = np.random.default_rng(seed)
    rounds = []
    for _ in range(n):
        loss, gap, ratio = rng.uniform(0.5, 2.0), rng.uniform(0.05, 0.45), rng.uniform(0.2, 0.6)
        after = loss + gap * (beta + gamma * rng.standard_normal()) \
            - (float(run["full"].mean_at(loss)) * ratio ** 0.5
               + float(run["full"].std_at(loss)) * ratio ** -0.5 * rng.standard_normal())
        rounds.append(SetChangeRound("full", loss, after, ratio, gap))
    return rounds, run


def test_the_set_shift_is_recovered_from_rounds_on_new_sets():
    from depl_fl.tracking.set_shift import fit_set_shift

    rounds, run = _set_change_rounds(0.8, 0.6, 4000, 1)
    fitted = fit_set_shift(rounds, run, 0.5, 0.5)
    assert fitted["mean"] == pytest.approx(0.8, abs=0.03)
    assert fitted["std"] == pytest.approx(0.6, abs=0.06)


def test_the_set_shift_needs_enough_rounds_and_is_never_a_gain():
    from depl_fl.tracking.set_shift import MIN_POINTS, fit_set_shift

    rounds, run = _set_change_rounds(0.8, 0.0, MIN_POINTS - 1, 2)
    assert fit_set_shift(rounds, run, 0.5, 0.5) is None
    gains, run = _set_change_rounds(-0.5, 0.0, 400, 3)   # subsets that do better than predicted
    assert fit_set_shift(gains, run, 0.5, 0.5)["mean"] == 0.0
    no_gap = [replace(r, gap=0.0) for r in _set_change_rounds(0.8, 0.0, 400, 4)[0]]
    assert fit_set_shift(no_gap, run, 0.5, 0.5) is None
