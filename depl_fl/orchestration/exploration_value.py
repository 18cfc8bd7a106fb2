"""Whether one more exploration round is worth its energy (the exploration's value stop).

After every exploration round the profile fitted so far already gives a
dependable plan from the model at hand (the target reached with the target
probability), at predicted energy ``E_plan(L)`` from the validation loss
``L`` now. One more exploration round costs ``E_round`` (about what the last
one cost) and buys training progress (the exploration trains the job's
model): it leaves the model at ``L_next``, the current loss minus the mean
decrease of the last two exploration rounds (with ``profile.explore.value_floor``,
the default, not below the target loss: :func:`look_ahead_loss`), from where the
dependable plan costs ``E_plan(L_next)``. The exploration stops when the round does not pay
for itself (a one-step look-ahead):

    E_plan(L) <= E_round + E_plan(L_next).

What the round would teach about the profile has no value in this
comparison: the plan's spread comes from the task's structural constants
(the plan regime's oscillation and judged error, measured on a trajectory
bank), not from the exploration's sample, so one more round does not narrow
it; the rate the round would refine is re-measured by every later round of
the plan's own. The rule needs a dependable plan now (no dependable plan:
explore on) and reads the validation losses only.

It is not judged while the exploration is still on the fresh model's plateau
(:func:`value_judged`): there the learning curve's rate cannot be read (the
trajectory has not left one oscillation of the plateau, or has left it for
fewer rounds than a level and a rate need, :mod:`depl_fl.tracking.plateau`),
and a plan from there extrapolates a rate measured on rounds that barely
moved the loss: long plans that a few more cheap rounds would have shortened.
The plateau is read from the first trained round on: the untrained network's
own loss is no point of it (it can lie far above the level the first round
falls to, where the plateau sits: 3.16 and then 2.24, 2.16, 2.27, 2.24).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

from depl_fl.tracking.plateau import ROUNDS_PAST_PLATEAU, rate_measurable


@dataclass(frozen=True)
class ExplorationValue:
    """The three energies the stop compares, in joules (see module doc)."""

    #: Predicted energy of the dependable plan from the model at hand (inf: no dependable plan).
    plan_j: float
    #: Energy of one more exploration round (the last round's).
    round_j: float
    #: Predicted energy of the dependable plan from the loss one more round would reach (inf: none).
    next_plan_j: float

    @property
    def saving_j(self) -> float:
        """What one more round is predicted to save on the plan: ``plan_j - next_plan_j``."""
        return self.plan_j - self.next_plan_j

    def stop(self) -> bool:
        """True when one more round does not pay for itself: ``plan_j <= round_j + next_plan_j``
        (and a dependable plan exists now)."""
        return math.isfinite(self.plan_j) and self.plan_j <= self.round_j + self.next_plan_j

    def to_dict(self) -> dict[str, float]:
        """The record of a judged round (``profile.values``)."""
        return {k: float(v) for k, v in asdict(self).items()}


def next_loss(trajectory: Sequence[float]) -> float:
    """The loss one more exploration round is expected to reach: the last loss minus the mean
    decrease of the last two rounds (of the last one when only one was run).

    Rounds that did not decrease the loss predict no decrease; never below 0.
    """
    losses = [float(v) for v in trajectory]
    if len(losses) < 2:
        return max(losses[-1], 0.0) if losses else math.nan
    recent = losses[-3:]
    decrease = (recent[0] - recent[-1]) / (len(recent) - 1)
    return max(losses[-1] - max(decrease, 0.0), 0.0)


def plan_energy(plan: Any) -> float:
    """A plan's predicted energy; ``inf`` when the plan is not dependable."""
    if not getattr(plan, "feasible", False):
        return math.inf
    return float(plan.predicted.get("cost_joules", math.inf))


def exploration_value(plan: Callable[[float], Any], *, round_j: float,
                      trajectory: Sequence[float], floor: float = 0.0) -> ExplorationValue:
    """The :class:`ExplorationValue` after an exploration round.

    Parameters
    ----------
    plan : callable
        ``plan(loss)``: the job's dependable plan from a model at validation
        loss ``loss``, with the profile fitted so far and what the exploration
        left of the deadline (None or an infeasible plan: no dependable plan).
    round_j : float
        Energy of one more exploration round.
    trajectory : sequence of float
        The worst variant's validation loss before the exploration and after
        every exploration round so far.
    floor : float
        The look-ahead's loss is at least this (``profile.explore.value_floor``: the target loss;
        0: no floor), see :func:`look_ahead_loss`.
    """
    losses = [float(v) for v in trajectory]
    plan_j = plan_energy(plan(losses[-1]))
    if not math.isfinite(plan_j):
        return ExplorationValue(math.inf, float(round_j), math.inf)
    return ExplorationValue(plan_j, float(round_j), plan_energy(plan(look_ahead_loss(losses, floor))))


def look_ahead_loss(trajectory: Sequence[float], floor: float) -> float:
    """The loss the value stop's look-ahead plans from: :func:`next_loss`, but not below ``floor``.

    With the target loss as the floor, the look-ahead never credits one more exploration round with
    reaching the target, where the plan from there has no round and costs nothing: whether a round
    meets the target is the met stop's to judge, with its margin, after the round. The straight
    extrapolation of the last two decreases overshoots a learning curve that slows down: on two
    development settings of 5 and 6 clients the loss it predicted lay below the loss the next round
    reached in 9 of 10 judged rounds (12 of 12 with ``group_sizes: by_cost``), and 6 (9) rounds were
    explored on for a look-ahead plan of no round, 3 (3) of them ending above the target
    (``benchmarks/results/exploration_few/development.md``).
    """
    return max(next_loss(trajectory), float(floor))


def value_judged(trajectory: Sequence[float], oscillation: float, rounds: int = ROUNDS_PAST_PLATEAU) -> bool:
    """Whether the value stop may judge the exploration after its last round.

    ``trajectory`` is the validation loss before the exploration and after every round. From the
    first round's loss ``L_1`` on (the untrained network's loss is no point of the plateau), it has
    left the plateau (one ``oscillation * sqrt(L_1)`` below ``L_1``) for enough rounds to read a
    learning curve's rate (:func:`depl_fl.tracking.plateau.rate_measurable`); ``oscillation`` is the
    job's ``o`` of ``eval_std = o sqrt(L)``, the one its plans use; ``rounds``: the rounds past the
    plateau it needs (``profile.explore.plateau_rounds``).
    """
    return rate_measurable([float(v) for v in trajectory][1:], float(oscillation), rounds)


def value_settings(explore: Mapping[str, Any]) -> tuple[bool, int]:
    """``(enabled, first round)`` of the value stop from ``profile.explore``.

    Enabled with ``stop_when_met`` (default true) and ``value_stop`` (``auto`` in ``conf/``: true with
    tracking, :mod:`depl_fl.runs.exploration_choice`; false where absent); it
    is judged after round ``value_from_round`` (default 4) and every later one.
    """
    enabled = bool(explore.get("stop_when_met", True)) and bool(explore.get("value_stop", False))
    return enabled, int(explore.get("value_from_round", 4))
