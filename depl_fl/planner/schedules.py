"""Two-block schedules: ``m1`` for ``k1`` rounds, then ``m2`` for ``k2`` rounds (one switch at most).

The expanded graph (:mod:`.model_selection`) finds the cheapest path for one
quantile multiplier, but the moment prediction's error depends on the shape
of the schedule, so a single ``kappa`` can favour the wrong switch point. This
module searches the switch point directly, in two stages:

* :func:`predicted_second_block` -- with the moment propagation, for every
  data ratio ``r`` of the candidate client sets, every allowed pair
  ``(m1, m2)`` and every switch point ``k1`` (each round up to ``DENSE_K1``,
  then steps of ~10%: ``O(log K)`` more), the fewest ``k2`` whose predicted
  quantile reaches the target. Vectorised over ``(r, k1)``: ``O(P * K)``
  numpy steps of ``O(R * log K)`` elements for ``P`` pairs, ``K`` rounds and
  ``R`` ratios.
  :func:`best_schedules` turns these tables into the cheapest predicted
  schedule of each client set and pair (its whole-plan cost, used by data
  selection), every schedule's levels allocated under the deadline.
* :func:`mc_second_block` -- the same question answered by Monte Carlo of
  the contract's loss semantics for a window of ``k1`` values around the
  predicted best (``O(W * K * n)`` for ``W`` values of ``k1`` and ``n``
  trajectories), so the switch point is chosen on the quantity the plan is
  judged by.

A schedule with one model only is the pair ``(m, m)`` with ``k1 = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from depl_fl.contract import draws
from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.semantics import final_map, judged_reaches, walk_moments
from depl_fl.planner.context import PlanContext
from depl_fl.planner.data_selection import start_moments_of
from depl_fl.planner.resources import Option, block_costs

# Predicted schedules longer than this are not enumerated (the graph still covers them).
ROUND_CAP = 120
# Switch points enumerated one by one up to this round, then in steps of ~10%.
DENSE_K1 = 16
# A predicted quantile falling by less than this per round has stalled.
STALL = 1e-6
NEVER = np.iinfo(np.int32).max // 4


@dataclass(frozen=True)
class Schedule:
    """``first`` for ``k1`` rounds then ``second`` for ``k2`` rounds (``k1 = 0``: one model)."""

    first: str
    k1: int
    second: str
    k2: int

    def models(self) -> list[str]:
        """The model of every round."""
        return [self.first] * self.k1 + [self.second] * self.k2


def allowed_pairs(ctx: PlanContext) -> list[tuple[str, str]]:
    """``(m1, m2)`` pairs usable from the start state; ``(m, m)`` is the one-model schedule.

    Only switches to a model with more FLOPs per sample are enumerated (a
    cheaper model first, where its higher floor does not bind yet); the
    expanded graph covers the other orders.
    """
    models = [m.id for m in ctx.scenario.models]
    prev = ctx.previous

    def reachable(m: str) -> bool:
        return prev is None or prev == m or (prev, m) in ctx.prop.switch

    flops = {m.id: m.flops_per_sample for m in ctx.scenario.models}
    pairs = [(m, m) for m in models if reachable(m)]
    pairs += [(a, b) for a in models for b in models
              if flops[a] < flops[b] and reachable(a) and (a, b) in ctx.prop.switch]
    return pairs


def switch_points(horizon: int) -> np.ndarray:
    """The ``k1`` values enumerated: every round up to ``DENSE_K1``, then steps of ~10%."""
    points = list(range(1, min(horizon, DENSE_K1 + 1)))
    k = DENSE_K1
    while k < horizon:
        points.append(k)
        k = max(k + 1, int(k * 1.1))
    return np.array(sorted(set(points)), dtype=np.int64)


def first_blocks(ctx: PlanContext, models: list[str], ratios: np.ndarray, rounds: int,
                 shift: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Moments after ``0..rounds`` rounds of each model from the start state, shape ``(R, rounds + 1)``.

    All models advance together (one :meth:`LossPropagator.run_many` per round).
    ``shift``: mean and variance of each ratio's set-shift jump (column 0,
    no round run, is then the start plus the jump: a plan of zero rounds is
    judged on the start state by the callers).
    """
    usable = [m for m in models if ctx.previous is None or ctx.previous == m
              or (ctx.previous, m) in ctx.prop.switch]
    if not usable:
        return {}
    which = np.repeat(np.arange(len(usable)), ratios.size)
    rr = np.tile(ratios, len(usable))
    tiled = None if shift is None else tuple(np.tile(np.broadcast_to(x, ratios.shape), len(usable))
                                             for x in shift)
    mean, var = start_moments_of(ctx, rr.shape, tiled)
    if ctx.previous is not None:
        for i, m in enumerate(usable):
            if m != ctx.previous:
                sl = which == i
                mean[sl], var[sl] = ctx.prop.switch_array(ctx.previous, m, mean[sl], var[sl])
    means, vars_ = [mean], [var]
    for _ in range(rounds):
        mean, var = ctx.prop.run_many(usable, which, mean, var, rr)
        means.append(mean)
        vars_.append(var)
    all_m = np.stack(means, axis=1).reshape(len(usable), ratios.size, rounds + 1)
    all_v = np.stack(vars_, axis=1).reshape(len(usable), ratios.size, rounds + 1)
    return {m: (all_m[i], all_v[i]) for i, m in enumerate(usable)}


def predicted_tables(ctx: PlanContext, pairs: list[tuple[str, str]], ratios: np.ndarray,
                     kappa: float, horizon: int, k1: np.ndarray,
                     uncovered: np.ndarray | None = None,
                     shift: tuple[np.ndarray, np.ndarray] | None = None
                     ) -> dict[tuple[str, str], np.ndarray]:
    """Fewest predicted rounds ``k2`` of ``m2`` after ``k1[j]`` rounds of ``m1``, per pair.

    Each table has shape ``(R, len(k1))``; entry ``[i, j]`` is ``NEVER`` when
    no ``k2`` with ``k1[j] + k2 <= horizon`` reaches
    ``mean + kappa * std <= target`` on ratio ``ratios[i]``. For ``m1 == m2``
    (the one-model schedule, ``k1`` is then 0) only column 0 is filled. All
    pairs advance together, one :meth:`LossPropagator.run_many` per round.
    ``uncovered`` (version 2, shape ``(R,)``) is the unseen share of the final
    map on each ratio's sets; the goal is on the judged final loss.
    ``shift`` (shape ``(R,)`` each): mean and variance of the set-shift jump
    of each ratio's sets.
    """
    target = ctx.targets.target_loss
    unseen = np.zeros(ratios.size) if uncovered is None else np.asarray(uncovered, dtype=float)
    models = sorted({m for pair in pairs for m in pair})
    first = first_blocks(ctx, models, ratios, horizon, shift)
    out = {}
    for m1, m2 in pairs:
        # A one-model table has its column 0 even when no switch point fits (horizon 1).
        out[(m1, m2)] = np.full((ratios.size, max(k1.size, int(m1 == m2))), NEVER, dtype=np.int64)
        if m1 == m2 and m1 in first:
            hit = ctx.prop.judged_quantile([m1], 0, first[m1][0], first[m1][1], kappa,
                                           unseen[:, None], ratios[:, None]) <= target
            m0, v0 = first[m1][0][:, 0], first[m1][1][:, 0]
            if shift is not None:  # no round run: no set-shift jump either
                m0, v0 = m0 - shift[0], np.maximum(v0 - shift[1], 0.0)
            hit[:, 0] = ctx.prop.start_quantile(m0, v0, kappa) <= target
            out[(m1, m2)][:, 0] = np.where(hit.any(axis=1), hit.argmax(axis=1), NEVER)
    switching = [p for p in pairs if p[0] != p[1] and p[0] in first] if k1.size else []
    if switching:
        out.update(second_blocks_all(ctx, switching, first, ratios, kappa, horizon, k1, unseen))
    return out


def second_blocks_all(ctx: PlanContext, switching: list[tuple[str, str]],
                      first: dict[str, tuple[np.ndarray, np.ndarray]], ratios: np.ndarray,
                      kappa: float, horizon: int, k1: np.ndarray,
                      unseen: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
    """:func:`_second_blocks` of every group of switching pairs, all advanced together.

    A group (the pairs sharing a second model) stops when none of its states
    is open or every open one has stalled; a state leaves the batch once its
    goal is met or its horizon passed (the propagation is elementwise, so
    this changes no result).
    """
    target = ctx.targets.target_loss
    seconds = sorted({b for _, b in switching})
    group = {m: i for i, m in enumerate(seconds)}
    block = ratios.size * k1.size
    mean = np.concatenate([(first[a][0][:, k1] + ctx.prop.switch[(a, b)][0]).ravel() for a, b in switching])
    var = np.concatenate([(first[a][1][:, k1] + ctx.prop.switch[(a, b)][1]).ravel() for a, b in switching])
    which = np.repeat([group[b] for _, b in switching], block)
    rr = np.tile(np.repeat(ratios, k1.size), len(switching))
    uu = np.tile(np.repeat(unseen, k1.size), len(switching))
    kk = np.tile(k1, ratios.size * len(switching))
    need = np.full(mean.size, NEVER, dtype=np.int64)
    quantile = mean + kappa * np.sqrt(var)
    live = np.arange(mean.size)
    for k2 in range(1, horizon if live.size else 1):
        m, v = ctx.prop.run_many(seconds, which[live], mean[live], var[live], rr[live])
        new_q = ctx.prop.judged_quantile(seconds, which[live], m, v, kappa, uu[live], rr[live])
        open_ = kk[live] + k2 <= horizon
        hit = open_ & (new_q <= target)
        need[live[hit]] = k2
        open_ &= ~hit
        # a group stops when nothing is left open or its open predictions no longer fall
        moving = np.bincount(which[live], weights=open_ & ~(quantile[live] - new_q < STALL),
                             minlength=len(seconds))
        keep = open_ & (moving > 0)[which[live]]
        mean[live], var[live], quantile[live] = m, v, new_q
        live = live[keep]
        if not live.size:
            break
    return {pair: need[i * block:(i + 1) * block].reshape(ratios.size, k1.size)
            for i, pair in enumerate(switching)}


def _second_blocks(ctx: PlanContext, group: list[tuple[str, str]],
                   first: dict[str, tuple[np.ndarray, np.ndarray]], ratios: np.ndarray,
                   kappa: float, horizon: int, k1: np.ndarray,
                   unseen: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
    """:func:`predicted_tables` of switching pairs that share their second model (one array).

    The straightforward form of :func:`second_blocks_all`, which the planner uses.
    """
    target = ctx.targets.target_loss
    m2 = group[0][1]
    block = ratios.size * k1.size
    mean = np.concatenate([(first[a][0][:, k1] + ctx.prop.switch[(a, b)][0]).ravel() for a, b in group])
    var = np.concatenate([(first[a][1][:, k1] + ctx.prop.switch[(a, b)][1]).ravel() for a, b in group])
    rr = np.tile(np.repeat(ratios, k1.size), len(group))
    uu = np.tile(np.repeat(unseen, k1.size), len(group))
    kk = np.tile(k1, ratios.size * len(group))
    need = np.full(mean.size, NEVER, dtype=np.int64)
    quantile = mean + kappa * np.sqrt(var)
    for k2 in range(1, horizon):
        mean, var = ctx.prop.run_array(m2, mean, var, rr)
        new_q = ctx.prop.judged_quantile([m2], 0, mean, var, kappa, uu, rr)
        open_ = (need == NEVER) & (kk + k2 <= horizon)
        hit = open_ & (new_q <= target)
        need[hit] = k2
        open_ &= ~hit
        # stop when nothing is left open or the open predictions no longer fall
        if not open_.any() or np.all(quantile[open_] - new_q[open_] < STALL):
            break
        quantile = new_q
    return {pair: need[i * block:(i + 1) * block].reshape(ratios.size, k1.size)
            for i, pair in enumerate(group)}


def best_schedules(ctx: PlanContext, options: Sequence[dict[str, list[Option]]], groups: np.ndarray,
                   tables: dict[tuple[str, str], np.ndarray], k1_values: np.ndarray
                   ) -> list[list[tuple[float, Schedule]]]:
    """Cheapest predicted schedule per client set and model pair, its levels chosen under the deadline.

    Every switch point of every pair is costed as the plan would be: the
    levels of its ``k1 + k2`` rounds come from the greedy allocation under the
    deadline (:func:`~depl_fl.planner.resources.block_costs`, the cost of
    :func:`~depl_fl.planner.resources.allocate_levels`), not from each
    model's cheapest level. Where the deadline binds, a long schedule must buy
    fast levels in many rounds; priced at the cheapest levels it would look
    cheaper than a shorter schedule on a smaller, faster set, and data
    selection would keep the wrong set and switch point.

    Parameters
    ----------
    options : sequence of dict
        Per set, ``model id -> round options`` (the Pareto front, fastest first).
    groups : numpy.ndarray
        Shape ``(S,)``: row of each set in the tables (its data ratio).
    tables : dict
        ``pair -> predicted_second_block(...)``.
    k1_values : numpy.ndarray
        The ``k1`` of the tables' columns (column 0 of a one-model pair is ``k1 = 0``).

    Returns
    -------
    list
        Per set, ``(cost, schedule)`` of every pair that reaches the goal,
        cheapest first (empty when none does).
    """
    out: list[list[tuple[float, Schedule]]] = [[] for _ in groups]
    models = list(options[0]) if len(options) else []
    # Cheapest option of every set and model: where a schedule fits the deadline at these, they
    # are its levels (the greedy allocation moves every round to them); elsewhere the greedy runs.
    cheap_c = np.array([[opts[m][-1].cost for m in models] for opts in options]).reshape(len(options), -1)
    cheap_t = np.array([[opts[m][-1].time for m in models] for opts in options]).reshape(len(options), -1)
    index = {m: i for i, m in enumerate(models)}
    limit = ctx.deadline * (1.0 + 1e-9)
    for (m1, m2), table in tables.items():
        one_model = m1 == m2
        k1 = np.zeros(1) if one_model else k1_values.astype(float)
        if k1.size == 0:  # no switch point within the horizon
            continue
        k2_all = table[groups][:, :k1.size].astype(float)
        k2_all[k2_all >= NEVER] = np.inf
        a, b = index[m1], index[m2]
        with np.errstate(invalid="ignore"):
            total = k1[None, :] * cheap_c[:, a, None] + k2_all * cheap_c[:, b, None]
            fits = k1[None, :] * cheap_t[:, a, None] + k2_all * cheap_t[:, b, None] <= limit
        total[~np.isfinite(k2_all)] = np.inf
        for s in np.nonzero(np.isfinite(k2_all).any(axis=1))[0]:
            if not fits[s][np.isfinite(k2_all[s])].all():
                opts = options[s]
                blocks = [(opts[m2], k2_all[s])] if one_model else [(opts[m1], k1), (opts[m2], k2_all[s])]
                total[s] = block_costs(blocks, ctx.deadline)
            j = int(np.argmin(total[s]))
            if np.isfinite(total[s, j]):
                out[s].append((float(total[s, j]), Schedule(m1, int(k1[j]), m2, int(k2_all[s, j]))))
    for lst in out:
        lst.sort(key=lambda t: t[0])
    return out


def mc_second_block(ctx: PlanContext, pair: tuple[str, str], r: float, k1_values: Sequence[int],
                    horizon: int, need: float, n: int, seed: int,
                    clients: tuple[str, ...] | None = None) -> dict[int, int]:
    """Fewest ``k2`` with Monte Carlo ``P[L <= L*] >= need``, per ``k1`` (missing: none within ``horizon``).

    Exact contract semantics on ``n`` trajectories (``r`` the set's data
    ratio); the rounds of the first block share their random draws across
    the ``k1`` values (common random numbers), so the comparison between
    switch points is not blurred by independent noise. Version 2: ``r`` is
    the set's ``r_eff`` and ``clients`` (the set) gives the final map; the
    probability is the judged loss's, the evaluation noise integrated out
    (:func:`depl_fl.contract.semantics.judged_probability`), each compared with
    ``need`` as soon as that comparison is decided
    (:func:`depl_fl.contract.semantics.judged_reaches`).
    """
    m1, m2 = pair
    scen = ctx.scenario
    rng = np.random.default_rng(seed)
    a, b = scen.loss.data_exponent_mean, scen.loss.data_exponent_std
    scale = (r ** a, r ** (-b))
    losses = np.array(np.broadcast_to(ctx.start_losses(n, rng), (n,)), dtype=float)
    losses = _set_shift(ctx, clients, losses, rng)
    k1s = sorted({k for k in k1_values if 0 <= k < horizon} if m1 != m2 else {0})
    first_from = ctx.previous
    if m1 == m2:
        rows = losses[None, :].copy()
    else:
        losses = _switch(ctx, first_from, m1, losses, rng)
        rows = np.empty((len(k1s), n))
        for k in range(max(k1s) + 1):
            if k in k1s:
                rows[k1s.index(k)] = losses
            losses = _run(scen, m1, losses, scale, rng)
    for i, k1 in enumerate(k1s):
        source = m1 if k1 > 0 else first_from
        rows[i] = _switch(ctx, source, m2, rows[i], rng)
    result: dict[int, int] = {}
    open_ = np.ones(len(k1s), dtype=bool)
    target = ctx.targets.target_loss
    last = RoundDecision(m2, clients, {}) if clients is not None else None
    # Without a final map the judged loss is the walk's (version 1): one vectorised comparison.
    walk_only = final_map(scen, last) is None
    for k2 in range(1, horizon + 1):
        live = np.nonzero(open_ & (np.array(k1s) + k2 <= horizon))[0]
        if live.size == 0:
            break
        rows[live] = _run(scen, m2, rows[live], scale, rng)
        if walk_only:
            reached = np.mean(rows[live] <= target, axis=1) >= need
        else:
            reached = judged_reaches(scen, last, rows[live], target, need)
        for i in live[reached]:
            result[k1s[i]] = k2
            open_[i] = False
    return result


def _set_shift(ctx: PlanContext, clients: tuple[str, ...] | None, losses: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    """The set-shift jump of a first round on ``clients`` (before the model switch's: both add)."""
    jump = ctx.prop.set_shift_moments(clients, ctx.previous_clients) if clients is not None else None
    if jump is None:
        return losses
    return losses + jump[0] + math.sqrt(jump[1]) * draws.standard_normal(rng, losses.shape)


def _switch(ctx: PlanContext, source: str | None, target: str, losses: np.ndarray,
            rng: np.random.Generator) -> np.ndarray:
    if source is None or source == target:
        return losses
    sw = ctx.scenario.loss.switch[(source, target)]
    return losses + sw.mean + sw.std * draws.standard_normal(rng, losses.shape)


def _run(scen, model: str, losses: np.ndarray, scale: tuple[float, float],
         rng: np.random.Generator) -> np.ndarray:
    mu, sigma = walk_moments(scen.loss.run[model], losses)  # version 2: without the evaluation noise
    x = draws.standard_normal(rng, losses.shape)
    return np.maximum(losses - (mu * scale[0] + sigma * scale[1] * x), 0.0)
