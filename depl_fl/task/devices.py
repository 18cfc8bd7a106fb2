"""The torch device that trains and evaluates: ``train.device`` and a node's own ``device``.

A device is written ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (``cuda`` when
``torch.cuda.is_available()``, else ``cpu``). :func:`resolve_device` turns a
spelling into the device this machine runs, or refuses it in one line: a
``cuda`` device on a machine without CUDA is a user mistake, never a silent
fall-back to the CPU. ``cpu`` resolves without importing torch, so the
default job's configuration checks stay as light as before.

In a deployment a node may set its own device in its node config
(``flower-supernode --node-config "device='cuda'"``); it wins over the job's
``train.device`` (:func:`node_device`), because the device is a property of
the node's machine, which only its operator knows: one job setting cannot
describe a federation of GPU and CPU nodes, and a node's GPU is no business
of the server's. Every array that leaves a node is a CPU numpy array whatever
the device (:func:`depl_fl.task.models.get_state`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from depl_fl.errors import ScenarioError

#: The spellings a device setting accepts.
DEVICE_PATTERN = r"^(cpu|cuda|cuda:[0-9]+|auto)$"
#: The node config key with which a node picks its own device.
NODE_DEVICE_KEY = "device"


def cuda_devices() -> int:
    """Number of CUDA devices torch can use here (0 without CUDA)."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def resolve_device(spec: Any, field: str = "train.device") -> str:
    """The device ``spec`` names on this machine: ``cpu``, ``cuda`` or ``cuda:N``.

    Parameters
    ----------
    spec : str
        ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.
    field : str
        The setting's name, for the error line.

    Raises
    ------
    ScenarioError
        A spelling outside :data:`DEVICE_PATTERN`, a CUDA device on a machine
        without CUDA, or ``cuda:N`` beyond the devices there are (one line).
    """
    text = str(spec).strip()
    if not re.match(DEVICE_PATTERN, text):
        raise ScenarioError(f"{field}={spec}: must be cpu, cuda, cuda:N or auto")
    if text == "cpu":
        return text
    count = cuda_devices()
    if text == "auto":
        return "cuda" if count else "cpu"
    if not count:
        raise ScenarioError(f"{field}={text}: CUDA is not available on this machine "
                            f"(torch {_torch_version()} sees no GPU); use {field}=cpu or auto")
    index = int(text.partition(":")[2] or 0)
    if index >= count:
        raise ScenarioError(f"{field}={text}: this machine has {count} CUDA device(s), "
                            f"cuda:0..cuda:{count - 1}")
    return text


def node_device(job_device: Any, node_config: Mapping[str, Any]) -> str:
    """The device a node trains and evaluates on: its node config's ``device``, else the job's.

    Resolved on the node (``auto`` means this node's GPU, if it has one).
    """
    own = node_config.get(NODE_DEVICE_KEY)
    if own is not None and str(own).strip():
        return resolve_device(own, field=f"node config {NODE_DEVICE_KEY}")
    return resolve_device(job_device or "cpu")


def _torch_version() -> str:
    import torch

    return str(torch.__version__)
