"""Exhaustive search (``method="optimum"``) for small instances.

Search space (documented restriction of "all plans"):

* one client set for the whole plan: **every** capacity-feasible subset of
  the clients (at most ``MAX_CLIENTS`` clients; subsets with equal sample
  totals share their loss simulation, since the loss depends on the set only
  through ``r``);
* model sequences with at most ``MAX_SWITCHES`` switches (default 1: "``m1``
  for ``k1`` rounds, then ``m2`` for ``k2`` rounds"; 2 switches multiply the
  search tree by ~10 -- 3 clients, 3 models, 25 rounds took 15-120 s instead
  of 1-5 s), every length up to ``max_rounds``, only allowed switches;
* one level vector per block, from the exact Pareto front of the set and
  block model (:func:`~depl_fl.planner.resources.round_options`), all
  combinations enumerated under the deadline.

Every sequence is evaluated by Monte Carlo of the exact semantics
(:func:`depl_fl.contract.semantics.simulate_final_losses`, one round at a time, with
common random numbers per round index) on ``SEARCH_TRAJECTORIES``
trajectories; a sequence that looks dependable is re-checked on
``mc_trajectories`` (the same acceptance rule as DepL's: ``P >= pi + se``).
Branch and bound keeps it fast: a depth-first search per sample total, pruned
when the cheapest possible cost of the prefix reaches the incumbent, when the
fastest possible time passes the deadline, and never extending a dependable
prefix (every extra round costs more). The incumbent starts from the
dependable ``full`` plan and the DepL plan (when ``seed_incumbents``), so the
result is the cheapest of those and of the whole space above.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from depl_fl.contract.plan import Plan, RoundDecision
from depl_fl.contract.semantics import simulate_final_losses
from depl_fl.errors import ScenarioError
from depl_fl.planner.checking import (
    decisions,
    finish_plan,
    probability,
    required_probability,
    start_losses,
    totals,
)
from depl_fl.planner.context import PlanContext
from depl_fl.planner.data_selection import _capacity_ok
from depl_fl.planner.resources import ClientSet, Option, round_options

MAX_CLIENTS = 12
MAX_SWITCHES = 1
SEARCH_TRAJECTORIES = 1000
# A prefix is re-checked on the full count when its search estimate is within
# this many standard errors of the acceptance threshold.
SCREEN_Z = 3.0


def _block_costs(opts: dict[str, list[Option]], blocks: list[tuple[str, int]],
                 deadline: float) -> tuple[float, list[Option]] | None:
    """Cheapest per-block option combination within the deadline."""
    lists = [opts[m] for m, _ in blocks]
    best: tuple[float, list[Option]] | None = None
    for combo in itertools.product(*lists):
        t = sum(o.time * k for o, (_, k) in zip(combo, blocks))
        if t > deadline * (1.0 + 1e-9):
            continue
        c = sum(o.cost * k for o, (_, k) in zip(combo, blocks))
        if best is None or c < best[0]:
            best = (c, list(combo))
    return best


def plan_optimum(ctx: PlanContext, seed: int, n_final: int, started: float,
                 seed_incumbents: bool = True,
                 client_sets: list[tuple[str, ...]] | None = None) -> Plan:
    """Exhaustive branch-and-bound search; see the module docstring for the space.

    ``client_sets`` restricts the search to the given client sets (for
    instances too large for all subsets, e.g. the benchmark's 30 clients).
    """
    scen = ctx.scenario
    if client_sets is None and len(scen.clients) > MAX_CLIENTS:
        raise ScenarioError(f"--method optimum: exhaustive search is limited to {MAX_CLIENTS} "
                            f"clients, the scenario has {len(scen.clients)} (use depl)")
    target, pi = ctx.targets.target_loss, ctx.targets.target_prob
    need_final = required_probability(pi, n_final)
    n_search = min(SEARCH_TRAJECTORIES, n_final)
    screen = need_final - SCREEN_Z * math.sqrt(pi * (1 - pi) / n_search)
    models = [m.id for m in scen.models]

    best_cost, best_rounds, best_p = math.inf, None, 0.0
    if seed_incumbents:
        from depl_fl.planner.baselines import plan_full
        from depl_fl.planner.depl import plan_depl
        rounds, ok, p = plan_full(ctx, seed, n_final)
        if ok:
            best_cost, best_rounds, best_p = totals(ctx, rounds)[0], rounds, p
        cand, _, _ = plan_depl(ctx, "gaussian", seed, n_final)
        if cand is not None and cand.cost < best_cost:
            best_cost, best_rounds, best_p = cand.cost, cand.rounds, cand.prob
    incumbent_cost = best_cost

    ids = [c.id for c in scen.clients]
    if client_sets is None:
        client_sets = [combo for size in range(1, len(ids) + 1)
                       for combo in itertools.combinations(ids, size)]
    groups: dict[int, list[tuple[ClientSet, dict[str, list[Option]]]]] = {}
    for combo in client_sets:
        if _capacity_ok(scen, combo):
            cset = ClientSet.from_ids(scen, combo)
            opts = {m: round_options(scen, cset, m) for m in models}
            groups.setdefault(cset.total_samples, []).append((cset, opts))
    nodes = verified = 0
    streams: dict[tuple[int, bool], np.random.Generator] = {}
    states: dict[tuple[int, bool], dict] = {}
    verified_cache: dict[tuple, float] = {}
    for total, members in sorted(groups.items(), reverse=True):
        lb_cost = {m: min(o[m][-1].cost for _, o in members) for m in models}
        lb_time = {m: min(o[m][0].time for _, o in members) for m in models}
        probe = members[0][0].ids
        rng0 = np.random.default_rng(seed + 104729)
        start = np.array(np.broadcast_to(start_losses(ctx, n_search, rng0), (n_search,)), float)
        # DFS stack: (losses, blocks, switches, cost_lb, time_lb)
        stack: list[tuple[np.ndarray, list[tuple[str, int]], int, float, float]] = [
            (start, [], 0, 0.0, 0.0)]
        while stack:
            losses, blocks, switches, c_lb, t_lb = stack.pop()
            depth = sum(k for _, k in blocks)
            if depth >= ctx.max_rounds:
                continue
            last = blocks[-1][0] if blocks else ctx.previous
            for m in models:
                is_switch = last is not None and m != last
                if is_switch and ((last, m) not in scen.loss.switch
                                  or (blocks and switches >= MAX_SWITCHES)):
                    continue
                nc, nt = c_lb + lb_cost[m], t_lb + lb_time[m]
                if nc >= best_cost or nt > ctx.deadline * (1.0 + 1e-9):
                    continue
                nodes += 1
                rng = streams.get((depth, is_switch))
                if rng is None:
                    rng = streams[(depth, is_switch)] = np.random.default_rng((seed, depth, int(is_switch)))
                    states[(depth, is_switch)] = rng.bit_generator.state
                else:  # common random numbers: replay the stream of this round index
                    rng.bit_generator.state = states[(depth, is_switch)]
                new = simulate_final_losses(scen, [RoundDecision(m, probe, {})], n_search, rng,
                                            start_loss=losses, previous_model=last)
                nblocks = blocks[:-1] + [(m, blocks[-1][1] + 1)] if blocks and m == blocks[-1][0] \
                    else blocks + [(m, 1)]
                nsw = switches + (1 if blocks and is_switch else 0)
                if np.count_nonzero(new <= target) >= screen * n_search:
                    key = (total, tuple(nblocks))
                    found = False
                    for cset, opts in members:
                        choice = _block_costs(opts, nblocks, ctx.deadline)
                        if choice is None or choice[0] >= best_cost:
                            continue
                        seq = [m2 for m2, k in nblocks for _ in range(k)]
                        per_round = [o for o, (_, k) in zip(choice[1], nblocks) for _ in range(k)]
                        rounds = decisions(seq, per_round, cset.ids)
                        if key not in verified_cache:
                            verified += 1
                            verified_cache[key] = probability(ctx, rounds, n_final, seed)
                        if verified_cache[key] >= need_final:
                            best_cost, best_rounds, best_p = choice[0], rounds, verified_cache[key]
                            found = True
                    if found:
                        continue  # extensions only cost more
                stack.append((new, nblocks, nsw, nc, nt))
    info = {"search_space": f"fixed client set ({len(client_sets)} sets), "
                            f"<= {MAX_SWITCHES} switches, one level vector per block",
            "nodes": nodes, "verified": verified, "search_trajectories": n_search,
            "from_incumbent": bool(best_rounds is not None and best_cost >= incumbent_cost)}
    if best_rounds is None:
        from depl_fl.planner.baselines import plan_full
        rounds, _, p = plan_full(ctx, seed, n_final)
        return finish_plan(ctx, "optimum", rounds, False, started, seed, n_final, info,
                           probability_override=p)
    return finish_plan(ctx, "optimum", best_rounds, True, started, seed, n_final, info)

