"""A job that plans on measured costs, counts its deadline in wall-clock seconds and re-plans
when a node turns slower than the exploration measured (in process, no subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import run_server  # noqa: E402

N = 3
NODES = [{"cluster": "A", "level-watts": "3,6"}, {"cluster": "B", "level-watts": "1,2"},
         {"cluster": "B", "level-watts": "1,2"}]
JOB = ["simulation=inprocess", f"num_clients={N}", "profile.explore.rounds=4",
       "profile.explore.stop_loss_factor=null", "profile.explore.switch_rounds=[3]",
       "profile.explore.min_points_per_level=2", "target.loss=0.3", "target.prob=0.6",
       "target.deadline_s=120", "target.max_rounds=30", "train.lr=0.02", "tracking.enabled=true",
       "output.plot=false", "cost.source=measured", "cost.clock=wall", "cost.drift_rounds=1",
       "profile=thorough"]  # every cluster explores, so every level is measured
# Every node trains 8x slower from the first training round on (not in the exploration): whatever
# clients the plan (made on measured, hence timing-dependent, costs) picks, its first round is slow.
SLOW = ["faults.clients=[c0,c1,c2]", "faults.kind=slowdown", "faults.slowdown=8", "faults.train_only=true"]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("device-replan")
    cfg = compose_config([f"profile.cache_dir={tmp / 'cache'}", *JOB, *SLOW])
    grid = InProcessGrid(make_client_app(cfg), N, node_configs=NODES)
    return json.loads(Path(run_server(grid, cfg, tmp / "out")).read_text())


def test_exploration_measures_every_level_and_the_plan_uses_the_fit(job):
    profile = [r for r in job["rounds"] if r["phase"] == "profile"]
    assert [r["levels"] for r in profile] == [{"A": 0, "B": 0}, {"A": 1, "B": 1}] * 2
    cost = job["cost"]
    assert (cost["source"], cost["clock"], cost["used"]) == ("measured", "wall", "measured")
    assert {v["speed"] for v in cost["levels"].values()} == {"measured"}
    assert {v["energy"] for v in cost["levels"].values()} == {"measured"}
    # The scenario the job planned with is the fitted one, not the table.
    planned = {c["id"]: c for c in job["scenario"]["clusters"]}
    for key, level in cost["levels"].items():
        cluster, index = key.split("/")
        assert planned[cluster]["levels"][int(index)]["flops_per_s"] == pytest.approx(level["flops_per_s"])
    assert cost["levels"]["A/0"]["flops_per_s"] != cost["levels"]["A/0"]["declared_flops_per_s"]


def test_replies_report_measurements_and_the_summary_puts_them_beside_the_model(job):
    for r in job["rounds"]:
        assert r["energy_source"] == "declared"
        assert r["replies"] and all(m["energy_source"] == "declared" for m in r["replies"].values())
        assert r["bytes_down"] > 0 and r["bytes_up"] > 0 and r["train_time_s"] > 0
        assert r["measured_energy_j"] == pytest.approx(sum(m["energy_j"] for m in r["replies"].values()))
    measured = job["summary"]["measured"]
    assert measured["energy_source"] == "declared"
    assert measured["measured_time_s"] == pytest.approx(sum(r["wall_s"] for r in job["rounds"]))
    assert measured["modelled_time_s"] == pytest.approx(sum(r["round_time_s"] for r in job["rounds"]))
    assert measured["measured_energy_j"] > 0 and measured["modelled_energy_j"] > 0


def test_nodes_slower_than_measured_trigger_a_replan_on_recalibrated_speeds(job):
    train = [r for r in job["rounds"] if r["phase"] == "train"]
    first = train[0]
    assert first["wall_s"] > 3 * first["round_time_s"]
    drift = [p for p in job["replans"] if p["reason"].startswith("round time drift")]
    assert drift and drift[0]["round"] == first["round"]
    assert first["replanned"] and "recalibrated" in first
    for cluster, level in first["levels"].items():  # every cluster of the round was refitted slower
        key = f"{cluster}/{level}"
        fitted = job["cost"]["levels"][key]["flops_per_s"]
        assert first["recalibrated"]["levels"][key]["flops_per_s"] < fitted / 3


def test_the_deadline_counts_wall_clock_time(job):
    train = [r for r in job["rounds"] if r["phase"] == "train"]
    assert train[-1]["elapsed_s"] >= sum(r["wall_s"] for r in train)
    assert job["summary"]["elapsed_s"] == train[-1]["elapsed_s"]


@pytest.mark.parametrize("override, field", [("cost.source=bogus", "cost.source"),
                                             ("cost.clock=sundial", "cost.clock"),
                                             ("cost.drift_tolerance=0", "cost.drift_tolerance")])
def test_bad_cost_settings_are_one_line_errors(override, field):
    from depl_fl.errors import ScenarioError

    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")) as err:
        compose_config(["simulation=inprocess", override])
    assert "\n" not in str(err.value)


def test_simulation_keeps_the_table_and_the_model_clock():
    from strategies.server_app import cost_settings

    cfg = compose_config(["simulation=inprocess", "cost.source=measured"])
    assert cost_settings(cfg, deployment=False) == ("table", "model")
    assert cost_settings(cfg, deployment=True) == ("measured", "wall")
    assert cost_settings(compose_config(["simulation=inprocess"]), deployment=True) == ("table", "wall")
