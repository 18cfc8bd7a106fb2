"""The price of a trajectory bank (benchmarks/plan_regime/bank_cost.py).

Protects the accounting that puts a network's bank into the cost of its constants: every
exploration's recorded energy and every fixed-plan round priced by the contract's round energy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "plan_regime"))

from bank_cost import bank_costs, table  # noqa: E402
from two_clusters import DATA, two_cluster_scenario  # noqa: E402

from depl_fl.contract.plan import RoundDecision  # noqa: E402
from depl_fl.contract.scenario import scenario_to_dict  # noqa: E402
from depl_fl.contract.semantics import round_energy  # noqa: E402


def write_seed(folder: Path, exploration_j: float, policies: dict[str, tuple[str, list[str], int]]) -> None:
    """One bank seed: its job (scenario), its exploration's cost and its fixed plans' trajectories."""
    folder.mkdir(parents=True)
    scenario = scenario_to_dict(two_cluster_scenario())
    (folder / "job.json").write_text(json.dumps({"config": {}, "scenario": scenario}))
    (folder / "profile.json").write_text(json.dumps({"profile": {"cost": {"energy_j": exploration_j}}}))
    for name, (model, clients, rounds) in policies.items():
        doc = {"model": model, "clients": clients, "val": [0.5] * rounds, "test": [0.5] * rounds}
        (folder / f"{name}.json").write_text(json.dumps(doc))


def test_a_bank_costs_its_explorations_plus_every_fixed_plan_round(tmp_path: Path) -> None:
    scenario = two_cluster_scenario()
    model = json.loads(DATA.read_text())["models"][0]["id"]
    write_seed(tmp_path / "s1" / "seed100", 30.0, {f"{model}_all": (model, [f"c{i}" for i in range(6)], 4),
                                                   f"{model}_B": (model, ["c1", "c3", "c5"], 3)})
    write_seed(tmp_path / "s1" / "seed101", 20.0, {})
    costs = bank_costs(tmp_path)
    every = round_energy(scenario, RoundDecision(model, tuple(f"c{i}" for i in range(6)), {"A": 0, "B": 0}))
    on_b = round_energy(scenario, RoundDecision(model, ("c1", "c3", "c5"), {"B": 0}))
    cost = costs["s1"]
    assert (cost.explorations, cost.policies, cost.policy_rounds) == (2, 2, 7)
    assert cost.exploration_j == pytest.approx(50.0)
    assert cost.policy_j == pytest.approx(4 * every + 3 * on_b)
    assert on_b < every
    assert f"**{cost.total_j:.0f}**" in table(tmp_path, costs)


def test_a_folder_without_a_bank_has_no_cost(tmp_path: Path) -> None:
    (tmp_path / "s1" / "seed1").mkdir(parents=True)
    assert bank_costs(tmp_path) == {}
