"""What every planner method needs to know: scenario, targets, where planning starts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from depl_fl.contract.plan import Targets
from depl_fl.contract.scenario import Scenario
from depl_fl.errors import ScenarioError
from depl_fl.planner.quantile import LossPropagator, PlanStart, start_moments
from depl_fl.planner.trajectories import TrajectoryCache

# Rounds considered when the user gives no max_rounds.
DEFAULT_MAX_ROUNDS = 1000


@dataclass
class PlanContext:
    """Remaining budget and start state of one planning call."""

    scenario: Scenario
    targets: Targets
    start: PlanStart | None
    prop: LossPropagator
    deadline: float          # remaining time
    max_rounds: int          # remaining rounds
    start_mean: float
    start_var: float
    previous: str | None
    bin_width: float
    mc_cache: TrajectoryCache = field(init=False, repr=False)
    # Expanded graphs already built, by (data ratio, edges, round price): see plan_for_set.
    graphs: dict[tuple, Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        # A partial, not a bound method: no reference cycle, so the cache is
        # freed as soon as the planning call drops its context.
        std = self.start_std if self.start is not None else 0.0
        self.mc_cache = TrajectoryCache(self.scenario, self.previous,
                                        partial(_start_losses, self.start_mean, std))

    def start_losses(self, n: int, rng: np.random.Generator) -> np.ndarray | float:
        """Initial losses of ``n`` trajectories (a draw from ``rng`` when the start loss is uncertain)."""
        std = self.start_std if self.start is not None else 0.0
        return _start_losses(self.start_mean, std, n, rng)

    @classmethod
    def build(cls, scenario: Scenario, targets: Targets, start: PlanStart | None,
              eta: float) -> "PlanContext":
        """Check the inputs and derive the remaining budget."""
        if not (isinstance(eta, (int, float)) and 0.0 < eta <= 1.0):
            raise ScenarioError(f"--eta: must be in (0, 1], got {eta!r}")
        mean, var, previous = start_moments(scenario, start)
        elapsed = start.elapsed_s if start else 0.0
        done = start.rounds_done if start else 0
        limit = targets.max_rounds if targets.max_rounds is not None else DEFAULT_MAX_ROUNDS + done
        span = abs(mean - targets.target_loss)
        width = eta * max(span, 0.05 * max(mean, targets.target_loss, 1e-3)) / 4.0
        return cls(scenario, targets, start, LossPropagator(scenario),
                   targets.deadline_s - elapsed, max(limit - done, 0), mean, var, previous,
                   width)

    @property
    def start_std(self) -> float:
        """Standard deviation of the start loss."""
        return math.sqrt(self.start_var)


def _start_losses(mean: float, std: float, n: int, rng: np.random.Generator) -> np.ndarray | float:
    """``mean`` when the start loss is known, else ``n`` draws of ``max(N(mean, std**2), 0)``."""
    if std == 0.0:
        return mean
    return np.maximum(rng.normal(mean, std, n), 0.0)
