"""The prior's trajectory as the plateau and rate evidence of a job that has explored only a few rounds.

While the job's own trajectory is still on the fresh model's plateau (no rate measurable), the value
stop's plateau guard and each variant's learning-curve rate read the prior's trajectory; once the job's
own shows a rate, its own is read, as without a prior.
"""

from __future__ import annotations

import json

import pytest

from depl_fl.orchestration.prior_regime import (
    prior_oscillation,
    prior_rate,
    prior_rates,
    rate_from_prior,
    value_judged_with_prior,
)
from depl_fl.orchestration.profile_fit import local_steps, with_plan_regime
from depl_fl.orchestration.profile_prior import load_prior
from depl_fl.orchestration.profiling import federated_key
from depl_fl.runs.runconfig import compose_config
from depl_fl.tracking.learning_curve import PlanRegime, effective_floor, rate_coefficient, ratio_factor

REGIME = PlanRegime(power=1.08, floor=0.145, rate_exponent=0.31, noise_exponent=0.55, oscillation=0.16,
                    steps_exponent=0.6, reference_steps=3.125, judged_error_factor=0.75, oscillation_dof=3.4,
                    anchor="last")
OSC = 0.05
#: Fresh loss, then two rounds within one oscillation (0.05 sqrt(2.24) = 0.075) of the first round's.
ON_PLATEAU = [3.16, 2.24, 2.20]
#: Off the plateau after round 2, then four more rounds.
PRIOR = [3.10, 2.22, 2.18, 1.90, 1.50, 1.20, 1.00]
#: The job's own, off the plateau for three rounds.
OWN_OFF = [3.16, 2.24, 1.90, 1.40, 1.10]


def test_the_plateau_guard_passes_on_the_prior_only_while_the_own_trajectory_shows_no_rate():
    assert not value_judged_with_prior(ON_PLATEAU, None, OSC, OSC)
    assert value_judged_with_prior(ON_PLATEAU, PRIOR, OSC, OSC)
    assert not value_judged_with_prior(ON_PLATEAU, ON_PLATEAU + [2.21], OSC, OSC)  # a prior still on it
    assert value_judged_with_prior(OWN_OFF, None, OSC, OSC)
    assert value_judged_with_prior(OWN_OFF, ON_PLATEAU, OSC, OSC)
    # each trajectory with its own federation's oscillation: at 0.5 the prior's band is 0.74 wide
    assert not value_judged_with_prior(ON_PLATEAU, PRIOR, OSC, 0.5)
    assert not value_judged_with_prior(ON_PLATEAU, PRIOR, 0.01, 0.5)  # 2.20 is 0.04 below 2.24: 1 round
    assert value_judged_with_prior(ON_PLATEAU, PRIOR, 0.5, OSC)


def test_the_rate_comes_from_the_prior_only_where_it_shows_one_and_the_job_does_not():
    assert rate_from_prior(ON_PLATEAU, PRIOR, OSC, OSC)
    assert not rate_from_prior(OWN_OFF, PRIOR, OSC, OSC)
    assert not rate_from_prior(ON_PLATEAU, None, OSC, OSC)
    assert not rate_from_prior(ON_PLATEAU, [2.2], OSC, OSC)
    assert not rate_from_prior(ON_PLATEAU, ON_PLATEAU, OSC, OSC)
    assert not rate_from_prior(ON_PLATEAU, PRIOR, OSC, 0.5)  # the prior's own oscillation hides it


def test_the_prior_rate_is_read_as_the_job_reads_its_own():
    ratios = [1.0, 0.4, 0.4, 0.5, 0.5, 0.6]
    floor = effective_floor(REGIME.floor, 2.20)
    # window 0.5 of 6 rounds: the last 3 rounds, 1.90 -> 1.00
    expected = rate_coefficient(1.90, 1.00, 3, REGIME.power, floor)
    assert prior_rate(PRIOR, ratios, REGIME, 0.5, floor, rate_at_full=False) == pytest.approx(expected)
    at_full = prior_rate(PRIOR, ratios, REGIME, 0.5, floor, rate_at_full=True)
    assert at_full == pytest.approx(expected / ratio_factor([0.5, 0.5, 0.6], REGIME.rate_exponent))
    assert at_full > expected  # the prior explored on part of its federation
    # window 1: from the fresh loss, through the prior's plateau: slower
    assert prior_rate(PRIOR, ratios, REGIME, 1.0, floor, rate_at_full=False) < expected
    # the job's own plateau rounds would give a far slower curve than the prior's
    assert rate_coefficient(2.24, 2.20, 1, REGIME.power, floor) < expected / 5


def test_prior_rates_per_variant():
    own = {"full": (ON_PLATEAU, [1.0, 0.4, 0.4]), "p50": (OWN_OFF, [1.0] * 5), "p75": (ON_PLATEAU, [1.0] * 3)}
    prior = {"full": (PRIOR, [1.0] * 7), "p50": (PRIOR, [1.0] * 7)}  # no p75 in the prior
    rates = prior_rates(own, prior, REGIME, OSC, OSC, 0.5, rate_at_full=True)
    assert set(rates) == {"full"}  # p50 shows its own rate; p75 has no prior trajectory
    assert rates["full"] == pytest.approx(prior_rate(PRIOR, [1.0] * 7, REGIME, 0.5,
                                                     effective_floor(REGIME.floor, 2.20), True))
    assert prior_rates(own, None, REGIME, OSC, OSC, 0.5, rate_at_full=True) == {}


def test_the_plan_regime_takes_a_given_rate_and_starts_at_its_own_last_loss():
    fitted = {"run": {"full": {"levels": [3.0], "mean": [0.05], "std": [0.1]}}}
    trajectories = {"full": (ON_PLATEAU, [1.0, 1.0, 1.0])}
    own = with_plan_regime(fitted, trajectories, 2, REGIME, 3.125, {}, 0.5, oscillation=OSC)
    given = with_plan_regime(fitted, trajectories, 2, REGIME, 3.125, {}, 0.5, oscillation=OSC,
                             rates={"full": 0.5})
    floor = effective_floor(REGIME.floor, 2.20)
    assert own["run"]["full"]["levels"] == given["run"]["full"]["levels"]
    run, slow_run = given["run"]["full"], own["run"]["full"]
    curve = [(lv, mu) for lv, mu in zip(run["levels"], run["mean"], strict=True) if floor < lv <= 1.25 * 2.20]
    assert curve and all(mu == pytest.approx(0.5 * (lv - floor) ** REGIME.power) for lv, mu in curve)
    assert max(lv for lv, _ in curve) == pytest.approx(1.25 * 2.20)  # the curve tops at its own last loss
    top = 1.25 * 2.20
    slow = [mu for lv, mu in zip(slow_run["levels"], slow_run["mean"], strict=True) if floor < lv <= top]
    assert all(s < g for s, (_, g) in zip(slow, curve, strict=True))  # its own plateau rate: slower


def test_the_prior_file_hands_on_its_trajectories(tmp_path):
    cfg = {"dataset": {"name": "digits"}, "model": {"arch": "digits_cnn"}}
    records = [{"loss_before": 3.1, "loss": 2.2}, {"loss_before": 2.2, "loss": 2.0}]
    doc = {"task": {"dataset": "digits", "arch": "digits_cnn"}, "fit_inputs": {
        "observations": [{"round": 1, "model": "full", "loss_before": 3.1, "loss_after": 2.2}],
        "records": records, "trajectories": {"full": [[3.1, 2.2, 2.0], [1.0, 0.5, 0.5]]}}}
    path = tmp_path / "profile-fed-x.json"
    path.write_text(json.dumps(doc))
    prior = load_prior(path, cfg)
    assert prior.trajectory == (3.1, 2.2, 2.0)
    assert prior.trajectories == {"full": ((3.1, 2.2, 2.0), (1.0, 0.5, 0.5))}
    assert prior.properties == {}  # a cache file without its clients' data


def test_the_prior_oscillation_is_its_own_federations(tmp_path):
    cfg = compose_config(["num_clients=3"])
    regime = PlanRegime.from_config(cfg["profile"]["plan_regime"])
    small = {"c0": {"num-samples": 100}, "c1": {"num-samples": 120}}
    large = {"c0": {"num-samples": 300}, "c1": {"num-samples": 260}}
    trajectories = {"full": (PRIOR, [1.0] * 7)}
    assert prior_oscillation(trajectories, regime, cfg, small) == pytest.approx(
        regime.oscillation_at(local_steps(cfg, small)))
    # more samples per client, more local steps: a wider oscillation
    wider = prior_oscillation(trajectories, regime, cfg, large)
    assert wider > prior_oscillation(trajectories, regime, cfg, small)


def test_prior_regime_keys_only_a_profile_fitted_with_a_prior():
    cfg = compose_config(["num_clients=3"])
    assert cfg["profile"]["explore"]["prior_regime"] is True
    off = compose_config(["num_clients=3", "profile.explore.prior_regime=false"])
    props = {"0": {"cluster": "a", "num-samples": 10}}
    without = {**cfg, "profile": {**cfg["profile"], "explore": {
        k: v for k, v in cfg["profile"]["explore"].items() if k != "prior_regime"}}}
    assert federated_key(cfg, props) == federated_key(off, props) == federated_key(without, props)
    obs = [{"round": 1}]
    with_prior = federated_key(cfg, props, obs)
    assert with_prior == federated_key(without, props, obs) != federated_key(off, props, obs)
