"""simulation.ray_address: what it accepts, what it refuses (one line each) and what ray.init receives."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("hydra")

from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.main import ray_init_args  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from strategies.ray_cluster import check_reachable, find_cluster  # noqa: E402
from tests.process_groups import stop_group  # noqa: E402

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
     "config simulation.ray_address: must be auto or HOST:PORT (the head's GCS address, e.g. "
     "127.0.0.1:6379), got '127.0.0.1'"),
    (["simulation.ray_address=ray://head.example:10001"],
     "config simulation.ray_address: 'ray://head.example:10001' is a URL (Ray Client's ray://HOST:10001 "
     "among them); a job joins a cluster through its head's GCS address: give HOST:PORT (the port of "
     "`ray start --head --port`, 6379 by default)"),
    (["simulation.ray_address=127.0.0.1:99999"],
     "config simulation.ray_address: port 99999 of '127.0.0.1:99999' is not in 1-65535"),
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


def test_auto_with_a_ray_address_that_is_no_address_is_one_line(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "head-without-port")
    with pytest.raises(ScenarioError) as info:
        find_cluster("auto", timeout_s=1.0)
    assert str(info.value) == ("simulation.ray_address=auto: RAY_ADDRESS='head-without-port' is not a Ray "
                               "cluster's HOST:PORT; fix or unset it")


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


RAYLET = ("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet "
          "--raylet_socket_name=/tmp/rc1/session_x/sockets/raylet --node_ip_address=192.0.2.2").split(" ") + [
    "--python_worker_command=/venv/bin/python default_worker.py --node-ip-address=192.0.2.2 "
    "--gcs-address=192.0.2.2:6531 --temp-dir=/tmp/rc1 --webui=",
    "--temp_dir=/tmp/rc1", "--gcs-address=192.0.2.2:6531"]


def test_a_raylet_command_line_names_its_cluster_and_temp_dir():
    from strategies.ray_cluster import raylet_flags

    assert raylet_flags(RAYLET) == ("192.0.2.2:6531", "/tmp/rc1")
    without_temp_dir = [a for a in RAYLET if "temp" not in a] + ["--gcs-address=192.0.2.2:7000"]
    assert raylet_flags(without_temp_dir) == ("192.0.2.2:6531", "/tmp/ray")
    assert raylet_flags(["/usr/bin/python", "--gcs-address=192.0.2.2:6531"]) is None  # not a raylet
    assert raylet_flags([]) is None


def test_an_instance_is_a_cluster_when_a_ray_start_recorded_it_in_its_temp_dir():
    from strategies.ray_cluster import RayInstance, classify

    records = {"/tmp/ray": "192.0.2.2:6379", "/tmp/rc1": "192.0.2.2:6531"}
    raylets = [("192.0.2.2:6531", "/tmp/rc1"),     # a head started with --temp-dir
               ("192.0.2.2:6531", "/tmp/ray"),     # its second node, recorded elsewhere: still the cluster
               ("192.0.2.2:41585", "/tmp/ray"),    # a job's own Ray (ray.init): nothing records it
               ("192.0.2.2:6379", "/tmp/ray")]     # a head without --temp-dir
    assert classify(raylets, records.get) == [RayInstance("192.0.2.2:41585", False),
                                              RayInstance("192.0.2.2:6379", True),
                                              RayInstance("192.0.2.2:6531", True)]


def test_auto_joins_the_one_cluster_and_never_a_jobs_own_ray():
    from strategies.ray_cluster import RayInstance, choose_auto

    own, cluster = RayInstance("192.0.2.2:41585", False), RayInstance("192.0.2.2:6531", True)
    assert choose_auto([cluster], None) == "192.0.2.2:6531"
    assert choose_auto([own, cluster], None) == "192.0.2.2:6531"  # Ray's own auto picks either
    # a stale record in /tmp/ray (its cluster was killed, not `ray stop`ped) does not hide the running one
    assert choose_auto([own, cluster], "192.0.2.2:6379") == "192.0.2.2:6531"
    with pytest.raises(ScenarioError) as info:
        choose_auto([own], None)
    assert str(info.value) == (
        "simulation.ray_address=auto: no Ray cluster runs on this machine, only 1 job's own Ray "
        "(192.0.2.2:41585) (started by `ray.init`, each ends with its job), which auto does not join; "
        "start a cluster (`ray start --head`) or give its HOST:PORT")
    with pytest.raises(ScenarioError, match=r"no running Ray cluster found on this machine \(the last "
                                            r"`ray start` recorded 192.0.2.2:6379 in Ray's temp dir"):
        choose_auto([], "192.0.2.2:6379")
    with pytest.raises(ScenarioError, match=r"^simulation.ray_address=auto: no running Ray cluster found "
                                            r"on this machine; start one with `ray start --head`"):
        choose_auto([], None)


def test_auto_among_several_clusters_asks_for_the_address_unless_tmp_ray_records_one():
    from strategies.ray_cluster import RayInstance, choose_auto

    clusters = [RayInstance("10.0.0.1:6379", True), RayInstance("10.0.0.1:6380", True),
                RayInstance("10.0.0.1:41585", False)]
    with pytest.raises(ScenarioError) as info:
        choose_auto(clusters, None)
    assert str(info.value).startswith("simulation.ray_address=auto: 2 Ray clusters run on this machine "
                                      "(10.0.0.1:6379, 10.0.0.1:6380) and none is the one")
    # the cluster of the last `ray start` without --temp-dir among them is Ray's own choice
    assert choose_auto(clusters, "10.0.0.1:6380") == "10.0.0.1:6380"


def test_auto_is_passed_to_ray_init_as_the_cluster_it_found(monkeypatch):
    pytest.importorskip("ray")
    from strategies.ray_cluster import RayInstance

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("strategies.ray_cluster.running_instances",
                        lambda: [RayInstance("10.0.0.1:41585", False), RayInstance("10.0.0.1:6531", True)])
    monkeypatch.setattr("strategies.ray_cluster.check_reachable", lambda *args, **kwargs: None)
    joins = find_cluster("auto", timeout_s=1.0)
    assert joins == "10.0.0.1:6531"
    sim = compose_config(["simulation.ray_address=auto"])["simulation"]
    assert ray_init_args(sim, joins)["address"] == "10.0.0.1:6531"  # ray.init("auto") may pick the other
    assert find_cluster("127.0.0.1:6531") == "127.0.0.1:6531"  # as given: Ray canonicalizes it itself


def test_a_wrong_port_names_what_was_given_and_the_clusters_that_run_here():
    from strategies.ray_cluster import RayInstance, unreachable_line

    here = [RayInstance("192.0.2.2:41585", False), RayInstance("192.0.2.2:6531", True)]
    line = unreachable_line("127.0.0.1:6532", "127.0.0.1:6532", "192.0.2.2:6532", "Connection refused", here)
    assert line == ("simulation.ray_address=127.0.0.1:6532: no Ray cluster answers at 127.0.0.1:6532 (Ray "
                    "connects to 192.0.2.2:6532) (Connection refused); the Ray cluster(s) running on this "
                    "machine: 192.0.2.2:6531; give a running cluster's HOST:PORT or start its head "
                    "(`ray start --head --port 6532`)")
    line = unreachable_line("auto", "10.0.0.9:6379", "10.0.0.9:6379", "timed out", here[:1], "RAY_ADDRESS")
    assert line.startswith("simulation.ray_address=auto: no Ray cluster answers at 10.0.0.9:6379, which "
                           "RAY_ADDRESS names (timed out); no Ray cluster runs on this machine, only 1 "
                           "job's own Ray (192.0.2.2:41585); ")


def test_a_host_that_does_not_resolve_is_one_line():
    pytest.importorskip("ray")
    with pytest.raises(ScenarioError) as info:
        find_cluster("no-such-head.invalid:6379", timeout_s=2.0)
    assert str(info.value).startswith("simulation.ray_address=no-such-head.invalid:6379: no Ray cluster "
                                      "answers at no-such-head.invalid:6379 (cannot resolve "
                                      "no-such-head.invalid: ")
    assert str(info.value).endswith("give a running cluster's HOST:PORT or check the host name")




@pytest.mark.slow
def test_auto_passes_over_a_jobs_own_ray_and_joins_a_ray_start_cluster(monkeypatch):
    """A job's own Ray (``ray.init``) runs; ``auto`` refuses it, then joins a ``ray start`` head beside it."""
    pytest.importorskip("ray")
    from strategies.ray_cluster import running_instances

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if running_instances():
        pytest.skip("other Ray instances run on this machine")
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_USAGE_STATS_ENABLED": "0"}
    own_job = ("import ray, time; ray.init(address='local', num_cpus=1, include_dashboard=False, "
               "logging_level='ERROR'); print(ray.get_runtime_context().gcs_address, flush=True); "
               "time.sleep(120)")
    temp_dir = tempfile.mkdtemp(prefix="ra", dir="/tmp")  # Ray's socket paths must stay short
    started: list[subprocess.Popen] = []
    try:
        started.append(subprocess.Popen([sys.executable, "-c", own_job], stdout=subprocess.PIPE, text=True,
                                        stderr=subprocess.DEVNULL, env=env, start_new_session=True))
        own_address = started[0].stdout.readline().strip()
        assert own_address, "the job's own Ray did not start"
        with pytest.raises(ScenarioError) as info:
            find_cluster("auto", timeout_s=2.0)
        assert f"no Ray cluster runs on this machine, only 1 job's own Ray ({own_address})" in str(info.value)

        port = _free_port()
        started.append(subprocess.Popen(
            [str(Path(sys.executable).with_name("ray")), "start", "--block", "--head", "--port", str(port),
             "--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--temp-dir", temp_dir,
             "--include-dashboard", "false", "--disable-usage-stats"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True))
        deadline = time.monotonic() + 60
        while not any(i.recorded for i in running_instances()) and time.monotonic() < deadline:
            time.sleep(1)
        cluster = find_cluster("auto", timeout_s=5.0)  # Ray records the head at this machine's address
        assert cluster.endswith(f":{port}") and cluster != own_address

        wrong = _free_port()
        with pytest.raises(ScenarioError) as info:
            find_cluster(f"127.0.0.1:{wrong}", timeout_s=2.0)
        assert f"the Ray cluster(s) running on this machine: {cluster};" in str(info.value)
    finally:
        for proc in reversed(started):
            stop_group(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_cpu_share_so_small_that_the_actors_outgrow_a_nodes_memory_is_one_line():
    from strategies.ray_cluster import ACTOR_BYTES_FLOOR, crowded_node, room_verdict

    gib = 2.0**30
    node = {"CPU": 2.0, "memory": 16.0 * gib}
    # 0.25 CPU: 8 actors, 0.05: 40 (about 8 GiB, still within the node's memory): no verdict
    assert crowded_node([node], {"num_cpus": 0.25, "num_gpus": 0.0}) is None
    assert room_verdict([node], node, {"num_cpus": 0.05, "num_gpus": 0.0}, "x") is None
    assert crowded_node([{"CPU": 2.0}], {"num_cpus": 0.001, "num_gpus": 0.0}) is None  # no memory: not judged
    # 0.01 CPU: Flower starts 200 actors before the first round, whatever the number of clients
    assert crowded_node([{"CPU": 1.0, "memory": 64 * gib}, node], {"num_cpus": 0.01, "num_gpus": 0.0}) == (
        2.0, 200, 16.0 * gib)
    assert 200 * ACTOR_BYTES_FLOOR > 16.0 * gib > 81 * ACTOR_BYTES_FLOOR
    with pytest.raises(ScenarioError) as info:
        room_verdict([node], node, {"num_cpus": 0.01, "num_gpus": 0.0}, "this machine's Ray")
    assert str(info.value) == (
        "simulation.client_num_cpus=0.01: Flower would start 200 ClientApp actors on a node of this "
        "machine's Ray (2 CPUs / 0.01; as many whatever the number of clients), each a Python process of at "
        "least 200 MiB, more than the node's 16.0 GiB of Ray memory; raise simulation.client_num_cpus (to at "
        "least 0.024 there)")
