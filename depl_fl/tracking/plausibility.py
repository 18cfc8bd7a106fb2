"""Is an observed loss plausible? Flags non-finite losses and spikes before tracking uses them.

One bad evaluation (a corrupted test batch, an aggregate that was rolled back
too late, a transient fault) must not be fed to the online estimator nor
trigger a re-plan. The loss model itself says what to expect of one round
(docs/FORMATS.md, loss semantics): from the loss ``l`` before it, with model ``m`` after
model ``p`` and data ratio ``r``,

    L = l + mu_sw + sd_sw * Y - mu_m(l') * r**a - sd_m(l') * r**-b * X,   l' = l + mu_sw

so ``L`` has mean ``l + mu_sw - mu_m(l') r**a`` and standard deviation
``sqrt(sd_sw**2 + (sd_m(l') r**-b)**2)`` (no switch: ``mu_sw = sd_sw = 0``).

A loss is a **spike** when it exceeds that mean by more than ``z`` standard
deviations, ``z`` being the one-sided normal quantile of ``tail_prob`` (default
1e-3: a correct profile flags an honest round once in a thousand). The profile
may be biased or too confident for this run, so the recent residuals
(observed - predicted mean of the rounds that were not flagged) correct it:
with at least ``MIN_RESIDUALS`` of them, their median shifts the centre and
their robust spread (1.4826 x MAD) replaces the profile's standard deviation
when it is larger (widened by the median's own sampling error, variance
pi/2 sd^2 / n). Only a loss that *rose* above the level before the round
(and is too high) is flagged: a drop cannot derail a dependability guarantee
about reaching a loss, and a stall is information tracking needs. After
``max_spikes`` consecutive spikes (controller) a high loss is taken as real.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import norm

from depl_fl.contract.scenario import LossModel

#: Residuals needed before their spread is trusted alongside the profile's.
MIN_RESIDUALS = 3
#: Consistency constant of the MAD for a normal distribution.
MAD_TO_STD = 1.4826


def after_switch(loss_model: LossModel, model: str, previous: str | None, level: float,
                 var: float) -> tuple[float, float]:
    """Mean and variance of the loss ``level`` (variance ``var``) after the jump of a switch to ``model``.

    No switch (same model, no previous one, or no ``l_sw`` entry for the pair): unchanged.
    """
    if previous is not None and previous != model and (previous, model) in loss_model.switch:
        jump = loss_model.switch[(previous, model)]
        return level + jump.mean, var + jump.std ** 2
    return level, var


def one_round_prediction(loss_model: LossModel, model: str, previous: str | None, loss_before: float,
                         ratio: float) -> tuple[float, float, float]:
    """Mean and standard deviation of the loss after one round, and the level ``l'`` it starts from."""
    level, var = after_switch(loss_model, model, previous, float(loss_before), 0.0)
    profile = loss_model.run[model]
    mu = float(profile.mean_at(level)) * ratio ** loss_model.data_exponent_mean
    sd = float(profile.std_at(level)) * ratio ** (-loss_model.data_exponent_std)
    return max(level - mu, 0.0), math.sqrt(var + sd * sd), level


def loss_flag(loss_after: float, predicted_mean: float, predicted_std: float,
              residuals: Sequence[float], tail_prob: float = 1e-3, floor: float = -math.inf) -> str | None:
    """``"non-finite"``, ``"spike"`` or ``None`` (plausible) for one observed loss.

    Parameters
    ----------
    loss_after : float
        The observed loss.
    predicted_mean, predicted_std : float
        :func:`one_round_prediction` from the last plausible loss.
    residuals : sequence of float
        ``observed - predicted_mean`` of recent plausible rounds.
    tail_prob : float
        One-sided probability of flagging an honest round under the model.
    floor : float
        Only a loss above this (the level before the round) can be a spike:
        a round without progress is a stall, which tracking must see.
    """
    if not math.isfinite(loss_after):
        return "non-finite"
    res = np.asarray(list(residuals), dtype=np.float64)
    centre, spread = predicted_mean, predicted_std
    if res.size >= MIN_RESIDUALS:
        # The median's own error (about 1.25 sd / sqrt(n)) widens the spread.
        bias = float(np.median(res))
        mad = MAD_TO_STD * float(np.median(np.abs(res - bias)))
        centre += bias
        spread = max(spread, mad) * math.sqrt(1.0 + 1.571 / res.size)
    if not spread > 0 or loss_after <= floor:  # no spread: cannot judge; a stall is no spike
        return None
    z = float(norm.isf(tail_prob))
    return "spike" if (loss_after - centre) / spread > z else None
