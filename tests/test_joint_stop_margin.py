"""The joint stop margin: one margin that holds for every look of a run at once."""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.tracking.split_margin import joint_stop_margin, margin_quantiles, stop_margin


def _skewed(n: int, rng: np.random.Generator) -> np.ndarray:
    """Mostly near-zero losses and a few large ones, like a classifier's cross-entropy."""
    return np.where(rng.random(n) < 0.85, rng.exponential(0.05, n), rng.exponential(1.5, n))


def test_one_look_is_the_stop_margin_draw_for_draw():
    losses = _skewed(180, np.random.default_rng(0))
    for seed in range(3):
        single = stop_margin(losses, 180, 0.9, seed=seed)
        assert joint_stop_margin(losses[None, :], 180, 0.9, seed=seed) == single


def test_the_joint_margin_is_at_least_the_last_looks_and_repeated_looks_add_nothing():
    rng = np.random.default_rng(1)
    looks = np.vstack([_skewed(150, rng) for _ in range(4)])
    alone = stop_margin(looks[-1], 150, 0.95, seed=4)
    assert joint_stop_margin(looks, 150, 0.95, seed=4) > alone
    assert joint_stop_margin(np.vstack([looks[-1]] * 3), 150, 0.95, seed=4) == alone


def test_margin_quantiles_are_each_probabilitys_margin():
    rng = np.random.default_rng(2)
    looks = np.vstack([_skewed(120, rng) for _ in range(3)])
    probs = [0.8, 0.9, 0.95]
    joint = margin_quantiles(looks, 100, probs, draws=500, seed=9)
    single = margin_quantiles(looks, 100, probs, draws=500, seed=9, joint=False)
    assert joint.tolist() == [joint_stop_margin(looks, 100, p, draws=500, seed=9) for p in probs]
    assert single.tolist() == [stop_margin(looks[-1], 100, p, draws=500, seed=9) for p in probs]
    assert np.all(np.diff(joint) > 0) and np.all(joint >= single)


def test_on_independent_looks_it_bounds_a_miss_at_any_look_where_the_one_look_margin_does_not():
    # Five looks whose errors are independent (the worst case for repeated looks): every look's
    # one-look margin misses in 1 - prob of the splits, so some look misses in about 1 - prob**5.
    # The joint quantile of all five looks (the largest error does not depend on the looks' order)
    # times each look's own standard error bounds a miss at any of them.
    rng = np.random.default_rng(3)
    looks = np.vstack([_skewed(240, rng) for _ in range(5)])
    prob, splits, any_single, any_joint = 0.9, 200, 0, 0
    for seed in range(splits):
        order = np.random.default_rng(100 + seed).permutation(240)
        val, test = looks[:, order[:120]], looks[:, order[120:]].mean(axis=1)
        error = test - val.mean(axis=1)
        single = [stop_margin(val[k], 120, prob, draws=400, seed=seed) for k in range(5)]
        joint = [joint_stop_margin(np.roll(val, 4 - k, axis=0), 120, prob, draws=400, seed=seed)
                 for k in range(5)]
        any_single += bool(np.any(error > single))
        any_joint += bool(np.any(error > joint))
    assert any_single / splits >= 0.25  # 1 - 0.9**5 = 0.41
    assert any_joint / splits <= 0.16  # promised 0.10; standard error 0.02


@pytest.mark.parametrize("looks, message", [
    (np.zeros(5), r"\(looks, samples\)"),
    (np.zeros((0, 5)), r"\(looks, samples\)"),
    (np.array([[0.1, np.inf]]), "not all finite"),
])
def test_bad_looks_are_a_one_line_error(looks, message):
    with pytest.raises(ScenarioError, match=message):
        joint_stop_margin(looks, 10, 0.9)


def test_central_evaluation_with_joint_looks_bounds_every_evaluation_that_measured_a_margin():
    pytest.importorskip("torch")
    pytest.importorskip("flwr")
    from depl_fl.runs.runconfig import compose_config
    from depl_fl.task.local_update import initial_state, variant_model
    from depl_fl.task.partitions import geometry, test_split, validation_split
    from depl_fl.task.training import per_sample_losses
    from strategies.depl_strategy import state_to_arrays
    from strategies.server_app import make_evaluate_fn

    overrides = ["seed=5", "target.prob=0.9", "target.loss=5.0"]
    cfg = compose_config([*overrides, "tracking.stop_looks=joint"])
    assert compose_config(overrides)["tracking"]["stop_looks"] == "one"
    geo = geometry(cfg)
    states = [initial_state(geo, seed=s) for s in (5, 6)]
    evaluate = make_evaluate_fn(cfg)
    margins = [evaluate(r, state_to_arrays(s))["loss-margin"] for r, s in ((1, states[0]), (2, states[1]))]
    looks = np.vstack([per_sample_losses(variant_model(s, geo, 0.0), *validation_split(cfg)) for s in states])
    n_test = len(test_split(cfg)[1])
    assert margins[0] == pytest.approx(stop_margin(looks[0], n_test, 0.9, seed=5 * 100_003 + 1))
    assert margins[1] == pytest.approx(joint_stop_margin(looks, n_test, 0.9, seed=5 * 100_003 + 2))
    assert margins[1] > stop_margin(looks[1], n_test, 0.9, seed=5 * 100_003 + 2)


@pytest.mark.parametrize("overrides, message", [
    (["tracking.stop_looks=sometimes"], "stop_looks"),
    (["tracking.enabled=false", "tracking.stop_looks=joint"], "stop_looks"),
])
def test_a_stop_looks_the_job_cannot_use_is_refused(overrides, message):
    from depl_fl.runs.runconfig import compose_config

    with pytest.raises(ScenarioError, match=message):
        compose_config(overrides)
