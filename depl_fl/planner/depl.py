"""DepL: data -> model -> resources, then a Monte Carlo check that tightens the plan.

1. **Data** (:mod:`.data_selection`, :func:`whole_plan_scores`): every
   candidate client set (all subsets up to 10 clients, else greedy chains,
   pre-ranked by ``K(S) * c(S)`` of one model) is scored by the predicted
   cost of the **whole plan it enables**: for every model pair, its cheapest
   schedule "``m1`` for ``k1`` rounds, then ``m2`` for ``k2``" (one switch at
   most, every switch point, :mod:`.schedules`), the levels of its rounds
   chosen under the deadline as the plan's would be.
2. **Model**: the best predicted schedules of every set and model pair,
   cheapest first, get their switch point searched by Monte Carlo
   (:func:`schedule_candidate`), since the prediction's error depends on the
   schedule's shape; then, on the best sets (:mod:`.model_selection`), the
   cheapest model sequence (any number of switches) whose predicted quantile
   ``mean + kappa * std`` reaches the target, as a lowest-weight path in the
   expanded graph. The per-round cost of a model is that of its level option
   minimising ``cost + lambda * time``; ``lambda`` (and a price per round)
   rise from 0 only when the deadline or ``max_rounds`` would otherwise cut
   every path. A schedule or set is planned only while its predicted cost
   is within ``BOUND_SLACK`` of the best dependable plan found
   (:func:`plan_depl` says why).
3. **Resources** (:mod:`.resources`): levels per round by the greedy
   multiple-choice knapsack under the deadline.
4. **Check and tighten**: the plan's ``P[L_K <= L*]`` is estimated by Monte
   Carlo of the exact semantics. The quantile multiplier ``kappa`` starts at
   the guarantee's value (Gaussian ``Phi^-1(pi)`` or Cantelli's
   ``sqrt(pi/(1-pi))``); if the plan is not dependable ``kappa`` is raised
   until it is, then the interval is bisected, keeping every passing plan
   (the cheapest wins, not the first); with the Gaussian guarantee ``kappa``
   is also lowered while the plan stays dependable. Cantelli's bound is never
   loosened. When the prediction says "unreachable" before any plan passes,
   the most conservative existing paths are probed, and as a last resort the
   cheapest dependable "one model for K rounds" plan on the set is taken.
5. **Refine**: rounds are dropped one at a time (cheapest first) while the
   plan stays dependable (:func:`trim`).

**Switches only when they pay**: of two dependable plans, one with more
switches replaces one with fewer only when it is cheaper by ``SWITCH_MARGIN``
per extra switch (:func:`_better`); ``planner_info.switches`` reports them.

**Complexity** (``n`` clients, ``S`` candidate sets (``2^n`` up to 10
clients, else ``O(n)`` chain prefixes), ``M`` models, ``K`` rounds, ``T``
Monte Carlo trajectories, ``eta`` the step): set scoring
``O(S M^2 K log K)`` moment updates and ``O(S M^2 C L log K)`` level
allocation steps (``C L`` cluster levels); per planned set the graph
``O(K M^2 / eta)`` vertex updates per kappa (a bounded number of kappas), the
switch-point search ``O(M K T)`` and the checks ``O(K T)`` each (a bounded
number); polynomial in every quantity except the exact subset enumeration
of small instances.

The returned plan has passed ``P >= pi + se`` (one Monte Carlo standard
error) on ``mc_trajectories`` (>= 20,000) trajectories, and ``P >= pi`` on an
independent stream (:func:`.checking.finish_plan`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import judged_reaches, simulate_final_losses
from depl_fl.identity_memo import LastObjectMemo
from depl_fl.planner.checking import (
    SEARCH_TRAJECTORIES,
    decisions,
    probability,
    required_probability,
    start_losses,
)
from depl_fl.planner.context import PlanContext
from depl_fl.planner.data_selection import (
    candidate_sets,
    has_candidate_set,
    predictable,
    rank_sets,
    set_shift_terms,
    set_terms,
)
from depl_fl.planner.model_selection import EdgeSpec, LayeredGraph
from depl_fl.planner.quantile import kappa as kappa_of
from depl_fl.planner.resources import ClientSet, Option, allocate_levels, block_costs, lagrangian_option
from depl_fl.planner.schedules import (
    ROUND_CAP,
    Schedule,
    allowed_pairs,
    best_schedules,
    mc_second_block,
    predicted_tables,
    switch_points,
)

# How many of the best-scored client sets are planned in full.
SETS_SMALL = 6
SETS_LARGE = 1
# Gaussian calibration: how far below Phi^-1(pi) kappa may go.
LOOSEN = 1.5
BISECTIONS = 3
# Sets scored by their whole plan (the rest are pre-ranked by the one-model proxy).
PRE_RANK = 64
PRE_RANK_LARGE = 16
# Predicted schedules (any set, any model pair) whose switch point is searched by
# Monte Carlo, the k1 window around the predicted switch point, and the trajectories of that search.
SCHEDULES_SMALL = 8
SCHEDULES_LARGE = 2
K1_WINDOW = 6
# A set or schedule is planned only while its predicted cost is below the best dependable
# plan's times (1 + BOUND_SLACK): the prediction at the guarantee's kappa rarely
# underestimates what a dependable plan of that shape costs, and a plan with more
# switches (the graph's) saves a few percent at most.
BOUND_SLACK = 0.1
# Few clients (any round limit: a deadline binds without one): pairs that miss the goal at the
# guarantee's kappa are also scored this much lower, and the best NEAR_SCHEDULES of those searched
# by Monte Carlo while cheaper than the best plan.
OPTIMISM = 0.25
NEAR_SCHEDULES = 3
# Dependable candidates confirmed on the independent stream, cheapest first, when the cheapest
# one misses pi there (it sat at pi on the search's stream, within its Monte Carlo error).
RUNNERS_UP = 3
SCHEDULE_TRAJECTORIES = 4000
SCHEDULE_EXTEND = 3
SCHEDULE_CHECKS = 6
SCHEDULE_CHECKS_LARGE = 2
SCREEN_Z = 2.0
# A plan with more switches must be this much cheaper per extra switch.
SWITCH_MARGIN = 0.002
# The kappa search checks its candidates on the stream of seed + this offset.
SEARCH_SEED_OFFSET = 7919


_LARGEST: LastObjectMemo[ClientSet] = LastObjectMemo()


@dataclass
class Candidate:
    """A planned round sequence with its cost and Monte Carlo probability."""

    rounds: list[RoundDecision]
    cost: float
    prob: float
    kappa: float


def reference_model(ctx: PlanContext) -> str:
    """The least-compressed model (the "full" DNN)."""
    return min(ctx.scenario.models, key=lambda m: (m.compression, -m.flops_per_sample)).id


def _graph_search(ctx: PlanContext, opts: dict[str, list[Option]], r: float, kappa: float,
                  lam: float, nu: float, unseen: float = 0.0, shift: tuple[float, float] = (0.0, 0.0)):
    """Lightest goal path with per-round weight ``cost + lam * time + nu`` (None: no goal).

    ``shift``: mean and variance of the set's set-shift jump, added to the start state.
    """
    edges = {}
    for m, o in opts.items():
        chosen = lagrangian_option(o, lam)
        edges[m] = EdgeSpec(chosen.cost, chosen.time)
    # The graph does not depend on kappa: build it once per (set, prices).
    key = (r, tuple(edges.items()), nu, shift)
    graph = ctx.graphs.get(key)
    if graph is None:
        graph = LayeredGraph(ctx.prop, r, edges, ctx.start_mean + shift[0], ctx.start_var + shift[1],
                             ctx.previous,
                             ctx.deadline, ctx.max_rounds, ctx.bin_width, round_price=nu)
        ctx.graphs[key] = graph
    return graph.solve(kappa, ctx.targets.target_loss, unseen)


def _priced_search(ctx: PlanContext, opts: dict[str, list[Option]], r: float, kappa: float,
                   unseen: float = 0.0, shift: tuple[float, float] = (0.0, 0.0)):
    """When constraints bind: the fastest, fewest-rounds corner first, then the lowest prices
    (time price ``lam``, then round price ``nu``) under which a goal stays reachable.

    Raising the prices only makes paths faster and shorter, so reachability
    is (nearly) monotone along the price sequence: a bisection finds the
    lowest reachable prices in ``O(log P)`` graph searches instead of up to
    ``P`` (``P`` = 3 x the options' slopes), which matters when the deadline
    binds and every kappa of the search asks again.
    """
    mean_cost = sum(o[0].cost for o in opts.values()) / len(opts)
    slopes = sorted({(a.cost - b.cost) / (b.time - a.time)
                     for o in opts.values() for a, b in itertools.pairwise(o) if b.time > a.time})
    prices = [(lam, nu) for lam in slopes + [math.inf] for nu in (0.0, mean_cost, 10.0 * mean_cost)]
    found = _graph_search(ctx, opts, r, kappa, *prices[-1], unseen, shift)  # the corner
    if found is None:
        return None
    lo, hi = -1, len(prices) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        result = _graph_search(ctx, opts, r, kappa, *prices[mid], unseen, shift)
        if result is None:
            lo = mid
        else:
            hi, found = mid, result
    return found


def plan_for_set(ctx: PlanContext, cset: ClientSet, kappa: float,
                 options: dict[str, list[Option]] | None = None) -> list[RoundDecision] | None:
    """Model graph + level allocation on one client set; None if no goal is reachable."""
    scen = ctx.scenario
    opts = options or {m.id: ctx.options(cset, m.id) for m in scen.models}
    r, unseen = ctx.prop.set_terms(cset.ids)
    if ctx.prop.start_quantile(ctx.start_mean, ctx.start_var, kappa) <= ctx.targets.target_loss:
        return []  # met at the start: no round, so no set-shift jump either
    shift = ctx.prop.set_shift_moments(cset.ids, ctx.previous_clients) or (0.0, 0.0)
    result = _graph_search(ctx, opts, r, kappa, 0.0, 0.0, unseen, shift) \
        or _priced_search(ctx, opts, r, kappa, unseen, shift)
    if result is None:
        return None
    if not result.models:
        return []
    alloc = allocate_levels(result.models, opts, ctx.deadline)
    if alloc is None:
        return None
    return decisions(result.models, alloc, cset.ids)


def _cost(opts: dict[str, list[Option]], rounds: list[RoundDecision]) -> float:
    """Total cost of rounds on one client set, from the options' costs (= the cost model)."""
    table = {(m, o.levels): o.cost for m, lst in opts.items() for o in lst}
    return float(sum(table[(r.model, tuple(r.levels.items()))] for r in rounds))


class _KappaSearch:
    """The quantile-multiplier search of :func:`tune_set` on one client set."""

    def __init__(self, ctx: PlanContext, cset: ClientSet, seed: int, n_final: int) -> None:
        self.ctx, self.cset, self.seed, self.n_final = ctx, cset, seed, n_final
        self.opts = {m.id: ctx.options(cset, m.id) for m in ctx.scenario.models}
        pi = ctx.targets.target_prob
        self.n_search = min(SEARCH_TRAJECTORIES, n_final)
        self.need_search = required_probability(pi, self.n_search)
        self.need_final = required_probability(pi, n_final)
        self.seq_cache: dict[tuple, float] = {}
        self.seen: dict[float, Candidate | None] = {}
        self.most_probable: Candidate | None = None
        self.passing: list[Candidate] = []

    def attempt(self, k: float) -> Candidate | None:
        """The graph's plan at multiplier ``k`` with its search probability (memoised)."""
        k = round(k, 6)
        if k in self.seen:
            return self.seen[k]
        rounds = plan_for_set(self.ctx, self.cset, k, self.opts)
        cand = None
        if rounds is not None:
            key = tuple(r.model for r in rounds)
            if key not in self.seq_cache:
                self.seq_cache[key] = probability(self.ctx, rounds, self.n_search,
                                                  self.seed + SEARCH_SEED_OFFSET)
            cand = Candidate(rounds, _cost(self.opts, rounds), self.seq_cache[key], k)
            if self.most_probable is None or cand.prob > self.most_probable.prob:
                self.most_probable = cand
        self.seen[k] = cand
        return cand

    def keep_if_ok(self, c: Candidate | None) -> bool:
        """Record ``c`` as passing when its search probability meets the threshold."""
        if c is not None and c.prob >= self.need_search:
            self.passing.append(c)
            return True
        return False

    def bisect(self, lo: float, hi: float) -> None:
        """Narrow the kappa interval (lo fails, hi passes), keeping every passing plan."""
        for _ in range(BISECTIONS):
            mid = 0.5 * (lo + hi)
            if self.keep_if_ok(self.attempt(mid)):
                hi = mid
            else:
                lo = mid

    def loosen(self, k0: float) -> None:
        """Gaussian calibration: a passing ``k0`` may be too pessimistic, try lower."""
        if not self.keep_if_ok(self.attempt(k0 - LOOSEN)):
            self.bisect(k0 - LOOSEN, k0)

    def tighten(self, k0: float) -> None:
        """``k0`` fails: raise kappa until a plan passes (or none exists), then narrow."""
        lo, step, hi, no_path = k0, 0.5, None, None
        while step <= 16.0:
            c = self.attempt(k0 + step)
            if c is None:
                no_path = k0 + step
                break
            if self.keep_if_ok(c):
                hi = k0 + step
                break
            lo = k0 + step
            step *= 2.0
        if hi is None and no_path is not None:
            hi, lo = self.probe_below(lo, no_path)
        if hi is not None:
            self.bisect(lo, hi)

    def probe_below(self, lo: float, no_path: float) -> tuple[float | None, float]:
        """The prediction says "unreachable" above ``no_path``: probe the most
        conservative plans that still exist, the Monte Carlo may accept them."""
        for _ in range(BISECTIONS + 1):
            mid = 0.5 * (lo + no_path)
            c = self.attempt(mid)
            if c is None:
                no_path = mid
            elif self.keep_if_ok(c):
                return mid, lo
            else:
                lo = mid
        return None, lo

    def finish(self, cand: Candidate, p: float) -> Candidate:
        """Trim a candidate that passed the final check."""
        return trim(self.ctx, self.cset, self.opts, Candidate(cand.rounds, cand.cost, p, cand.kappa),
                    self.need_final, self.n_final, self.seed)

    def final(self, k0: float) -> Candidate | None:
        """Final check on the full trajectory count, cheapest first; tighten on failure."""
        for cand in sorted(self.passing, key=lambda c: c.cost):
            p = probability(self.ctx, cand.rounds, self.n_final, self.seed)
            if p >= self.need_final:
                return self.finish(cand, p)
        k = max((c.kappa for c in self.passing), default=k0)
        for _ in range(8 if self.passing else 0):
            k += 0.25
            c = self.attempt(k)
            if c is None:
                break
            p = probability(self.ctx, c.rounds, self.n_final, self.seed)
            if p >= self.need_final:
                return self.finish(c, p)
        fallback = single_model_plan(self.ctx, self.cset, self.opts, self.need_final,
                                     self.n_final, self.seed)
        if fallback is not None:
            return trim(self.ctx, self.cset, self.opts, fallback, self.need_final, self.n_final,
                        self.seed)
        return None


def tune_set(ctx: PlanContext, cset: ClientSet, guarantee: str, seed: int,
             n_final: int) -> tuple[Candidate | None, Candidate | None]:
    """Cheapest dependable plan on one client set over the quantile multiplier.

    Returns
    -------
    tuple
        ``(best dependable candidate or None, most probable candidate seen)``.
    """
    search = _KappaSearch(ctx, cset, seed, n_final)
    k0 = kappa_of(ctx.targets.target_prob, guarantee)
    first = search.attempt(k0)
    if search.keep_if_ok(first):
        if guarantee == "gaussian":
            search.loosen(k0)
    elif first is None:
        return None, search.most_probable
    else:
        search.tighten(k0)
    return search.final(k0), search.most_probable


def single_model_plan(ctx: PlanContext, cset: ClientSet, opts: dict[str, list[Option]],
                      need: float, n: int, seed: int) -> Candidate | None:
    """Last resort on one client set: the cheapest "one model for K rounds" plan that is dependable.

    Used when the quantile prediction is too pessimistic near the round or
    time limit (it then finds no conservative-enough path although the Monte
    Carlo would accept one). ``K`` is found by a round-by-round Monte Carlo
    (the same random stream as a fresh check with ``seed``).
    """
    best: Candidate | None = None
    for model in opts:
        if ctx.previous is not None and ctx.previous != model \
                and (ctx.previous, model) not in ctx.prop.switch:
            continue
        rng = np.random.default_rng(seed)
        losses = np.array(np.broadcast_to(start_losses(ctx, n, rng), (n,)), dtype=float)
        probe = RoundDecision(model, cset.ids, {})
        previous, trained_on = ctx.previous, ctx.previous_clients
        for k in range(1, ctx.max_rounds + 1):
            if k * opts[model][0].time > ctx.deadline * (1.0 + 1e-9):
                break
            losses = simulate_final_losses(ctx.scenario, [probe], n, rng, start_loss=losses,
                                           previous_model=previous, judged=False,
                                           previous_clients=trained_on)
            previous, trained_on = model, cset.ids
            if judged_reaches(ctx.scenario, probe, losses[None, :], ctx.targets.target_loss, need)[0]:
                seq = [model] * k
                alloc = allocate_levels(seq, opts, ctx.deadline)
                if alloc is None:
                    break
                rounds = decisions(seq, alloc, cset.ids)
                p = probability(ctx, rounds, n, seed)
                cost = _cost(opts, rounds)
                if p >= need and (best is None or cost < best.cost):
                    best = Candidate(rounds, cost, p, math.inf)
                break
    return best


def _blocks(models: list[str]) -> list[int]:
    """Index of the last round of every run of equal models."""
    return [i for i in range(len(models)) if i + 1 == len(models) or models[i + 1] != models[i]]


def trim(ctx: PlanContext, cset: ClientSet, opts: dict[str, list[Option]], cand: Candidate,
         need: float, n: int, seed: int, max_checks: int = 40) -> Candidate:
    """Monte Carlo refinement of a dependable plan: drop rounds while it stays dependable.

    The graph's discretisation and the quantile prediction make the path
    slightly conservative; here each step tries removing one round of one
    block (cheapest result first), re-allocates levels and keeps the first
    change whose Monte Carlo probability (``n`` trajectories, same seed) still
    meets ``need``.
    """
    models = [r.model for r in cand.rounds]
    best = cand
    checks = 0
    while checks < max_checks:
        trials = []
        for i in _blocks(models):
            seq = models[:i] + models[i + 1:]
            if not seq:
                continue
            prev = ctx.previous
            if any(a != b and (a, b) not in ctx.prop.switch
                   for a, b in itertools.pairwise([prev, *seq]) if a is not None):
                continue
            alloc = allocate_levels(seq, opts, ctx.deadline)
            if alloc is None:
                continue
            rounds = decisions(seq, alloc, cset.ids)
            trials.append((_cost(opts, rounds), seq, rounds))
        trials.sort(key=lambda t: t[0])
        accepted = False
        for cost, seq, rounds in trials:
            if checks >= max_checks or cost >= best.cost:
                break
            checks += 1
            p = probability(ctx, rounds, n, seed)
            if p >= need:
                best, models, accepted = Candidate(rounds, cost, p, best.kappa), seq, True
                break
        if not accepted:
            break
    return best


def largest_set(ctx: PlanContext) -> ClientSet:
    """The ``max_clients`` largest clients of every cluster (found once per scenario object)."""
    return _LARGEST.get(ctx.scenario, lambda: _largest_set(ctx.scenario))


def _largest_set(scen: Scenario) -> ClientSet:
    ids: list[str] = []
    for cluster in scen.clusters:
        members = sorted((c for c in scen.clients if c.cluster == cluster.id),
                         key=lambda c: -c.num_samples)[:cluster.max_clients]
        ids.extend(c.id for c in members)
    return ClientSet.from_ids(scen, ids)


def few_clients(ctx: PlanContext) -> bool:
    """Few enough clients to score every set's near-miss schedules too (see ``OPTIMISM``)."""
    return len(ctx.scenario.clients) <= 12


def is_small(ctx: PlanContext) -> bool:
    """Small instances get a wider search (more sets, pairs and switch points checked)."""
    return few_clients(ctx) and ctx.max_rounds <= 60


def _pre_ranked(ctx: PlanContext, sets: list[ClientSet], kappa: float) -> list[ClientSet]:
    """The sets worth a whole-plan score: all when few, else the best by the one-model proxy."""
    limit = PRE_RANK if is_small(ctx) else PRE_RANK_LARGE
    if len(sets) <= limit:
        return list(sets)
    ranked = rank_sets(ctx, sets, kappa, [m.id for m in ctx.scenario.models])
    return [c for _, c in ranked[:limit]]


@dataclass
class Scored:
    """A client set with its predicted schedules (see :func:`whole_plan_scores`)."""

    cost: float
    schedules: list[tuple[float, Schedule]]
    cset: ClientSet
    near: list[tuple[float, Schedule]]


def whole_plan_scores(ctx: PlanContext, sets: list[ClientSet], kappa: float,
                      optimistic: float | None = None) -> list[Scored]:
    """Data selection against the plan a set enables: predicted cost of its best <= 1-switch schedule.

    Every set is scored with every allowed model pair and every switch point,
    each schedule's levels chosen under the deadline (:func:`best_schedules`).
    Sorted ascending; sets whose schedules all miss the goal come last (by
    sample total). Each set comes with ``(predicted cost, schedule)`` of each
    of its model pairs, cheapest first. With ``optimistic`` (a smaller
    multiplier), the pairs that miss the goal at ``kappa`` within the round
    and time limits but reach it at ``optimistic`` are listed apart
    (``near``): near the limits the prediction's small pessimism (about 0.1
    in kappa) can hide the cheapest dependable plan, which uses every round;
    the Monte Carlo then judges it.
    """
    scen = ctx.scenario
    terms, groups = np.unique(np.stack([*set_terms(ctx, sets), *set_shift_terms(ctx, sets)], axis=1),
                              axis=0, return_inverse=True)
    groups = groups.reshape(-1)
    horizon = max(1, min(ctx.max_rounds, ROUND_CAP))
    k1 = switch_points(horizon)
    options = [{m.id: ctx.options(cset, m.id) for m in scen.models} for cset in sets]
    scored = []
    for k in (kappa,) if optimistic is None else (kappa, optimistic):
        tables = predicted_tables(ctx, allowed_pairs(ctx), terms[:, 0], k, horizon, k1,
                                  uncovered=terms[:, 1], shift=(terms[:, 2], terms[:, 3]))
        scored.append(best_schedules(ctx, options, groups, tables, k1))
    out = []
    for i, cset in enumerate(sets):
        per_pair = scored[0][i]
        found = {(sc.first, sc.second) for _, sc in per_pair}
        near = [(c, sc) for c, sc in scored[-1][i] if (sc.first, sc.second) not in found] \
            if len(scored) > 1 else []
        out.append(Scored(per_pair[0][0] if per_pair else math.inf, per_pair, cset, near))
    out.sort(key=lambda t: (t.cost, -t.cset.total_samples))
    return out


def schedule_candidate(ctx: PlanContext, cset: ClientSet, guess: Schedule, seed: int,
                       n_final: int) -> Candidate | None:
    """Monte Carlo choice of the switch point around a predicted schedule, checked on ``n_final``.

    ``k1`` is tried in a window around the predicted one; for each, the
    fewest ``k2`` that passes a screening threshold (``SCREEN_Z`` search
    standard errors below the final one) comes from :func:`mc_second_block`;
    the cheapest few are re-checked on the full trajectory count, adding
    rounds of the second model while they fall short.
    """
    scen = ctx.scenario
    opts = {m.id: ctx.options(cset, m.id) for m in scen.models}
    pi = ctx.targets.target_prob
    n_search = min(SCHEDULE_TRAJECTORIES, n_final)
    need_final = required_probability(pi, n_final)
    screen = need_final - SCREEN_Z * math.sqrt(pi * (1.0 - pi) / n_search)
    pair = (guess.first, guess.second)
    window = range(max(guess.k1 - K1_WINDOW, 1), guess.k1 + K1_WINDOW + 1)
    found = mc_second_block(ctx, pair, ctx.prop.set_terms(cset.ids)[0],
                            window, rounds_within_deadline(ctx, [opts[m] for m in pair]), screen,
                            n_search, seed + 31337, clients=cset.ids)
    one_model = pair[0] == pair[1]
    k1s = np.array([0 if one_model else k1 for k1 in found], dtype=float)
    k2s = np.array(list(found.values()), dtype=float)
    blocks = [(opts[pair[1]], k1s + k2s)] if one_model else [(opts[pair[0]], k1s), (opts[pair[1]], k2s)]
    costs = block_costs(blocks, ctx.deadline) if found else np.zeros(0)
    ranked = sorted((float(c), int(k1), int(k2)) for c, k1, k2 in zip(costs, k1s, k2s, strict=True)
                    if math.isfinite(c))
    best: Candidate | None = None
    for low, k1, k2 in ranked[:SCHEDULE_CHECKS if is_small(ctx) else SCHEDULE_CHECKS_LARGE]:
        if best is not None and low >= best.cost:
            break
        cand = _extend_until_dependable(ctx, cset, opts, Schedule(pair[0], k1, pair[1], k2),
                                        need_final, n_final, seed)
        if cand is not None and (best is None or cand.cost < best.cost):
            best = cand
    return best


def rounds_within_deadline(ctx: PlanContext, options: list[list[Option]]) -> int:
    """The most rounds that can fit the remaining deadline (each at its fastest option), at most
    the round limit: a longer schedule is never priced, so its Monte Carlo walk is not run."""
    fastest = min((min(o.time for o in opts) for opts in options if opts), default=0.0)
    if fastest <= 0:
        return ctx.max_rounds
    return max(1, min(ctx.max_rounds, int(math.floor(ctx.deadline * (1.0 + 1e-9) / fastest))))


def _extend_until_dependable(ctx: PlanContext, cset: ClientSet, opts: dict[str, list[Option]],
                             sched: Schedule, need: float, n: int, seed: int) -> Candidate | None:
    """The schedule, with up to ``SCHEDULE_EXTEND`` more rounds of its second model, once dependable."""
    for extra in range(SCHEDULE_EXTEND + 1):
        seq = Schedule(sched.first, sched.k1, sched.second, sched.k2 + extra).models()
        if len(seq) > ctx.max_rounds:
            return None
        alloc = allocate_levels(seq, opts, ctx.deadline)
        if alloc is None:
            return None
        rounds = decisions(seq, alloc, cset.ids)
        p = probability(ctx, rounds, n, seed)
        if p >= need:
            return Candidate(rounds, _cost(opts, rounds), p, math.nan)
    return None


def switches(models: list[str]) -> int:
    """Number of model switches in a round sequence."""
    return sum(1 for a, b in itertools.pairwise(models) if a != b)


def _better(cand: Candidate | None, best: Candidate | None) -> bool:
    """Cheaper wins; a plan with more switches must be cheaper by ``SWITCH_MARGIN`` (no thrashing)."""
    if cand is None:
        return False
    if best is None:
        return True
    extra = switches([r.model for r in cand.rounds]) - switches([r.model for r in best.rounds])
    margin = SWITCH_MARGIN * extra if extra > 0 else 0.0
    return cand.cost * (1.0 + margin) < best.cost or (extra < 0 and cand.cost <= best.cost)


def _within(bound: float, best: Candidate | None) -> bool:
    """Whether a predicted cost may still beat the best plan (see ``BOUND_SLACK``)."""
    return best is None or bound < best.cost * (1.0 + BOUND_SLACK)


def _sets_to_plan(ctx: PlanContext, sets: list[ClientSet], scored: list[Scored]
                  ) -> list[tuple[float, ClientSet]]:
    """The sets the graph may plan, best predicted first, with their predicted costs.

    The best-scored sets, and always the largest set (every cluster at
    capacity: a tight pi may favour data the prediction undervalues). A set
    no schedule reaches the goal on gets ``-inf``: only the graph can tell.
    """
    limit = SETS_SMALL if is_small(ctx) else SETS_LARGE
    chosen = [(t.cost, t.cset) for t in scored if math.isfinite(t.cost)][:limit]
    if not chosen:
        # No schedule with <= 1 switch reaches the goal: let the graph try the largest sets.
        chosen = [(-math.inf, c) for c in sorted(sets, key=lambda c: -c.total_samples)[:limit]]
    largest = largest_set(ctx)
    if predictable(ctx.scenario, largest.ids) and all(set(c.ids) != set(largest.ids) for _, c in chosen):
        score = next((t.cost for t in scored if set(t.cset.ids) == set(largest.ids)), math.inf)
        chosen.append((score if math.isfinite(score) else -math.inf, largest))
    return chosen


def _search_schedules(ctx: PlanContext, scored: list[Scored], seed: int, n_final: int
                      ) -> tuple[Candidate | None, int, list[Candidate]]:
    """Monte Carlo switch points of the best predicted schedules of every set and model pair.

    Cheapest predicted first, while the prediction may still beat the best
    plan found; then the few schedules that reach the goal only at the
    optimistic multiplier, while cheaper than the best plan. Returns that
    plan, how many schedules were searched, and every dependable plan found.
    """
    small = is_small(ctx)
    best: Candidate | None = None
    searched = 0
    found: list[Candidate] = []
    for near, cap, slack in ((False, SCHEDULES_SMALL if small else SCHEDULES_LARGE, BOUND_SLACK),
                             (True, NEAR_SCHEDULES, 0.0)):
        combos = sorted(((cost, i, sched) for i, t in enumerate(scored)
                         for cost, sched in (t.near if near else t.schedules)), key=lambda c: (c[0], c[1]))
        for cost, i, sched in combos[:cap]:
            if best is not None and cost >= best.cost * (1.0 + slack):
                break
            searched += 1
            sc = schedule_candidate(ctx, scored[i].cset, sched, seed, n_final)
            if sc is not None:
                found.append(sc)
            if _better(sc, best):
                best = sc
    return best, searched, found


def no_round_wins(ctx: PlanContext, guarantee: str, seed: int, n_final: int) -> bool:
    """Whether :func:`plan_depl`'s best plan is the plan of no round, known without the search.

    It is when the start already meets the target by the tests the search
    applies to that plan: a candidate set exists, the start's predicted
    quantile at the guarantee's ``kappa`` is at most the target (so
    :func:`plan_for_set` returns no round on every set), and no round passes
    the kappa search's Monte Carlo threshold and its final check
    (:class:`_KappaSearch`, the same seeds and trajectories). Costing nothing,
    it is then the cheapest dependable candidate, whatever the other sets and
    schedules give; whether it holds on the independent stream is the caller's
    check (:func:`depl_fl.planner.checking.finish_plan`), as for any best plan.
    Re-plans from a tracked state that already meets the target take this
    path every round once the plan has no round left.
    """
    if not has_candidate_set(ctx.scenario, reference_model(ctx)):
        return False
    k0 = round(kappa_of(ctx.targets.target_prob, guarantee), 6)
    if ctx.prop.start_quantile(ctx.start_mean, ctx.start_var, k0) > ctx.targets.target_loss:
        return False
    pi = ctx.targets.target_prob
    n_search = min(SEARCH_TRAJECTORIES, n_final)
    if probability(ctx, [], n_search, seed + SEARCH_SEED_OFFSET) < required_probability(pi, n_search):
        return False
    return probability(ctx, [], n_final, seed) >= required_probability(pi, n_final)


def plan_depl(ctx: PlanContext, guarantee: str, seed: int, n_final: int
              ) -> tuple[Candidate | None, Candidate | None, dict, list[Candidate]]:
    """Run DepL; returns (best dependable candidate, most probable candidate, info, runners-up).

    The runners-up are the other dependable candidates found, cheapest first
    (at most ``RUNNERS_UP``): the plan to confirm next when the cheapest one
    misses pi on the independent stream.

    Why a set is judged by the schedules it enables, every model pair and
    switch point priced under the deadline: with a binding deadline a long
    schedule on many clients must buy fast, costly levels in many rounds.
    Priced at each model's cheapest level, a larger set with a cheap-per-round
    variant that needs many rounds looks cheaper than a smaller set that
    trains another variant pair at cheap levels within the deadline; the
    smaller set then fell out of the few sets planned in full, the Monte Carlo
    switch-point search ran only on the best sets' best pairs, and the plan
    cost up to the levels' energy ratio (2.3x) more than the optimum. Here the
    Monte Carlo switch-point search runs on the best predicted schedules of
    every set and pair, cheapest first, and the graph on the best sets, each
    only while its predicted cost can still beat the best dependable plan
    found (``BOUND_SLACK``).
    """
    k0 = kappa_of(ctx.targets.target_prob, guarantee)
    sets = candidate_sets(ctx.scenario, reference_model(ctx))
    if not sets:  # version 2: no set lies in the profile's measured coverage range
        return None, None, {"candidate_sets": 0, "sets_planned": 0, "kappa": None, "switches": None}, []
    scored = whole_plan_scores(ctx, _pre_ranked(ctx, sets, k0), k0,
                               k0 - OPTIMISM if few_clients(ctx) else None)
    best, searched, found = _search_schedules(ctx, scored, seed, n_final)
    most: Candidate | None = None
    planned = 0
    for rank, (score, cset) in enumerate(_sets_to_plan(ctx, sets, scored)):
        if rank > 0 and not _within(score, best):
            continue
        planned += 1
        cand, probable = tune_set(ctx, cset, guarantee, seed, n_final)
        if cand is not None:
            found.append(cand)
        if _better(cand, best):
            best = cand
        if probable is not None and (most is None or probable.prob > most.prob):
            most = probable
    info = {"candidate_sets": len(sets), "sets_planned": planned, "schedules_searched": searched,
            "kappa": best.kappa if best and math.isfinite(best.kappa) else None,
            "switches": switches([r.model for r in best.rounds]) if best else None}
    return best, most, info, runners_up(found, best)


def runners_up(found: list[Candidate], best: Candidate | None) -> list[Candidate]:
    """The dependable candidates other than ``best``, distinct, cheapest first (``RUNNERS_UP`` at most)."""
    out: list[Candidate] = []
    for cand in sorted(found, key=lambda c: c.cost):
        if len(out) == RUNNERS_UP:
            break
        if (best is None or cand.rounds != best.rounds) and all(cand.rounds != o.rounds for o in out):
            out.append(cand)
    return out
