"""Which model a job that the stall or the divergence stop ended keeps: its best validated one.

Both stops end a job whose last rounds did not help (:mod:`depl_fl.tracking.stall`:
the lowest validation loss is old; :mod:`depl_fl.tracking.divergence`: the last
rounds are worse than the fresh model), so by construction the last round's
model is not the best one the job made. The job then ends with the candidate
of lowest measured validation loss -- the loss its decisions read, never the
test split's. The candidates are the model the training started from (round
0) and every training round's merged model, from ``first`` on (a job resumed
from a checkpoint that kept no best model only knows the rounds since).
"""

from __future__ import annotations

import math
from typing import Sequence

#: ``tracking.early_stop_model``: ``best`` (the lowest validation loss) or ``last`` (the last round's model).
EARLY_STOP_MODELS = ("best", "last")


def best_candidate(losses: Sequence[float], start_loss: float | None,
                   first: int = 0) -> tuple[int, float] | None:
    """Round and validation loss of the lowest candidate; a tie goes to the later round.

    Parameters
    ----------
    losses : sequence of float
        Measured validation loss of each training round's model, in order
        (``losses[k - 1]`` is round ``k``'s). A non-finite loss is no candidate.
    start_loss : float or None
        Validation loss of the model the training started from (round 0);
        ``None`` or non-finite: no candidate.
    first : int
        The first round that is a candidate (0: the start model).

    Returns
    -------
    tuple of (int, float) or None
        ``(round, loss)``, round 0 for the start model; ``None`` when no
        candidate has a finite loss.
    """
    best: tuple[int, float] | None = None
    for k, value in enumerate([start_loss, *losses]):
        if k < int(first) or value is None or not math.isfinite(float(value)):
            continue
        if best is None or float(value) <= best[1]:
            best = (k, float(value))
    return best
