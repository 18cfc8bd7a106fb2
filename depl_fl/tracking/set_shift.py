"""The set-shift jump: what a first round on a new client set costs, fitted from exploration groups.

A model trained on every client, then trained one round on a subset ``S``
with skewed labels, drifts towards ``S``'s label distribution: on the
balanced validation split its loss falls short of the run profile's
prediction, the more the further ``S``'s labels are from the reference
shares. The contract's ``loss.set_shift`` (docs/CONTRACT_V2.md) models this
as ``Y = g_S * Normal(beta, gamma)`` with ``g_S = 1 - c_S`` the set's
coverage gap, added before the round's run step when the set differs from
the one the model last trained on.

The federated exploration measures it: each of its groups starts a round
from the global model (trained on every client) and trains on its own set,
exactly a plan's first round on a new set. Each such round gives the
estimate ``Y_i = mu_m(L_i) * r_i**a - d_i`` (the decrease the profile
predicts minus the observed one, as for a model switch's jump; see
:func:`depl_fl.tracking.estimation.switch_estimates`), and

* ``beta = sum(g_i Y_i) / sum(g_i**2)`` (least squares through 0: a set with
  the reference shares pays nothing), floored at 0 -- a set change is never
  planned as a gain;
* ``gamma**2 = max(0, sum(e_i**2 - v_i) / sum(g_i**2))`` with
  ``e_i = Y_i - beta g_i`` and ``v_i`` the run variance the round carries
  (``E[e_i**2] = g_i**2 gamma**2 + v_i``, moments summed over the rounds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from depl_fl.contract.scenario import RunProfile

#: Fewest group rounds with a coverage gap from which the jump is fitted (fewer: none).
MIN_POINTS = 6


@dataclass(frozen=True)
class SetChangeRound:
    """One round on a new client set, started from a model trained on every client."""

    model: str
    loss_before: float
    loss_after: float
    ratio: float   # r_eff of the set
    gap: float     # 1 - c_S of the set


def fit_set_shift(rounds: Sequence[SetChangeRound], run: Mapping[str, RunProfile], a: float, b: float,
                  min_points: int = MIN_POINTS) -> dict[str, float] | None:
    """``{"mean": beta, "std": gamma}`` of ``loss.set_shift`` (None: fewer than ``min_points`` usable rounds).

    Parameters
    ----------
    rounds : sequence of SetChangeRound
        Rounds on new sets (rounds of models without a run profile, or with no
        coverage gap, are not used).
    run : mapping
        The fitted run profiles per model (the ones the planner uses).
    a, b : float
        The data exponents of the profile.
    """
    usable = [r for r in rounds if r.model in run and r.gap > 0.0 and r.ratio > 0.0]
    if len(usable) < min_points:
        return None
    gap = np.array([r.gap for r in usable])
    ratio = np.array([r.ratio for r in usable])
    before = np.array([r.loss_before for r in usable])
    decrease = before - np.array([r.loss_after for r in usable])
    predicted = np.array([float(run[r.model].mean_at(r.loss_before)) for r in usable]) * ratio ** a
    run_var = np.array([float(run[r.model].std_at(r.loss_before)) ** 2 for r in usable]) * ratio ** (-2.0 * b)
    jumps = predicted - decrease
    weight = float(gap @ gap)
    beta = max(float(gap @ jumps) / weight, 0.0)
    residual = jumps - beta * gap
    gamma = float(np.sqrt(max(float(np.sum(residual ** 2 - run_var)) / weight, 0.0)))
    return {"mean": beta, "std": gamma}
