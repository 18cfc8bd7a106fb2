"""The planner on contract version 2 (label coverage, evaluation noise) vs. an independent Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest

from depl_fl.contract.plan import RoundDecision, Targets
from depl_fl.contract.scenario import Scenario, scenario_from_dict, scenario_to_dict
from depl_fl.contract.semantics import evaluate_plan, plan_errors, set_coverage, simulate_final_losses
from depl_fl.planner import make_plan, predict_quantile
from depl_fl.planner.data_selection import candidate_sets, predictable
from tests.benchmark_scripts import load_benchmark

scenarios = load_benchmark("scenarios", module_name="planner_scenarios")

FLOOR = 4.0


def skewed(seed: int, *, floor: float | None = FLOOR, bounds: tuple[float, float] | None = None,
           eval_share: float = 0.6) -> tuple[Scenario, Targets]:
    """``random_small(seed)`` as version 2: Dirichlet(0.3) label histograms over 10 classes,
    ``eval_std = eval_share * std / sqrt(2)`` and, optionally, a floor loss and coverage bounds.
    The target is the predicted 0.9-quantile of FedAvg on every client after 12 rounds."""
    base, targets = scenarios.random_small(seed)
    scen = scenarios.as_version_2(base, seed, eval_factor=eval_share / math.sqrt(2.0), floor=floor,
                                  bounds=bounds)
    everyone = tuple(c.id for c in scen.clients)
    target = predict_quantile(scen, [RoundDecision("full", everyone, {})] * 12, 0.9)[0]
    return scen, Targets(round(target, 4), targets.target_prob, targets.deadline_s, 25)


def _uncovered_set(scen: Scenario) -> tuple[str, ...]:
    """The smallest client set that leaves a class unseen (there is one under Dirichlet(0.3))."""
    for c in sorted(scen.clients, key=lambda c: c.num_samples):
        cov = set_coverage(scen, (c.id,))
        if cov[1] > 0:
            return (c.id,)
    raise AssertionError("every client shows every class")


@pytest.mark.parametrize("seed", [1, 3])
def test_prediction_matches_monte_carlo_on_covered_and_uncovered_sets(seed: int) -> None:
    scen, _ = skewed(seed)
    models = [m.id for m in scen.models]
    everyone = tuple(c.id for c in scen.clients)
    lacking = _uncovered_set(scen)
    for clients in (everyone, lacking):
        rounds = [RoundDecision(m, clients, {}) for m in [models[2]] * 4 + [models[0]] * 10]
        q, mean, std = predict_quantile(scen, rounds, 0.9)
        losses = simulate_final_losses(scen, rounds, 40000, np.random.default_rng(2))
        assert abs(mean - losses.mean()) < 0.03
        assert abs(std - losses.std()) < 0.15 * losses.std() + 0.005
        assert abs(q - np.quantile(losses, 0.9)) < 0.03 + 0.1 * losses.std()
    # The set that never shows a class is predicted at its floor: at least u * F.
    u = set_coverage(scen, lacking)[1]
    rounds = [RoundDecision("full", lacking, {})] * 25
    assert predict_quantile(scen, rounds, 0.5)[1] >= u * FLOOR - 1e-9


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_plan_is_dependable_under_the_independent_monte_carlo(seed: int) -> None:
    scen, targets = skewed(seed)
    plan = make_plan(scen, targets, seed=4)
    assert plan.feasible
    ev = evaluate_plan(scen, plan.rounds, targets, n=40000, seed=99)
    assert ev["valid"], ev["errors"]
    assert ev["probability"] >= targets.target_prob - 0.005
    se = math.sqrt(targets.target_prob * (1 - targets.target_prob) / 20000)
    assert abs(plan.predicted["probability"] - ev["probability"]) < 4 * se
    assert plan.predicted["cost_joules"] == pytest.approx(ev["cost_joules"])


@pytest.mark.parametrize("method", ["depl", "optimum"])
def test_plans_use_only_sets_in_the_measured_coverage_range(method: str) -> None:
    scen, targets = skewed(2, floor=None, bounds=(0.8, 0.0))
    sets = candidate_sets(scen, "full")
    assert sets and all(predictable(scen, s.ids) for s in sets)
    everything = [ids for ids in (s.ids for s in candidate_sets(
        scenario_from_dict({**scenario_to_dict(scen), "version": 1}), "full"))]
    assert len(everything) > len(sets)  # some sets were refused
    plan = make_plan(scen, targets, method=method, seed=4)
    assert plan.feasible
    assert plan_errors(scen, plan.rounds, targets) == []
    for r in plan.rounds:
        c_s, u_s = set_coverage(scen, r.clients)
        assert c_s >= 0.8 and u_s == 0.0
    ev = evaluate_plan(scen, plan.rounds, targets, n=20000, seed=99)
    assert ev["dependable"] or ev["probability"] >= targets.target_prob - 0.005


def test_only_the_set_of_every_client_is_left_at_full_coverage() -> None:
    # The default reference is the pooled histogram: only the set of every client has c_S = 1.
    scen, targets = skewed(2, floor=None, bounds=(0.999, 0.0))
    everyone = tuple(c.id for c in scen.clients)
    assert [s.ids for s in candidate_sets(scen, "full")] == [everyone]
    plan = make_plan(scen, targets, seed=4)
    assert plan.feasible and all(r.clients == everyone for r in plan.rounds)
    assert plan_errors(scen, plan.rounds, targets) == []


def _kinked_v2() -> Scenario:
    """A kinked profile with a kinked evaluation-noise share (version 2)."""
    return scenario_from_dict({
        "version": 2,
        "clusters": [{"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9}],
                      "bytes_per_s": 1e6}],
        "clients": [{"id": "c0", "cluster": "A", "num_samples": 100}],
        "models": [{"id": "m", "flops_per_sample": 1e6, "size_bytes": 1e4}],
        "loss": {"initial": 2.5, "data_exponent_mean": 0.25, "data_exponent_std": 0.9,
                 "run": {"m": {"levels": [0.6, 0.95, 1.4, 2.0], "mean": [0.03, 0.2, 0.15, 0.27],
                               "std": [0.07, 0.04, 0.14, 0.08], "eval_std": [0.045, 0.01, 0.09, 0.0]}}},
    })


@pytest.mark.parametrize("mean, var", [(0.7, 0.05), (1.0, 0.3 ** 2), (2.4, 0.01), (0.05, 0.04)])
def test_one_round_and_the_final_draw_have_the_exact_gaussian_moments(mean: float, var: float) -> None:
    from depl_fl.planner.quantile import LossPropagator

    scen = _kinked_v2()
    prof = scen.loss.run["m"]
    r = 0.6
    rng = np.random.default_rng(5)
    loss = rng.normal(mean, math.sqrt(var), 1_000_000)
    step = rng.normal(prof.mean_at(loss) * r ** 0.25, prof.walk_std_at(loss) * r ** -0.9)
    after = np.maximum(loss - step, 0.0)
    prop = LossPropagator(scen)
    got_mean, got_var = prop.run_scalar("m", mean, var, r)
    assert got_mean == pytest.approx(after.mean(), abs=2e-3)
    assert got_var == pytest.approx(after.var(), rel=0.01, abs=1e-4)
    # The final evaluation draw: variance V + E[eval_std(L)**2] for L ~ N(mean, var).
    judged = loss + prof.eval_std_at(loss) * rng.standard_normal(loss.size)
    jm, jv = prop.judged_array(["m"], 0, np.array(mean), np.array(var))
    assert float(jm) == pytest.approx(mean)
    assert float(jv) == pytest.approx(judged.var(), rel=0.01, abs=1e-4)


def test_large_instances_get_a_chain_of_sets_that_cover_the_labels() -> None:
    # 14 clients of one cluster, each holding one class of 10; the largest four repeat class 0, so
    # the size-ordered chain needs all 14 clients to show every class, the coverage chain only 10.
    hists = [[0] * 10 for _ in range(14)]
    for i in range(14):
        hists[i][max(i - 4, 0)] = 100 + (14 - i) * 10 if i < 4 else 100
    doc = {"version": 2,
           "clusters": [{"id": "A", "levels": [{"flops_per_s": 1e9, "joules_per_flop": 1e-9}],
                         "bytes_per_s": 1e6}],
           "clients": [{"id": f"c{i:02d}", "cluster": "A", "num_samples": sum(h), "label_histogram": h}
                       for i, h in enumerate(hists)],
           "models": [{"id": "full", "flops_per_sample": 1e6, "size_bytes": 1e4}],
           "loss": {"initial": 2.3, "label_shares": [1] * 10, "max_uncovered": 0.0,
                    "run": {"full": {"levels": [0.0, 3.0], "mean": [0.0, 0.2], "std": [0.01, 0.05]}}}}
    scen = scenario_from_dict(doc)
    sets = candidate_sets(scen, "full")
    assert sets and all(set_coverage(scen, s.ids)[1] == 0.0 for s in sets)
    smallest = min(sets, key=lambda s: len(s.ids))
    assert len(smallest.ids) == 10  # one client per class: the fewest that show every class


def _with_set_shift(scen: Scenario, mean: float, std: float) -> Scenario:
    from dataclasses import replace

    from depl_fl.contract.scenario import SetShift

    return replace(scen, loss=replace(scen.loss, set_shift=SetShift(mean, std)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_plans_with_a_set_shift_are_dependable_under_the_independent_monte_carlo(seed: int) -> None:
    scen, targets = skewed(seed)
    shifted = _with_set_shift(scen, 0.5, 0.5)
    plan = make_plan(shifted, targets, seed=4)
    assert plan.feasible
    ev = evaluate_plan(shifted, plan.rounds, targets, n=40000, seed=99)
    assert ev["valid"], ev["errors"]
    assert ev["probability"] >= targets.target_prob - 0.005
    se = math.sqrt(targets.target_prob * (1 - targets.target_prob) / 20000)
    assert abs(plan.predicted["probability"] - ev["probability"]) < 4 * se


def test_a_large_set_shift_keeps_the_plan_on_the_set_the_model_trained_on() -> None:
    # Without a shift the cheapest plan trains a subset; with a large one a change of set costs
    # more than training every client, and a re-plan that starts on a subset stays on it.
    scen, targets = skewed(1)
    everyone = {c.id for c in scen.clients}
    assert set(make_plan(scen, targets, seed=4).rounds[0].clients) != everyone
    shifted = _with_set_shift(scen, 20.0, 0.0)
    assert set(make_plan(shifted, targets, seed=4).rounds[0].clients) == everyone
    subset = make_plan(scen, targets, seed=4).rounds[0].clients
    from depl_fl.planner import PlanStart

    start = PlanStart(scen.loss.initial, 0.0, None, previous_clients=tuple(subset))
    replan = make_plan(shifted, targets, seed=4, start=start)
    assert replan.feasible and all(set(r.clients) in (set(subset), everyone) for r in replan.rounds)


def test_a_graph_solves_each_kappa_as_a_fresh_graph_would() -> None:
    from depl_fl.planner.context import PlanContext
    from depl_fl.planner.model_selection import EdgeSpec, LayeredGraph

    scen, targets = skewed(2)
    ctx = PlanContext.build(scen, targets, None, 0.05)
    assert ctx.prop.has_final_map()
    edges = {m.id: EdgeSpec(10.0 * (1.0 - m.compression) + 1.0, 1.0) for m in scen.models}
    everyone = tuple(c.id for c in scen.clients)
    r, unseen = ctx.prop.set_terms(everyone)
    _, gap = ctx.prop.set_terms(_uncovered_set(scen))

    def fresh() -> LayeredGraph:
        return LayeredGraph(ctx.prop, r, edges, ctx.start_mean, 0.0, None, 1e9, 25, ctx.bin_width)

    kept = fresh()  # asked again and again, as a kappa search does
    asks = [(k, u) for k in (1.28, 0.5, 2.0, 1.28, 3.0, 0.9) for u in (unseen, gap)]
    found = [kept.solve(k, targets.target_loss, u) for k, u in asks]
    assert [f is not None for f in found].count(True) >= 6
    assert found == [fresh().solve(k, targets.target_loss, u) for k, u in asks]
