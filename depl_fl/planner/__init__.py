"""The DepL planner: data -> model -> resources, checked by Monte Carlo.

Public API: :func:`make_plan`, :func:`plan_holds`, :class:`PlanStart`, :func:`predict_quantile`.
Imports numpy and scipy only (never flwr or torch).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from depl_fl.contract.plan import Plan, RoundDecision, Targets
from depl_fl.contract.scenario import Scenario
from depl_fl.errors import ScenarioError
from depl_fl.planner.baselines import plan_expectation, plan_full
from depl_fl.planner.checking import confirm_seed, finish_plan, probability, required_probability, totals
from depl_fl.planner.context import PlanContext
from depl_fl.planner.depl import Candidate, no_round_wins, plan_depl
from depl_fl.planner.quantile import GUARANTEES, PlanStart, kappa, predict_quantile

METHODS = ("depl", "expectation", "full", "optimum")

__all__ = ["METHODS", "GUARANTEES", "PlanStart", "kappa", "make_plan", "no_better_start", "plan_holds",
           "predict_quantile"]


def make_plan(scenario: Scenario, targets: Targets, method: str = "depl", eta: float | None = None,
              guarantee: str = "gaussian", seed: int = 0, start: PlanStart | None = None,
              mc_trajectories: int = 20000) -> Plan:
    """Plan training that reaches ``target_loss`` with ``target_prob`` at minimum cost.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    targets : Targets
        Target loss and probability, deadline, optional round limit.
    method : {"depl", "expectation", "full", "optimum"}
        DepL, the mean-based baseline, plain FedAvg made dependable, or
        exhaustive search (small instances).
    eta : float, optional
        Discretisation step of the expanded graph, in [0.001, 1]; None (the
        default) chooses it from the scenario (:func:`.context.auto_eta`).
        The step used is recorded in the plan (``eta``).
    guarantee : {"gaussian", "cantelli"}
        How the planner predicts the pi-quantile (see :mod:`.quantile`).
    seed : int
        Seed of every Monte Carlo run.
    start : PlanStart, optional
        Re-plan from the middle of a run.
    mc_trajectories : int
        Trajectories of the final Monte Carlo check (>= 20,000 to call a plan
        dependable under the contract).

    Returns
    -------
    Plan
        ``feasible`` is False when no dependable plan exists; then
        ``predicted["probability"]`` is the best probability reached.
    """
    started = time.perf_counter()
    if method not in METHODS:
        raise ScenarioError(f"--method: unknown method {method!r} (choose from {', '.join(METHODS)})")
    if guarantee not in GUARANTEES:
        raise ScenarioError(f"--guarantee: unknown guarantee {guarantee!r} "
                            f"(choose from {', '.join(GUARANTEES)})")
    if int(mc_trajectories) < 1:
        raise ScenarioError(f"mc_trajectories: must be >= 1, got {mc_trajectories!r}")
    n = int(mc_trajectories)
    ctx = PlanContext.build(scenario, targets, start, eta)
    plan = _plan_with(ctx, method, guarantee, seed, n, started)
    plan.extra["eta"] = ctx.eta
    plan.extra["planner_info"]["eta_source"] = "user" if eta is not None else "auto"
    return plan


def _plan_with(ctx: PlanContext, method: str, guarantee: str, seed: int, n: int,
               started: float) -> Plan:
    """Dispatch to the method (see :func:`make_plan`)."""
    if method == "full":
        rounds, ok, best_p = plan_full(ctx, seed, n)
        return finish_plan(ctx, method, rounds, ok, started, seed, n,
                           probability_override=None if ok else best_p)
    if method == "expectation":
        rounds, info = plan_expectation(ctx)
        if rounds is None:
            full_rounds, _, best_p = plan_full(ctx, seed, n)
            return finish_plan(ctx, method, full_rounds, False, started, seed, n, info,
                               probability_override=best_p)
        return finish_plan(ctx, method, rounds, True, started, seed, n, info, confirm=False)
    if method == "optimum":
        from depl_fl.planner.optimum import plan_optimum
        return plan_optimum(ctx, seed, n, started)
    return _no_round_plan(ctx, method, guarantee, seed, n, started) \
        or _depl_confirmed(ctx, method, guarantee, seed, n, started)


def _no_round_plan(ctx: PlanContext, method: str, guarantee: str, seed: int, n: int,
                   started: float) -> Plan | None:
    """The plan of no round when DepL's search would return it (:func:`.depl.no_round_wins`), else None.

    The same plan document as the search's, its ``planner_info`` aside: the
    cheapest candidate goes through the same confirmation on the independent
    stream (:func:`.checking.finish_plan`); where it fails there, the search runs.
    """
    if not no_round_wins(ctx, guarantee, seed, n):
        return None
    plan = finish_plan(ctx, method, [], True, started, seed, n,
                       {"shortcut": "no round: the start meets the target"})
    return plan if plan.feasible else None


def _depl_confirmed(ctx: PlanContext, method: str, guarantee: str, seed: int, n: int,
                    started: float) -> Plan:
    """DepL's plan, confirmed on an independent stream; its fallbacks when that fails.

    In order: DepL's cheapest candidate; else its next cheapest dependable
    candidates (runners-up); else the cheaper of its most probable candidate
    and plain FedAvg that holds on the independent stream; else an infeasible
    plan reporting the best probability reached.
    """
    best, most, info, others = plan_depl(ctx, guarantee, seed, n)
    if best is not None:
        plan = _first_confirmed(ctx, method, [best, *others], started, seed, n, info)
        if plan is not None:
            return plan
    confirmed: list[Plan] = []
    if best is not None and most is not None and most.rounds != best.rounds:
        # The cheapest plan sat at pi on the search's stream and missed it on the independent
        # one (within its Monte Carlo error, with no time left to extend it); the most probable
        # plan the search saw has room to spare: a dependable plan if it holds there.
        plan = finish_plan(ctx, method, most.rounds, True, started, seed, n,
                           {**info, "fallback": "most probable"})
        if plan.feasible:
            confirmed.append(plan)
    full_rounds, full_ok, full_p = plan_full(ctx, seed, n)
    if full_ok:  # DepL's search missed a plan that plain FedAvg finds: still return it.
        plan = finish_plan(ctx, method, full_rounds, True, started, seed, n, {**info, "fallback": "full"})
        if plan.feasible:
            confirmed.append(plan)
        elif best is None and not confirmed:
            return plan
    if confirmed:
        return min(confirmed, key=lambda p: p.predicted["cost_joules"])
    if most is not None and most.prob > full_p:
        return finish_plan(ctx, method, most.rounds, False, started, seed, n, info,
                           probability_override=most.prob)
    return finish_plan(ctx, method, full_rounds, False, started, seed, n, info,
                       probability_override=full_p)


def _first_confirmed(ctx: PlanContext, method: str, candidates: Sequence[Candidate], started: float,
                     seed: int, n: int, info: dict) -> Plan | None:
    """The first of ``candidates`` (cheapest first) that holds on the independent stream.

    A later one is a runner-up: ``info`` then says the cheapest missed and which one held.
    """
    for rank, cand in enumerate(candidates):
        extra = info if rank == 0 else {**info, "fallback": f"runner-up {rank}"}
        plan = finish_plan(ctx, method, cand.rounds, True, started, seed, n, extra)
        if plan.feasible:
            return plan
        info["cheapest_plan"] = "missed pi on the independent Monte Carlo"
    return None


def plan_holds(scenario: Scenario, targets: Targets, rounds: Sequence[RoundDecision],
               start: PlanStart | None = None, seed: int = 0,
               mc_trajectories: int = 20000) -> tuple[bool, float]:
    """Whether ``rounds`` still pass the planner's acceptance test from ``start``.

    The test a plan of :func:`make_plan` passes before it is returned: within
    the remaining deadline and round limit, and a Monte Carlo probability of
    ``P[L_K <= target_loss]`` (on the independent stream of the final check,
    ``mc_trajectories`` trajectories) of at least ``pi`` plus one Monte Carlo
    standard error (the search's acceptance threshold, the stricter of the two).
    A plan that passes is one :func:`make_plan` could have returned from
    ``start``; tracking keeps it instead of re-planning.

    Returns
    -------
    tuple of (bool, float)
        Whether it holds, and the probability (NaN for no round or a plan out
        of the remaining budget).
    """
    rounds = list(rounds)
    n = int(mc_trajectories)
    ctx = PlanContext.build(scenario, targets, start, eta=None)
    if not rounds or len(rounds) > ctx.max_rounds or totals(ctx, rounds)[1] > ctx.deadline * (1.0 + 1e-9):
        return False, float("nan")
    p = probability(ctx, rounds, n, confirm_seed(seed))
    return p >= required_probability(targets.target_prob, n), p


def no_better_start(later: PlanStart, earlier: PlanStart) -> bool:
    """Whether ``later`` is a start no better than ``earlier`` for :func:`make_plan`'s feasibility.

    No lower loss mean or spread, no less time or fewer rounds used, the same
    previous model and client set. With the same scenario and targets, DepL's
    feasibility is monotone in these inputs: from a start no better than one
    without a dependable plan, the planner finds none either. Why: a higher
    start loss or spread moves the Monte Carlo trajectories' final losses up
    or wider while the target stays, so every candidate's probability of
    ending below it falls, and less time or fewer rounds left only take plans
    away from every search and fallback (the FedAvg plan's rounds included).
    The planner is a search over Monte Carlo estimates, so this is checked
    rather than proved: ``tests/test_planner_monotone.py`` sweeps a grid of
    starts and fails where feasibility is not monotone.
    """
    return (later.loss_mean >= earlier.loss_mean and later.loss_std >= earlier.loss_std
            and later.elapsed_s >= earlier.elapsed_s and later.rounds_done >= earlier.rounds_done
            and later.previous_model == earlier.previous_model
            and later.previous_clients == earlier.previous_clients)
