"""The patience stop: a tracked job whose validation loss stopped improving ends.

A job whose target is out of reach (e.g. non-IID clients whose merged model
gets worse after an early best) can keep re-planning: each re-plan's loss
profile still predicts the target, so the job would train to its deadline
while its validation loss rises. The divergence stop does not catch it when
the loss stays below the fresh model's. This rule ends the job once the
lowest validation loss of the job so far was reached at least ``rounds``
training rounds ago; the loss the training starts from (the exploration's
last measured loss) is the first reference, so a run that never gets below
where it started stops too.
"""

from __future__ import annotations

import math
from typing import Sequence


def rounds_since_best(losses: Sequence[float], start_loss: float | None) -> int:
    """Training rounds since the lowest validation loss of the job so far.

    Parameters
    ----------
    losses : sequence of float
        Measured validation loss after each training round so far, in order.
        A non-finite loss never is a new lowest (a model whose loss is not
        finite is no improvement).
    start_loss : float or None
        Validation loss the training starts from (round 0); ``None`` or
        non-finite: no reference before the first finite round loss.

    Returns
    -------
    int
        ``len(losses)`` minus the round that reached the lowest loss (0 for the
        start); a tie is no improvement. Without any finite loss, ``len(losses)``.
    """
    best = float(start_loss) if start_loss is not None and math.isfinite(float(start_loss)) else math.inf
    best_round = 0
    for k, value in enumerate((float(v) for v in losses), start=1):
        if math.isfinite(value) and value < best:
            best, best_round = value, k
    return len(losses) - best_round


def stalled(losses: Sequence[float], start_loss: float | None, rounds: int | None) -> bool:
    """Whether the job's lowest validation loss was reached at least ``rounds`` rounds ago.

    Parameters
    ----------
    losses : sequence of float
        Measured validation loss after each training round so far, in order
        (non-finite: no improvement, see :func:`rounds_since_best`).
    start_loss : float or None
        Validation loss the training starts from: the first reference.
    rounds : int or None
        Patience in training rounds; ``None`` turns the rule off.

    Returns
    -------
    bool
        ``True`` when at least ``rounds`` training rounds were recorded since
        the lowest loss so far (the start counts as round 0).
    """
    if rounds is None:
        return False
    if int(rounds) < 1:
        raise ValueError(f"rounds must be a positive integer or None, got {rounds!r}")
    return rounds_since_best(losses, start_loss) >= int(rounds)


def stall_reason(rounds: int, best_loss: float) -> str:
    """The one-line reason a stalled job records and prints."""
    return f"validation loss not below its lowest so far ({best_loss:.4g}) for {int(rounds)} rounds"
