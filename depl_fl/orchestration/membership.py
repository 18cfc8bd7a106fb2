"""Elastic membership of a DepL run: dropping lost clients, admitting late ones, reply timeouts.

Pure functions (no flwr): the strategy and the run controller call them.

* A client that died, timed out or sent a rejected update is removed from
  every remaining round of the plan at once (:func:`drop_clients`), so that
  neither the plan nor any prediction counts its data any more; a round left
  without clients is removed.
* A client that connects later is appended to the scenario
  (:func:`admit_clients`) and may be used from the next re-plan.
* The reply timeout of a round follows the plan's modelled round time
  (:func:`round_timeout_s`): ``slack_s + factor * modelled``, capped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import round_time


def drop_clients(rounds: Sequence[RoundDecision], gone: Collection[str],
                 scenario: Scenario) -> list[RoundDecision]:
    """``rounds`` without the clients in ``gone`` (empty rounds removed, unused levels dropped)."""
    if not gone:
        return list(rounds)
    cluster_of = {c.id: c.cluster for c in scenario.clients}
    kept: list[RoundDecision] = []
    for decision in rounds:
        clients = tuple(c for c in decision.clients if c not in gone)
        if not clients:
            continue
        active = {cluster_of[c] for c in clients}
        kept.append(RoundDecision(decision.model, clients,
                                  {k: v for k, v in decision.levels.items() if k in active}))
    return kept


def admit_clients(scenario: Scenario, candidates: Iterable) -> tuple[Scenario, list[str]]:
    """``scenario`` with the clients of ``candidates`` it does not know yet appended.

    The loss model (including ``reference_samples``) is kept, so the meaning of
    the data ratio of every earlier round does not change.

    Returns
    -------
    (Scenario, list of str)
        The new scenario and the ids of the admitted clients.
    """
    known = {c.id for c in scenario.clients}
    new = [c for c in candidates if c.id not in known]
    if not new:
        return scenario, []
    return dataclasses.replace(scenario, clients=tuple(scenario.clients) + tuple(new)), [c.id for c in new]


def round_timeout_s(scenario: Scenario, decision: RoundDecision, *, factor: float, slack_s: float,
                    cap_s: float) -> float:
    """Reply timeout of one round: ``min(cap_s, slack_s + factor * modelled round time)``.

    ``slack_s`` covers what the cost model does not (starting the ClientApp
    process, loading the data); ``factor`` >= 1 is the margin on the modelled
    compute and transfer time.
    """
    return float(min(cap_s, slack_s + factor * round_time(scenario, decision)))
