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
from typing import Any

import numpy as np

from depl_fl.contract.plan import Plan, RoundDecision
from depl_fl.contract.semantics import judged_probability, simulate_final_losses
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
from depl_fl.planner.data_selection import _capacity_ok, predictable
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
        t = sum(o.time * k for o, (_, k) in zip(combo, blocks, strict=True))
        if t > deadline * (1.0 + 1e-9):
            continue
        c = sum(o.cost * k for o, (_, k) in zip(combo, blocks, strict=True))
        if best is None or c < best[0]:
            best = (c, list(combo))
    return best


Member = tuple[ClientSet, dict[str, list[Option]]]


def _groups(ctx: PlanContext, client_sets: list[tuple[str, ...]],
            models: list[str]) -> dict[int, list[Member]]:
    """Capacity-feasible client sets with their options, grouped by what fixes their loss.

    Version 1: the sample total. Version 2: the set's ``(r_eff, unseen share)``
    (:meth:`LossPropagator.set_terms`), and only sets in the profile's
    measured coverage range (:func:`predictable`).
    """
    groups: dict[Any, list[Member]] = {}
    for combo in client_sets:
        if _capacity_ok(ctx.scenario, combo) and predictable(ctx.scenario, combo):
            cset = ClientSet.from_ids(ctx.scenario, combo)
            opts = {m: round_options(ctx.scenario, cset, m) for m in models}
            key = ctx.prop.set_terms(combo) if ctx.scenario.version >= 2 else cset.total_samples
            groups.setdefault(key, []).append((cset, opts))
    return groups


class _Search:
    """Branch and bound over block sequences (see the module docstring)."""

    def __init__(self, ctx: PlanContext, seed: int, n_final: int) -> None:
        self.ctx, self.seed, self.n_final = ctx, seed, n_final
        pi = ctx.targets.target_prob
        self.need_final = required_probability(pi, n_final)
        self.n_search = min(SEARCH_TRAJECTORIES, n_final)
        self.screen = self.need_final - SCREEN_Z * math.sqrt(pi * (1 - pi) / self.n_search)
        self.models = [m.id for m in ctx.scenario.models]
        self.best_cost, self.best_rounds = math.inf, None
        self.nodes = self.verified = 0
        self.streams: dict[tuple[int, bool], np.random.Generator] = {}
        self.states: dict[tuple[int, bool], dict] = {}
        self.verified_cache: dict[tuple, float] = {}

    def seed_incumbents(self) -> None:
        """Start from the dependable ``full`` plan and DepL's plan."""
        from depl_fl.planner.baselines import plan_full
        from depl_fl.planner.depl import plan_depl
        rounds, ok, _ = plan_full(self.ctx, self.seed, self.n_final)
        if ok:
            self.best_cost, self.best_rounds = totals(self.ctx, rounds)[0], rounds
        cand, _, _, _ = plan_depl(self.ctx, "gaussian", self.seed, self.n_final)
        if cand is not None and cand.cost < self.best_cost:
            self.best_cost, self.best_rounds = cand.cost, cand.rounds

    def _stream(self, depth: int, is_switch: bool) -> np.random.Generator:
        """Common random numbers: the same stream for every prefix of this round index."""
        key = (depth, is_switch)
        rng = self.streams.get(key)
        if rng is None:
            rng = self.streams[key] = np.random.default_rng((self.seed, depth, int(is_switch)))
            self.states[key] = rng.bit_generator.state
        else:
            rng.bit_generator.state = self.states[key]
        return rng

    def _verify(self, total: int, members: list[Member], blocks: list[tuple[str, int]]) -> bool:
        """Re-check a screened sequence on every set of the group; True if one became the incumbent."""
        key = (total, tuple(blocks))
        found = False
        for cset, opts in members:
            choice = _block_costs(opts, blocks, self.ctx.deadline)
            if choice is None or choice[0] >= self.best_cost:
                continue
            seq = [m for m, k in blocks for _ in range(k)]
            per_round = [o for o, (_, k) in zip(choice[1], blocks, strict=True) for _ in range(k)]
            rounds = decisions(seq, per_round, cset.ids)
            if key not in self.verified_cache:
                self.verified += 1
                self.verified_cache[key] = probability(self.ctx, rounds, self.n_final, self.seed)
            if self.verified_cache[key] >= self.need_final:
                self.best_cost, self.best_rounds = choice[0], rounds
                found = True
        return found

    def _children(self, blocks: list[tuple[str, int]], switches: int):
        """Allowed next models with whether they switch."""
        last = blocks[-1][0] if blocks else self.ctx.previous
        for m in self.models:
            is_switch = last is not None and m != last
            if is_switch and ((last, m) not in self.ctx.scenario.loss.switch
                              or (blocks and switches >= MAX_SWITCHES)):
                continue
            yield m, last, is_switch

    def group(self, total: int, members: list[Member]) -> None:
        """Depth-first search over the block sequences of one sample total."""
        ctx = self.ctx
        lb_cost = {m: min(o[m][-1].cost for _, o in members) for m in self.models}
        lb_time = {m: min(o[m][0].time for _, o in members) for m in self.models}
        probe = members[0][0].ids
        rng0 = np.random.default_rng(self.seed + 104729)
        start = np.array(np.broadcast_to(start_losses(ctx, self.n_search, rng0), (self.n_search,)), float)
        stack = [(start, [], 0, 0.0, 0.0)]   # (losses, blocks, switches, cost_lb, time_lb)
        while stack:
            losses, blocks, switches, c_lb, t_lb = stack.pop()
            depth = sum(k for _, k in blocks)
            if depth >= ctx.max_rounds:
                continue
            for m, last, is_switch in self._children(blocks, switches):
                nc, nt = c_lb + lb_cost[m], t_lb + lb_time[m]
                if nc >= self.best_cost or nt > ctx.deadline * (1.0 + 1e-9):
                    continue
                self.nodes += 1
                step = RoundDecision(m, probe, {})
                new = simulate_final_losses(ctx.scenario, [step], self.n_search,
                                            self._stream(depth, is_switch), start_loss=losses,
                                            previous_model=last, judged=False,
                                            previous_clients=probe if blocks else ctx.previous_clients)
                nblocks = blocks[:-1] + [(m, blocks[-1][1] + 1)] if blocks and m == blocks[-1][0] \
                    else blocks + [(m, 1)]
                if judged_probability(ctx.scenario, step, new, ctx.targets.target_loss) >= self.screen \
                        and self._verify(total, members, nblocks):
                    continue  # extensions only cost more
                stack.append((new, nblocks, switches + (1 if blocks and is_switch else 0), nc, nt))


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
    search = _Search(ctx, seed, n_final)
    if seed_incumbents:
        search.seed_incumbents()
    incumbent_cost = search.best_cost
    ids = [c.id for c in scen.clients]
    if client_sets is None:
        client_sets = [combo for size in range(1, len(ids) + 1)
                       for combo in itertools.combinations(ids, size)]
    for total, members in sorted(_groups(ctx, client_sets, search.models).items(), reverse=True):
        search.group(total, members)
    info = {"search_space": f"fixed client set ({len(client_sets)} sets), "
                            f"<= {MAX_SWITCHES} switches, one level vector per block",
            "nodes": search.nodes, "verified": search.verified, "search_trajectories": search.n_search,
            "from_incumbent": bool(search.best_rounds is not None
                                   and search.best_cost >= incumbent_cost)}
    if search.best_rounds is None:
        from depl_fl.planner.baselines import plan_full
        rounds, _, p = plan_full(ctx, seed, n_final)
        return finish_plan(ctx, "optimum", rounds, False, started, seed, n_final, info,
                           probability_override=p)
    plan = finish_plan(ctx, "optimum", search.best_rounds, True, started, seed, n_final, info)
    if not plan.feasible:  # failed the independent confirmation: the confirmed FedAvg plan, if any
        from depl_fl.planner.baselines import plan_full
        rounds, ok, _ = plan_full(ctx, seed, n_final)
        alt = finish_plan(ctx, "optimum", rounds, True, started, seed, n_final, info) if ok else plan
        return alt if alt.feasible else plan
    return plan
