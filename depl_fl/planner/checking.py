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
# The reported probability is re-estimated on a stream the search never used
# (seed + CONFIRM_OFFSET); a plan short of pi there gets at most
# CONFIRM_EXTEND more rounds.
CONFIRM_OFFSET = 1_000_003
CONFIRM_EXTEND = 3


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
    return [RoundDecision(m, ids, o.level_map()) for m, o in zip(models, options, strict=True)]


def confirm_seed(seed: int) -> int:
    """Seed of the independent confirmation (never used while searching)."""
    return seed + CONFIRM_OFFSET


def stderr(prob: float, n: int) -> float:
    """Monte Carlo standard error of a probability estimated from ``n`` trajectories."""
    return math.sqrt(max(prob * (1.0 - prob), 0.0) / n)


def _confirmed(ctx: PlanContext, rounds: list[RoundDecision], n: int,
               seed: int) -> tuple[list[RoundDecision], bool]:
    """Rounds whose independent Monte Carlo reaches pi, adding copies of the last round if needed.

    The search accepts a plan on its own random stream, which favours plans
    that were lucky on it; the confirmation draws a fresh stream. When it
    falls short of pi, the last round is repeated (at most
    ``CONFIRM_EXTEND`` times, within the deadline and round limit).
    """
    pi = ctx.targets.target_prob
    out = list(rounds)
    for _ in range(CONFIRM_EXTEND + 1):
        if probability(ctx, out, n, confirm_seed(seed)) >= pi:
            return out, True
        if not out or len(out) + 1 > ctx.max_rounds \
                or totals(ctx, out + [out[-1]])[1] > ctx.deadline * (1.0 + 1e-9):
            break
        out.append(out[-1])
    return list(rounds), False


def finish_plan(ctx: PlanContext, method: str, rounds: list[RoundDecision], feasible: bool,
                started: float, seed: int, n: int, info: dict[str, Any] | None = None,
                probability_override: float | None = None, confirm: bool = True) -> Plan:
    """Assemble the :class:`Plan`: totals from the cost model, probability from Monte Carlo.

    The reported probability comes from an independent Monte Carlo
    (:func:`confirm_seed`), not the stream the search selected the plan on,
    so it agrees with ``depl-fl evaluate`` within ``probability_stderr``; a
    feasible plan is first confirmed on that stream (see :func:`_confirmed`),
    and reported infeasible if it cannot be. ``probability_override`` is used
    for infeasible results, whose reported probability is the best one
    reachable rather than that of ``rounds``.
    """
    info = dict(info or {})
    if feasible and confirm:
        search_p = probability(ctx, rounds, n, seed)
        rounds, feasible = _confirmed(ctx, rounds, n, seed)
        info["search_probability"] = search_p
        if not feasible:
            info["confirmation"] = "failed: the plan misses pi on an independent Monte Carlo"
    cost, time_s = totals(ctx, rounds)
    losses = final_losses(ctx, rounds, n, confirm_seed(seed))
    prob = float(np.mean(losses <= ctx.targets.target_loss))
    reported = prob if probability_override is None else max(prob, probability_override)
    predicted = {
        "cost_joules": cost,
        "time_s": time_s,
        "loss_quantile": float(empirical_quantile(losses, ctx.targets.target_prob)),
        "probability": reported,
        "probability_stderr": stderr(reported, n),
    }
    extra = {"planner_info": {"trajectories": n, "seed": seed, "check_seed": confirm_seed(seed),
                              **info}}
    return Plan(method=method, feasible=feasible, rounds=rounds, predicted=predicted,
                planner_seconds=time.perf_counter() - started, extra=extra)
