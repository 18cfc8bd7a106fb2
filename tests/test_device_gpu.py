"""train.device=cuda: jobs, the user-app helper and sub-networks on a GPU (``-m gpu``; skipped without CUDA).

Run by ``scripts/gpu_check.sh`` on a machine with CUDA. Each check is a
helper taking the device, so the same code is what the CPU would run. The
comparisons with the CPU switch TF32 off (:func:`ieee_fp32`): with it, cuDNN
convolutions round their inputs to 10 mantissa bits, which is a setting of
the machine, not a defect of the sub-networks.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("flwr")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (train.device=cuda)")]

from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.subnets import UserNetwork  # noqa: E402
from tests import user_nets  # noqa: E402

#: A short in-process job: 3 clients, in-process pilots, at most 2 rounds (tests/test_e2e.py's TINY).
TINY = ["num_clients=3", "simulation=inprocess", "profile.source=inprocess", "profile.seeds=1",
        "profile.rounds=3", "profile.switch_at=[2]", "target.loss=2.2", "target.prob=0.6",
        "target.max_rounds=2", "tracking.enabled=false", "planner.mc_trajectories=20000"]


@contextlib.contextmanager
def ieee_fp32() -> Iterator[None]:
    """Full float32 matrix products and convolutions on the GPU (no TF32) while the block runs."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def built_in_job(tmp_path: Path, device: str) -> dict:
    """The results.json of a short built-in in-process job with ``train.device=device``."""
    from depl_fl.main import run_job

    cfg = compose_config([*TINY, f"train.device={device}", f"profile.cache_dir={tmp_path / 'cache'}"])
    return json.loads(Path(run_job(cfg, tmp_path / "out")).read_text())


def test_a_built_in_job_trains_and_evaluates_on_cuda(tmp_path):
    torch.cuda.reset_peak_memory_stats()
    doc = built_in_job(tmp_path, "cuda")
    assert doc["config"]["train"]["device"] == "cuda"
    assert torch.cuda.max_memory_allocated() > 0  # the pilots, clients and evaluations ran there
    assert 1 <= len(doc["rounds"]) <= 2 and doc["summary"]["rounds"] == len(doc["rounds"])
    for r in doc["rounds"]:
        assert np.isfinite(r["loss"]) and np.isfinite(r["test_loss"]) and 0 <= r["accuracy"] <= 1
    assert doc["summary"]["status"] == "completed"


def local_updates(device: str) -> tuple[dict, dict]:
    """One client's local update of the p50 digits variant on the CPU and on ``device``."""
    from depl_fl.task.local_update import initial_state, local_update
    from depl_fl.task.partitions import client_partition, geometry
    from depl_fl.task.slicing import extract
    from depl_fl.task.subnets import network_layout

    cfg = compose_config(["num_clients=4"])
    geo = geometry(cfg)
    full = initial_state(geo, seed=0)
    sub = extract(full, network_layout(geo).structure(full, 0.5))
    x, y = client_partition(cfg, 1, 4)
    runs = {}
    for where in ("cpu", device):
        res = local_update(sub, geo, 0.5, x, y, epochs=1, lr=0.05, batch_size=32, seed=7, device=where)
        assert all(type(v) is np.ndarray for v in res.kept_state.values())
        runs[where] = res.kept_state
    return runs["cpu"], runs[device]


def test_local_training_on_cuda_follows_the_cpus():
    with ieee_fp32():
        cpu, gpu = local_updates("cuda")
    assert cpu.keys() == gpu.keys()
    for name in cpu:  # one epoch, the same mini-batch order: only the float sums differ
        np.testing.assert_allclose(gpu[name], cpu[name], atol=1e-4, rtol=1e-4, err_msg=name)


def user_client_round(device: str) -> tuple[dict, dict, object, list[str]]:
    """A DepLClient on ``device`` whose ``train`` leaves the net there.

    Returns the full state, the reply's entries, the variant's structure and
    the devices ``train`` saw the net on.
    """
    from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
    from torch.utils.data import DataLoader, TensorDataset

    from clients.user_app import DepLClient
    from depl_fl.task.models import get_state
    from depl_fl.task.slicing import extract
    from depl_fl.task.subnets import full_network, network_layout
    from strategies.depl_strategy import arrays_to_state, state_to_arrays
    from strategies.inprocess_grid import InProcessGrid

    seen: list[str] = []

    def train(net, loader, epochs, dev):  # quickstart's train, minus moving the net back
        net.to(dev).train()
        seen.append(str(next(net.parameters()).device))
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        for _ in range(epochs):
            for images, labels in loader:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(images.to(dev)), labels.to(dev)).backward()
                opt.step()

    network = UserNetwork(user_nets.resnet_tiny, (3, 16, 16), "resnet_tiny")
    full = get_state(full_network(network, seed=0))
    structure = network_layout(network).structure(full, 0.5)
    sent = extract(full, structure)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 3, 16, 16, generator=gen), torch.arange(16) % 10)
    InProcessGrid(lambda m, c: m, 1)  # sets Flower's task identity needed by Message()
    conf = ConfigRecord({"compression": 0.5, "local-epochs": 1, "server-round": 1})
    msg = Message(RecordDict({"arrays": state_to_arrays(sent), "config": conf}), dst_node_id=100,
                  message_type=MessageType.TRAIN)
    context = Context(run_id=1, node_id=100, node_config={"partition-id": 0}, state=RecordDict(),
                      run_config={})
    reply = DepLClient(network, train, device=device).train(msg, context, DataLoader(data, batch_size=8))
    return full, arrays_to_state(reply.content["arrays"]), structure, seen


def test_the_example_apps_client_on_cuda_replies_cpu_numpy_that_scatters_exactly():
    from depl_fl.task.slicing import extract, scatter

    full, reply, structure, seen = user_client_round("cuda")
    assert seen == ["cuda:0"]
    assert {k: v.shape for k, v in reply.items()} == structure.sub_shapes()
    assert all(type(v) is np.ndarray for v in reply.values())
    assert any(not np.array_equal(reply[k], extract(full, structure)[k]) for k in reply)  # it trained
    back = scatter(full, reply, structure)
    assert all(np.array_equal(extract(back, structure)[k], reply[k]) for k in reply)
    on_gpu = {k: torch.from_numpy(v).to("cuda") for k, v in full.items()}
    reply_on_gpu = {k: torch.from_numpy(v).to("cuda") for k, v in reply.items()}
    for k, v in scatter(on_gpu, reply_on_gpu, structure).items():  # cuda tensors in, numpy out, exact
        assert type(v) is np.ndarray and np.array_equal(v, back[k])
    assert all(np.array_equal(extract(on_gpu, structure)[k], extract(full, structure)[k]) for k in reply)


def sub_network_outputs(device: str, network: object, shape: tuple[int, ...]) -> tuple[object, object]:
    """The p50 sub-network's evaluation-mode logits of one batch on the CPU and on ``device``."""
    from depl_fl.task.local_update import variant_model
    from depl_fl.task.models import get_state
    from depl_fl.task.subnets import full_network

    state = get_state(full_network(network, seed=0))
    x = torch.randn(8, *shape, generator=torch.Generator().manual_seed(1))
    out = {}
    for where in ("cpu", device):
        model = variant_model(state, network, 0.5, where).eval()
        with torch.no_grad():
            out[where] = model(x.to(where)).cpu()
    return out["cpu"], out[device]


@pytest.mark.parametrize("name", ["digits_cnn", "resnet_tiny", "mobilenet_v2_tiny"])
def test_the_sub_network_forward_on_cuda_equals_the_cpus(name):
    from depl_fl.task.partitions import geometry

    if name == "digits_cnn":
        network = geometry(compose_config([]))
        shape = (network.in_channels, network.image_size, network.image_size)
    else:
        shape = (3, 16, 16)
        network = UserNetwork(getattr(user_nets, name), shape, name)
    with ieee_fp32():
        cpu, gpu = sub_network_outputs("cuda", network, shape)
    torch.testing.assert_close(gpu, cpu, atol=1e-5, rtol=1e-5)


def test_the_gpu_meter_reads_the_energy_of_work_on_the_gpu():
    """NVML's counter of the GPU torch trains on grows while it works (needs nvidia-ml-py)."""
    import time

    pytest.importorskip("pynvml")
    from depl_fl.task.energy_meter import GpuMeter, meter_for

    meter = GpuMeter("cuda")
    assert meter.available, "nvidia-ml-py is installed but NVML gave no energy counter for cuda"
    a = torch.randn(4096, 4096, device="cuda")
    start, t0 = meter.read_uj(), time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
    joules = meter.joules_between(start, meter.read_uj())
    seconds = time.perf_counter() - t0
    assert 10.0 * seconds < joules < 2000.0 * seconds  # between 10 W and 2 kW while it multiplies
    assert any(isinstance(m, GpuMeter) for m in meter_for(None, "cuda").meters)
