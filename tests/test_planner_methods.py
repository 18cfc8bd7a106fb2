"""DepL against its baselines on 20 seeded random small scenarios (the planner's main claims).

Per scenario: DepL's plan is dependable by an independent Monte Carlo (another
seed, 20,000 trajectories), costs at most 1.05x the exhaustive optimum, and
every plan of every method is valid (no disallowed switch, unknown id, excess
clients). The mean-based ``expectation`` baseline misses pi on a clear share.
"""

from __future__ import annotations

import pytest

from depl_fl.contract.semantics import evaluate_plan, plan_errors
from depl_fl.planner import make_plan
from tests.benchmark_scripts import load_benchmark

scenarios = load_benchmark("scenarios", module_name="planner_scenarios")

SEEDS = range(20)
CHECK_SEED = 424242
CHECK_N = 20000


@pytest.fixture(scope="module")
def results():
    out = []
    for seed in SEEDS:
        scen, targets = scenarios.random_small(seed)
        plans = {m: make_plan(scen, targets, method=m, seed=seed) for m in
                 ("depl", "expectation", "full", "optimum")}
        checks = {m: evaluate_plan(scen, p.rounds, targets, n=CHECK_N, seed=CHECK_SEED)
                  for m, p in plans.items()}
        out.append((seed, scen, targets, plans, checks))
    return out


def test_every_plan_is_valid(results):
    for seed, scen, targets, plans, _ in results:
        for method, plan in plans.items():
            errors = plan_errors(scen, plan.rounds, targets)
            assert errors == [], f"seed {seed} {method}: {errors}"


def test_depl_is_dependable_by_independent_monte_carlo(results):
    feasible = 0
    for seed, _, targets, plans, checks in results:
        plan = plans["depl"]
        if not plan.feasible:
            # then nothing is dependable: neither FedAvg nor the exhaustive search found a plan
            assert not plans["full"].feasible and not plans["optimum"].feasible, f"seed {seed}"
            continue
        feasible += 1
        assert checks["depl"]["probability"] >= targets.target_prob - 0.005, \
            f"seed {seed}: P={checks['depl']['probability']:.4f} < pi={targets.target_prob}"
        assert plan.predicted["probability"] >= targets.target_prob
    assert feasible >= 15


def test_depl_within_five_percent_of_optimum(results):
    ratios = []
    for seed, _, _, plans, _ in results:
        if plans["depl"].feasible:
            assert plans["optimum"].feasible, f"seed {seed}"
            ratio = plans["depl"].predicted["cost_joules"] / plans["optimum"].predicted["cost_joules"]
            assert ratio <= 1.05, f"seed {seed}: depl costs {ratio:.3f}x the optimum"
            ratios.append(ratio)
    assert ratios and sum(ratios) / len(ratios) <= 1.03


def test_depl_cheaper_than_full_fedavg(results):
    for seed, _, _, plans, _ in results:
        if plans["depl"].feasible and plans["full"].feasible:
            depl, full = plans["depl"].predicted["cost_joules"], plans["full"].predicted["cost_joules"]
            assert depl <= full * 1.0001, \
                f"seed {seed}"


def test_expectation_misses_pi_often(results):
    misses = sum(1 for _, _, targets, _, checks in results
                 if checks["expectation"]["probability"] < targets.target_prob)
    assert misses >= 0.3 * len(results), f"expectation missed pi only {misses}/{len(results)} times"
