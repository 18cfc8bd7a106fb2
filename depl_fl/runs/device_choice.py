"""The devices of a job: ``train.device`` resolved on this machine, ``simulation.client_num_gpus`` checked.

``train.device`` (``cpu`` by default, ``cuda``, ``cuda:N`` or ``auto``) is where
the clients train and the server evaluates; a job records it resolved
(``auto`` becomes ``cuda`` or ``cpu``; ``cpu`` under Ray without a GPU share, where no
client could see a GPU). ``simulation.client_num_gpus`` is the
GPU share of every simulated client under Ray (Flower's ``client_resources``
``num_gpus``, beside ``num_cpus``). Both are refused in one line before any
round where this machine cannot honour them (:func:`resolve_job_devices`).
In a deployment each node resolves its own device
(:func:`depl_fl.task.devices.node_device`); only the server's evaluation
reads this machine's. The default (``cpu``, no GPU share) never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from depl_fl.errors import ScenarioError
from depl_fl.task.devices import cuda_devices, resolve_device


def resolve_job_devices(cfg: Mapping[str, Any], simulation: bool = True) -> dict[str, Any]:
    """``cfg`` with ``train.device`` resolved on this machine, after checking the GPU share.

    ``simulation=False`` (a deployment, ``flwr run``: no ``simulation.*`` key is
    read there) checks the device only.

    Raises
    ------
    ScenarioError
        One line: a CUDA device or a GPU share on a machine without CUDA, a
        share larger than the GPUs here, a share of more than one GPU that is
        not whole (Ray's rule), or a CUDA device under Ray without a share
        (Ray hides the GPUs from a client that has none) or with an index
        (Ray gives each client its own GPU, seen there as ``cuda``).
    """
    train = cfg.get("train") or {}
    spec = train.get("device", "cpu")
    sim = cfg.get("simulation") or {}
    ray_without_share = (simulation and sim.get("backend") == "ray"
                         and float(sim.get("client_num_gpus") or 0.0) <= 0)
    # auto means "a GPU where the clients can use one": under Ray without a GPU share they cannot.
    device = "cpu" if str(spec).strip() == "auto" and ray_without_share else resolve_device(spec)
    if sim and simulation:
        check_gpu_share(sim, device)
    return {**cfg, "train": {**train, "device": device}}


def check_gpu_share(sim: Mapping[str, Any], device: str) -> None:
    """Refuse a ``simulation`` section whose GPU share this machine (or Ray) cannot honour."""
    share = float(sim.get("client_num_gpus") or 0.0)
    ray = sim.get("backend") == "ray"
    if share > 1 and not share.is_integer():
        raise ScenarioError(f"simulation.client_num_gpus={share:g}: a share above one GPU must be a whole "
                            f"number of GPUs (Ray's rule)")
    if share > 0 and ray and not sim.get("ray_address"):  # a cluster brings its own GPUs
        count = cuda_devices()
        if not count:
            raise ScenarioError(f"simulation.client_num_gpus={share:g}: CUDA is not available on this "
                                f"machine; leave simulation.client_num_gpus=0")
        if share > count:
            raise ScenarioError(f"simulation.client_num_gpus={share:g}: this machine has {count} GPU(s); "
                                f"no client could ever be placed")
    if ray and device != "cpu":
        if share <= 0:
            raise ScenarioError(f"train.device={device}: under simulation=ray a client sees a GPU only "
                                f"with a GPU share; set simulation.client_num_gpus (e.g. 0.25: four "
                                f"clients per GPU)")
        if ":" in device:
            raise ScenarioError(f"train.device={device}: under simulation=ray each client gets its own "
                                f"GPU from Ray and sees it as cuda; use train.device=cuda")
