"""The loss oscillation a job's own exploration shows, and how it widens the plan regime's.

Why. The plan regime (:mod:`depl_fl.tracking.learning_curve`) spreads a
plan's final loss by ``eval_std = o sqrt(L)`` with one task constant ``o``
fitted on the trajectory bank of the digits CNN. A network that oscillates
more from round to round (the residual network with BatchNorm at local lr
0.2: its validation loss jumps up by a factor of two and back within a few
rounds) then gets plans too narrow for its runs. The exploration's merged
trajectories measure the oscillation of the job's own network; this module
turns them into a coefficient in the regime's units and combines it with the
constant.

The estimator. Along a trajectory ``y_k = T_k + O_k`` with a smooth trend
``T`` and an oscillation that does not accumulate, ``sd(O_k) = m sqrt(T_k)
r_k**-b`` (``r_k`` the round's effective data ratio, ``b`` the regime's
noise exponent), the second difference ``D_k = y_{k+1} - 2 y_k + y_{k-1}``
removes every linear trend and has ``E[D_k**2] = (curvature)**2 + m**2
(v_{k-1} + 4 v_k + v_{k+1})`` with ``v_j = T_j r_j**(-2b)`` (the
difference-based variance estimator of nonparametric regression, Gasser,
Sroka and Jennen-Steinmetz 1986, with the regime's heteroscedasticity).
:func:`difference_oscillation` pools every variant's trajectory in one
ratio of sums, ``m**2 = sum D**2 / sum (v_{k-1} + 4 v_k + v_{k+1})`` with
the observed losses standing in for the trend (unbiased in ``v``). Two known
biases: the curvature of a fast descent adds to ``D`` (too high), and the
rounds of a fresh model's plateau, which barely move, count with their full
level (too low); both are also in the reference the estimate is compared
with, which is measured with the same estimator on the bank's explorations.

The combination. ``o`` is not an oscillation alone: fitted by the pinball
loss of the plans' quantiles, it also holds the learning curve's error (on
the bank the estimator measures about 0.05 at the reference steps, a third of
``o``). A per-job estimate therefore does not replace it. Independent
variance components add, so the plan uses
``o_job**2 = o**2 + max(0, m**2 - m_ref**2)`` (:func:`combined_oscillation`):
the constant, plus the oscillation variance the job measures beyond
``m_ref``, the 0.9-quantile of the per-job estimates over the bank's 80
explorations (``profile.plan_regime.explored_oscillation``,
``benchmarks/plan_regime/oscillation_reference.py``). A network like the
bank's keeps ``o`` (nine jobs in ten of the bank itself, whose
scatter of ``m`` the fitted ``o`` already holds); a network that oscillates
more gets the excess on top, never less than the constant. A shrinkage of
``m`` towards the constant would need a second family's bank to set its
weight; the excess rule needs none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from depl_fl.errors import ScenarioError


@dataclass(frozen=True)
class OscillationEstimate:
    """The oscillation coefficient measured on a job's trajectories.

    Attributes
    ----------
    coefficient : float
        ``m`` of ``sd(O) = m sqrt(L) r**-b`` at the trajectories' own local steps.
    differences : int
        Second differences pooled (about the estimate's degrees of freedom).
    """

    coefficient: float
    differences: int


def difference_oscillation(trajectories: Iterable[tuple[Sequence[float], Sequence[float]]],
                           noise_exponent: float) -> OscillationEstimate | None:
    """``m`` from second differences of loss trajectories (see the module docstring).

    Parameters
    ----------
    trajectories : iterable of (losses, ratios)
        Per trajectory the losses ``y_0 .. y_K`` of successive rounds and the
        effective data ratio of each of the ``K`` rounds (``y_0``, the start,
        counts at ratio 1); a trajectory of fewer than three losses is skipped.
    noise_exponent : float
        ``b``: the oscillation scales with ``r**-b``.

    Returns
    -------
    OscillationEstimate or None
        None without any second difference or with no positive loss level.

    Raises
    ------
    ScenarioError
        When a trajectory's ratios do not match its losses, or a loss or ratio
        is not a finite number (losses >= 0, ratios > 0).
    """
    squares = weights = 0.0
    count = 0
    for losses, ratios in trajectories:
        y = np.asarray(losses, dtype=float)
        r = np.asarray(ratios, dtype=float)
        need = max(y.size - 1, 0)
        if r.size != need:
            raise ScenarioError(f"oscillation: {y.size} losses need {need} ratios, got {r.size}")
        if not (np.all(np.isfinite(y)) and np.all(y >= 0.0) and np.all(np.isfinite(r)) and np.all(r > 0.0)):
            raise ScenarioError("oscillation: losses must be finite numbers >= 0 and ratios finite and > 0")
        if y.size < 3:
            continue
        level = y * np.concatenate(([1.0], r)) ** (-2.0 * float(noise_exponent))
        second = y[2:] - 2.0 * y[1:-1] + y[:-2]
        squares += float(second @ second)
        weights += float(np.sum(level[:-2] + 4.0 * level[1:-1] + level[2:]))
        count += int(second.size)
    if count == 0 or weights <= 0.0:
        return None
    return OscillationEstimate(math.sqrt(squares / weights), count)


def combined_oscillation(regime: float, measured: float | None, reference: float | None) -> float:
    """``sqrt(regime**2 + max(0, measured**2 - reference**2))``: the plan's oscillation coefficient.

    ``regime`` when nothing was measured or no reference is set (the constant as it is).
    All three at the same local steps.
    """
    if measured is None or reference is None:
        return float(regime)
    for name, value in (("regime", regime), ("measured", measured), ("reference", reference)):
        if not (value >= 0.0 and math.isfinite(value)):
            raise ScenarioError(f"oscillation: {name} must be a number >= 0, got {value!r}")
    excess = max(0.0, measured * measured - reference * reference)
    return math.sqrt(regime * regime + excess)
