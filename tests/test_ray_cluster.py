"""simulation.ray_address: a job joins a running two-node Ray cluster and runs its clients on it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.process_groups import stop_group

pytest.importorskip("flwr")
pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parent.parent
RAY = str(Path(sys.executable).with_name("ray"))
SHORT_JOB = ["num_clients=4", "profile.source=inprocess", "profile.seeds=1", "profile.rounds=3",
             "profile.switch_at=[2]", "target.loss=2.2", "target.prob=0.6", "target.max_rounds=2",
             "tracking.enabled=false", "simulation=ray", "simulation.client_num_cpus=1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0", "PYTHONPATH": str(ROOT),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """``ray start ... --block`` in its own process group: ending the group ends that node."""
    with open(log, "wb") as out:
        return subprocess.Popen([RAY, "start", "--block", "--num-cpus", "1", "--node-ip-address",
                                 "127.0.0.1", "--disable-usage-stats", *args], stdout=out,
                                stderr=subprocess.STDOUT, env=_env(), start_new_session=True)


def _wait_for_nodes(gcs: str, want: int, timeout_s: float = 90.0) -> list[dict]:
    code = ("import json, ray; ray.init(address=%r, logging_level='ERROR'); "
            "print(json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive']]))" % gcs)
    deadline = time.monotonic() + timeout_s
    while True:
        proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                              timeout=120)
        nodes = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else []
        if len(nodes) >= want or time.monotonic() > deadline:
            return nodes
        time.sleep(2)


def _actors(gcs: str) -> list[dict]:
    """Every actor the cluster has seen (also dead ones), with its class and node, from the GCS actor table.

    (``ray.util.state`` would need the dashboard, which needs packages this project does not install.)
    """
    code = ("import json, ray; from ray._private.state import actors; "
            "ray.init(address=%r, logging_level='ERROR'); "
            "print(json.dumps([{'class': a['ActorClassName'], 'node': a['Address']['NodeID'], "
            "'state': a['State']} for a in actors().values()]))" % gcs)
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])




@pytest.mark.slow
def test_job_joins_a_running_two_node_cluster(tmp_path, monkeypatch):
    temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # Ray's socket paths must stay short
    port = _free_port()
    gcs = f"127.0.0.1:{port}"
    nodes: list[subprocess.Popen] = []
    try:
        nodes.append(_start(["--head", "--port", str(port), "--temp-dir", temp_dir,
                             "--include-dashboard", "false"], tmp_path / "head.log"))
        assert len(_wait_for_nodes(gcs, 1)) == 1, (tmp_path / "head.log").read_text()[-2000:]
        nodes.append(_start(["--address", gcs], tmp_path / "worker.log"))
        node_ids = _wait_for_nodes(gcs, 2)
        assert len(node_ids) == 2, (tmp_path / "worker.log").read_text()[-2000:]
        # auto finds it too: the head (own --temp-dir) and the second node recorded it, as `ray start` does
        from strategies.ray_cluster import find_cluster

        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        assert find_cluster("auto").endswith(f":{port}")

        proc = subprocess.run(
            [sys.executable, "-m", "depl_fl.main", *SHORT_JOB, f"simulation.ray_address={gcs}",
             f"profile.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"],
            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc = json.loads((tmp_path / "out" / "results.json").read_text())
        assert doc["config"]["simulation"]["ray_address"] == gcs and len(doc["rounds"]) >= 1

        clients = [a for a in _actors(gcs) if a["class"] == "ClientAppActor"]
        # One CPU per node and one per client: Flower placed one ClientApp actor on each node.
        assert len(clients) == 2, clients
        assert {a["node"] for a in clients} == set(node_ids)

        # A client larger than every node: one line, exit 2 (Flower's empty actor pool hung the job).
        big = subprocess.run(
            [sys.executable, "-m", "depl_fl.main", *SHORT_JOB, f"simulation.ray_address={gcs}",
             "simulation.client_num_cpus=2", f"hydra.run.dir={tmp_path / 'big'}"],
            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
        assert big.returncode == 2, big.stderr[-3000:]
        assert big.stderr.strip().splitlines()[-1].startswith(
            f"depl-fl: simulation.client_num_cpus: no node of the Ray cluster at {gcs} has the 2 CPUs")

        # No ray_address: the job starts its own Ray even with RAY_ADDRESS naming the cluster
        # (a bare ray.init joined it and refused ray_num_cpus there).
        own = subprocess.run(
            [sys.executable, "-m", "depl_fl.main", *SHORT_JOB, "simulation.ray_num_cpus=1",
             f"profile.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'own'}"],
            cwd=ROOT, env={**_env(), "RAY_ADDRESS": gcs}, capture_output=True, text=True, timeout=600)
        assert own.returncode == 0, own.stderr[-3000:]
        assert len([a for a in _actors(gcs) if a["class"] == "ClientAppActor"]) == 2
    finally:
        for node in reversed(nodes):
            stop_group(node)
        shutil.rmtree(temp_dir, ignore_errors=True)
