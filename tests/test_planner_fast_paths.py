"""The planner's fast paths return exactly what the straightforward loops return.

Planning speed (at most 1 s on the paper scenario) comes from batching
and pruning that must not change any plan:

* the moment propagation is elementwise, bit for bit: an element's result
  does not depend on the batch it is in or on the models the batch holds, so
  the planner may merge models into one pass and drop settled elements;
* :func:`rounds_needed_all` (all models, settled ratios dropped) equals
  :func:`rounds_needed`, one model at a time;
* :func:`schedules.second_blocks_all` (all groups, settled states dropped)
  equals :func:`schedules._second_blocks`, one group at a time;
* the per-scenario cache of round options returns the fronts ``round_options``
  computes; the trajectory cache answers a repeated plan as a fresh run;
* a start that already meets the target gets the plan of no round without
  the search, the same plan document as the search's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from depl_fl.contract.plan import RoundDecision
from depl_fl.planner import schedules
from depl_fl.planner.context import PlanContext
from depl_fl.planner.data_selection import candidate_sets, rounds_needed, rounds_needed_all
from depl_fl.planner.quantile import LossPropagator, PlanStart
from depl_fl.planner.resources import Option, allocate_levels, block_costs, round_options
from tests.benchmark_scripts import load_benchmark

scenarios = load_benchmark("scenarios", module_name="planner_scenarios")


def _version2(seed: int):
    """``random_hard(seed)`` as version 2: label histograms, evaluation noise, a floor loss."""
    base, targets = scenarios.random_hard(seed)
    return scenarios.as_version_2(base, seed, eval_factor=0.4, floor=4.0), targets


def _cases():
    yield scenarios.paper_like(0.95), None
    yield scenarios.paper_like(0.9), PlanStart(1.5, 0.1, "mobilenet-p90", 0.0, 3)
    for seed in (100, 104, 110, 5003, 5010, 7001):
        yield scenarios.random_hard(seed), None
    yield scenarios.random_small(3), PlanStart(0.9, 0.0, "full")
    yield scenarios.scaled(60, 6, 80), None
    yield _version2(104), None
    yield _version2(5010), None


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


@pytest.mark.parametrize("index", range(len(CASES)))
def test_rounds_needed_all_equals_the_per_model_loop(index):
    (scen, targets), start = CASES[index]
    ctx = PlanContext.build(scen, targets, start, None)
    ratios = np.random.default_rng(index).uniform(0.001, 3.0, 60)
    models = [m.id for m in scen.models]
    uncovered = np.random.default_rng(index + 1).uniform(0.0, 0.3, ratios.size)
    for kappa in (0.0, 1.64, 4.0):
        for unseen in (0.0, uncovered):
            fast = rounds_needed_all(ctx, models, ratios, kappa, unseen)
            for m in models:
                assert np.array_equal(fast[m], rounds_needed(ctx, m, ratios, kappa, unseen)), (m, kappa)


@pytest.mark.parametrize("index", range(len(CASES)))
def test_second_blocks_all_equal_one_group_at_a_time(index):
    (scen, targets), start = CASES[index]
    ctx = PlanContext.build(scen, targets, start, None)
    rng = np.random.default_rng(index)
    ratios = np.unique(rng.uniform(0.001, 3.0, 12))
    pairs = schedules.allowed_pairs(ctx)
    models = sorted({m for pair in pairs for m in pair})
    compared = 0
    for horizon in (2, 25, min(ctx.max_rounds, schedules.ROUND_CAP)):
        k1 = schedules.switch_points(horizon)
        first = schedules.first_blocks(ctx, models, ratios, horizon)
        usable = [p for p in pairs if p[0] != p[1] and p[0] in first]
        for kappa in (0.0, 1.64, 4.0):
            for unseen in (np.zeros(ratios.size), rng.uniform(0.0, 0.3, ratios.size)):
                if not usable:
                    continue
                fast = schedules.second_blocks_all(ctx, usable, first, ratios, kappa, horizon, k1, unseen)
                for m2 in sorted({b for _, b in usable}):
                    group = [p for p in usable if p[1] == m2]
                    slow = schedules._second_blocks(ctx, group, first, ratios, kappa, horizon, k1, unseen)
                    for pair, table in slow.items():
                        assert np.array_equal(fast[pair], table), (pair, horizon, kappa)
                        compared += 1
    assert compared > 0 or all(p[0] == p[1] for p in pairs)


def test_cached_round_options_are_the_fronts():
    scen, targets = scenarios.paper_like(0.9)
    ctx = PlanContext.build(scen, targets, None, None)
    later = PlanContext.build(scen, targets, PlanStart(1.5, 0.1, scen.models[0].id, 10.0, 2), None)
    for cset in candidate_sets(scen, scen.models[0].id)[::7]:
        for model in scen.models:
            assert ctx.options(cset, model.id) == round_options(scen, cset, model.id)
            assert ctx.options(cset, model.id) is ctx.options(cset, model.id)
            # A re-plan on the same scenario object from another start reads the same fronts.
            assert later.options(cset, model.id) is ctx.options(cset, model.id)


def test_round_options_and_the_largest_set_are_made_again_for_another_scenario_object():
    from depl_fl.planner.depl import largest_set

    scen, targets = scenarios.scaled(60, 6, 80)
    ctx = PlanContext.build(scen, targets, None, None)
    cset = candidate_sets(scen, scen.models[0].id)[0]
    model = scen.models[0].id
    cheaper = dataclasses.replace(scen, clusters=tuple(
        dataclasses.replace(c, activation_joules=c.activation_joules + 7.0) for c in scen.clusters))
    other = PlanContext.build(cheaper, targets, None, None)
    assert other.options(cset, model) == round_options(cheaper, cset, model)
    assert other.options(cset, model) != ctx.options(cset, model)
    assert largest_set(ctx) is largest_set(PlanContext.build(scen, targets, None, None))
    fewer = dataclasses.replace(scen, clients=scen.clients[:30])
    kept = {c.id for c in scen.clients[:30]}
    assert set(largest_set(PlanContext.build(fewer, targets, None, None)).ids) <= kept
    assert not set(largest_set(ctx).ids) <= kept


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


@pytest.mark.parametrize("column", [0, 7, 25, -1])
def test_a_predicted_schedule_switches_at_its_columns_round(column):
    # The tables' columns hold k1 = switch_points(h)[j] (1..20, then steps of ~10%): a schedule
    # built from column j switches after that many rounds, and its cost is k1 c1 + k2 c2.
    (scen, targets), start = CASES[0]
    ctx = PlanContext.build(scen, targets, start, None)
    first, second = scen.models[0].id, scen.models[1].id
    k1_values = schedules.switch_points(60)
    table = np.full((1, k1_values.size), schedules.NEVER, dtype=np.int64)
    table[0, column] = 5
    options = [{m.id: [Option(1e-6, 2.0 if m.id == first else 3.0, ())] for m in scen.models}]
    (cost, sched), = schedules.best_schedules(ctx, options, np.array([0]),
                                              {(first, second): table}, k1_values)[0]
    assert (sched.first, sched.k1, sched.second, sched.k2) == (first, int(k1_values[column]), second, 5)
    assert cost == sched.k1 * 2.0 + 5 * 3.0


@pytest.mark.parametrize("seed", [200, 203, 207])
def test_block_costs_equal_the_level_allocation(seed):
    """The vectorised cost of many two-block schedules is :func:`allocate_levels`' cost of each."""
    scen, targets = scenarios.random_deadline(seed)
    rng = np.random.default_rng(seed)
    models = [m.id for m in scen.models]
    checked = 0
    for cset in candidate_sets(scen, "full")[::3]:
        a, b = rng.choice(models, size=2, replace=False)
        opts = {a: round_options(scen, cset, a), b: round_options(scen, cset, b)}
        k1 = np.arange(1, 13, dtype=float)
        k2 = rng.integers(1, 13, size=k1.size).astype(float)
        k2[3] = np.inf                                     # a schedule that does not exist
        deadline = targets.deadline_s * rng.uniform(0.5, 2.0)
        got = block_costs([(opts[a], k1), (opts[b], k2)], deadline)
        for i in range(k1.size):
            alloc = None if not np.isfinite(k2[i]) else \
                allocate_levels([a] * int(k1[i]) + [b] * int(k2[i]), opts, deadline)
            want = np.inf if alloc is None else sum(o.cost for o in alloc)
            assert got[i] == pytest.approx(want, rel=1e-9), (cset.ids, a, b, i)
            checked += np.isfinite(want)
    assert checked > 0


def test_a_schedule_that_needs_fast_levels_is_priced_at_them():
    """Under a binding deadline a long cheap-per-round schedule costs its fast levels' energy:
    the shorter schedule that fits the deadline at the cheapest levels wins."""
    (scen, targets), start = CASES[0]
    ctx = PlanContext.build(scen, targets, start, None)
    ctx.deadline = 20.0
    first, second = scen.models[0].id, scen.models[1].id
    k1_values = np.array([4, 16])
    table = np.array([[6, 1]])                             # 4 + 6 rounds, or 16 + 1 rounds
    # one round: 1 s for 10 J (fast) or 2 s for 4 J (cheapest), both models
    options = [{m.id: [Option(1.0, 10.0, ()), Option(2.0, 4.0, ())] for m in scen.models}]
    (cost, sched), = schedules.best_schedules(ctx, options, np.array([0]),
                                              {(first, second): table}, k1_values)[0]
    # 10 rounds fit 20 s at 4 J; 17 rounds need 14 fast ones: 14 * 10 + 3 * 4 = 152 J > 40 J
    assert (sched.k1, sched.k2) == (4, 6)
    assert cost == pytest.approx(40.0)


def test_undominated_vertices_match_a_pairwise_reference_on_dense_and_spread_layers():
    """The layer's dominance mask (a vertex is dropped when another of its model has both bins
    lower or equal and a strictly lighter weight) is the same whether it is computed on the bin
    grid (many vertices) or pairwise (few vertices over a wide bin range)."""
    from depl_fl.planner.model_selection import _undominated

    rng = np.random.default_rng(7)
    paths = 0
    for spread in (8, 5000):
        for _ in range(50):
            n = int(rng.integers(2, 80))
            keys = {(int(rng.integers(0, 3)), int(rng.integers(0, spread)), int(rng.integers(0, spread)))
                    for _ in range(n)}
            columns = zip(*sorted(keys), strict=True)
            model, mean_bin, std_bin = (np.array(col, dtype=np.int64) for col in columns)
            weight = rng.random(model.size).round(2)
            expected = np.array([not any(model[j] == model[i] and mean_bin[j] <= mean_bin[i]
                                         and std_bin[j] <= std_bin[i] and weight[j] < weight[i]
                                         for j in range(model.size)) for i in range(model.size)])
            assert (_undominated(model, mean_bin, std_bin, weight) == expected).all()
            paths += int(not expected.all())
    assert paths > 0  # some layers do drop vertices


def _plan_document(plan) -> dict:
    """A plan's document without what says how it was found (``planner_info``, ``planner_seconds``)."""
    from depl_fl.contract.plan import plan_to_dict

    doc = plan_to_dict(plan)
    doc.pop("planner_info", None)
    doc.pop("planner_seconds", None)
    return doc


@pytest.mark.parametrize("index", range(len(CASES)))
@pytest.mark.parametrize("fraction", [0.0, 0.9, 1.0, 1.05])
def test_a_start_that_meets_the_target_gets_the_searchs_plan_without_the_search(index, fraction,
                                                                              monkeypatch):
    import depl_fl.planner as planner

    (scen, targets), base = CASES[index]
    previous = base.previous_model if base is not None else None
    start = PlanStart(targets.target_loss * fraction, 0.0, previous, 0.0, 2)
    fast = planner.make_plan(scen, targets, start=start, mc_trajectories=4000)
    monkeypatch.setattr(planner, "no_round_wins", lambda *args, **kwargs: False)
    searched = planner.make_plan(scen, targets, start=start, mc_trajectories=4000)
    assert _plan_document(fast) == _plan_document(searched)
    took = "shortcut" in fast.extra["planner_info"]
    if fraction == 0.0:
        assert took and fast.feasible and fast.rounds == []
    if took:
        assert "candidate_sets" in searched.extra["planner_info"] and searched.rounds == []
    if fraction > 1.0:
        assert not took and fast.rounds


def test_candidate_sets_are_kept_per_scenario_object():
    scen, _ = scenarios.scaled(60, 6, 80)
    model = scen.models[0].id
    first = candidate_sets(scen, model)
    again = candidate_sets(scen, model)
    assert again == first and again is not first  # a new list: a caller may reorder it
    again.clear()
    assert candidate_sets(scen, model) == first
    smaller = dataclasses.replace(scen, clients=scen.clients[:30])
    assert {c for s in candidate_sets(smaller, model) for c in s.ids} <= {c.id for c in scen.clients[:30]}


def test_hinge_sums_add_the_levels_in_order_bit_for_bit() -> None:
    from depl_fl.planner.quantile import _hinge_sums

    rng = np.random.default_rng(4)
    for n, levels, rows in ((1, 1, 1), (37, 13, 1), (37, 13, 37), (5, 40, 5)):
        e1, e2 = rng.normal(size=(n, levels)) * 1e3, rng.normal(size=(n, levels))
        w1, w2 = rng.normal(size=(rows, levels, 4)), rng.normal(size=(rows, levels, 4)) * 1e-3
        const = rng.normal(size=(4,) if rows == 1 else (n, 4))
        one_by_one = np.array(np.broadcast_to(const, (n, 4)))
        for j in range(levels):
            one_by_one += e1[:, j, None] * w1[:, j]
            one_by_one += e2[:, j, None] * w2[:, j]
        assert np.array_equal(_hinge_sums(const, e1, e2, w1, w2), one_by_one)
