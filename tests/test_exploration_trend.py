"""Where an oscillating exploration really ended: the trend fitted through its trajectory.

Protects :mod:`depl_fl.tracking.exploration_trend` (a known curve is recovered,
a last loss on a dip or a spike does not move the trend with it, the plateau of
the fresh model is left out), ``profile.plan_regime.anchor`` (checked in one
line, its default keys the profile cache as before) and its use in the profile
a plan is made on (:func:`depl_fl.orchestration.profile_fit.with_plan_regime`).
"""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.orchestration.profile_fit import exploration_trends, with_plan_regime
from depl_fl.runs.runconfig import compose_config
from depl_fl.tracking.exploration_trend import fit_exploration_trend, trend_curve
from depl_fl.tracking.learning_curve import PlanRegime
from depl_fl.tracking.plateau import plateau_end

REGIME = PlanRegime(power=1.08, floor=0.145, rate_exponent=0.31, noise_exponent=0.55, oscillation=0.16,
                    steps_exponent=0.6, reference_steps=3.125, judged_error_factor=0.75, oscillation_dof=3.4,
                    anchor="trend")


def _plateau_then_curve(level: float = 2.0, rate: float = 0.12, rounds: int = 12) -> np.ndarray:
    """Three rounds on the fresh model's plateau (2.3), then the regime's curve from ``level``."""
    return np.concatenate([[2.30, 2.30, 2.29], trend_curve(level, rate, [1.0] * rounds, 1.08, 0.145)])


def test_a_noiseless_curve_is_recovered_from_the_end_of_the_plateau() -> None:
    losses = _plateau_then_curve()
    fit = fit_exploration_trend(losses, 1.08, 0.145, oscillation=0.2)
    assert fit is not None
    assert fit.window_start == 3  # 2.0 is within one oscillation (0.2 sqrt(2.3)) of the fresh loss, 1.77 not
    assert fit.rate == pytest.approx(0.12, rel=0.05)
    assert fit.level == pytest.approx(losses[-1], rel=0.01)
    assert fit.floor == 0.145


def test_a_last_loss_on_a_dip_or_a_spike_does_not_move_the_trend_with_it() -> None:
    losses = _plateau_then_curve()
    truth = float(losses[-1])
    swings = np.array([0.0, 0.0, 0.0, 0.0, 0.15, -0.15, 0.12, -0.12, 0.15, -0.15, 0.1, -0.1, 0.12, -0.1, 0.1,
                       0.0])
    for end, worse in ((-0.35, "dip"), (+0.6, "spike")):
        measured = losses + swings
        measured[-1] = truth + end
        fit = fit_exploration_trend(measured, 1.08, 0.145, oscillation=0.25)
        assert fit is not None, worse
        # the trend stays within a third of the last swing from the true curve, the last loss does not
        assert abs(fit.level - truth) < abs(end) / 3.0, worse
        assert 0.0 < fit.level_std < 0.5, worse


def test_the_fit_reports_its_uncertainty_larger_for_a_louder_oscillation() -> None:
    rng = np.random.default_rng(3)
    losses = _plateau_then_curve()
    noise = rng.standard_normal(losses.size) * np.sqrt(losses)
    quiet = fit_exploration_trend(losses + 0.02 * noise, 1.08, 0.145, oscillation=0.02)
    loud = fit_exploration_trend(losses + 0.2 * noise, 1.08, 0.145, oscillation=0.2)
    assert quiet is not None and loud is not None
    assert loud.level_std > 3.0 * quiet.level_std


def test_plateau_and_short_trajectories() -> None:
    assert plateau_end([2.3, 2.29, 2.28, 1.9, 1.5], oscillation=0.2) == 2
    assert plateau_end([2.3, 1.5, 1.2], oscillation=0.2) == 0
    assert plateau_end([2.3, 2.3, 2.3], oscillation=0.2) == 0
    assert fit_exploration_trend([2.3, 2.3, 2.29, 1.8, 1.5], 1.08, 0.145, 0.2) is None  # 3 after the plateau
    assert fit_exploration_trend([2.3, 1.8, 1.5, 1.3, 1.1], 1.08, 0.145, 0.0) is None
    assert fit_exploration_trend([2.3, 1.8, float("nan"), 1.3, 1.1], 1.08, 0.145, 0.2) is None


def test_rounds_on_a_subset_give_the_rate_at_every_client() -> None:
    losses = trend_curve(2.0, 0.12 * 0.5 ** 0.31, [1.0] * 12, 1.08, 0.145)
    fit = fit_exploration_trend(losses, 1.08, 0.145, 0.2, ratios=[0.5] * 12, rate_exponent=0.31)
    assert fit is not None and fit.rate == pytest.approx(0.12, rel=0.05)


def test_the_anchor_is_checked_in_one_line_and_its_default_keys_the_cache_as_before() -> None:
    from depl_fl.orchestration.profiling import profile_key

    raw = {**{k: getattr(REGIME, k) for k in ("power", "floor", "rate_exponent", "noise_exponent",
                                               "oscillation", "steps_exponent", "reference_steps",
                                               "judged_error_factor", "oscillation_dof")}}
    assert PlanRegime.from_config(raw).anchor == "last"
    assert PlanRegime.from_config({**raw, "anchor": "trend"}) == REGIME
    with pytest.raises(ScenarioError, match="anchor: must be one of last, trend"):
        PlanRegime.from_config({**raw, "anchor": "middle"})
    with pytest.raises(ScenarioError, match="profile.plan_regime.anchor") as err:
        compose_config(["profile.plan_regime.anchor=middle"])
    assert "\n" not in str(err.value)
    cfg = compose_config(["num_clients=3"])
    assert cfg["profile"]["plan_regime"]["anchor"] == "last"
    regime = {k: v for k, v in cfg["profile"]["plan_regime"].items() if k != "anchor"}
    assert profile_key(cfg) == profile_key({**cfg, "profile": {**cfg["profile"], "plan_regime": regime}})
    trend = compose_config(["num_clients=3", "profile.plan_regime.anchor=trend"])
    assert profile_key(trend) != profile_key(cfg)


def test_the_profile_starts_its_curve_at_the_trend_not_at_a_dip() -> None:
    losses = list(_plateau_then_curve())
    losses[-1] -= 0.35  # the exploration stopped on a dip
    trajectories = {"full": (losses, [1.0] * (len(losses) - 1))}
    run = {"levels": [0.6, 1.2, 2.3], "mean": [0.1, 0.2, 0.1], "std": [0.1, 0.2, 0.1], "eval_std": [0.05] * 3}
    fitted = {"initial": 2.3, "run": {"full": run}, "data_exponent_mean": 0.5, "data_exponent_std": 0.5}
    trends = exploration_trends(trajectories, REGIME, oscillation=0.25)
    assert set(trends) == {"full"} and trends["full"].level > losses[-1] + 0.2
    trend_run = with_plan_regime(fitted, trajectories, len(losses) - 1, REGIME, 3.125, {}, oscillation=0.25)
    last = PlanRegime(**{**REGIME.__dict__, "anchor": "last"})
    last_run = with_plan_regime(fitted, trajectories, len(losses) - 1, last, 3.125, {}, oscillation=0.25)
    # the plan regime reaches 1.25 x its start: the trend's level, not the dip's
    top = max(lv for lv in trend_run["run"]["full"]["levels"] if lv <= 1.25 * trends["full"].level + 1e-9)
    assert top == pytest.approx(1.25 * trends["full"].level)
    assert max(lv for lv in last_run["run"]["full"]["levels"] if lv <= 1.25 * losses[-1] + 1e-9) \
        == pytest.approx(1.25 * losses[-1])


def test_each_network_says_how_its_plans_read_the_regime_and_an_override_wins() -> None:
    def regime(*overrides: str) -> tuple:
        section = compose_config(list(overrides))["profile"]["plan_regime"]
        return section["anchor"], section["explored_oscillation"]

    assert regime() == ("last", None)  # the digits CNN the constants were fitted on
    assert regime("model=digits_cnn_all") == ("last", None)
    for model in ("digits_resnet", "alexnet_like", "mobilenet_like"):
        assert regime(f"model={model}") == ("trend", 0.073), model
    assert regime("model=custom", "model.factory=tests.user_nets:mlp") == ("trend", 0.073)
    assert regime("model=digits_resnet", "profile.plan_regime.anchor=last",
                  "profile.plan_regime.explored_oscillation=null") == ("last", None)
    # the model's own choice is no setting: in-process profiling (which reads neither) takes it silently
    inprocess = compose_config(["model=digits_resnet", "profile.source=inprocess"])
    assert inprocess["model"]["regime"]["anchor"] == "trend"
    with pytest.raises(ScenarioError, match="profile.plan_regime.anchor=last: not read when profile.source"):
        compose_config(["model=digits_resnet", "profile.source=inprocess", "profile.plan_regime.anchor=last"])


def test_the_exploration_hands_the_plan_its_trend_on_a_network_that_reads_it() -> None:
    from depl_fl.orchestration.profile_fit import plan_regime_of
    from strategies.federated_profiling import FederatedProfiler

    losses = list(_plateau_then_curve())
    losses[-1] -= 0.35  # stopped on a dip
    run = {"levels": [0.6, 1.2, 2.3], "mean": [0.1, 0.2, 0.1], "std": [0.1, 0.2, 0.1], "eval_std": [0.05] * 3}
    measured = {"initial": 2.3, "run": {"full": dict(run), "p50": dict(run)}, "data_exponent_mean": 0.5,
                "data_exponent_std": 0.5}
    props = {f"c{i}": {"num-samples": 100} for i in range(4)}
    starts = {}
    for model in ("digits_cnn", "digits_resnet"):
        cfg = compose_config([f"model={model}", "num_clients=4"])
        profiler = FederatedProfiler(cfg, None)
        profiler.trajectories = {m: (list(losses), [1.0] * (len(losses) - 1)) for m in ("full", "p50")}
        profiler.records, profiler.sem_points = [{}] * (len(losses) - 1), {}
        profiler.finish_fit(measured, props, plan_regime_of(cfg))
        starts[model] = profiler.start_trend
    assert starts["digits_cnn"] is None  # the plan starts at the measured loss
    trend = starts["digits_resnet"]
    assert trend is not None and trend["mean"] > losses[-1] + 0.2 and trend["std"] > 0.0
