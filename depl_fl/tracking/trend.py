"""The trend under a run's oscillating loss: a Kalman filter on the loss model tracking predicts from.

Why. The loss a round measures oscillates around the run's trend without
accumulating (the plan regime, :mod:`depl_fl.tracking.learning_curve`: FedAvg on
skewed clients overshoots and comes back, by 0.03-0.1 on digits), and the
first round on a new client set drifts towards that set's labels and is made
up in the next. Tracking that starts every prediction from the last
measured loss re-plans on those swings: a first round that rises on a cheap
subset moves the rest of the run to every client, the costly cluster
included, for no better coverage. The filter follows the trend instead.

The model (the loss model's own terms). The measured validation loss after
round ``k`` is ``y_k = T_k + O_k`` with the oscillation ``O_k`` of standard
deviation ``eval_std_m(T) r**-b`` (the set's effective data ratio ``r``), and
the trend moves like the contract's walk::

    T_k = T_{k-1} + jump - mu_m(T_{k-1} + jump) r**a + W_k

with ``W_k`` the walk's own spread plus the uncertainty of the decrease
itself (``RATE_UNCERTAINTY`` times its size: the profile's rate is an
estimate; at least ``DRIFT_SHARE`` of the oscillation, so that near the floor,
where the predicted decrease vanishes, the filter still follows a run that
levels off elsewhere). :func:`predict` is the prediction step, :func:`update` the
correction by a measured loss, both scalar Kalman steps. With no oscillation
in the profile (version 1) the update takes the measured loss as the trend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from depl_fl.contract.scenario import LossModel
from depl_fl.tracking.plausibility import after_switch

#: Standard deviation of a round's decrease, as a multiple of its predicted size (process noise).
RATE_UNCERTAINTY = 0.3
#: Least process noise, as a multiple of the oscillation's standard deviation: near the floor the
#: predicted decrease vanishes, and a filter without process noise would stop following the loss.
DRIFT_SHARE = 0.2


@dataclass(frozen=True)
class Trend:
    """Estimate of the trend loss: ``mean`` with variance ``var``."""

    mean: float
    var: float

    @property
    def std(self) -> float:
        """Standard deviation of the estimate."""
        return math.sqrt(max(self.var, 0.0))


def predict(loss_model: LossModel, trend: Trend, model: str, previous: str | None, ratio: float) -> Trend:
    """The trend after one more round of ``model`` on a set of effective data ratio ``ratio``.

    The mean follows the profile from the current mean (a model switch first
    adds its jump); the variance adds the jump's, the walk's per-round spread
    and ``(RATE_UNCERTAINTY * decrease)**2``.
    """
    level, var = after_switch(loss_model, model, previous, trend.mean, trend.var)
    profile = loss_model.run[model]
    decrease = float(profile.mean_at(level)) * ratio ** loss_model.data_exponent_mean
    walk = float(profile.walk_std_at(level)) * ratio ** (-loss_model.data_exponent_std)
    drift = max((RATE_UNCERTAINTY * decrease) ** 2,
                DRIFT_SHARE ** 2 * oscillation_var(loss_model, model, level, ratio))
    return Trend(max(level - decrease, 0.0), var + walk * walk + drift)


def oscillation_var(loss_model: LossModel, model: str, loss: float, ratio: float) -> float:
    """Variance of one measured loss around the trend: ``(eval_std_m(loss) r**-b)**2`` (0 without it)."""
    profile = loss_model.run[model]
    sd = float(profile.eval_std_at(max(loss, 0.0))) * ratio ** (-loss_model.data_exponent_std)
    return sd * sd


def update(prior: Trend, observed: float, noise_var: float) -> Trend:
    """The Kalman correction of ``prior`` by one measured loss (its oscillation: variance ``noise_var``)."""
    if noise_var <= 0.0:
        return Trend(float(observed), 0.0)
    gain = prior.var / (prior.var + noise_var)
    return Trend(prior.mean + gain * (float(observed) - prior.mean), (1.0 - gain) * prior.var)
