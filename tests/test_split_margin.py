"""The stop margin: how far a stopped model's test loss may lie above its validation loss."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtri

from depl_fl.errors import ScenarioError
from depl_fl.tracking.split_margin import gaussian_margin, stop_margin, studentised_differences


def _cross_entropy_like(n: int, seed: int) -> np.ndarray:
    """Mostly near-zero losses and a few large ones: the right skew of a classifier's cross-entropy."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < 0.85, rng.exponential(0.05, n), rng.exponential(1.5, n))


def _miss_rates(population: np.ndarray, prob: float, splits: int) -> tuple[float, float]:
    """Share of random half/half splits whose test mean exceeds validation mean + margin."""
    half = population.size // 2
    boot = gauss = 0
    for seed in range(splits):
        order = np.random.default_rng(seed).permutation(population.size)
        val, test = population[order[:half]], population[order[half:]].mean()
        boot += test > val.mean() + stop_margin(val, population.size - half, prob, draws=500, seed=seed)
        gauss += test > val.mean() + gaussian_margin(val, population.size - half, prob)
    return boot / splits, gauss / splits


@pytest.mark.parametrize("prob", [0.9, 0.95])
def test_on_skewed_losses_the_bootstrap_margin_misses_as_promised_and_the_gaussian_one_more(prob):
    boot, gauss = _miss_rates(_cross_entropy_like(360, seed=1), prob, splits=400)
    assert abs(boot - (1 - prob)) <= 0.03  # 400 splits: standard error 0.011-0.015
    assert gauss >= 1.3 * (1 - prob) and gauss > boot + 0.02


def test_on_symmetric_losses_the_bootstrap_margin_is_the_gaussian_one():
    losses = np.random.default_rng(2).normal(1.0, 0.2, 400)
    assert stop_margin(losses, 400, 0.9, seed=0) == pytest.approx(gaussian_margin(losses, 400, 0.9), rel=0.08)
    assert gaussian_margin(losses, 400, 0.9) == pytest.approx(
        float(ndtri(0.9)) * np.std(losses, ddof=1) * np.sqrt(2 / 400))


def test_the_margin_grows_with_prob_and_shrinks_with_the_splits():
    losses = _cross_entropy_like(200, seed=3)
    margins = [stop_margin(losses, 200, p, seed=0) for p in (0.8, 0.9, 0.95)]
    assert 0 < margins[0] < margins[1] < margins[2]
    big = np.tile(losses, 4)
    assert stop_margin(big, 800, 0.9, seed=0) < 0.6 * margins[1]


def test_the_margin_is_seeded_and_zero_without_spread():
    losses = _cross_entropy_like(100, seed=4)
    assert stop_margin(losses, 100, 0.9, seed=7) == stop_margin(losses, 100, 0.9, seed=7)
    assert stop_margin(losses, 100, 0.9, seed=7) != stop_margin(losses, 100, 0.9, seed=8)
    assert stop_margin(np.full(50, 0.3), 50, 0.9) == 0.0


def _margin_by_numpy(losses: np.ndarray, test_size: int, prob: float, draws: int, seed: int,
                     chunk: int = 250) -> float:
    """The bootstrap-t margin written with numpy's own mean and std over whole chunks of redraws."""
    losses = np.asarray(losses, dtype=float)
    n_val = losses.size
    sem = float(np.std(losses, ddof=1)) / np.sqrt(n_val)
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, draws, chunk):
        b = min(chunk, draws - start)
        val = losses[rng.integers(0, n_val, size=(b, n_val))]
        test = losses[rng.integers(0, n_val, size=(b, test_size))]
        val_sem = val.std(axis=1, ddof=1) / np.sqrt(n_val)
        diff = test.mean(axis=1) - val.mean(axis=1)
        out.append(np.divide(diff, val_sem, out=np.zeros_like(diff), where=val_sem > 0))
    return float(np.quantile(np.concatenate(out), prob)) * sem


@pytest.mark.parametrize("n_val, test_size, draws",
                         [(3586, 3538, 2000), (37, 90, 777), (400, 30, 260), (2, 1, 9)])
def test_the_margin_is_numpys_mean_and_std_bit_for_bit(n_val, test_size, draws):
    for seed in range(3):
        losses = _cross_entropy_like(n_val, seed=10 + seed)
        assert stop_margin(losses, test_size, 0.9, draws=draws, seed=seed) == \
            _margin_by_numpy(losses, test_size, 0.9, draws, seed)


def test_studentised_differences_are_numpys_and_zero_for_equal_rows():
    val = np.vstack([_cross_entropy_like(301, seed=5), np.full(301, 0.25), _cross_entropy_like(301, seed=6)])
    test_mean = np.array([0.3, 0.2, 0.1])
    sem = val.std(axis=1, ddof=1) / np.sqrt(301)
    expected = np.divide(test_mean - val.mean(axis=1), sem, out=np.zeros(3), where=sem > 0)
    assert np.array_equal(studentised_differences(val.copy(), test_mean), expected)
    assert studentised_differences(val.copy(), test_mean)[1] == 0.0


@pytest.mark.parametrize("losses, test_size, prob, message", [
    ([0.1], 10, 0.9, "at least 2 validation losses"),
    ([0.1, 0.2], 0, 0.9, "test split must hold a sample"),
    ([0.1, 0.2], 10, 1.0, r"probability must be in \(0, 1\)"),
    ([0.1, float("nan")], 10, 0.9, "not all finite"),
])
def test_bad_input_is_a_one_line_error(losses, test_size, prob, message):
    with pytest.raises(ScenarioError, match=message):
        stop_margin(np.array(losses), test_size, prob)


def test_central_evaluation_reports_the_margin_of_the_validation_losses():
    pytest.importorskip("torch")
    pytest.importorskip("flwr")
    from depl_fl.runs.runconfig import compose_config
    from depl_fl.task.local_update import initial_state, variant_model
    from depl_fl.task.partitions import geometry, test_split, validation_split
    from depl_fl.task.training import per_sample_losses
    from strategies.depl_strategy import state_to_arrays
    from strategies.server_app import make_evaluate_fn

    cfg = compose_config(["seed=5", "target.prob=0.9", "target.loss=5.0"])
    state = initial_state(geometry(cfg), seed=5)
    metrics = make_evaluate_fn(cfg)(3, state_to_arrays(state))
    losses = per_sample_losses(variant_model(state, geometry(cfg), 0.0), *validation_split(cfg))
    n_test = len(test_split(cfg)[1])
    assert metrics["loss-margin"] == pytest.approx(stop_margin(losses, n_test, 0.9, seed=5 * 100_003 + 3))
    assert metrics["loss"] == pytest.approx(losses.mean(), rel=1e-5)
    assert metrics["loss-sem"] == pytest.approx(np.std(losses, ddof=1) / np.sqrt(n_test))
    # Above the target no stop test can pass whatever the margin: it is not computed.
    above = make_evaluate_fn(compose_config(["seed=5", "target.prob=0.9", "target.loss=1.0"]))(
        3, state_to_arrays(state))
    assert metrics["loss"] > 1.0 and np.isnan(above["loss-margin"])
    assert above["loss"] == metrics["loss"] and above["loss-sem"] == metrics["loss-sem"]


def test_large_splits_resample_a_subsample_and_keep_the_margin():
    losses = np.random.default_rng(3).lognormal(-1.0, 1.0, 30_000)
    full = stop_margin(losses, 30_000, 0.9, seed=1, draws=1000, max_resample=None)
    capped = stop_margin(losses, 30_000, 0.9, seed=1, draws=1000)
    assert capped != full and capped == pytest.approx(full, rel=0.06)
    small = losses[:5000]  # below the cap nothing changes
    whole = stop_margin(small, 5000, 0.9, seed=2, draws=300, max_resample=None)
    assert stop_margin(small, 5000, 0.9, seed=2, draws=300) == whole


def test_one_evaluation_pass_gives_the_figures_of_the_two_passes_bit_for_bit():
    torch = pytest.importorskip("torch")
    from depl_fl.task.training import evaluate_model, evaluate_with_losses, per_sample_losses

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = np.random.default_rng(0).normal(size=(1300, 6)).astype(np.float32)
    y = np.random.default_rng(1).integers(0, 4, size=1300)

    def squared(logits, target):  # a user's per-sample loss
        return ((logits.softmax(dim=1) - torch.nn.functional.one_hot(target, 4)) ** 2).sum(dim=1)

    for loss_fn in (None, squared):
        loss, acc, losses = evaluate_with_losses(model, x, y, batch_size=512, loss_fn=loss_fn)
        assert (loss, acc) == evaluate_model(model, x, y, batch_size=512, loss_fn=loss_fn)
        assert np.array_equal(losses, per_sample_losses(model, x, y, batch_size=512, loss_fn=loss_fn))
        assert losses.shape == (1300,)


def test_the_shared_log_softmax_gives_cross_entropys_figures_bit_for_bit():
    torch = pytest.importorskip("torch")
    from torch.nn import functional as F

    from depl_fl.task.training import _cross_entropy_sum_and_samples

    gen = torch.Generator().manual_seed(3)
    for rows, classes, scale in ((512, 10, 1.0), (377, 10, 40.0), (64, 2, 5.0), (1000, 62, 0.01)):
        logits = torch.randn(rows, classes, generator=gen) * scale
        target = torch.randint(0, classes, (rows,), generator=gen)
        total, per_sample = _cross_entropy_sum_and_samples(logits, target)
        assert total == float(F.cross_entropy(logits, target, reduction="sum"))
        assert torch.equal(per_sample, F.cross_entropy(logits, target, reduction="none"))
