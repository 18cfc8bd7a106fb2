"""The divergence stop: training that keeps the model worse than the fresh one ends.

A job whose planned rounds make the model worse (e.g. a learning rate that
diverges on non-IID clients) never meets its target, however it re-plans: the
tracker's trend and the planner's loss profile still predict a decrease, so the
job would run to its deadline and spend its whole budget. The rule here is
deliberately conservative: it fires only when the measured validation loss of
each of the last ``rounds`` training rounds is above the fresh (untrained)
model's validation loss, which a training run that learns anything leaves
within its first rounds and does not return to.
"""

from __future__ import annotations

import math
from typing import Sequence


def diverging(losses: Sequence[float], fresh_loss: float | None, rounds: int | None) -> bool:
    """Whether the last ``rounds`` training losses are all above the fresh model's loss.

    Parameters
    ----------
    losses : sequence of float
        Measured validation loss after each training round so far, in order.
        A non-finite loss counts as above (a model whose loss is not finite
        is no better than the fresh one).
    fresh_loss : float or None
        Validation loss of the fresh model (before any round trained it).
        ``None`` or non-finite: unknown, the rule never fires.
    rounds : int or None
        How many consecutive last rounds must be above ``fresh_loss``;
        ``None`` turns the rule off.

    Returns
    -------
    bool
        ``True`` when at least ``rounds`` losses were recorded and each of the
        last ``rounds`` is above ``fresh_loss``.
    """
    if rounds is None or fresh_loss is None or not math.isfinite(float(fresh_loss)):
        return False
    if int(rounds) < 1:
        raise ValueError(f"rounds must be a positive integer or None, got {rounds!r}")
    last = [float(v) for v in losses][-int(rounds):]
    return len(last) == int(rounds) and all(not math.isfinite(v) or v > fresh_loss for v in last)


def divergence_reason(rounds: int, fresh_loss: float) -> str:
    """The one-line reason a diverging job records and prints."""
    return f"validation loss above the fresh model's ({fresh_loss:.4g}) for {int(rounds)} rounds"
