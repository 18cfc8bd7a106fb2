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
from depl_fl.identity_memo import LastObjectMemo
from depl_fl.planner.limits import check_ranges
from depl_fl.planner.quantile import LossPropagator, PlanStart, propagator_for, start_moments
from depl_fl.planner.resources import ClientSet, Option, round_options
from depl_fl.planner.trajectories import TrajectoryCache

# Rounds considered when the user gives no max_rounds.
DEFAULT_MAX_ROUNDS = 1000
# Range of the discretisation step: below ETA_MIN the expanded graph's layers
# (O(1/eta) vertices per model after dominance, O(1/eta^2) cells in the
# dominance grid) outgrow memory; the automatic choice stays in [ETA_AUTO_MIN, ETA_AUTO_MAX].
ETA_MIN = 1e-3
ETA_AUTO_MIN = 0.05
ETA_AUTO_MAX = 0.2
# Round options by (client ids, model) of the last scenario object planned on: they depend on the
# scenario alone, and a tracked run re-plans on the same object every round until a client fails.
_OPTIONS: LastObjectMemo[dict[tuple[tuple[str, ...], str], list[Option]]] = LastObjectMemo()


def auto_eta(scenario: Scenario, targets: Targets, start_mean: float) -> float:
    """The discretisation step used when the user gives none.

    A bin of the expanded graph is ``eta * span / 4`` wide (``span`` the
    distance from the start loss to the target); the step is chosen so that a
    bin is no wider than a quarter of a typical round's loss noise (the
    median over models of the run profiles' std at the start loss), i.e.
    ``eta = noise / span``: states closer than the noise of one round are
    merged, farther ones kept apart. Clamped to ``[ETA_AUTO_MIN, ETA_AUTO_MAX]``.
    """
    span = max(abs(start_mean - targets.target_loss), 1e-9)
    noise = float(np.median([np.interp(start_mean, p.levels, p.std)
                             for p in scenario.loss.run.values()]))
    return float(min(max(noise / span, ETA_AUTO_MIN), ETA_AUTO_MAX))


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
    eta: float
    mc_cache: TrajectoryCache = field(init=False, repr=False)
    # Expanded graphs already built, by (data ratio, edges, round price): see plan_for_set.
    graphs: dict[tuple, Any] = field(init=False, repr=False, default_factory=dict)
    # Pareto fronts of round options already computed, by (client ids, model): see options().
    _options: dict[tuple[tuple[str, ...], str], list[Option]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # A partial, not a bound method: no reference cycle, so the cache is
        # freed as soon as the planning call drops its context.
        std = self.start_std if self.start is not None else 0.0
        self.mc_cache = TrajectoryCache(self.scenario, self.previous,
                                        partial(_start_losses, self.start_mean, std),
                                        previous_clients=self.previous_clients)
        self._options = _OPTIONS.get(self.scenario, dict)

    def start_losses(self, n: int, rng: np.random.Generator) -> np.ndarray | float:
        """Initial losses of ``n`` trajectories (a draw from ``rng`` when the start loss is uncertain)."""
        std = self.start_std if self.start is not None else 0.0
        return _start_losses(self.start_mean, std, n, rng)

    def options(self, cset: ClientSet, model: str) -> list[Option]:
        """:func:`.resources.round_options` of ``model`` on ``cset``, computed once per scenario object.

        The list is shared between callers (and the planning calls on the same
        scenario object): read it, do not modify it.
        """
        key = (cset.ids, model)
        opts = self._options.get(key)
        if opts is None:
            opts = self._options[key] = round_options(self.scenario, cset, model)
        return opts

    @classmethod
    def build(cls, scenario: Scenario, targets: Targets, start: PlanStart | None,
              eta: float | None) -> "PlanContext":
        """Check the inputs and derive the remaining budget (``eta=None``: :func:`auto_eta`)."""
        check_ranges(scenario)
        mean, var, previous = start_moments(scenario, start)
        if eta is None:
            eta = auto_eta(scenario, targets, mean)
        if not (isinstance(eta, (int, float)) and math.isfinite(eta) and ETA_MIN <= eta <= 1.0):
            raise ScenarioError(f"--eta: must be in [{ETA_MIN:g}, 1], got {eta!r}")
        elapsed = start.elapsed_s if start else 0.0
        done = start.rounds_done if start else 0
        limit = targets.max_rounds if targets.max_rounds is not None else DEFAULT_MAX_ROUNDS + done
        span = abs(mean - targets.target_loss)
        width = eta * max(span, 0.05 * max(mean, targets.target_loss, 1e-3)) / 4.0
        return cls(scenario, targets, start, propagator_for(scenario),
                   targets.deadline_s - elapsed, max(limit - done, 0), mean, var, previous,
                   width, float(eta))

    @property
    def previous_clients(self) -> tuple[str, ...] | None:
        """Client set the start model last trained on (None: every client, see :class:`PlanStart`)."""
        return self.start.previous_clients if self.start is not None else None

    @property
    def start_std(self) -> float:
        """Standard deviation of the start loss."""
        return math.sqrt(self.start_var)


def _start_losses(mean: float, std: float, n: int, rng: np.random.Generator) -> np.ndarray | float:
    """``mean`` when the start loss is known, else ``n`` draws of ``max(N(mean, std**2), 0)``."""
    if std == 0.0:
        return mean
    return np.maximum(rng.normal(mean, std, n), 0.0)
