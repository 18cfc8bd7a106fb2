"""Spread split into accumulating innovation and evaluation noise (depl_fl.tracking.noise)."""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.tracking.noise import split_spread, spread_ratio


def _decreases(rng, s_w: float, s_e: float, rounds: int, runs: int) -> list[np.ndarray]:
    """Residual decreases of ``L_k = W_k + e_k`` (trend removed): ``-(w_k + e_k - e_{k-1})``."""
    out = []
    for _ in range(runs):
        e = rng.normal(0.0, s_e, rounds + 1)
        w = rng.normal(0.0, s_w, rounds)
        out.append(-(w + e[1:] - e[:-1]))
    return out


def test_split_recovers_innovation_and_evaluation_noise():
    rng = np.random.default_rng(0)
    split = split_spread(_decreases(rng, 0.02, 0.03, 40, 300))
    assert split.innovation_var == pytest.approx(0.02**2, rel=0.15)
    assert split.eval_var == pytest.approx(0.03**2, rel=0.1)
    assert split.rho == pytest.approx(-0.03**2 / (0.02**2 + 2 * 0.03**2), abs=0.03)
    # The K-round variance it predicts matches the simulated one; the random walk's does not.
    k, runs = 30, 4000
    total = np.array([d.sum() for d in _decreases(rng, 0.02, 0.03, k, runs)])
    assert split.k_round_var(k) == pytest.approx(total.var(), rel=0.15)
    assert k * split.per_round_var > 2.5 * total.var()


def test_a_true_random_walk_has_no_evaluation_noise():
    split = split_spread(_decreases(np.random.default_rng(1), 0.05, 0.0, 30, 200))
    assert split.eval_var < 0.05 * split.innovation_var and abs(split.rho) < 0.05


def test_spread_ratio_limits_and_the_readme_figure():
    assert spread_ratio(0.0, 30) == pytest.approx(1.0)
    assert spread_ratio(-0.5, 25) == pytest.approx(0.2)
    assert spread_ratio(-0.39, 30) == pytest.approx(0.496, abs=1e-3)  # README's pilots: ~2x too wide
    with pytest.raises(ScenarioError, match="rho in"):
        spread_ratio(0.3, 10)
    with pytest.raises(ScenarioError, match="two or more rounds"):
        split_spread([[0.1]])
