"""Split the per-round spread of the loss into a part that accumulates and one that does not.

Why the static plan is over-cautious: the contract's loss is a random walk,
every round adds an independent draw ``X_k`` with the profile's per-round
std, so the variance of the loss after ``K`` rounds grows like ``K * var(X)``.
The observed loss is better described as a trend plus a random walk plus an
evaluation error that does not accumulate::

    L_k = T_k + W_k + e_k,   W_k = W_{k-1} + w_k,   var(w) = s_w**2,  var(e) = s_e**2

(``e_k``: how far this round's model evaluates from where its learning has
really got; a round that evaluates badly is made up in the next). The
per-round decrease then has variance ``g0 = s_w**2 + 2 s_e**2`` and lag-1
autocovariance ``g1 = -s_e**2``: successive decreases are negatively
correlated, ``rho = g1 / g0``. The change of the loss over ``K`` rounds has
variance ``K s_w**2 + 2 s_e**2``, not ``K g0``. :func:`split_spread` estimates
``s_w`` and ``s_e`` from the standardised residuals of pilot trajectories;
:func:`spread_ratio` says by how much the random walk over-states the
``K``-round spread (at ``rho = -0.39`` a 30-round plan's spread is
over-stated about 2x).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from depl_fl.contract.scenario import RunProfile
from depl_fl.errors import ScenarioError


@dataclass(frozen=True)
class SpreadSplit:
    """Per-round spread split into innovation (accumulates) and evaluation noise (does not).

    Attributes
    ----------
    innovation_var : float
        ``s_w**2`` (in the units of the residuals given).
    eval_var : float
        ``s_e**2``.
    rho : float
        Lag-1 autocorrelation of the per-round decreases (``-eval_var / per-round var``).
    pairs : int
        Number of successive residual pairs the lag-1 estimate used.
    """

    innovation_var: float
    eval_var: float
    rho: float
    pairs: int

    @property
    def per_round_var(self) -> float:
        """``g0 = s_w**2 + 2 s_e**2``: the variance the contract's random walk uses per round."""
        return self.innovation_var + 2.0 * self.eval_var

    def k_round_var(self, rounds: int) -> float:
        """Variance of the loss change over ``rounds`` rounds: ``K s_w**2 + 2 s_e**2``."""
        return rounds * self.innovation_var + 2.0 * self.eval_var


def split_spread(segments: Iterable[Sequence[float]]) -> SpreadSplit:
    """Estimate the split from residual decreases of several trajectories.

    Parameters
    ----------
    segments : iterable of sequences of float
        Per trajectory, the residuals ``y_k - mu(L_k)`` of successive rounds
        against the fitted profile (standardised or not; the split is in the
        same units). They are not re-centred: centring each trajectory would
        bias the lag-1 covariance by about ``-g0 / length``.

    Returns
    -------
    SpreadSplit
        ``eval_var = max(0, -g1)`` and ``innovation_var = max(0, g0 - 2 eval_var)``
        from the pooled lag-0 and lag-1 autocovariances.

    Raises
    ------
    ScenarioError
        Without any trajectory of at least two rounds.
    """
    sq = cross = 0.0
    n0 = n1 = 0
    for seg in segments:
        z = np.asarray(seg, dtype=float)
        if z.size < 2:
            continue
        sq += float(z @ z)
        cross += float(z[:-1] @ z[1:])
        n0 += z.size
        n1 += z.size - 1
    if n1 == 0:
        raise ScenarioError("spread split: need at least one trajectory of two or more rounds")
    g0, g1 = sq / n0, cross / n1
    eval_var = max(0.0, -g1)
    innovation_var = max(0.0, g0 - 2.0 * eval_var)
    return SpreadSplit(innovation_var, eval_var, g1 / g0 if g0 > 0 else 0.0, n1)


def spread_ratio(rho: float, rounds: int) -> float:
    """True ``K``-round std over the random walk's: ``sqrt((1 + 2 rho) - 2 rho / K)``, rho in [-0.5, 0].

    1 for a pure random walk (``rho = 0``); ``sqrt(1 / K)`` when the whole
    per-round spread is evaluation noise (``rho = -0.5``).
    """
    if not -0.5 <= rho <= 0.0 or rounds < 1:
        raise ScenarioError(f"spread ratio: need rho in [-0.5, 0] and rounds >= 1, got {rho!r}, {rounds!r}")
    return math.sqrt((1.0 + 2.0 * rho) - 2.0 * rho / rounds)


def standardised_residuals(losses: Sequence[float], ratios: Sequence[float], profile: RunProfile,
                           data_exponent_mean: float, data_exponent_std: float) -> np.ndarray:
    """``z_k = (d_k - mu(L_{k-1}) r_k**a) / (sigma(L_{k-1}) r_k**-b)`` along one trajectory.

    Parameters
    ----------
    losses : sequence of float
        ``L_0, ..., L_K`` of one model's trajectory (``K + 1`` values).
    ratios : sequence of float
        The data ratio of each of the ``K`` rounds.
    profile : RunProfile
        The fitted run profile the residuals are taken against.
    data_exponent_mean, data_exponent_std : float
        ``a`` and ``b``.
    """
    loss = np.asarray(losses, dtype=float)
    r = np.asarray(ratios, dtype=float)
    if r.size != loss.size - 1:
        raise ScenarioError(f"residuals: {loss.size} losses need {loss.size - 1} ratios, got {r.size}")
    before = loss[:-1]
    decrease = before - loss[1:]
    scale = np.maximum(profile.std_at(before), 1e-12) * r ** (-float(data_exponent_std))
    return (decrease - profile.mean_at(before) * r ** float(data_exponent_mean)) / scale


def fit_eval_std(trajectories: Iterable[tuple[str, Sequence[float], Sequence[float]]],
                 profiles: Mapping[str, RunProfile], data_exponent_mean: float,
                 data_exponent_std: float) -> tuple[SpreadSplit, dict[str, list[float]]]:
    """Per-level evaluation noise ``eval_std`` of every run profile (docs/CONTRACT_V2.md).

    The standardised residuals of all trajectories are pooled in one
    :func:`split_spread`; the share of the per-round variance that is
    evaluation noise, ``s_e**2 / g0`` (at most 1/2, where the innovation
    vanishes), scales each level's ``std``: ``eval_std = sqrt(share) * std``.

    Parameters
    ----------
    trajectories : iterable of (model id, losses, ratios)
        Trajectories of one model each (see :func:`standardised_residuals`); a
        model without one gets ``eval_std`` from the pooled share all the same.
    profiles : mapping model id -> RunProfile
        The fitted run profiles.
    data_exponent_mean, data_exponent_std : float
        ``a`` and ``b`` of the fit.

    Returns
    -------
    (SpreadSplit, dict)
        The pooled split and ``{model: eval_std per level}``.
    """
    segments = [standardised_residuals(losses, ratios, profiles[m], data_exponent_mean, data_exponent_std)
                for m, losses, ratios in trajectories if m in profiles and len(losses) >= 3]
    split = split_spread(segments)
    share = min(split.eval_var / split.per_round_var, 0.5) if split.per_round_var > 0 else 0.0
    return split, {m: [math.sqrt(share) * float(s) for s in p.std] for m, p in profiles.items()}


#: Where levels are added between the anchor at loss 0 and the lowest measured level (fractions of it).
BELOW_RANGE_FRACTIONS = (0.25, 0.5, 0.75)


def sem_coefficient(points: Iterable[tuple[float, float]]) -> float | None:
    """``c`` of ``sem(L)**2 = c * L`` from measured ``(loss, standard error)`` pairs (median ratio).

    The standard error of a mean cross-entropy over ``n`` samples is
    ``sqrt(v / n)``; the per-sample variance ``v`` of a classifier's loss comes
    mostly from its few wrong samples and grows about in proportion to the mean
    loss, so ``sem**2 / L`` is about constant (the median resists the first,
    untrained rounds). ``None`` without a pair with ``L > 0`` and a finite sem.
    """
    ratios = [s * s / loss for loss, s in points
              if loss > 0 and math.isfinite(loss) and math.isfinite(s) and s >= 0]
    return float(np.median(ratios)) if ratios else None


def with_evaluation_error(run: Mapping[str, Sequence[float]], coefficient: float) -> dict[str, list[float]]:
    """A run profile whose evaluation noise is at least the measured standard error of one evaluation.

    The loss the target judges is one evaluation on a finite test split: it
    misses the model's true loss by about ``sem(L) = sqrt(coefficient * L)``
    (the validation split's measured standard error; the splits have the same
    size). A profile measured at high losses and anchored at loss 0
    (``anchor_at_zero``) shrinks its ``eval_std`` in proportion to the loss and
    states about a third of that near the target (0.015-0.03 against a measured
    0.05-0.07 on digits, where the misses of static plans ended with validation
    losses below the target and test losses above it). Per level:
    ``eval_std = max(eval_std, sem(L))`` and ``std = max(std, sqrt(2) eval_std)``
    (the contract's ``2 eval_std**2 <= std**2``; a measured std that already
    holds the noise is kept). Levels at ``BELOW_RANGE_FRACTIONS`` of the lowest
    measured level are added first (means and spreads interpolated linearly,
    as the contract would), so that the square-root shape shows below the
    measured range.

    Parameters
    ----------
    run : mapping
        ``levels``, ``mean``, ``std`` and optionally ``eval_std`` of one variant;
        ``levels[0] == 0`` marks an anchor below the measured range.
    coefficient : float
        ``c`` of :func:`sem_coefficient` (>= 0).

    Returns
    -------
    dict
        The same keys (``eval_std`` always), other keys of ``run`` kept.
    """
    levels = [float(v) for v in run["levels"]]
    mean, std = [float(v) for v in run["mean"]], [float(v) for v in run["std"]]
    eval_std = [float(v) for v in run.get("eval_std") or [0.0] * len(levels)]
    if len(levels) > 1 and levels[0] == 0.0:
        extra = [f * levels[1] for f in BELOW_RANGE_FRACTIONS]
        new_levels = [0.0, *extra, *levels[1:]]
        mean, std, eval_std = (list(np.interp(new_levels, levels, v)) for v in (mean, std, eval_std))
        levels = new_levels
        run = {k: v for k, v in run.items() if k != "spread_factor"}  # one per old level
    sem = [math.sqrt(max(coefficient, 0.0) * level) for level in levels]
    eval_std = [max(e, s) for e, s in zip(eval_std, sem, strict=True)]
    std = [max(s, math.sqrt(2.0) * e * (1.0 + 1e-12)) for s, e in zip(std, eval_std, strict=True)]
    return {**run, "levels": levels, "mean": [float(v) for v in mean], "std": std, "eval_std": eval_std}
