"""Spread split into accumulating innovation and evaluation noise (depl_fl.tracking.noise)."""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.tracking.noise import sem_coefficient, split_spread, spread_ratio, with_evaluation_error


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


def test_spread_ratio_limits_and_a_measured_correlation():
    assert spread_ratio(0.0, 30) == pytest.approx(1.0)
    assert spread_ratio(-0.5, 25) == pytest.approx(0.2)
    assert spread_ratio(-0.39, 30) == pytest.approx(0.496, abs=1e-3)  # rho -0.39: ~2x too wide
    with pytest.raises(ScenarioError, match="rho in"):
        spread_ratio(0.3, 10)
    with pytest.raises(ScenarioError, match="two or more rounds"):
        split_spread([[0.1]])


def _trajectory(rng, profile, rounds: int, s_e_share: float, start: float = 2.0) -> list[float]:
    """Observed losses ``T_k + W_k + e_k`` whose per-round decrease follows ``profile`` (r = 1).

    The per-round std of the observed decrease is ``std(L)``; a share ``s_e_share`` of its
    variance is evaluation noise (``2 s_e**2``), the rest innovation.
    """
    latent, out = start, [start]
    for _ in range(rounds):
        std = float(profile.std_at(latent))
        s_e = std * np.sqrt(s_e_share / 2.0)
        s_w = std * np.sqrt(1.0 - s_e_share)
        latent = latent - float(profile.mean_at(latent)) + rng.normal(0.0, s_w)
        out.append(latent + rng.normal(0.0, s_e))
    return out


def test_eval_std_fit_recovers_the_evaluation_share_per_level():
    from depl_fl.contract.scenario import RunProfile
    from depl_fl.tracking.noise import fit_eval_std

    profile = RunProfile((0.5, 1.0, 2.0), (0.02, 0.05, 0.08), (0.02, 0.03, 0.05))
    rng = np.random.default_rng(3)
    trajectories = [("m0", _trajectory(rng, profile, 25, 0.8), [1.0] * 25) for _ in range(200)]
    split, eval_std = fit_eval_std(trajectories, {"m0": profile}, 0.5, 0.5)
    # Evaluation noise is 80% of the per-round variance: s_e**2 = 0.4 g0, eval_std = sqrt(0.4) std.
    assert split.rho == pytest.approx(-0.4, abs=0.05)
    assert eval_std["m0"] == pytest.approx([np.sqrt(0.4) * s for s in profile.std], rel=0.1)
    # A pure random walk has (almost) none; the share is capped at 1/2 of the per-round variance.
    walk = [("m", _trajectory(np.random.default_rng(4), profile, 2000, 0.0, start=60.0), [1.0] * 2000)]
    _, none = fit_eval_std(walk, {"m": profile}, 0.5, 0.5)
    assert max(none["m"]) < 0.25 * min(profile.std)
    with pytest.raises(ScenarioError, match="ratios"):
        fit_eval_std([("m", [1.0, 0.9, 0.8], [1.0])], {"m": profile}, 0.5, 0.5)


def test_sem_coefficient_is_the_median_ratio_and_skips_unusable_points():
    points = [(2.0, 0.2), (1.0, 0.1), (0.5, 0.1), (0.0, 0.3), (1.0, float("nan"))]
    assert sem_coefficient(points) == pytest.approx(0.02)   # median of 0.02, 0.01, 0.02
    assert sem_coefficient([]) is None
    assert sem_coefficient([(0.0, 0.1)]) is None


def test_evaluation_error_raises_eval_std_to_the_standard_error_below_the_measured_range():
    anchored = {"levels": [0.0, 0.8, 1.6], "mean": [0.0, 0.08, 0.2], "std": [0.001, 0.2, 0.3],
                "eval_std": [0.0005, 0.05, 0.1], "spread_factor": [1.0, 1.0, 1.0]}
    c = 0.01                                                   # sem(0.8) = 0.089, sem(0.2) = 0.045
    out = with_evaluation_error(anchored, c)
    assert out["levels"] == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.6])
    assert out["mean"] == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08, 0.2])   # the linear anchor kept
    assert "spread_factor" not in out
    sem = np.sqrt(c * np.array(out["levels"]))
    assert out["eval_std"] == pytest.approx(np.maximum(sem, [0.0005, 0.0125, 0.025, 0.0375, 0.05, 0.1]))
    # a measured std that already holds the noise stays; below the range it grows to hold it
    assert out["std"][-1] == pytest.approx(0.3) and out["std"][-2] == pytest.approx(0.2)
    assert out["std"][1] == pytest.approx(np.sqrt(2.0) * sem[1])
    assert all(2 * e * e <= s * s for e, s in zip(out["eval_std"], out["std"], strict=True))
    # without an anchor no level is added; a zero coefficient changes nothing else
    plain = {"levels": [0.5, 1.0], "mean": [0.05, 0.1], "std": [0.1, 0.2]}
    assert with_evaluation_error(plain, 0.0) == {**plain, "eval_std": [0.0, 0.0]}
