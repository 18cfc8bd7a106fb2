"""Where an oscillating exploration really ended: the learning curve fitted through its trajectory.

Why. The federated exploration stops at the first round whose measured loss
falls below ``stop_loss_factor * L*`` (or when its share of the deadline is
used). On a network whose loss oscillates by a large share of itself from
round to round (a residual network with BatchNorm on skewed clients: 0.2-0.5
around a loss of 1), that stop selects a dip: the plan that starts from the
last measured loss starts below the trend the next rounds return to, and its
rate, read between the fresh loss and that dip, is too fast; an exploration
cut off by its time share on a spike is the mirror image (a plan from the
spike finds no dependable plan at all). Both are the oscillation the plan
regime itself models as not accumulating (:mod:`depl_fl.tracking.learning_curve`):
the model's state is the trend, the measured loss is the trend plus the
oscillation.

The fit. With the plan regime's structural constants ``p`` and ``f`` fixed,
the trend follows the planner's own round recursion
``T_{k+1} = T_k - c r_k**a (T_k - f)**p``; its two free parameters, the level
at the window's first round and ``c``, are fitted by robust least squares
(soft-L1 loss) to the measured losses, each residual in units of the
oscillation the job itself measured at that loss (``o sqrt(T)``). The window
starts at the last round of the fresh model's plateau (the first rounds whose
loss is still within one oscillation of the fresh loss, which the power-law
curve does not have; :mod:`depl_fl.tracking.plateau`). The uncertainty of the end level comes from the fit's
Gauss-Newton covariance; a plan starts from the end level with that spread.
Every input is the job's own: its trajectory and its measured oscillation.
The plan regime reads its rate between the fresh loss and this level, as its
constants were fitted with (:func:`depl_fl.orchestration.profile_fit.with_plan_regime`);
the fitted ``c`` shapes the fit only: read without the fresh model's plateau
it is faster, and plans made with it on the residual network were too short.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from depl_fl.tracking.plateau import ROUNDS_PAST_PLATEAU, plateau_end

#: Starting values of ``log c`` the fit tries (the cost surface has shallow local minima).
LOG_RATE_STARTS = (-6.0, -4.0, -2.0, -1.0, 0.0)
#: Bounds of ``log c``.
LOG_RATE_BOUNDS = (-14.0, 3.0)


@dataclass(frozen=True)
class ExplorationTrend:
    """The learning curve fitted through one exploration trajectory.

    Attributes
    ----------
    level : float
        The trend at the exploration's last round (where a plan starts).
    level_std : float
        Standard deviation of ``level`` (the fit's uncertainty).
    rate : float
        ``c`` of ``mu(L) = c (L - f)**p`` at ``r = 1`` (with ``ratios``) or
        at the rounds' own ``r`` (without).
    window_start : int
        The first round the fit reads (0 is the fresh model).
    floor : float
        The floor ``f`` the curve was fitted with.
    """

    level: float
    level_std: float
    rate: float
    window_start: int
    floor: float


def trend_curve(level: float, rate: float, factors: Sequence[float], power: float,
                floor: float) -> np.ndarray:
    """The trend from ``level``: ``T_{k+1} = T_k - rate * factor_k * (T_k - floor)**power``, never
    below ``floor`` (one value per round, ``len(factors) + 1`` in all)."""
    out = np.empty(len(factors) + 1)
    out[0] = trend = float(level)
    for k, factor in enumerate(factors, start=1):
        trend = max(trend - rate * float(factor) * max(trend - floor, 0.0) ** power, floor)
        out[k] = trend
    return out


def fit_exploration_trend(losses: Sequence[float], power: float, floor: float, oscillation: float,
                          ratios: Sequence[float] | None = None,
                          rate_exponent: float = 0.0) -> ExplorationTrend | None:
    """The trend of an exploration trajectory (see the module docstring).

    Parameters
    ----------
    losses : sequence of float
        The merged model's measured loss: fresh, then after every exploration round.
    power, floor : float
        The plan regime's ``p`` (> 1) and the job's floor ``f``.
    oscillation : float
        The job's oscillation coefficient ``o`` (``eval_std = o sqrt(L)``), > 0.
    ratios : sequence of float, optional
        ``r_eff`` of every round (``len(losses) - 1``): the fitted rate is then
        at ``r = 1`` (the rounds scale it by ``r**rate_exponent``); None: at the
        rounds' own ``r``.
    rate_exponent : float, optional
        ``a`` of that scaling.

    Returns
    -------
    ExplorationTrend or None
        None when fewer than ``ROUNDS_PAST_PLATEAU`` (3) rounds follow the plateau (nothing to fit a
        level and a rate to) or ``oscillation`` is not positive.
    """
    values = np.asarray(losses, dtype=float)
    if not (oscillation > 0.0) or values.size < 2 or not np.all(np.isfinite(values)):
        return None
    start = plateau_end(values, oscillation)
    window = values[start:]
    if window.size - 1 < ROUNDS_PAST_PLATEAU:
        return None
    factors = [1.0] * (window.size - 1)
    if ratios is not None:
        for k, r in enumerate(list(ratios)[start:start + window.size - 1]):
            factors[k] = max(float(r), 1e-12) ** rate_exponent

    def curve(theta: np.ndarray) -> np.ndarray:
        return trend_curve(theta[0], math.exp(theta[1]), factors, power, floor)

    def residuals(theta: np.ndarray) -> np.ndarray:
        trend = curve(theta)
        return (window - trend) / (oscillation * np.sqrt(np.maximum(trend, 1e-9)))

    lower = (floor + 1e-9, LOG_RATE_BOUNDS[0])
    upper = (max(float(window.max()) * 2.0, floor + 1.0), LOG_RATE_BOUNDS[1])
    first = float(np.clip(window[0], lower[0] + 1e-9, upper[0] - 1e-9))
    best = None
    for log_rate in LOG_RATE_STARTS:
        fit = least_squares(residuals, [first, log_rate], loss="soft_l1", f_scale=1.0, bounds=(lower, upper))
        if best is None or fit.cost < best.cost:
            best = fit
    assert best is not None
    theta = best.x
    level = float(curve(theta)[-1])
    return ExplorationTrend(level=level, level_std=_end_std(curve, theta, best.jac),
                            rate=float(math.exp(theta[1])), window_start=start, floor=float(floor))


def _end_std(curve, theta: np.ndarray, jac: np.ndarray) -> float:
    """Standard deviation of the curve's last value from the fit's Gauss-Newton covariance
    (residuals are in units of the oscillation: unit variance)."""
    try:
        cov = np.linalg.pinv(jac.T @ jac)
    except np.linalg.LinAlgError:
        return 0.0
    grad = np.empty(2)
    for j in range(2):
        step = np.zeros(2)
        step[j] = 1e-6 * max(1.0, abs(theta[j]))
        grad[j] = (curve(theta + step)[-1] - curve(theta - step)[-1]) / (2.0 * step[j])
    var = float(grad @ cov @ grad)
    return math.sqrt(var) if math.isfinite(var) and var > 0.0 else 0.0
