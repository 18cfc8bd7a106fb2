"""The fresh model's plateau at the start of an exploration trajectory.

A fresh model's first rounds barely move its loss: the trajectory sits within
the job's own oscillation of the fresh loss before the power-law learning curve
starts (which has no such plateau). A learning curve's level and rate are
measurable only from the rounds after it. Two readers share this definition:
the trend fitted through an exploration (:mod:`depl_fl.tracking.exploration_trend`
starts its window at the plateau's last round) and the exploration's value stop
(:mod:`depl_fl.orchestration.exploration_value` judges no round before the rate
is measurable, as a plan from the plateau extrapolates a rate it never saw; it
reads the trajectory from the first trained round on).

The band is one oscillation at the fresh loss, ``o sqrt(L_0)``, with ``o`` the
job's oscillation coefficient (``eval_std = o sqrt(L)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Rounds after the plateau's last round that a learning curve's level and rate need (two parameters
#: and one residual).
ROUNDS_PAST_PLATEAU = 3


def first_below_plateau(losses: Sequence[float], oscillation: float) -> int | None:
    """The first round whose loss lies more than one oscillation (``oscillation * sqrt(L_0)``) below the
    fresh loss ``L_0 = losses[0]``; None while every loss is within the band (still on the plateau)."""
    values = np.asarray(losses, dtype=float)
    if values.size == 0:
        return None
    band = float(oscillation) * math.sqrt(max(float(values[0]), 0.0))
    below = np.flatnonzero(values < values[0] - band)
    return int(below[0]) if below.size else None


def plateau_end(losses: Sequence[float], oscillation: float) -> int:
    """The last round of the fresh model's plateau: the round before the first loss more than one
    oscillation below the fresh loss (0 when the first round is, or when no round is)."""
    first = first_below_plateau(losses, oscillation)
    return max(first - 1, 0) if first is not None else 0


def rounds_past_plateau(losses: Sequence[float], oscillation: float) -> int:
    """How many rounds follow the plateau's last round (0 while the trajectory is still on it)."""
    if first_below_plateau(losses, oscillation) is None:
        return 0
    return len(losses) - 1 - plateau_end(losses, oscillation)


def rate_measurable(losses: Sequence[float], oscillation: float, rounds: int = ROUNDS_PAST_PLATEAU) -> bool:
    """Whether the trajectory has left the plateau by ``rounds`` rounds or more (default
    :data:`ROUNDS_PAST_PLATEAU`: a learning curve's level and rate can be read from it)."""
    return rounds_past_plateau(losses, oscillation) >= int(rounds)


#: The share of the fresh model's loss an exploration must lose before "it barely learned" no longer
#: explains a missing plan (:func:`barely_learned`).
BARELY_LEARNED_SHARE = 0.1


def barely_learned(fresh_loss: float | None, losses: Sequence[float],
                   share: float = BARELY_LEARNED_SHARE) -> bool:
    """Whether an exploration never took its lowest validation loss ``share`` below the fresh model's.

    A network still on its starting plateau after the whole exploration (Flower's quickstart ``Net``
    at a small learning rate sits at about 2.2 of a fresh 2.3 for 40 rounds) has no dependable plan
    because it has not started to learn: the user's remedy is the learning rate or a longer
    exploration, not a looser target. Only the wording of the job's error reads it.
    """
    values = [float(v) for v in losses if v is not None and math.isfinite(float(v))]
    if fresh_loss is None or not math.isfinite(float(fresh_loss)) or fresh_loss <= 0 or not values:
        return False
    return min(values) > (1.0 - float(share)) * float(fresh_loss)
