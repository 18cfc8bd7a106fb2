"""Data selection: which clients take part (the decision taken least often).

Objective (the paper's): minimise ``K(S) * c(S)`` -- rounds needed times cost
per round -- over client sets ``S`` (subject to ``K(S) * t(S) <= deadline``,
``K(S) <= max_rounds`` and the clusters' ``max_clients``). Under the contract
``S`` enters the loss only through ``r = samples(S) / reference``: more
samples give a larger mean decrease ``r**a`` and a smaller spread ``r**-b``,
so ``K`` is non-increasing in ``samples(S)`` while ``c(S)`` is a modular
(per-client energy) plus per-cluster activation term, i.e. concave in
"clusters used" -- the product is the unbounded submodular-type objective of
the paper.

Algorithm (and how far from exact it is):

* ``K(S)`` is evaluated with the quantile predictor for each model used
  alone (:func:`rounds_needed`, vectorised over all candidate sample totals);
  ``c(S)``/``t(S)`` come from the exact per-set Pareto front of levels
  (:func:`depl_fl.planner.resources.round_options`), taking the cheapest
  option that still fits the deadline for ``K(S)`` rounds; the score is the
  best model's ``K * c``.
* **Small instances** (at most ``EXACT_LIMIT`` clients): every
  capacity-feasible subset is scored -- exact minimisation of the score.
* **Larger instances**: since ``K`` depends only on the sample total, for a
  given total the best set is the one that buys its samples cheapest. We score
  every prefix (all up to 64 clients, then in 10% steps) of a few greedy
  chains: clients by marginal joules per sample (cheapest level of their
  cluster, upload/download amortised over their samples), largest first on
  ties; each cluster alone by size; and clusters cumulatively in order of
  cheapness. This is exact when clients of a cluster have equal per-sample
  cost and deadlines do not bind; otherwise it is a heuristic (a general
  submodular minimiser, e.g. Fujishige-Wolfe, would be ``O(n^5)`` evaluations
  and is not used).

The planner (:func:`depl_fl.planner.depl.plan_depl`) then scores the sets
by the whole plans they enable and plans the best ones in full (model graph +
resource allocation + Monte Carlo check); the cheapest dependable plan wins,
which repairs most of the proxy's error.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from depl_fl.contract.coverage import is_predictable
from depl_fl.contract.scenario import Scenario
from depl_fl.contract.semantics import set_coverage
from depl_fl.identity_memo import LastObjectMemo
from depl_fl.planner.context import PlanContext
from depl_fl.planner.resources import ClientSet

EXACT_LIMIT = 10
#: The candidate sets of the last scenario object and model asked about: see :func:`candidate_sets`.
_CANDIDATES: LastObjectMemo[tuple[ClientSet, ...]] = LastObjectMemo()
#: Whether the last scenario object and model asked about have a candidate set: see :func:`has_candidate_set`.
_HAS_CANDIDATE: LastObjectMemo[bool] = LastObjectMemo()


def rounds_needed(ctx: PlanContext, model: str, ratios: np.ndarray, kappa: float,
                  uncovered: np.ndarray | float = 0.0,
                  shift: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Rounds of ``model`` alone until ``mean + kappa * std <= target``, per data ratio.

    The quantile is that of the judged final loss (version 2: the unseen
    share ``uncovered`` of each set and the evaluation noise, see
    :meth:`LossPropagator.judged_array`).

    Parameters
    ----------
    ctx : PlanContext
        Start state and budget.
    model : str
        The model used in every round.
    ratios : numpy.ndarray
        Data ratios ``r``.
    kappa : float
        Quantile multiplier.
    shift : tuple of numpy.ndarray, optional
        Mean and variance of each ratio's set-shift jump (:func:`set_shift_terms`).

    Returns
    -------
    numpy.ndarray of int
        Rounds needed; ``ctx.max_rounds + 1`` where the goal is not reached.
    """
    never = ctx.max_rounds + 1
    ratios = np.asarray(ratios, dtype=float)
    mean, var = start_moments_of(ctx, ratios.shape, shift)
    needed = np.full(ratios.shape, never, dtype=int)
    target = ctx.targets.target_loss
    if mean[0:1].size and ctx.prop.start_quantile(ctx.start_mean, ctx.start_var, kappa) <= target:
        needed[:] = 0
        return needed
    if ctx.previous is not None and ctx.previous != model:
        if (ctx.previous, model) not in ctx.prop.switch:
            return needed
        mean, var = ctx.prop.switch_array(ctx.previous, model, mean, var)
    for k in range(1, ctx.max_rounds + 1):
        new_mean, new_var = ctx.prop.run_array(model, mean, var, ratios)
        quantile = ctx.prop.judged_quantile([model], 0, new_mean, new_var, kappa, uncovered, ratios)
        hit = (needed == never) & (quantile <= target)
        needed[hit] = k
        open_ = needed == never
        if not open_.any():
            break
        stalled = np.abs(new_mean - mean) + np.abs(new_var - var) < 1e-12
        if stalled[open_].all():
            break
        mean, var = new_mean, new_var
    return needed


def start_moments_of(ctx: PlanContext, shape: tuple[int, ...],
                     shift: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray]:
    """Start ``(mean, var)`` arrays of ``shape``, each plus its set's set-shift jump (if any).

    The set-shift jump of a first round on a new set adds to the loss like a
    model switch's (the order of the two additions does not matter).
    """
    mean, var = np.full(shape, ctx.start_mean), np.full(shape, ctx.start_var)
    if shift is not None:
        mean = mean + np.broadcast_to(shift[0], shape)
        var = var + np.broadcast_to(shift[1], shape)
    return mean, var


def set_shift_terms(ctx: PlanContext, sets: Sequence[ClientSet]) -> tuple[np.ndarray, np.ndarray]:
    """Per set, mean and variance of its first round's set-shift jump (0 without ``loss.set_shift``)."""
    jumps = [ctx.prop.set_shift_moments(s.ids, ctx.previous_clients) or (0.0, 0.0) for s in sets]
    out = np.array(jumps, dtype=float).reshape(-1, 2)
    return out[:, 0], out[:, 1]


def rounds_needed_all(ctx: PlanContext, models: Sequence[str], ratios: np.ndarray, kappa: float,
                      uncovered: np.ndarray | float = 0.0,
                      shift: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """:func:`rounds_needed` of every model, all advanced together (one propagation per round).

    A model stops when none of its ratios is left open or all open ones have
    stalled; a ratio leaves the batch once its goal is met (the propagation is
    elementwise, so this changes no result).
    """
    never = ctx.max_rounds + 1
    ratios = np.asarray(ratios, dtype=float)
    out = {m: np.full(ratios.shape, never, dtype=int) for m in models}
    met = ctx.prop.start_quantile(ctx.start_mean, ctx.start_var, kappa) <= ctx.targets.target_loss
    if ratios.size and met:
        return {m: np.zeros(ratios.shape, dtype=int) for m in models}
    prev = ctx.previous
    usable = [m for m in models if prev is None or prev == m or (prev, m) in ctx.prop.switch]
    if not usable or not ratios.size:
        return out
    which = np.repeat(np.arange(len(usable)), ratios.size)
    rr = np.tile(ratios, len(usable))
    uu = np.tile(np.broadcast_to(np.asarray(uncovered, dtype=float), ratios.shape), len(usable))
    tiled = None if shift is None else tuple(np.tile(np.broadcast_to(x, ratios.shape), len(usable))
                                             for x in shift)
    mean, var = start_moments_of(ctx, rr.shape, tiled)
    for i, m in enumerate(usable):
        if prev is not None and prev != m:
            sl = which == i
            mean[sl], var[sl] = ctx.prop.switch_array(prev, m, mean[sl], var[sl])
    needed = np.full(rr.shape, never, dtype=int)
    live = np.arange(rr.size)
    for k in range(1, ctx.max_rounds + 1):
        new_mean, new_var = ctx.prop.run_many(usable, which[live], mean[live], var[live], rr[live])
        quantile = ctx.prop.judged_quantile(usable, which[live], new_mean, new_var, kappa, uu[live], rr[live])
        hit = quantile <= ctx.targets.target_loss
        needed[live[hit]] = k
        stalled = np.abs(new_mean - mean[live]) + np.abs(new_var - var[live]) < 1e-12
        mean[live], var[live] = new_mean, new_var
        keep = ~hit & ~_model_done(which[live], ~hit, stalled)
        live = live[keep]
        if not live.size:
            break
    for i, m in enumerate(usable):
        out[m] = needed[i * ratios.size:(i + 1) * ratios.size]
    return out


def _model_done(which: np.ndarray, open_: np.ndarray, stalled: np.ndarray) -> np.ndarray:
    """Per element: has its model stopped (no open element left, or every open one stalled)?"""
    groups = int(which.max()) + 1
    open_n = np.bincount(which, weights=open_, minlength=groups)
    moving = np.bincount(which, weights=open_ & ~stalled, minlength=groups)
    return ((open_n == 0) | (moving == 0))[which]


def _subsets(scenario: Scenario) -> Iterable[tuple[str, ...]]:
    ids = [c.id for c in scenario.clients]
    for size in range(1, len(ids) + 1):
        for combo in itertools.combinations(ids, size):
            yield combo


def _capacity_ok(scenario: Scenario, ids: Sequence[str]) -> bool:
    counts: dict[str, int] = {}
    for cid in ids:
        cl = scenario.client(cid).cluster
        counts[cl] = counts.get(cl, 0) + 1
    return all(n <= scenario.cluster(c).max_clients for c, n in counts.items())


def _checkpoints(n: int) -> list[int]:
    points = list(range(1, min(n, 64) + 1))
    k = 64
    while k < n:
        k = max(k + 1, int(k * 1.1))
        points.append(min(k, n))
    return sorted(set(points))


def _chains(scenario: Scenario, model_id: str) -> list[list[str]]:
    """Greedy orders of the clients (see the module docstring)."""
    model = scenario.model(model_id)
    le = scenario.local_epochs

    def score(c) -> tuple[float, int]:
        cl = scenario.cluster(c.cluster)
        jpf = min(lv.joules_per_flop for lv in cl.levels)
        per_sample = le * model.flops_per_sample * jpf \
            + 2.0 * model.size_bytes * cl.joules_per_byte / c.num_samples
        return per_sample, -c.num_samples

    by_score = sorted(scenario.clients, key=score)
    chains = [[c.id for c in by_score]]
    by_cluster: dict[str, list[str]] = {}
    for c in sorted(scenario.clients, key=lambda c: -c.num_samples):
        by_cluster.setdefault(c.cluster, []).append(c.id)
    chains.extend(by_cluster.values())
    cluster_rank = sorted(by_cluster, key=lambda cid: score(scenario.client(by_cluster[cid][0])))
    chains.append([cid for cl in cluster_rank for cid in by_cluster[cl]])
    coverage_chain = _coverage_chain(scenario, [c.id for c in by_score])
    if coverage_chain:
        chains.append(coverage_chain)
    return chains


#: Most clients for which the coverage-greedy chain (quadratic in the clients) is built.
COVERAGE_CHAIN_LIMIT = 256


def _coverage_chain(scenario: Scenario, order: list[str]) -> list[str]:
    """Version 2: clients added one by one, each time the one giving the largest ``c_S * n_S``
    (ties: the earlier in ``order``) -- prefixes that cover the labels with the fewest clients.
    Empty without histograms, or beyond ``COVERAGE_CHAIN_LIMIT`` clients."""
    q = scenario.loss.label_shares
    hists = {c.id: c.label_histogram for c in scenario.clients}
    if scenario.version < 2 or q is None or any(h is None for h in hists.values()) \
            or len(order) > COVERAGE_CHAIN_LIMIT:
        return []
    shares = np.asarray(q, dtype=float)
    left = list(order)
    pooled = np.zeros(shares.size)
    chain: list[str] = []
    while left:
        cand = pooled[None, :] + np.array([hists[c] for c in left], dtype=float)
        effective = np.minimum(cand, shares[None, :] * cand.sum(axis=1, keepdims=True)).sum(axis=1)
        best = int(np.argmax(effective))
        pooled = cand[best]
        chain.append(left.pop(best))
    return chain


def _chain_prefixes(scenario: Scenario, chain: Sequence[str]) -> Iterable[ClientSet]:
    """Capacity-respecting prefixes of a chain (clients over capacity are skipped)."""
    kept: list[str] = []
    used: dict[str, int] = {}
    for cid in chain:
        cl = scenario.client(cid).cluster
        if used.get(cl, 0) < scenario.cluster(cl).max_clients:
            used[cl] = used.get(cl, 0) + 1
            kept.append(cid)
    order = [c.id for c in scenario.clusters]
    index = {c: i for i, c in enumerate(order)}
    samples = np.zeros(len(order))
    counts = np.zeros(len(order))
    biggest = np.zeros(len(order))
    checkpoints = set(_checkpoints(len(kept)))
    for k, cid in enumerate(kept, start=1):
        client = scenario.client(cid)
        i = index[client.cluster]
        samples[i] += client.num_samples
        counts[i] += 1
        biggest[i] = max(biggest[i], client.num_samples)
        if k in checkpoints:
            active = counts > 0
            yield ClientSet(tuple(kept[:k]), tuple(c for c, a in zip(order, active, strict=True) if a),
                            samples[active].copy(), counts[active].copy(), biggest[active].copy(),
                            int(samples.sum()))


def predictable(scenario: Scenario, ids: Sequence[str]) -> bool:
    """Whether the loss of set ``ids`` lies in the profile's measured coverage range (version 2).

    Always True for version 1 or a set without label histograms
    (:func:`depl_fl.contract.coverage.is_predictable`).
    """
    loss = scenario.loss
    if loss.min_coverage is None and loss.max_uncovered is None:
        return True
    return is_predictable(set_coverage(scenario, ids), loss.min_coverage, loss.max_uncovered)


def set_terms(ctx: PlanContext, sets: Sequence[ClientSet]) -> tuple[np.ndarray, np.ndarray]:
    """Per set, the walk's data ratio ``r_eff`` and the unseen share of its final map."""
    terms = np.array([ctx.prop.set_terms(s.ids) for s in sets], dtype=float).reshape(-1, 2)
    return terms[:, 0], terms[:, 1]


def candidate_sets(scenario: Scenario, model_id: str) -> list[ClientSet]:
    """Client sets to score: all subsets when small, else prefixes of greedy chains.

    Version 2: only sets whose label coverage the profile measured
    (:func:`predictable`) -- the planner never extrapolates the loss profile.

    The sets depend on the scenario and the model alone: a re-plan on the same
    scenario object (every round of a tracked run until a client fails) gets
    the last call's sets again instead of walking every chain over every client.
    """
    return list(_CANDIDATES.get(scenario, lambda: tuple(_candidate_sets(scenario, model_id)), model_id))


def has_candidate_set(scenario: Scenario, model_id: str) -> bool:
    """Whether :func:`candidate_sets` has a set, found without building the others.

    Known once per scenario object and model: the first set still walks the
    greedy chains over every client (each a sort of the clients), and a
    tracked run asks before every re-plan.
    """
    return _HAS_CANDIDATE.get(scenario, lambda: next(_candidate_sets(scenario, model_id), None) is not None,
                              model_id)


def _candidate_sets(scenario: Scenario, model_id: str) -> Iterator[ClientSet]:
    """The sets of :func:`candidate_sets`, in its order, one at a time."""
    if len(scenario.clients) <= EXACT_LIMIT:
        yield from (ClientSet.from_ids(scenario, ids) for ids in _subsets(scenario)
                    if _capacity_ok(scenario, ids) and predictable(scenario, ids))
        return
    seen: set[frozenset[str]] = set()
    for chain in _chains(scenario, model_id):
        for cset in _chain_prefixes(scenario, chain):
            key = frozenset(cset.ids)
            if key not in seen and predictable(scenario, cset.ids):
                seen.add(key)
                yield cset


def rank_sets(ctx: PlanContext, sets: Sequence[ClientSet], kappa: float,
              models: Sequence[str]) -> list[tuple[float, ClientSet]]:
    """Score ``K(S) * c(S)`` of every set (best single model), ascending.

    Sets for which no single model reaches the goal get score ``inf`` but are
    kept (ordered by sample total, largest first) so that the model graph,
    which may switch models, can still try them.
    """
    ratios, uncovered = set_terms(ctx, sets)
    needed = rounds_needed_all(ctx, models, ratios, kappa, uncovered, set_shift_terms(ctx, sets))
    scored: list[tuple[float, float, int, ClientSet]] = []
    for i, cset in enumerate(sets):
        best = np.inf
        for m in models:
            k = int(needed[m][i])
            if k > ctx.max_rounds:
                continue
            fitting = [o for o in ctx.options(cset, m) if k * o.time <= ctx.deadline]
            if fitting:
                best = min(best, k * fitting[-1].cost)
        scored.append((best, -cset.total_samples, i, cset))
    scored.sort(key=lambda t: (t[0], t[1], t[2]))
    return [(s, c) for s, _, _, c in scored]
