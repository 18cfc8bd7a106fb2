"""Unit tests of the planner's pieces: quantile prediction, resources, graph, API errors."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from depl_fl.contract.plan import RoundDecision, Targets
from depl_fl.contract.semantics import (
    evaluate_plan,
    plan_errors,
    round_energy,
    round_time,
    simulate_final_losses,
)
from depl_fl.errors import ScenarioError
from depl_fl.planner import PlanStart, make_plan, predict_quantile
from depl_fl.planner.context import PlanContext
from depl_fl.planner.model_selection import EdgeSpec, LayeredGraph
from depl_fl.planner.quantile import LossPropagator, kappa
from depl_fl.planner.resources import ClientSet, allocate_levels, round_options
from tests.benchmark_scripts import load_benchmark

scenarios = load_benchmark("scenarios", module_name="planner_scenarios")


@pytest.fixture(scope="module")
def small():
    return scenarios.random_small(3)


def _rounds(scen, models, clients=None):
    ids = tuple(clients or [c.id for c in scen.clients])
    return [RoundDecision(m, ids, {}) for m in models]


def test_gaussian_prediction_matches_monte_carlo_moments(small):
    scen, _ = small
    models = [m.id for m in scen.models]
    seq = [models[2]] * 5 + [models[1]] * 3 + [models[0]] * 6
    q, mean, std = predict_quantile(scen, _rounds(scen, seq), 0.9)
    losses = simulate_final_losses(scen, _rounds(scen, seq), 40000, np.random.default_rng(1))
    assert abs(mean - losses.mean()) < 0.03
    assert abs(std - losses.std()) < 0.25 * losses.std() + 0.005
    assert abs(q - np.quantile(losses, 0.9)) < 0.05
    assert q == pytest.approx(mean + kappa(0.9) * std)


def _kinked_scenario():
    """One model whose mean decrease has a sharp kink (as fitted from real pilots)."""
    from depl_fl.contract.scenario import scenario_from_dict

    return scenario_from_dict({
        "version": 1,
        "clusters": [{"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9}],
                      "bytes_per_s": 1e6}],
        "clients": [{"id": "c0", "cluster": "A", "num_samples": 100}],
        "models": [{"id": "m", "flops_per_sample": 1e6, "size_bytes": 1e4},
                   {"id": "n", "flops_per_sample": 5e5, "size_bytes": 5e3}],
        "loss": {"initial": 2.5, "data_exponent_mean": 0.25, "data_exponent_std": 0.9,
                 "run": {"m": {"levels": [0.6, 0.95, 1.4, 2.0], "mean": [0.03, 0.2, 0.15, 0.27],
                               "std": [0.07, 0.04, 0.14, 0.08]},
                         "n": {"levels": [1.0], "mean": [0.1], "std": [0.05]}},
                 "switch": []},
    })


@pytest.mark.parametrize("mean, var", [(0.7, 0.05), (1.0, 0.3 ** 2), (0.3, 0.0), (2.4, 0.01), (0.05, 0.04)])
def test_one_run_round_has_the_exact_moments_of_a_gaussian_loss(mean, var):
    scen = _kinked_scenario()
    prof = scen.loss.run["m"]
    r = 0.6
    rng = np.random.default_rng(5)
    loss = rng.normal(mean, math.sqrt(var), 1_000_000)
    step = rng.normal(prof.mean_at(loss) * r ** 0.25, prof.std_at(loss) * r ** -0.9)
    after = np.maximum(loss - step, 0.0)
    got_mean, got_var = LossPropagator(scen).run_scalar("m", mean, var, r)
    # 1e6 draws: the Monte Carlo moments are good to ~1e-3 here
    assert got_mean == pytest.approx(after.mean(), abs=2e-3)
    assert got_var == pytest.approx(after.var(), rel=0.01, abs=1e-4)


def test_gaussian_prediction_is_unbiased_over_a_kink():
    """The mean of a long plan over a kinked profile (linearisation was biased by ~0.1)."""
    scen = _kinked_scenario()
    rounds = [RoundDecision("m", ("c0",), {})] * 25
    _, mean, _ = predict_quantile(scen, rounds, 0.9)
    losses = simulate_final_losses(scen, rounds, 40000, np.random.default_rng(2))
    assert abs(mean - losses.mean()) < 0.02


def test_scalar_array_and_many_forms_agree():
    prop = LossPropagator(_kinked_scenario())
    rng = np.random.default_rng(0)
    mean = rng.uniform(0.0, 2.6, 300)
    var = rng.uniform(0.0, 0.1, 300) ** 2
    var[:30] = 0.0
    r = rng.uniform(0.2, 1.0, 300)
    for model in ("m", "n"):
        arr_mean, arr_var = prop.run_array(model, mean, var, r)
        scalar = np.array([prop.run_scalar(model, mean[i], var[i], r[i]) for i in range(300)])
        np.testing.assert_allclose(arr_mean, scalar[:, 0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(arr_var, scalar[:, 1], rtol=1e-10, atol=1e-14)
    which = rng.integers(0, 2, 300)
    many_mean, many_var = prop.run_many(["m", "n"], which, mean, var, 0.5)
    for k, model in enumerate(("m", "n")):
        arr_mean, arr_var = prop.run_array(model, mean, var, 0.5)
        np.testing.assert_allclose(many_mean[which == k], arr_mean[which == k], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(many_var[which == k], arr_var[which == k], rtol=1e-10, atol=1e-14)


def test_cantelli_is_more_conservative_and_distribution_free(small):
    scen, _ = small
    rounds = _rounds(scen, [scen.models[0].id] * 8)
    qg, mean, std = predict_quantile(scen, rounds, 0.95, "gaussian")
    qc, _, _ = predict_quantile(scen, rounds, 0.95, "cantelli")
    assert qc == pytest.approx(mean + std * math.sqrt(0.95 / 0.05))
    assert qc > qg
    losses = simulate_final_losses(scen, rounds, 20000, np.random.default_rng(2))
    assert np.mean(losses <= qc) >= 0.95


def test_predict_quantile_from_a_start_state(small):
    scen, _ = small
    m = scen.models[0].id
    q0, mean0, std0 = predict_quantile(scen, [], 0.9, start=PlanStart(1.5, 0.1))
    assert (mean0, std0) == pytest.approx((1.5, 0.1))
    q1, mean1, _ = predict_quantile(scen, _rounds(scen, [m] * 3), 0.9, start=PlanStart(1.5, 0.1))
    assert mean1 < mean0 and q1 < q0


def test_unknown_model_and_disallowed_switch_are_one_line_errors(small):
    scen, _ = small
    with pytest.raises(ScenarioError, match="unknown model"):
        predict_quantile(scen, _rounds(scen, ["nope"]), 0.9)
    with pytest.raises(ScenarioError, match="unknown guarantee"):
        predict_quantile(scen, _rounds(scen, [scen.models[0].id]), 0.9, guarantee="chebyshev")


def test_round_options_agree_with_the_cost_model(small):
    scen, _ = small
    cset = ClientSet.from_ids(scen, [c.id for c in scen.clients][:3])
    for model in scen.models:
        opts = round_options(scen, cset, model.id)
        assert opts, model.id
        times = [o.time for o in opts]
        costs = [o.cost for o in opts]
        assert times == sorted(times) and costs == sorted(costs, reverse=True)
        for o in opts:
            dec = RoundDecision(model.id, cset.ids, o.level_map())
            assert round_time(scen, dec) == pytest.approx(o.time)
            assert round_energy(scen, dec) == pytest.approx(o.cost)


def test_level_allocation_meets_the_deadline_and_prefers_cheap_levels():
    scen, _ = scenarios.paper_like()
    cset = ClientSet.from_ids(scen, [c.id for c in scen.clients])
    opts = {m.id: round_options(scen, cset, m.id) for m in scen.models[:2]}
    seq = [scen.models[0].id] * 6 + [scen.models[1].id] * 4
    fastest = sum(opts[m][0].time for m in seq)
    slowest = sum(opts[m][-1].time for m in seq)
    assert allocate_levels(seq, opts, 0.99 * fastest) is None
    loose = allocate_levels(seq, opts, 10 * slowest)
    assert [o.cost for o in loose] == [opts[m][-1].cost for m in seq]
    mid = 0.5 * (fastest + slowest)
    chosen = allocate_levels(seq, opts, mid)
    assert sum(o.time for o in chosen) <= mid
    assert sum(o.cost for o in loose) <= sum(o.cost for o in chosen) <= sum(opts[m][0].cost for m in seq)


def test_layered_graph_finds_the_cheapest_goal_sequence_by_brute_force(small):
    """Every model sequence up to 7 rounds, predicted exactly: the graph's path is a goal and as
    cheap as the cheapest goal sequence (up to the discretisation's merges)."""
    import itertools

    scen, _ = small
    models = [m.id for m in scen.models]
    everyone = [c.id for c in scen.clients]
    target = predict_quantile(scen, _rounds(scen, [models[0]] * 6, everyone), 0.9)[0]
    targets = Targets(target, 0.9, 1e9, 7)
    ctx = PlanContext.build(scen, targets, None, 0.01)
    edges = {m.id: EdgeSpec(10.0 * (1.0 - m.compression) + 1.0, 1.0) for m in scen.models}
    r = sum(c.num_samples for c in scen.clients) / scen.loss.reference_samples
    graph = LayeredGraph(ctx.prop, r, edges, ctx.start_mean, 0.0, None, 1e9, 7, ctx.bin_width)
    res = graph.solve(kappa(0.9), target)
    best = math.inf
    for k in range(1, 8):
        for seq in itertools.product(models, repeat=k):
            if any(a != b and (a, b) not in ctx.prop.switch for a, b in itertools.pairwise(seq)):
                continue
            cost = sum(edges[m].cost for m in seq)
            if cost < best and predict_quantile(scen, _rounds(scen, seq, everyone), 0.9)[0] <= target + 1e-12:
                best = cost
    assert res is not None and math.isfinite(best)
    assert res.cost == pytest.approx(sum(edges[m].cost for m in res.models))
    assert predict_quantile(scen, _rounds(scen, res.models, everyone), 0.9)[0] <= target + 1e-9
    assert res.cost <= best * 1.0001


def test_finer_eta_explores_more_vertices(small):
    scen, targets = small
    counts = []
    for eta in (0.2, 0.02):
        ctx = PlanContext.build(scen, targets, None, eta)
        edges = {m.id: EdgeSpec(1.0 + m.flops_per_sample / 1e8, 1.0) for m in scen.models}
        graph = LayeredGraph(ctx.prop, 1.0, edges, ctx.start_mean, 0.0, None, 1e9, 25, ctx.bin_width)
        counts.append(graph.solve(kappa(0.9), targets.target_loss).vertices)
    assert counts[1] > counts[0]


def test_depl_plan_is_dependable_and_reports_its_figures(small):
    scen, targets = small
    plan = make_plan(scen, targets, seed=5)
    assert plan.feasible and plan.method == "depl"
    ev = evaluate_plan(scen, plan.rounds, targets, n=20000, seed=77)
    assert ev["valid"] and ev["probability"] >= targets.target_prob - 0.005
    assert plan.predicted["cost_joules"] == pytest.approx(ev["cost_joules"])
    assert plan.predicted["time_s"] == pytest.approx(ev["time_s"])
    assert plan.predicted["probability"] >= targets.target_prob
    assert plan.predicted["loss_quantile"] <= targets.target_loss
    assert 0.0 < plan.planner_seconds < 30.0


def test_cantelli_plan_costs_at_least_the_gaussian_one(small):
    scen, targets = small
    g = make_plan(scen, targets, guarantee="gaussian")
    c = make_plan(scen, targets, guarantee="cantelli")
    assert c.feasible and c.predicted["probability"] >= targets.target_prob
    assert c.predicted["cost_joules"] >= g.predicted["cost_joules"] * 0.999


def test_tight_deadline_uses_faster_levels_and_holds():
    scen, _ = scenarios.random_small(1)
    loose_t = Targets(scenarios.random_small(1)[1].target_loss, 0.9, 1e7, 25)
    loose = make_plan(scen, loose_t)
    assert loose.feasible
    tight_t = Targets(loose_t.target_loss, 0.9, 0.8 * loose.predicted["time_s"], 25)
    tight = make_plan(scen, tight_t)
    if tight.feasible:
        assert plan_errors(scen, tight.rounds, tight_t) == []
        assert tight.predicted["time_s"] <= tight_t.deadline_s
        assert tight.predicted["cost_joules"] >= loose.predicted["cost_joules"] * 0.999
    else:
        assert tight.predicted["probability"] < 0.9


def test_unreachable_target_is_infeasible_with_best_probability(small):
    scen, targets = small
    hard = Targets(0.01, 0.9, targets.deadline_s, 10)
    for method in ("depl", "full", "expectation"):
        plan = make_plan(scen, hard, method=method)
        assert plan.feasible is False, method
        assert 0.0 <= plan.predicted["probability"] < 0.9
        assert plan_errors(scen, plan.rounds, hard) == []


def test_no_client_set_in_the_measured_coverage_range_is_a_plan_not_a_crash(small, monkeypatch):
    import depl_fl.planner.depl as depl

    scen, targets = small
    monkeypatch.setattr(depl, "candidate_sets", lambda *_: [])
    plan = make_plan(scen, targets, method="depl", seed=5)
    assert plan.method == "depl"
    info = plan.extra["planner_info"]
    assert info["candidate_sets"] == 0
    if plan.feasible:  # the fallback to plain FedAvg, confirmed as every plan is
        assert info["fallback"] == "full"
        assert plan.predicted["probability"] >= targets.target_prob
    else:
        assert 0.0 <= plan.predicted["probability"] < targets.target_prob


def test_replanning_from_a_start_state_respects_remaining_budget(small):
    scen, targets = small
    m = scen.models[1].id
    start = PlanStart(loss_mean=1.4, loss_std=0.05, previous_model=m, elapsed_s=10.0, rounds_done=5)
    plan = make_plan(scen, targets, start=start)
    assert plan.feasible
    assert len(plan.rounds) <= targets.max_rounds - 5
    assert plan_errors(scen, plan.rounds, targets, previous_model=m, elapsed_s=10.0,
                       rounds_done=5) == []
    fresh = make_plan(scen, targets)
    assert len(plan.rounds) < len(fresh.rounds)


def test_bad_arguments_are_one_line_scenario_errors(small):
    scen, targets = small
    for kwargs, pattern in (({"method": "magic"}, "unknown method"),
                            ({"guarantee": "x"}, "unknown guarantee"),
                            ({"eta": 0.0}, "eta"),
                            ({"start": PlanStart(1.0, previous_model="nope")}, "previous model")):
        with pytest.raises(ScenarioError, match=pattern) as err:
            make_plan(scen, targets, **kwargs)
        assert "\n" not in str(err.value)
    with pytest.raises(ScenarioError, match="exhaustive"):
        make_plan(scenarios.paper_like()[0], scenarios.paper_like()[1], method="optimum")


def test_planner_never_imports_flwr_or_torch():
    code = ("import sys, depl_fl.planner, depl_fl.planner.optimum; "
            "bad = [m for m in ('flwr', 'torch') if m in sys.modules]; print(bad); "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_trajectory_cache_resumes_prefixes_bit_for_bit():
    from depl_fl.planner.checking import final_losses

    scen, targets = scenarios.paper_like(0.9)
    start = PlanStart(loss_mean=1.8, loss_std=0.1, previous_model="mobilenet")
    ctx = PlanContext.build(scen, targets, start, 0.05)
    ids = tuple(c.id for c in scen.clients[:9])
    models = ["mobilenet"] * 5 + ["mobilenet-p50"] * 4 + ["mobilenet"] * 3
    seqs = [models, models[:7] + models[8:], models[:3], models, models + ["mobilenet"] * 2]
    for seq in seqs:
        rounds = [RoundDecision(m, ids, {}) for m in seq]
        rng = np.random.default_rng(11)
        fresh = simulate_final_losses(scen, rounds, 3000, rng,
                                      start_loss=np.maximum(rng.normal(1.8, 0.1, 3000), 0.0),
                                      previous_model="mobilenet")
        assert np.array_equal(final_losses(ctx, rounds, 3000, 11), fresh)


def test_a_cheapest_plan_that_fails_confirmation_falls_back_to_the_most_probable(small, monkeypatch):
    # DepL's cheapest candidate passed pi on the search's stream and missed it on the
    # independent one (16 clients, alpha 0.3: no time left to extend it); the most probable
    # candidate, with room to spare, is dependable and must be returned, not "no plan".
    import depl_fl.planner as planner
    from depl_fl.planner.depl import Candidate

    scen, targets = small
    good = make_plan(scen, targets, seed=5)
    assert good.feasible and len(good.rounds) > 1
    short = good.rounds[:1]
    assert evaluate_plan(scen, short, targets, n=20000, seed=1)["probability"] < targets.target_prob
    info = {"candidate_sets": 1, "sets_planned": 1, "kappa": 1.0, "switches": 0}
    monkeypatch.setattr(planner, "plan_depl", lambda ctx, guarantee, seed, n: (
        Candidate(short, 1.0, targets.target_prob, 1.0),
        Candidate(list(good.rounds), good.predicted["cost_joules"], 0.99, 2.0), dict(info), []))
    monkeypatch.setattr(planner, "plan_full", lambda ctx, seed, n: (short, False, 0.1))
    plan = make_plan(scen, targets, seed=5)
    assert plan.feasible and plan.rounds == good.rounds
    assert plan.predicted["probability"] >= targets.target_prob
    assert plan.extra["planner_info"]["fallback"] == "most probable"
    assert plan.extra["planner_info"]["cheapest_plan"] == "missed pi on the independent Monte Carlo"
    # Without a confirmable most probable candidate the answer stays "no dependable plan".
    monkeypatch.setattr(planner, "plan_depl", lambda ctx, guarantee, seed, n: (
        Candidate(short, 1.0, targets.target_prob, 1.0), Candidate(short, 1.0, 0.5, 2.0), dict(info), []))
    assert not make_plan(scen, targets, seed=5).feasible
    # A dependable runner-up is confirmed before the most probable candidate is tried.
    monkeypatch.setattr(planner, "plan_depl", lambda ctx, guarantee, seed, n: (
        Candidate(short, 1.0, targets.target_prob, 1.0), Candidate(short, 1.0, 0.5, 2.0), dict(info),
        [Candidate(short, 1.0, targets.target_prob, 1.0),
         Candidate(list(good.rounds), good.predicted["cost_joules"], 0.95, 2.0)]))
    plan = make_plan(scen, targets, seed=5)
    assert plan.feasible and plan.rounds == good.rounds
    assert plan.extra["planner_info"]["fallback"] == "runner-up 2"
