"""Baselines: ``expectation`` (state of the art, mean only) and ``full`` (plain FedAvg).

``expectation``
    The PACT-style planner (arXiv 2212.02304): the same three decoupled
    decisions as DepL -- data, model graph, levels -- but the goal is
    ``E[L_K] <= L*`` (``kappa = 0``) and there is no probability check. It is
    as cheap as a mean-based plan can be and, by construction, misses pi
    often. Its reported probability is the Monte Carlo one (informational);
    ``feasible`` means "the mean reaches the target".
``full``
    The full model on every client (capacity permitting: the ``max_clients``
    largest clients of each cluster), every cluster at its fastest level, for
    the fewest rounds whose Monte Carlo probability reaches pi.
"""

from __future__ import annotations

import math

import numpy as np

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.semantics import judged_probability, round_time, simulate_final_losses
from depl_fl.planner.checking import required_probability, start_losses, totals
from depl_fl.planner.context import PlanContext
from depl_fl.planner.data_selection import candidate_sets, rank_sets
from depl_fl.planner.depl import SETS_LARGE, SETS_SMALL, plan_for_set, reference_model


def plan_expectation(ctx: PlanContext) -> tuple[list[RoundDecision] | None, dict]:
    """Cheapest plan whose predicted mean final loss reaches the target (no probability)."""
    scen = ctx.scenario
    models = [m.id for m in scen.models]
    ranked = rank_sets(ctx, candidate_sets(scen, reference_model(ctx)), 0.0, models)
    limit = SETS_SMALL if len(scen.clients) <= 12 and ctx.max_rounds <= 60 else SETS_LARGE
    chosen = [c for s, c in ranked if math.isfinite(s)][:limit] or [c for _, c in ranked[:limit]]
    best, best_cost = None, math.inf
    for cset in chosen:
        rounds = plan_for_set(ctx, cset, 0.0)
        if rounds is None:
            continue
        cost = totals(ctx, rounds)[0]
        if cost < best_cost:
            best, best_cost = rounds, cost
    return best, {"sets_planned": len(chosen)}


def full_decision(ctx: PlanContext) -> RoundDecision:
    """One FedAvg round: full model, largest clients up to capacity, fastest levels."""
    scen = ctx.scenario
    chosen: list[str] = []
    levels: dict[str, int] = {}
    for cluster in scen.clusters:
        members = sorted((c for c in scen.clients if c.cluster == cluster.id),
                         key=lambda c: -c.num_samples)[:cluster.max_clients]
        if not members:
            continue
        chosen.extend(c.id for c in members)
        levels[cluster.id] = max(range(len(cluster.levels)),
                                 key=lambda i: (cluster.levels[i].flops_per_s,
                                                -cluster.levels[i].joules_per_flop))
    return RoundDecision(reference_model(ctx), tuple(chosen), levels)


def plan_full(ctx: PlanContext, seed: int, n: int) -> tuple[list[RoundDecision], bool, float]:
    """Fewest FedAvg rounds that are dependable by Monte Carlo.

    Returns
    -------
    tuple
        ``(rounds, dependable, best probability seen)``; when not dependable,
        ``rounds`` is the most probable prefix within the deadline and round limit.
    """
    decision = full_decision(ctx)
    t = round_time(ctx.scenario, decision)
    limit = min(ctx.max_rounds, int(math.floor(ctx.deadline * (1.0 + 1e-9) / t)))
    need = required_probability(ctx.targets.target_prob, n)
    # Round-by-round with one generator: the same stream as a fresh Monte
    # Carlo of each prefix with this seed (see checking.final_losses).
    rng = np.random.default_rng(seed)
    losses = np.array(np.broadcast_to(start_losses(ctx, n, rng), (n,)), dtype=float)
    previous, trained_on = ctx.previous, ctx.previous_clients
    best_k, best_p = 0, float(np.mean(losses <= ctx.targets.target_loss))
    if best_p >= need:  # the target is met before any round: the zero-round plan
        return [], True, best_p
    for k in range(1, limit + 1):
        losses = simulate_final_losses(ctx.scenario, [decision], n, rng, start_loss=losses,
                                       previous_model=previous, judged=False,
                                       previous_clients=trained_on)
        previous, trained_on = decision.model, decision.clients
        p = judged_probability(ctx.scenario, decision, losses, ctx.targets.target_loss)
        if p > best_p:
            best_k, best_p = k, p
        if p >= need:
            return [decision] * k, True, p
    return [decision] * best_k, False, best_p
