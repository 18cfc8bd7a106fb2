"""The stop rule: whether the model at hand meets the target now.

One rule for the two places a job may stop: the run controller after a
training round (:meth:`depl_fl.orchestration.controller.RunController.met_now`)
and the federated exploration after an exploration round
(:class:`strategies.federated_profiling.FederatedProfiler`), so that a job
that ends during its exploration ends by the same test as one that ends
after a planned round.
"""

from __future__ import annotations

import math


def stop_margin_of(loss: float, *, prob: float, guarantee: str, loss_sem: float | None,
                   loss_margin: float | None, judged_error: float) -> float:
    """How far the judged test loss may lie above the measured validation ``loss``.

    Parameters
    ----------
    loss : float
        Measured validation loss of the model at hand (clipped at 0).
    prob : float
        Target probability.
    guarantee : str
        ``gaussian`` or ``cantelli`` (:func:`depl_fl.planner.quantile.kappa`).
    loss_sem : float or None
        Standard error of the evaluation (a mean over as many samples as the test split holds).
    loss_margin : float or None
        Bootstrap-t ``prob``-quantile of ``test - validation``
        (:func:`depl_fl.tracking.split_margin.stop_margin`).
    judged_error : float
        ``loss.judged_error`` of a plan-regime profile (0 without).

    Returns
    -------
    float
        The bootstrap-t margin when measured (under Cantelli the larger of it
        and ``kappa * sqrt(2) * loss_sem``), else ``kappa * sqrt(2) * loss_sem``
        (0 without a standard error); at least ``kappa * sqrt(judged_error * loss)``.
    """
    from depl_fl.planner.quantile import kappa

    k = kappa(prob, guarantee)
    margin = k * math.sqrt(2.0) * loss_sem if loss_sem is not None else 0.0
    if loss_margin is not None:
        margin = loss_margin if guarantee == "gaussian" else max(margin, loss_margin)
    return max(margin, k * math.sqrt(max(float(judged_error), 0.0) * max(float(loss), 0.0)))


def target_met(loss: float, target_loss: float, *, prob: float, guarantee: str,
               loss_sem: float | None = None, loss_margin: float | None = None,
               judged_error: float = 0.0, track_mean: bool = False) -> bool:
    """Whether stopping with validation ``loss`` meets ``P[test loss <= target_loss] >= prob``.

    ``loss + margin <= target_loss`` with the margin of :func:`stop_margin_of`;
    with ``track_mean`` (the mean-based baseline) ``loss <= target_loss``. A
    non-finite loss never meets the target.
    """
    if not math.isfinite(float(loss)):
        return False
    loss = max(float(loss), 0.0)
    if track_mean:
        return loss <= target_loss
    margin = stop_margin_of(loss, prob=prob, guarantee=guarantee, loss_sem=loss_sem,
                            loss_margin=loss_margin, judged_error=judged_error)
    return loss + margin <= target_loss
