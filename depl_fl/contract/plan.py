"""Plan model (DESIGN.md section 3, contract version 1): load, validate, save."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from depl_fl.contract.scenario import read_json
from depl_fl.errors import ScenarioError

PLAN_VERSION = 1


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
        if not (self.deadline_s > 0.0) or self.deadline_s == float("inf"):
            raise ScenarioError(f"--deadline-s: must be a finite number > 0, got {self.deadline_s!r}")
        if not (self.target_loss >= 0.0) or self.target_loss == float("inf"):
            raise ScenarioError(f"--target-loss: must be a finite number >= 0, got {self.target_loss!r}")
        if self.max_rounds is not None and self.max_rounds < 1:
            raise ScenarioError(f"--max-rounds: must be >= 1, got {self.max_rounds!r}")


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


def plan_from_dict(raw: Any) -> Plan:
    """Parse a decoded plan document (structure only; ids are checked by ``evaluate``)."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"plan: expected a JSON object, got {type(raw).__name__}")
    if raw.get("version", PLAN_VERSION) != PLAN_VERSION:
        raise ScenarioError(f"plan.version: unsupported plan version {raw.get('version')!r}")
    rounds_raw = raw.get("rounds")
    if not isinstance(rounds_raw, list):
        raise ScenarioError("plan.rounds: missing or not a list")
    rounds = []
    for i, r in enumerate(rounds_raw):
        where = f"plan.rounds[{i}]"
        if not isinstance(r, dict):
            raise ScenarioError(f"{where}: expected an object")
        model, clients, levels = r.get("model"), r.get("clients"), r.get("levels", {})
        if not isinstance(model, str):
            raise ScenarioError(f"{where}.model: expected a model id string, got {model!r}")
        if not isinstance(clients, list) or not all(isinstance(c, str) for c in clients):
            raise ScenarioError(f"{where}.clients: expected a list of client id strings")
        if not isinstance(levels, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in levels.values()):
            raise ScenarioError(f"{where}.levels: expected an object mapping cluster id to level index")
        rounds.append(RoundDecision(model, tuple(clients), dict(levels)))
    predicted = raw.get("predicted", {}) or {}
    if not isinstance(predicted, dict):
        raise ScenarioError("plan.predicted: expected an object")
    planner_seconds = raw.get("planner_seconds", 0.0) or 0.0
    if isinstance(planner_seconds, bool) or not isinstance(planner_seconds, (int, float)):
        raise ScenarioError(f"plan.planner_seconds: expected a number, got {planner_seconds!r}")
    known = {"version", "method", "feasible", "rounds", "predicted", "planner_seconds"}
    return Plan(
        method=str(raw.get("method", "unknown")),
        feasible=bool(raw.get("feasible", True)),
        rounds=rounds,
        predicted=dict(predicted),
        planner_seconds=float(planner_seconds),
        extra={k: v for k, v in raw.items() if k not in known},
    )


def load_plan(path: str | Path) -> Plan:
    """Load a plan file."""
    return plan_from_dict(read_json(path, "plan"))


def save_plan(plan: Plan, path: str | Path) -> None:
    """Write ``plan`` as contract-version-1 JSON."""
    Path(path).write_text(json.dumps(plan_to_dict(plan), indent=2) + "\n", encoding="utf-8")
