"""Levels that act on a node (threads, affinity) and the energy a reply reports (meter, declared)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from depl_fl.errors import ScenarioError
from depl_fl.task.device_levels import level_setting, parse_cpu_list
from depl_fl.task.energy_meter import RaplMeter, meter_for, reply_energy

pytest.importorskip("torch")
pytest.importorskip("flwr")

import torch  # noqa: E402
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict  # noqa: E402

import depl_fl.task.local_update as local_update_module  # noqa: E402
from clients.handlers import train_content  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.partitions import geometry  # noqa: E402
from strategies.depl_strategy import state_to_arrays  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402

REAL_LOCAL_UPDATE = local_update_module.local_update
TWO_CPUS = len(os.sched_getaffinity(0)) >= 2 and 0 in os.sched_getaffinity(0) and 1 in os.sched_getaffinity(0)


# ---------------------------------------------------------------- node config mapping
def test_cpu_lists_parse_and_bad_ones_are_one_line_errors():
    assert parse_cpu_list("0-2,5") == frozenset({0, 1, 2, 5})
    for bad in ("", "a", "3-1", "-1"):
        with pytest.raises(ScenarioError, match="level-cpus"):
            parse_cpu_list(bad)


def test_level_mapping_defaults_and_node_config():
    node = {"level-threads": "1,3", "level-cpus": "0;0-1", "level-watts": "2.5,6"}
    low, high, beyond = (level_setting(node, i, deployment=True) for i in (0, 1, 5))
    assert (low.threads, low.cpus, low.watts) == (1, frozenset({0}), 2.5)
    assert (high.threads, high.cpus, high.watts) == (3, frozenset({0, 1}), 6.0)
    assert beyond.threads == 3 and beyond.watts == 6.0  # past the list: its last entry
    # Defaults: a deployment runs level + 1 threads (at most the CPUs it may use), simulation 1.
    assert level_setting({}, 1, deployment=True).threads == min(2, len(os.sched_getaffinity(0)))
    assert level_setting({}, 1, deployment=False).threads == 1
    assert level_setting({}, 0, deployment=True).cpus is None
    with pytest.raises(ScenarioError, match="level-watts"):
        level_setting({"level-watts": "2,-1"}, 1, deployment=True)


# ---------------------------------------------------------------- the training really runs so
@pytest.fixture(scope="module")
def cfg():
    return compose_config(["num_clients=4", "simulation=inprocess"])


def _train(cfg, level: int, node_extra: dict, monkeypatch, cache_dir=None):
    seen = {}

    def spy(*args, **kwargs):
        seen["threads"] = torch.get_num_threads()
        seen["cpus"] = set(os.sched_getaffinity(0))
        return REAL_LOCAL_UPDATE(*args, **kwargs)

    monkeypatch.setattr(local_update_module, "local_update", spy)
    InProcessGrid(lambda m, c: m, 1)  # Flower's task identity needed by Message()
    conf = ConfigRecord({"model-id": "full", "compression": 0.0, "level": level, "local-epochs": 1,
                         "lr": 0.05, "batch-size": 32, "server-round": 1, "seed": 0})
    msg = Message(RecordDict({"arrays": state_to_arrays(initial_state(geometry(cfg), 0)), "config": conf}),
                  dst_node_id=100, message_type=MessageType.TRAIN)
    context = Context(run_id=1, node_id=100, node_config={"partition-id": 1, "num-partitions": 4,
                                                          **node_extra},
                      state=RecordDict(), run_config={})
    content = train_content(msg.content, context, cfg, cache_dir)
    return seen, dict(content["metrics"])


@pytest.mark.skipif(not TWO_CPUS, reason="needs CPUs 0 and 1")
def test_a_level_changes_threads_and_affinity_during_training(cfg, monkeypatch):
    node = {"level-threads": "1,2", "level-cpus": "0;0-1"}
    before = (torch.get_num_threads(), set(os.sched_getaffinity(0)))
    seen0, m0 = _train(cfg, 0, node, monkeypatch)
    seen1, m1 = _train(cfg, 1, node, monkeypatch)
    assert seen0 == {"threads": 1, "cpus": {0}}
    assert seen1 == {"threads": 2, "cpus": {0, 1}}
    assert (m0["level-threads"], m0["level-cpus"], m0["level-cpu-mask"]) == (1, 1, 0b01)
    assert (m1["level-threads"], m1["level-cpus"], m1["level-cpu-mask"]) == (2, 2, 0b11)
    assert m1["level"] == 1
    # Restored after the round.
    assert (torch.get_num_threads(), set(os.sched_getaffinity(0))) == before


def test_default_levels_act_only_in_a_deployment(cfg, monkeypatch, tmp_path):
    seen_sim, _ = _train(cfg, 1, {}, monkeypatch)
    seen_dep, metrics = _train(cfg, 1, {}, monkeypatch, cache_dir=tmp_path)
    assert seen_sim["threads"] == 1
    assert seen_dep["threads"] == min(2, len(os.sched_getaffinity(0)))
    assert metrics["level-threads"] == seen_dep["threads"]


# ---------------------------------------------------------------- energy sources
def _fake_powercap(root, values, wrap=None):
    for name, value in values.items():
        zone = root / name
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "energy_uj").write_text(f"{value}\n")
        if wrap is not None:
            (zone / "max_energy_range_uj").write_text(f"{wrap}\n")


def test_rapl_reader_sums_top_zones_and_undoes_wraparound(tmp_path):
    _fake_powercap(tmp_path, {"intel-rapl:0": 1_000_000, "intel-rapl:1": 999_000_000,
                              "intel-rapl:0:0": 5}, wrap=1_000_000_000)
    meter = RaplMeter(tmp_path)
    assert meter.available and len(meter.zones) == 2  # the sub-zone intel-rapl:0:0 is not counted
    start = meter.read_uj()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("3500000\n")  # +2.5 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("499999\n")  # wrapped: +1.5 J
    assert meter.joules_between(start, meter.read_uj()) == pytest.approx(4.0)


def test_no_readable_meter_means_declared_or_model(tmp_path):
    assert meter_for(tmp_path / "absent") is None
    assert meter_for("off") is None
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "energy_uj").write_text("not a number")
    assert meter_for(tmp_path) is None
    assert reply_energy(None, 5.0, 2.0) == (10.0, "declared")
    assert reply_energy(3.0, 5.0, 2.0) == (3.0, "meter")
    assert reply_energy(None, None, 2.0) == (None, "model")


class _FakeNvml:
    """pynvml's calls the GPU meter makes, on one GPU whose counter the test moves (millijoules)."""

    def __init__(self, uuid: str) -> None:
        self.uuid, self.mj, self.inits = uuid, 5_000, 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != self.uuid:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return uuid

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        return self.mj


def _fake_gpu(monkeypatch, nvml_uuid: str, torch_uuid: str) -> _FakeNvml:
    import sys
    import types

    import torch

    nvml = _FakeNvml(nvml_uuid)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: types.SimpleNamespace(uuid=torch_uuid if index == 1 else "other"))
    return nvml


def test_a_cuda_node_adds_its_gpus_counter_found_by_uuid(monkeypatch, tmp_path):
    nvml = _fake_gpu(monkeypatch, "GPU-1234-abcd", "1234-abcd")  # torch names it without NVML's prefix
    _fake_powercap(tmp_path, {"intel-rapl:0": 1_000_000})
    meters = meter_for(tmp_path, "cuda:1")
    assert meters is not None and len(meters.meters) == 2
    start = meters.read_uj()
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("3000000\n")  # the package: +2 J
    nvml.mj += 7_500  # the GPU: +7.5 J
    assert meters.joules_between(start, meters.read_uj()) == pytest.approx(9.5)
    assert len(meter_for(tmp_path, "cpu").meters) == 1  # a CPU node reads no GPU
    assert meter_for("off", "cuda:1") is None  # off: no meter at all
    gpu_only = meter_for(tmp_path / "absent", "cuda:1")
    assert gpu_only is not None and [type(m).__name__ for m in gpu_only.meters] == ["GpuMeter"]


def test_a_gpu_nvml_cannot_name_is_no_meter(monkeypatch, tmp_path):
    _fake_gpu(monkeypatch, "GPU-other", "1234-abcd")
    assert meter_for(tmp_path / "absent", "cuda:1") is None
    monkeypatch.delitem(__import__("sys").modules, "pynvml")
    monkeypatch.setattr("builtins.__import__", _refusing("pynvml"))
    assert meter_for(tmp_path / "absent", "cuda:1") is None  # nvidia-ml-py not installed


def _refusing(name: str):
    import builtins

    real = builtins.__import__

    def importer(module, *args, **kwargs):
        if module == name:
            raise ImportError(f"No module named {name!r}")
        return real(module, *args, **kwargs)
    return importer


def test_reply_reports_energy_source_and_bytes(cfg, monkeypatch, tmp_path):
    _, declared = _train(cfg, 1, {"level-watts": "2,8", "energy-meter": "off"}, monkeypatch)
    assert declared["energy-source-code"] == 1
    assert declared["energy-j"] == pytest.approx(8.0 * declared["train-time-s"])
    _, model = _train(cfg, 0, {"energy-meter": "off"}, monkeypatch)
    assert model["energy-source-code"] == 2 and "energy-j" not in model
    full_bytes = sum(v.nbytes for v in initial_state(geometry(cfg), 0).values())
    assert model["bytes-down"] == full_bytes and model["bytes-up"] == full_bytes
    assert model["reply-time-s"] >= model["train-time-s"] > 0
    # A readable meter wins over the declared power (a fake sysfs tree that does not move: 0 J).
    _fake_powercap(tmp_path, {"intel-rapl:0": 42})
    _, metered = _train(cfg, 1, {"level-watts": "2,8", "energy-meter": str(tmp_path)}, monkeypatch)
    assert metered["energy-source-code"] == 0 and metered["energy-j"] == 0.0
    assert np.isfinite(metered["train-loss"])
