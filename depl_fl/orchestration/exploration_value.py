"""Whether one more exploration round is worth its energy (the exploration's value-of-information stop).

After every exploration round the profile fitted so far already gives a
dependable plan from the model at hand: a plan that reaches the target with
the target probability, at predicted energy ``E_plan``. One more exploration
round costs ``E_round`` (about what the last one cost) and can buy two things:
training progress (the exploration trains the job's model) and a more certain
profile, hence a plan with less margin. Neither can make the plan after it
cheaper than the plan that needs **no margin at all** from the loss the round
would reach: the mean-based plan (``method=expectation``), which only asks the
predicted mean loss to reach the target, from ``L_next``, the current loss
minus the last exploration round's decrease. Its energy ``E_floor`` is thus a
lower bound of every plan after the round, and ``E_plan - E_floor`` an upper
bound of what the round can save. The exploration stops when

    E_plan <= E_round + E_floor,

that is, when even a round that made the profile exact could not pay for
itself. The rule needs a dependable plan now (an infeasible plan never stops
the exploration) and reads the validation losses only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence


@dataclass(frozen=True)
class ExplorationValue:
    """The three energies the stop compares, in joules (see module doc)."""

    #: Predicted energy of the dependable plan from the model at hand (inf: no dependable plan).
    plan_j: float
    #: Energy of one more exploration round (the last round's).
    round_j: float
    #: Predicted energy of the mean-based plan from the loss one more round would reach.
    floor_j: float

    @property
    def saving_bound_j(self) -> float:
        """Upper bound of what one more round can save on the plan: ``plan_j - floor_j`` (at least 0)."""
        return max(self.plan_j - self.floor_j, 0.0)

    def stop(self) -> bool:
        """True when one more round cannot pay for itself: ``plan_j <= round_j + floor_j`` (finite plan)."""
        return math.isfinite(self.plan_j) and self.plan_j <= self.round_j + self.floor_j

    def to_dict(self) -> dict[str, float]:
        """The record of a round (``value`` in the exploration's record)."""
        return {k: float(v) for k, v in asdict(self).items()}


def next_loss(trajectory: Sequence[float]) -> float:
    """The loss one more exploration round is expected to reach: the last loss minus the last decrease.

    A round that did not decrease the loss predicts no decrease (the floor
    plan then starts from the loss at hand); never below 0.
    """
    losses = [float(v) for v in trajectory]
    if len(losses) < 2:
        return max(losses[-1], 0.0) if losses else math.nan
    return max(losses[-1] - max(losses[-2] - losses[-1], 0.0), 0.0)


def plan_energy(plan: Any) -> float:
    """A plan's predicted energy; ``inf`` when the plan is not dependable."""
    if not getattr(plan, "feasible", False):
        return math.inf
    return float(plan.predicted.get("cost_joules", math.inf))


def exploration_value(plan: Callable[[str, float], Any], *, round_j: float, trajectory: Sequence[float],
                      method: str = "depl") -> ExplorationValue:
    """The :class:`ExplorationValue` after an exploration round.

    Parameters
    ----------
    plan : callable
        ``plan(method, loss)``: the plan by ``method`` (the job's, or
        ``expectation``) from a model at validation loss ``loss``, with the
        profile fitted so far and what the exploration left of the deadline.
    round_j : float
        Energy of one more exploration round.
    trajectory : sequence of float
        The worst variant's validation loss after every exploration round so far.
    method : str
        The job's planning method (the plan from here).
    """
    losses = [float(v) for v in trajectory]
    plan_j = plan_energy(plan(method, losses[-1]))
    if not math.isfinite(plan_j):
        return ExplorationValue(math.inf, float(round_j), 0.0)
    floor = plan_energy(plan("expectation", next_loss(losses)))
    return ExplorationValue(plan_j, float(round_j), floor if math.isfinite(floor) else 0.0)


def value_settings(explore: Mapping[str, Any]) -> tuple[bool, int]:
    """``(enabled, first round)`` of the value stop from ``profile.explore``.

    Enabled with ``stop_when_met`` and ``value_stop`` (both default true); it
    is judged after round ``value_from_round`` (default 4) and every later one.
    """
    enabled = bool(explore.get("stop_when_met", True)) and bool(explore.get("value_stop", True))
    return enabled, int(explore.get("value_from_round", 4))
