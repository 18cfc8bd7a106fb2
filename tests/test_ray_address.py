"""simulation.ray_address: what it accepts, what it refuses (one line each) and what ray.init receives."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hydra")

from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.main import ray_init_args  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from strategies.ray_cluster import check_reachable, find_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("address", ["auto", "127.0.0.1:6379", "head.example:10001"])
def test_an_address_is_accepted_and_passed_to_ray_init(address):
    cfg = compose_config([f"simulation.ray_address={address}"])
    args = ray_init_args(cfg["simulation"])
    assert args["address"] == address and "num_cpus" not in args


def test_without_an_address_ray_starts_here_with_its_cpus():
    args = ray_init_args(compose_config(["simulation.ray_num_cpus=2"])["simulation"])
    # "local": never the cluster of the last `ray start` here nor RAY_ADDRESS, which a bare ray.init joins
    assert args["num_cpus"] == 2 and args["address"] == "local"
    assert ray_init_args(compose_config([])["simulation"])["address"] == "local"


@pytest.mark.parametrize("overrides, message", [
    (["simulation=inprocess", "simulation.ray_address=auto"],
     "config simulation.ray_address: needs simulation=ray (the in-process backend has no Ray)"),
    (["simulation.ray_address=auto", "simulation.ray_num_cpus=2"],
     "config simulation.ray_address: a running cluster brings its own CPUs; "
     "leave simulation.ray_num_cpus null"),
    (["simulation.ray_address=127.0.0.1"],
     "config simulation.ray_address: must match ^(auto|[^\\s:]+:[0-9]{1,5})$, got '127.0.0.1'"),
])
def test_a_misused_address_is_refused_in_one_line(overrides, message):
    with pytest.raises(ScenarioError) as info:
        compose_config(overrides)
    assert str(info.value) == message


def test_an_address_where_no_cluster_answers_is_one_line():
    pytest.importorskip("ray")
    port = _free_port()
    with pytest.raises(ScenarioError) as info:
        find_cluster(f"127.0.0.1:{port}", timeout_s=2.0)
    line = str(info.value)
    assert line.startswith(f"simulation.ray_address=127.0.0.1:{port}: no Ray cluster answers at ")
    assert f"`ray start --head --port {port}`" in line and "\n" not in line


def test_auto_follows_ray_address_to_a_cluster_that_is_down(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_free_port()}")
    with pytest.raises(ScenarioError, match=r"^simulation.ray_address=auto: no Ray cluster answers at "):
        find_cluster("auto", timeout_s=2.0)


def test_a_port_that_accepts_connections_passes_the_check():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        host_port = "127.0.0.1:%d" % server.getsockname()[1]
        check_reachable(host_port, host_port, timeout_s=2.0)


def test_the_job_stops_in_one_line_with_status_2_when_no_cluster_answers(tmp_path):
    address = f"127.0.0.1:{_free_port()}"
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", f"simulation.ray_address={address}",
                           f"hydra.run.dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"depl-fl: simulation.ray_address={address}: no Ray cluster answers at "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_actor_room_counts_node_by_node_as_flower_does():
    from strategies.ray_cluster import actor_room

    nodes = [{"CPU": 1.0}, {"CPU": 1.0}]
    assert actor_room(nodes, {"num_cpus": 0.5, "num_gpus": 0.0}) == 4
    assert actor_room(nodes, {"num_cpus": 2.0, "num_gpus": 0.0}) == 0  # 2 CPUs in all, but 1 per node
    assert actor_room([{"CPU": 8.0, "GPU": 1.0}, {"CPU": 8.0}], {"num_cpus": 1.0, "num_gpus": 0.25}) == 4


def test_a_client_no_node_holds_is_one_line():
    from strategies.ray_cluster import room_verdict

    with pytest.raises(ScenarioError) as info:
        room_verdict([{"CPU": 1.0}, {"CPU": 1.0}], {"CPU": 2.0}, {"num_cpus": 2.0, "num_gpus": 0.0},
                     "the Ray cluster at auto")
    assert str(info.value) == ("simulation.client_num_cpus: no node of the Ray cluster at auto has the "
                               "2 CPUs of one client (CPUs per node: 1, 1); lower "
                               "simulation.client_num_cpus / client_num_gpus")


def test_a_cluster_whose_cpus_other_jobs_hold_is_said_and_a_free_one_is_not():
    from strategies.ray_cluster import room_verdict

    nodes, client = [{"CPU": 1.0}, {"CPU": 1.0}], {"num_cpus": 0.5, "num_gpus": 0.0}
    assert room_verdict(nodes, {"CPU": 2.0}, client, "x") is None
    assert room_verdict(nodes, {"CPU": 0.5}, client, "x") is None
    warning = room_verdict(nodes, {"CPU": 0.25}, client, "the Ray cluster at auto")
    assert warning is not None and warning.startswith("the Ray cluster at auto: its free resources hold no "
                                                      "client of 0.5 CPUs now (0.25 CPUs free")


def test_auto_among_several_ray_instances_asks_for_the_address(monkeypatch):
    pytest.importorskip("ray")
    import ray._private.services as services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: ["10.0.0.1:6379", "10.0.0.1:6380"])
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)
    with pytest.raises(ScenarioError) as info:
        find_cluster("auto", timeout_s=1.0)
    assert str(info.value).startswith("simulation.ray_address=auto: 2 Ray instances run on this machine "
                                      "(10.0.0.1:6379, 10.0.0.1:6380)")
    # one recorded `ray start` cluster among them is Ray's own choice: no refusal from the count
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: "10.0.0.1:6380")
    monkeypatch.setattr("strategies.ray_cluster.check_reachable", lambda *args, **kwargs: None)
    assert find_cluster("auto", timeout_s=1.0) == "10.0.0.1:6380"
