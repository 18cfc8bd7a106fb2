"""The planner's fast paths return exactly what the straightforward loops return.

Planning speed (issue 13: <= 1 s on the paper scenario) comes from batching
and pruning that must not change any plan:

* the moment propagation is elementwise, bit for bit: an element's result
  does not depend on the batch it is in or on the models the batch holds, so
  the planner may merge models into one pass and drop settled elements;
* :func:`rounds_needed_all` (all models, settled ratios dropped) equals the
  per-model loop; :func:`schedules._second_blocks` (all groups, settled
  states dropped) equals the per-group loop;
* the per-call cache of round options returns the fronts ``round_options``
  computes; the switch-point search's run round equals the contract's.

The reference loops below are the planner's code before the fast paths.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from depl_fl.contract.plan import RoundDecision
from depl_fl.contract.semantics import InterpTable, iter_round_losses
from depl_fl.planner import schedules
from depl_fl.planner.context import PlanContext
from depl_fl.planner.data_selection import candidate_sets, rounds_needed_all
from depl_fl.planner.quantile import LossPropagator, PlanStart
from depl_fl.planner.resources import round_options

_SPEC = importlib.util.spec_from_file_location(
    "planner_scenarios", Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios.py")
scenarios = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(scenarios)


def _cases():
    yield scenarios.paper_like(0.95), None
    yield scenarios.paper_like(0.9), PlanStart(1.5, 0.1, "mobilenet-p90", 0.0, 3)
    for seed in (100, 104, 110, 5003, 5010, 7001):
        yield scenarios.random_hard(seed), None
    yield scenarios.random_small(3), PlanStart(0.9, 0.0, "full")
    yield scenarios.scaled(60, 6, 80), None


CASES = list(_cases())


@pytest.mark.parametrize("index", range(len(CASES)))
def test_propagation_is_elementwise(index):
    (scen, _), _start = CASES[index]
    prop = LossPropagator(scen)
    models = [m.id for m in scen.models]
    rng = np.random.default_rng(index)
    for _ in range(10):
        n = int(rng.integers(1, 300))
        mean = rng.uniform(0.0, 2.5, n)           # includes states near the clamp at 0
        var = rng.uniform(0.0, 0.4, n) ** 2
        r = float(rng.uniform(0.05, 2.0))
        which = rng.integers(0, len(models), n)
        batch_mean, batch_var = prop.run_many(models, which, mean, var, r)
        for j in rng.choice(n, size=min(n, 12), replace=False):
            model = models[which[j]]
            one_mean, one_var = prop.run_array(model, mean[j:j + 1], var[j:j + 1], np.array([r]))
            assert one_mean[0] == batch_mean[j] and one_var[0] == batch_var[j]
        keep = rng.random(n) < 0.5
        for i, model in enumerate(models):
            sel = keep & (which == i)
            sub_mean, sub_var = prop.run_array(model, mean[sel], var[sel], r)
            assert np.array_equal(sub_mean, batch_mean[sel]) and np.array_equal(sub_var, batch_var[sel])


def _rounds_needed_loop(ctx, model, ratios, kappa):
    """One model at a time, every ratio kept to the end (the planner's former loop)."""
    never = ctx.max_rounds + 1
    mean = np.full(ratios.shape, ctx.start_mean)
    var = np.full(ratios.shape, ctx.start_var)
    needed = np.full(ratios.shape, never, dtype=int)
    target = ctx.targets.target_loss
    if ctx.start_mean + kappa * ctx.start_std <= target:
        return np.zeros(ratios.shape, dtype=int)
    if ctx.previous is not None and ctx.previous != model:
        if (ctx.previous, model) not in ctx.prop.switch:
            return needed
        mean, var = ctx.prop.switch_array(ctx.previous, model, mean, var)
    for k in range(1, ctx.max_rounds + 1):
        new_mean, new_var = ctx.prop.run_array(model, mean, var, ratios)
        hit = (needed == never) & (new_mean + kappa * np.sqrt(new_var) <= target)
        needed[hit] = k
        open_ = needed == never
        if not open_.any():
            break
        stalled = np.abs(new_mean - mean) + np.abs(new_var - var) < 1e-12
        if stalled[open_].all():
            break
        mean, var = new_mean, new_var
    return needed


@pytest.mark.parametrize("index", range(len(CASES)))
def test_rounds_needed_all_equals_the_per_model_loop(index):
    (scen, targets), start = CASES[index]
    ctx = PlanContext.build(scen, targets, start, None)
    ratios = np.random.default_rng(index).uniform(0.001, 3.0, 60)
    models = [m.id for m in scen.models]
    for kappa in (0.0, 1.64, 4.0):
        fast = rounds_needed_all(ctx, models, ratios, kappa)
        for m in models:
            assert np.array_equal(fast[m], _rounds_needed_loop(ctx, m, ratios, kappa)), (m, kappa)


def _second_block_loop(ctx, group, first, ratios, kappa, horizon, k1):
    """One second model at a time, every state kept until the group stops (the former loop)."""
    target = ctx.targets.target_loss
    block = ratios.size * k1.size
    mean = np.concatenate([(first[a][0][:, k1] + ctx.prop.switch[(a, b)][0]).ravel() for a, b in group])
    var = np.concatenate([(first[a][1][:, k1] + ctx.prop.switch[(a, b)][1]).ravel() for a, b in group])
    rr = np.tile(np.repeat(ratios, k1.size), len(group))
    kk = np.tile(k1, ratios.size * len(group))
    need = np.full(mean.size, schedules.NEVER, dtype=np.int64)
    quantile = mean + kappa * np.sqrt(var)
    for k2 in range(1, horizon):
        mean, var = ctx.prop.run_array(group[0][1], mean, var, rr)
        new_q = mean + kappa * np.sqrt(var)
        open_ = (need == schedules.NEVER) & (kk + k2 <= horizon)
        hit = open_ & (new_q <= target)
        need[hit] = k2
        open_ &= ~hit
        if not open_.any() or np.all(quantile[open_] - new_q[open_] < schedules.STALL):
            break
        quantile = new_q
    return {pair: need[i * block:(i + 1) * block].reshape(ratios.size, k1.size)
            for i, pair in enumerate(group)}


@pytest.mark.parametrize("index", range(len(CASES)))
def test_second_blocks_equal_the_per_group_loop(index):
    (scen, targets), start = CASES[index]
    ctx = PlanContext.build(scen, targets, start, None)
    ratios = np.unique(np.random.default_rng(index).uniform(0.001, 3.0, 12))
    pairs = schedules.allowed_pairs(ctx)
    models = sorted({m for pair in pairs for m in pair})
    switching = [p for p in pairs if p[0] != p[1]]
    compared = 0
    for horizon in (2, 25, min(ctx.max_rounds, schedules.ROUND_CAP)):
        k1 = schedules.switch_points(horizon)
        first = schedules.first_blocks(ctx, models, ratios, horizon)
        usable = [p for p in switching if p[0] in first]
        if not usable:
            continue
        for kappa in (0.0, 1.64, 4.0):
            fast = schedules._second_blocks(ctx, usable, first, ratios, kappa, horizon, k1)
            for m2 in sorted({b for _, b in usable}):
                group = [p for p in usable if p[1] == m2]
                slow = _second_block_loop(ctx, group, first, ratios, kappa, horizon, k1)
                for pair, table in slow.items():
                    assert np.array_equal(fast[pair], table), (pair, horizon, kappa)
                    compared += 1
    assert compared > 0 or not switching


def test_cached_round_options_are_the_fronts():
    scen, targets = scenarios.paper_like(0.9)
    ctx = PlanContext.build(scen, targets, None, None)
    for cset in candidate_sets(scen, scen.models[0].id)[::7]:
        for model in scen.models:
            assert ctx.options(cset, model.id) == round_options(scen, cset, model.id)
            assert ctx.options(cset, model.id) is ctx.options(cset, model.id)


def test_switch_point_search_runs_the_contract_round():
    scen, _ = scenarios.random_hard(104)
    ids = tuple(c.id for c in scen.clients)
    r = sum(c.num_samples for c in scen.clients) / scen.loss.reference_samples
    scale = (r ** scen.loss.data_exponent_mean, r ** (-scen.loss.data_exponent_std))
    for model in scen.loss.run:
        prof = scen.loss.run[model]
        table = InterpTable(prof.levels, prof.mean, prof.std)
        losses = np.full(4000, scen.loss.initial)
        rng = np.random.default_rng(7)
        for reference in iter_round_losses(scen, [RoundDecision(model, ids, {})] * 12, 4000, 7,
                                           start_loss=scen.loss.initial):
            losses = schedules._run(table, losses, scale, rng)
            assert np.array_equal(losses, reference)


def test_switch_point_search_equals_one_row_at_a_time():
    """The search drops settled rows from its batch; the rows it keeps draw the same numbers."""
    scen, targets = scenarios.random_hard(110)
    ctx = PlanContext.build(scen, targets, None, None)
    for pair in schedules.allowed_pairs(ctx):
        found = schedules.mc_second_block(ctx, pair, 0.4, range(1, 9), ctx.max_rounds, 0.8, 1500, 3)
        assert found == _mc_second_block_loop(ctx, pair, 0.4, range(1, 9), ctx.max_rounds, 0.8, 1500, 3)


def _mc_second_block_loop(ctx, pair, r, k1_values, horizon, need, n, seed):
    """The former search: every row kept in one array, live rows gathered and scattered each round."""
    m1, m2 = pair
    scen = ctx.scenario
    rng = np.random.default_rng(seed)
    scale = (r ** scen.loss.data_exponent_mean, r ** (-scen.loss.data_exponent_std))
    tables = {m: InterpTable(scen.loss.run[m].levels, scen.loss.run[m].mean, scen.loss.run[m].std)
              for m in set(pair)}
    losses = np.full(n, ctx.start_mean)
    k1s = sorted({k for k in k1_values if 0 <= k < horizon} if m1 != m2 else {0})
    if m1 == m2:
        rows = losses[None, :].copy()
    else:
        rows = np.empty((len(k1s), n))
        for k in range(max(k1s) + 1):
            if k in k1s:
                rows[k1s.index(k)] = losses
            losses = schedules._run(tables[m1], losses, scale, rng)
    for i, k1 in enumerate(k1s):
        rows[i] = schedules._switch(ctx, m1 if k1 > 0 else None, m2, rows[i], rng)
    result, open_ = {}, np.ones(len(k1s), dtype=bool)
    for k2 in range(1, horizon + 1):
        live = np.nonzero(open_ & (np.array(k1s) + k2 <= horizon))[0]
        if live.size == 0:
            break
        rows[live] = schedules._run(tables[m2], rows[live], scale, rng)
        for i in live[np.mean(rows[live] <= ctx.targets.target_loss, axis=1) >= need]:
            result[k1s[i]] = k2
            open_[i] = False
    return result


def test_trajectory_cache_repeats_evicted_sequences_bit_for_bit():
    """A sequence asked again after its prefix states were evicted gets the fresh simulation's losses."""
    from depl_fl.contract.semantics import simulate_final_losses
    from depl_fl.planner.checking import final_losses
    from depl_fl.planner.trajectories import MAX_SEQUENCES

    scen, targets = scenarios.random_hard(104)
    ctx = PlanContext.build(scen, targets, None, None)
    ids = tuple(c.id for c in scen.clients)
    models = [m.id for m in scen.models]
    seqs = [[models[i % len(models)]] * (3 + i) for i in range(MAX_SEQUENCES + 3)]
    order = seqs + seqs[:2] + seqs[::-1] * 2
    assert len(set(map(tuple, order))) < len(order) and len(seqs) > MAX_SEQUENCES
    for seq in order:
        rounds = [RoundDecision(m, ids, {}) for m in seq]
        fresh = simulate_final_losses(scen, rounds, 2000, np.random.default_rng(5),
                                      start_loss=scen.loss.initial)
        assert np.array_equal(final_losses(ctx, rounds, 2000, 5), fresh)
