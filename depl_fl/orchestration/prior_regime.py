"""What another federation's exploration (the prior) tells the plan regime and the value stop.

A prior of the same task (same network, dataset and training settings) has
explored the same learning curve: its trajectory shows where the fresh model's
plateau ends and how fast the curve descends past it. A job that has explored
only a few rounds of its own, still on or near that plateau, has neither yet.
With ``profile.explore.prior_regime`` (default true; read only with
``profile.prior``) the prior is taken as the better evidence for both while
the job's own trajectory cannot show them:

* the plateau guard of the value stop (:func:`value_judged_with_prior`) passes
  when the job's own trajectory, or the prior's, has left the plateau for the
  rounds a rate needs (:func:`depl_fl.tracking.plateau.rate_measurable`), each
  read with its own federation's oscillation (:func:`prior_oscillation`);
* a variant's learning-curve rate (:func:`prior_rate`) is read from the
  prior's trajectory of that variant while the job's own trajectory is not yet
  rate-measurable (:func:`rate_from_prior`); the curve still starts at the
  job's own last loss (its level is this federation's).

Once the job's own trajectory shows a rate, its own rate is used, as without
a prior.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from depl_fl.tracking.plateau import ROUNDS_PAST_PLATEAU, rate_measurable


def value_judged_with_prior(own: Sequence[float], prior: Sequence[float] | None, oscillation: float,
                            prior_oscillation: float, rounds: int = ROUNDS_PAST_PLATEAU) -> bool:
    """Whether the value stop may judge: the job's own worst-variant trajectory ``own`` or the prior's
    ``prior`` (each the loss before the exploration, then after every round) has left the plateau for
    enough rounds to read a rate. Both are read from their first trained round on (as
    :func:`depl_fl.orchestration.exploration_value.value_judged` does), each with its own
    federation's oscillation coefficient (``oscillation``, ``prior_oscillation``: the oscillation grows
    with the local steps, fewer on a federation of more clients); ``rounds``: the rounds past the
    plateau the own trajectory needs (``profile.explore.plateau_rounds``)."""
    if rate_measurable([float(v) for v in own][1:], float(oscillation), rounds):
        return True
    return prior is not None and rate_measurable([float(v) for v in prior][1:], float(prior_oscillation))


def rate_from_prior(own_losses: Sequence[float], prior_losses: Sequence[float] | None,
                    oscillation: float, prior_oscillation: float) -> bool:
    """Whether a variant's rate comes from the prior: its own trajectory ``own_losses`` (fresh loss,
    then after every round) does not show a rate yet (at ``oscillation``) and the prior's
    ``prior_losses`` does (at ``prior_oscillation``)."""
    if prior_losses is None or len(prior_losses) < 2:
        return False
    if rate_measurable([float(v) for v in own_losses][1:], float(oscillation)):
        return False
    return rate_measurable([float(v) for v in prior_losses][1:], float(prior_oscillation))


def prior_rate(prior_losses: Sequence[float], prior_ratios: Sequence[float], regime: Any, window: float,
               floor: float, rate_at_full: bool) -> float:
    """The learning curve's ``c`` read from the prior's trajectory of one variant.

    As the job reads its own (:func:`depl_fl.orchestration.profile_fit.rate_span` over the prior's
    last ``window`` share of rounds, divided by the mean ``r_eff**a`` of those rounds with
    ``rate_at_full``), at the ``floor`` the job's curve uses.
    """
    from depl_fl.orchestration.profile_fit import rate_span
    from depl_fl.tracking.learning_curve import rate_coefficient, ratio_factor

    losses = [float(v) for v in prior_losses]
    first, last, span = rate_span(losses, len(losses) - 1, window)
    factor = ratio_factor(list(prior_ratios)[-span:], regime.rate_exponent) if rate_at_full else 1.0
    return rate_coefficient(first, last, span, regime.power, min(float(floor), 0.5 * last)) / float(factor)


def prior_rates(own: Mapping[str, tuple[Sequence[float], Any]],
                prior: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None, regime: Any,
                oscillation: float, prior_oscillation: float, window: float,
                rate_at_full: bool) -> dict[str, float]:
    """``{model: c}`` for the variants whose rate comes from the prior (:func:`rate_from_prior`), each
    at the floor the job's own curve uses (:func:`depl_fl.tracking.learning_curve.effective_floor` at
    the job's own last loss); empty without a prior."""
    from depl_fl.tracking.learning_curve import effective_floor

    out: dict[str, float] = {}
    for model, (losses, _) in own.items():
        theirs = (prior or {}).get(model)
        if not losses or theirs is None \
                or not rate_from_prior(losses, theirs[0], oscillation, prior_oscillation):
            continue
        floor = effective_floor(regime.floor, float(losses[-1]))
        out[model] = prior_rate(theirs[0], theirs[1], regime, window, floor, rate_at_full)
    return out


def prior_oscillation(trajectories: Mapping[str, tuple[Sequence[float], Any]], regime: Any,
                      cfg: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]]) -> float:
    """The oscillation coefficient of the prior's federation: the plan regime's at the local steps of
    its clients (``properties``, as its profile's data records them; this job's ``cfg`` for the
    training settings, the same task's), combined with its trajectories' as this job's is
    (:func:`depl_fl.orchestration.profile_fit.plan_oscillation`)."""
    from depl_fl.orchestration.profile_fit import local_steps, plan_oscillation

    return plan_oscillation(trajectories, regime, local_steps(cfg, properties))
