"""Plan model (docs/FORMATS.md, contract version 1): load, validate, save."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from depl_fl.contract.scenario import read_json
from depl_fl.contract.schema import OpenSchema, Schema, parse
from depl_fl.errors import ScenarioError

PLAN_VERSION = 1
#: Longest accepted deadline (seconds, ~32 million years): keeps deadline / round time finite.
MAX_DEADLINE_S = 1e15


@dataclass(frozen=True)
class RoundDecision:
    """One round of a plan: the model, the participating clients, the level per active cluster."""

    model: str
    clients: tuple[str, ...]
    levels: dict[str, int]


@dataclass
class Plan:
    """A training plan as written to ``plan.json``."""

    method: str
    feasible: bool
    rounds: list[RoundDecision]
    predicted: dict[str, float] = field(default_factory=dict)
    planner_seconds: float = 0.0
    version: int = PLAN_VERSION
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Targets:
    """The user's targets: P[final loss <= target_loss] >= target_prob within deadline_s."""

    target_loss: float
    target_prob: float
    deadline_s: float
    max_rounds: int | None = None

    def __post_init__(self) -> None:
        if not (0.0 < self.target_prob < 1.0):
            raise ScenarioError(f"--target-prob: must be in (0, 1), got {self.target_prob!r}")
        if not (0.0 < self.deadline_s <= MAX_DEADLINE_S):
            raise ScenarioError(f"--deadline-s: must be a number in (0, {MAX_DEADLINE_S:g}], "
                                f"got {self.deadline_s!r}")
        if not (self.target_loss >= 0.0) or self.target_loss == float("inf"):
            raise ScenarioError(f"--target-loss: must be a finite number >= 0, got {self.target_loss!r}")
        if self.max_rounds is not None and self.max_rounds < 1:
            raise ScenarioError(f"--max-rounds: must be >= 1, got {self.max_rounds!r}")

    def limits_text(self) -> str:
        """The budget a plan must fit, in words: the deadline and, when set, the round cap.

        The round cap is named because it can be the limit that binds: a plan of cheap
        rounds that fits the deadline may need more rounds than the cap allows.
        """
        text = f"within {self.deadline_s:g} s"
        if self.max_rounds is not None:
            text += f" and {self.max_rounds} rounds (max_rounds)"
        return text


def shortfall_text(plan: Plan, target_prob: float) -> str:
    """Why an infeasible plan misses pi, in words, for the one-line error.

    The probability an infeasible plan reports is the best the search reached on its
    own Monte Carlo stream; a plan is accepted only when that estimate beats pi by its
    Monte Carlo error and holds on an independent stream, so a reported 0.954 can come
    with pi = 0.95, where "best reachable 0.954 < 0.95" would read as a contradiction.
    """
    best = (plan.predicted or {}).get("probability")
    if not isinstance(best, (int, float)):
        return "best reachable probability unknown"
    if best < target_prob:
        return f"best reachable probability {best:.4g}"
    return (f"the best plan found reaches {best:.4g} on the search's Monte Carlo, too close to "
            f"{target_prob:g} to be confirmed (it must beat it by the Monte Carlo error and hold on "
            "an independent check)")


#: How much longer a deadline the planner tries when no dependable plan exists (:func:`relief_text`).
RELAXED_DEADLINE_FACTOR = 4.0


def relaxed_targets(plan: Plan, targets: Targets) -> Targets | None:
    """The targets at :data:`RELAXED_DEADLINE_FACTOR` times the deadline: does more deadline help?

    Parameters
    ----------
    plan : Plan
        The infeasible plan at ``targets``.
    targets : Targets
        The user's targets.

    Returns
    -------
    Targets or None
        None when the plan's search never ran (no predicted probability: a job refused
        before planning has nothing to relax); else ``targets`` with the longer deadline,
        capped at :data:`MAX_DEADLINE_S`.
    """
    if not isinstance((plan.predicted or {}).get("probability"), (int, float)):
        return None
    return replace(targets, deadline_s=min(targets.deadline_s * RELAXED_DEADLINE_FACTOR, MAX_DEADLINE_S))


#: The knobs' names in the one-line error of a job (Hydra) and of ``depl-fl plan`` (options).
JOB_KNOBS = {"deadline": "target.deadline_s", "prob": "target.prob", "loss": "target.loss",
             "rounds": "target.max_rounds"}
CLI_KNOBS = {"deadline": "--deadline-s", "prob": "--target-prob", "loss": "--target-loss",
             "rounds": "--max-rounds"}
#: Below this reachable probability no lower target probability is worth naming.
_MIN_NAMED_PROB = 0.01
#: A longer deadline that raises the reachable probability by more than this still helps.
_GROWS = 0.01


def relief_text(best: Plan, relaxed: Plan | None, targets: Targets,
                knobs: dict[str, str] | None = None) -> str:
    """What would make a dependable plan exist, in words, for the one-line error.

    Parameters
    ----------
    best : Plan
        The infeasible plan at the user's targets.
    relaxed : Plan or None
        The planner's answer at :data:`RELAXED_DEADLINE_FACTOR` times the deadline
        (None: not tried).
    targets : Targets
        The user's targets (the deadline that remains for training).
    knobs : dict, optional
        The names of the deadline, probability and loss settings (default :data:`JOB_KNOBS`).

    Returns
    -------
    str
        Empty without ``relaxed``; else, after "; ", more deadline and by how much
        when the relaxed plan exists; else the probability the longer deadline
        reaches and, when it is no higher than at the deadline, that more deadline
        alone does not make one (a ceiling of the loss model, not the time, binds),
        with the target probability that may, and a larger round cap when the
        best plan uses every round ``targets.max_rounds`` allows.
    """
    if relaxed is None:
        return ""
    names = knobs or JOB_KNOBS
    factor = f"{RELAXED_DEADLINE_FACTOR:g}x the deadline"
    if relaxed.feasible:
        need = float((relaxed.predicted or {}).get("time_s", math.nan)) - targets.deadline_s
        more = f"by at least {need:.0f} s" if math.isfinite(need) and need > 0 else "a little"
        return f"; with {factor} a plan exists: a {names['deadline']} longer {more} makes one"
    here, there = ((p.predicted or {}).get("probability") for p in (best, relaxed))
    if not isinstance(there, (int, float)):
        return f"; {factor} does not make one either"
    reach = here if isinstance(here, (int, float)) else there  # at the user's deadline
    lower = f"a {names['prob']} below {reach:.3g} or " if reach >= _MIN_NAMED_PROB else ""
    if targets.max_rounds is not None and len(best.rounds) >= targets.max_rounds and "rounds" in names:
        lower = f"a larger {names['rounds']}, {lower}"  # the cap binds: more deadline cannot add rounds
    if isinstance(here, (int, float)) and there > here + _GROWS:
        return (f"; {factor} reaches {there:.4g}, not enough: a much longer {names['deadline']}, "
                f"{lower}a higher {names['loss']} may")
    return (f"; {factor} reaches {there:.4g}: more deadline alone does not make one, "
            f"{lower}a higher {names['loss']} may")


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """Serialise a plan to the contract's JSON structure."""
    doc: dict[str, Any] = dict(plan.extra)
    doc.update({
        "version": plan.version,
        "method": plan.method,
        "feasible": plan.feasible,
        "rounds": [{"model": r.model, "clients": list(r.clients), "levels": dict(r.levels)}
                   for r in plan.rounds],
        "predicted": dict(plan.predicted),
        "planner_seconds": plan.planner_seconds,
    })
    return doc


class _RoundDoc(Schema):
    model: Annotated[str, Field(strict=True)]
    clients: list[Annotated[str, Field(strict=True)]]
    levels: dict[str, Annotated[int, Field(strict=True)]] = {}


class _PlanDoc(OpenSchema):
    version: Literal[1] = PLAN_VERSION
    method: Annotated[str, Field(strict=True)] = "unknown"
    feasible: Annotated[bool, Field(strict=True)] = True
    rounds: list[_RoundDoc]
    predicted: dict[str, Any] | None = None
    planner_seconds: Annotated[float, Field(strict=True)] | None = None


def plan_from_dict(raw: Any) -> Plan:
    """Parse a decoded plan document (structure only; ids are checked by ``evaluate``).

    Raises
    ------
    ScenarioError
        With one line naming the field, e.g. ``plan.rounds[0].model: expected a string, got 3``.
    """
    if not isinstance(raw, dict):
        raise ScenarioError(f"plan: expected a JSON object, got {type(raw).__name__}")
    doc = parse(_PlanDoc, raw, root="plan")
    return Plan(
        method=doc.method,
        feasible=doc.feasible,
        rounds=[RoundDecision(r.model, tuple(r.clients), dict(r.levels)) for r in doc.rounds],
        predicted=dict(doc.predicted or {}),
        planner_seconds=float(doc.planner_seconds or 0.0),
        extra=dict(doc.model_extra or {}),
    )


def load_plan(path: str | Path) -> Plan:
    """Load a plan file."""
    return plan_from_dict(read_json(path, "plan"))


def save_plan(plan: Plan, path: str | Path) -> None:
    """Write ``plan`` as contract-version-1 JSON."""
    Path(path).write_text(json.dumps(plan_to_dict(plan), indent=2) + "\n", encoding="utf-8")
