"""Monte Carlo checks of candidate plans (through :mod:`depl_fl.contract.semantics`) and plan assembly."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from depl_fl.contract.plan import Plan, RoundDecision
from depl_fl.contract.semantics import empirical_quantile, round_energy, round_time
from depl_fl.planner.context import PlanContext
from depl_fl.planner.resources import Option

# A plan is accepted when its Monte Carlo probability exceeds pi by this many
# Monte Carlo standard errors, so that an independent check (another seed)
# does not fall below pi by more than noise.
CONFIDENCE_Z = 1.0
# Trajectories used while searching (the final check uses mc_trajectories).
SEARCH_TRAJECTORIES = 5000


def required_probability(prob: float, n: int) -> float:
    """Acceptance threshold of a Monte Carlo estimate from ``n`` trajectories."""
    return prob + CONFIDENCE_Z * math.sqrt(prob * (1.0 - prob) / n)


def start_losses(ctx: PlanContext, n: int, rng: np.random.Generator) -> np.ndarray | float:
    """Initial losses of the trajectories (a draw when the start loss is uncertain)."""
    return ctx.start_losses(n, rng)


def final_losses(ctx: PlanContext, rounds: Sequence[RoundDecision], n: int, seed: int) -> np.ndarray:
    """Final losses of ``n`` trajectories of ``rounds`` from the plan's start state.

    The same losses as ``simulate_final_losses`` with ``default_rng(seed)``
    after the start draws, resumed from a shared prefix when one was
    simulated before (see :mod:`.trajectories`); the array is read-only.
    """
    return ctx.mc_cache.final_losses(rounds, n, seed)


def probability(ctx: PlanContext, rounds: Sequence[RoundDecision], n: int, seed: int) -> float:
    """Monte Carlo ``P[L_K <= target_loss]``."""
    losses = final_losses(ctx, rounds, n, seed)
    return float(np.mean(losses <= ctx.targets.target_loss))


def totals(ctx: PlanContext, rounds: Sequence[RoundDecision]) -> tuple[float, float]:
    """``(cost, time)`` of rounds via the cost model, each distinct round evaluated once."""
    seen: dict[tuple, tuple[float, float]] = {}
    cost = time_s = 0.0
    for r in rounds:
        key = (r.model, r.clients, tuple(sorted(r.levels.items())))
        if key not in seen:
            seen[key] = (round_energy(ctx.scenario, r), round_time(ctx.scenario, r))
        cost += seen[key][0]
        time_s += seen[key][1]
    return cost, time_s


def decisions(models: Sequence[str], options: Sequence[Option],
              clients: Sequence[str]) -> list[RoundDecision]:
    """Plan rounds from per-round models and level options on a fixed client set."""
    ids = tuple(clients)
    return [RoundDecision(m, ids, o.level_map()) for m, o in zip(models, options)]


def finish_plan(ctx: PlanContext, method: str, rounds: list[RoundDecision], feasible: bool,
                started: float, seed: int, n: int, info: dict[str, Any] | None = None,
                probability_override: float | None = None) -> Plan:
    """Assemble the :class:`Plan`: totals from the cost model, probability from Monte Carlo.

    ``probability_override`` is used for infeasible results, whose reported
    probability is the best one reachable rather than that of ``rounds``.
    """
    cost, time_s = totals(ctx, rounds)
    losses = final_losses(ctx, rounds, n, seed)
    prob = float(np.mean(losses <= ctx.targets.target_loss))
    predicted = {
        "cost_joules": cost,
        "time_s": time_s,
        "loss_quantile": empirical_quantile(losses, ctx.targets.target_prob),
        "probability": prob if probability_override is None else max(prob, probability_override),
    }
    extra = {"planner_info": {"trajectories": n, "seed": seed, **(info or {})}}
    return Plan(method=method, feasible=feasible, rounds=rounds, predicted=predicted,
                planner_seconds=time.perf_counter() - started, extra=extra)
