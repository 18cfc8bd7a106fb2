"""DepL's feasibility is monotone in the start: what lets tracking skip a re-plan that cannot help."""

from __future__ import annotations

import itertools

import pytest

from depl_fl.contract.plan import Targets
from depl_fl.planner import PlanStart, make_plan, no_better_start
from tests.two_clusters import two_cluster_scenario


@pytest.mark.parametrize("plan_regime", [False, True])
def test_no_start_that_is_no_better_than_an_infeasible_one_is_feasible(plan_regime: bool) -> None:
    scenario = two_cluster_scenario(plan_regime)
    assert bool(scenario.loss.judged_error) is plan_regime
    assert (scenario.loss.eval_dof is not None) is plan_regime
    targets = Targets(target_loss=1.5, target_prob=0.9, deadline_s=400.0, max_rounds=12)
    starts = [PlanStart(mean, std, "full", elapsed, done, None)
              for done, extra_s, std, mean in itertools.product((8, 9, 10, 11), (0.0, 45.0), (0.0, 0.1, 0.3),
                                                                 (1.6, 1.8, 2.0, 2.2, 2.4))
              for elapsed in [30.0 * done + extra_s]]
    feasible = {s: make_plan(scenario, targets, start=s).feasible for s in starts}
    assert any(feasible.values()) and not all(feasible.values())
    broken = [(a, b) for a, b in itertools.product(starts, starts)
              if not feasible[a] and feasible[b] and no_better_start(b, a)]
    assert broken == []


def test_a_start_is_no_better_only_with_the_same_previous_model_and_clients() -> None:
    base = PlanStart(2.0, 0.1, "full", 100.0, 5, ("c0", "c1"))
    assert no_better_start(base, base)
    assert no_better_start(PlanStart(2.1, 0.2, "full", 130.0, 6, ("c0", "c1")), base)
    for better in (PlanStart(1.9, 0.1, "full", 100.0, 5, ("c0", "c1")),
                   PlanStart(2.0, 0.0, "full", 100.0, 5, ("c0", "c1")),
                   PlanStart(2.0, 0.1, "full", 90.0, 5, ("c0", "c1")),
                   PlanStart(2.0, 0.1, "full", 100.0, 4, ("c0", "c1"))):
        assert not no_better_start(better, base)
    assert not no_better_start(PlanStart(2.1, 0.1, "p75", 100.0, 5, ("c0", "c1")), base)
    assert not no_better_start(PlanStart(2.1, 0.1, "full", 100.0, 5, ("c0",)), base)
