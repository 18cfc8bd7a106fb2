"""train.device and simulation.client_num_gpus without CUDA (the GPU checks: tests/test_device_gpu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flwr")

from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.runs.device_choice import resolve_job_devices  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.devices import node_device, resolve_device  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAS_CUDA = torch.cuda.is_available()
no_cuda = pytest.mark.skipif(HAS_CUDA, reason="checks the refusals of a machine without CUDA")
#: A 2-round in-process job with in-process pilots (as tests/test_e2e.py's TINY).
TINY = ["num_clients=3", "simulation=inprocess", "profile.source=inprocess", "profile.seeds=1",
        "profile.rounds=3", "profile.switch_at=[2]", "target.loss=2.2", "target.prob=0.6",
        "target.max_rounds=2", "tracking.enabled=false", "planner.mc_trajectories=20000"]


def _job(tmp_path: Path, extra: list[str]) -> dict:
    from depl_fl.main import run_job

    cfg = compose_config([*TINY, f"profile.cache_dir={tmp_path / 'cache'}", *extra])
    return json.loads(Path(run_job(cfg, tmp_path / "out")).read_text())


def _decisions(doc: dict) -> list[tuple]:
    """What a job decided and measured, without wall-clock times."""
    return [(r["model"], tuple(r["clients"]), r["loss"], r["test_loss"], r["accuracy"], r["energy_j"],
             r["round_time_s"]) for r in doc["rounds"]]


def test_train_device_cpu_is_the_default_job(tmp_path):
    assert compose_config([])["train"]["device"] == "cpu"
    assert compose_config(["train.device=cpu"]) == compose_config([])
    default = _job(tmp_path / "default", [])
    cpu = _job(tmp_path / "cpu", ["train.device=cpu"])
    assert default["config"]["train"]["device"] == cpu["config"]["train"]["device"] == "cpu"
    assert _decisions(default) == _decisions(cpu) and len(_decisions(cpu)) >= 1
    for doc in (default, cpu):  # each job its own cache folder, to measure its own profile
        doc["config"]["profile"].pop("cache_dir")
    assert default["config"] == cpu["config"]


def test_the_profile_key_of_the_cpu_default_is_the_key_without_the_option():
    from depl_fl.orchestration.profiling import profile_key

    cfg = compose_config([])
    without = {**cfg, "train": {k: v for k, v in cfg["train"].items() if k != "device"}}
    assert profile_key(cfg) == profile_key(without)
    assert profile_key({**cfg, "train": {**cfg["train"], "device": "cuda"}}) != profile_key(cfg)


def test_auto_is_recorded_resolved(tmp_path):
    doc = _job(tmp_path, ["train.device=auto"])
    assert doc["config"]["train"]["device"] == ("cuda" if HAS_CUDA else "cpu")
    assert len(doc["rounds"]) >= 1


@no_cuda
def test_cuda_without_cuda_is_refused_in_one_line_before_any_round(tmp_path):
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", *TINY, "train.device=cuda",
                           f"profile.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("depl-fl: train.device=cuda: CUDA is not available on this machine")
    assert not (tmp_path / "cache").exists()  # refused before the pilots
    assert not (tmp_path / "out" / "results.json").exists()  # no round ran


@no_cuda
def test_a_gpu_share_without_cuda_is_refused_in_one_line_before_ray_starts(tmp_path):
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    job = [k for k in TINY if k != "simulation=inprocess"]
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", *job, "simulation=ray",
                           "simulation.client_num_gpus=0.5", f"profile.cache_dir={tmp_path / 'cache'}",
                           f"hydra.run.dir={tmp_path / 'out'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert lines == ["depl-fl: simulation.client_num_gpus=0.5: CUDA is not available on this machine; "
                     "leave simulation.client_num_gpus=0"]


def test_device_spellings():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if HAS_CUDA else "cpu")
    for bad in ("gpu", "cuda:", "mps", "CUDA", "cuda:x"):
        with pytest.raises(ScenarioError, match=r"must be cpu, cuda, cuda:N or auto"):
            resolve_device(bad)
    with pytest.raises(ScenarioError, match=r"config train\.device"):
        compose_config(["train.device=gpu"])


def test_cuda_devices_beyond_the_machines_are_refused(monkeypatch):
    import depl_fl.task.devices as devices

    monkeypatch.setattr(devices, "cuda_devices", lambda: 2)
    assert resolve_device("cuda") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    assert resolve_device("auto") == "cuda"
    with pytest.raises(ScenarioError) as err:
        resolve_device("cuda:2")
    assert str(err.value) == "train.device=cuda:2: this machine has 2 CUDA device(s), cuda:0..cuda:1"
    monkeypatch.setattr(devices, "cuda_devices", lambda: 0)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ScenarioError, match=r"^train\.device=cuda:0: CUDA is not available"):
        resolve_device("cuda:0")


def test_the_node_config_device_wins_over_the_jobs(monkeypatch):
    import depl_fl.task.devices as devices

    monkeypatch.setattr(devices, "cuda_devices", lambda: 1)
    assert node_device("cpu", {"device": "cuda"}) == "cuda"
    assert node_device("cuda", {"device": "cpu"}) == "cpu"
    assert node_device("cuda", {"partition-id": 0}) == "cuda"
    assert node_device("auto", {"device": ""}) == "cuda"
    monkeypatch.setattr(devices, "cuda_devices", lambda: 0)
    assert node_device("cuda", {"device": "cpu"}) == "cpu"  # a CPU node of a GPU job
    with pytest.raises(ScenarioError, match=r"^node config device=cuda: CUDA is not available"):
        node_device("cpu", {"device": "cuda"})


def test_gpu_share_and_ray_rules(monkeypatch):
    import depl_fl.runs.device_choice as choice
    import depl_fl.task.devices as devices

    for module in (choice, devices):
        monkeypatch.setattr(module, "cuda_devices", lambda: 1)
    ray = compose_config(["simulation=ray"])

    def with_(device: str, share: float, **sim) -> dict:
        return {**ray, "train": {**ray["train"], "device": device},
                "simulation": {**ray["simulation"], "client_num_gpus": share, **sim}}

    assert resolve_job_devices(with_("cuda", 0.25))["train"]["device"] == "cuda"
    assert resolve_job_devices(with_("auto", 1))["train"]["device"] == "cuda"
    assert resolve_job_devices(with_("auto", 0.0))["train"]["device"] == "cpu"  # no client could see it
    assert resolve_job_devices(with_("cpu", 0.5))["train"]["device"] == "cpu"
    refusals = {
        ("cuda", 0.0): "train.device=cuda: under simulation=ray a client sees a GPU only with a GPU share",
        ("cuda:0", 0.5): "train.device=cuda:0: under simulation=ray each client gets its own GPU",
        ("cpu", 2.0): "simulation.client_num_gpus=2: this machine has 1 GPU(s)",
        ("cpu", 1.5): "simulation.client_num_gpus=1.5: a share above one GPU must be a whole number",
    }
    for (device, share), start in refusals.items():
        with pytest.raises(ScenarioError) as err:
            resolve_job_devices(with_(device, share))
        assert str(err.value).startswith(start) and "\n" not in str(err.value)
    # A running cluster brings its own GPUs: only the Ray rules apply.
    assert resolve_job_devices(with_("cpu", 2.0, ray_address="auto"))["train"]["device"] == "cpu"
    # A deployment reads no simulation.* key: its server checks the device alone.
    assert resolve_job_devices(with_("cuda", 0.0), simulation=False)["train"]["device"] == "cuda"


def test_client_resources_carry_the_gpu_share():
    from depl_fl.main import client_resources

    ray = compose_config(["simulation=ray"])["simulation"]
    assert client_resources(ray) == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert client_resources({**ray, "client_num_gpus": 0.25}) == {"num_cpus": 1.0, "num_gpus": 0.25}


def test_a_gpu_share_is_refused_in_process():
    with pytest.raises(ScenarioError, match=r"simulation\.client_num_gpus"):
        compose_config(["simulation=inprocess", "simulation.client_num_gpus=0.5"])


def test_extract_and_scatter_take_torch_tensors_and_return_numpy():
    from depl_fl.task.local_update import initial_state
    from depl_fl.task.partitions import geometry
    from depl_fl.task.slicing import aggregate, extract, scatter, silence
    from depl_fl.task.subnets import network_layout

    cfg = compose_config([])
    geo = geometry(cfg)
    state = initial_state(geo, 0)
    layout = network_layout(geo)
    structure = layout.structure(state, 0.5)
    as_tensors = {k: torch.from_numpy(v.copy()) for k, v in state.items()}
    sub = extract(state, structure)
    sub_t = extract(as_tensors, structure)
    assert all(type(sub_t[k]) is np.ndarray and np.array_equal(sub[k], sub_t[k]) for k in sub)
    trained = {k: torch.from_numpy(v + 1) for k, v in sub.items()}
    back = scatter(as_tensors, trained, structure)
    assert all(type(v) is np.ndarray for v in back.values())
    assert all(np.array_equal(extract(back, structure)[k], trained[k].numpy()) for k in sub)
    merged = aggregate(as_tensors, [(trained, 1.0), (sub, 1.0)], structure)
    assert all(np.allclose(extract(merged, structure)[k], sub[k] + 0.5) for k in sub)
    silent = silence(as_tensors, layout, structure)
    assert all(np.array_equal(silent[k], silence(state, layout, structure)[k]) for k in state)


def test_the_user_app_helper_with_a_train_that_moves_the_net_to_a_device_and_back():
    from depl_fl.task.models import get_state
    from depl_fl.task.subnets import UserNetwork, full_network, network_layout
    from depl_fl.task.user_update import user_local_update
    from tests.user_app_wiring import small_mlp

    seen: list[str] = []

    def train(net, loader, epochs, device):
        net.to(device)
        seen.append(str(next(net.parameters()).device))
        with torch.no_grad():
            for p in net.parameters():
                p.add_(1.0)
        net.to("cpu")

    network = UserNetwork(small_mlp, (4,), "mlp")
    state = get_state(full_network(network, seed=0))
    structure = network_layout(network).structure(state, 0.5)
    from depl_fl.task.slicing import extract, scatter

    sub = extract(state, structure)
    loader = [(torch.zeros(2, 4), torch.zeros(2, dtype=torch.long))]
    result = user_local_update(network, sub, 0.5, train, loader, 1, device="cpu")
    assert seen == ["cpu"]
    assert all(type(v) is np.ndarray for v in result.kept_state.values())
    assert all(np.array_equal(result.kept_state[k], sub[k] + 1) for k in sub)
    back = scatter(state, result.kept_state, structure)
    assert all(np.array_equal(extract(back, structure)[k], result.kept_state[k]) for k in sub)
