"""Per-process cached access to the dataset, the client partitions and the test split.

Both the ClientApp (one Ray actor = one process, many partitions) and the
server (test split for central evaluation) go through here, so the dataset is
loaded and partitioned once per process.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from depl_fl.task.data import load_dataset, partition_indices
from depl_fl.task.local_update import TaskGeometry


def _key(cfg: Mapping[str, Any]) -> tuple[str, str | None]:
    ds = cfg["dataset"]
    return str(ds["name"]), ds.get("data_dir")


@lru_cache(maxsize=4)
def _dataset(name: str, data_dir: str | None) -> Any:
    return load_dataset(name, data_dir=data_dir)


@lru_cache(maxsize=16)
def _partitions(name: str, data_dir: str | None, num_partitions: int,
                alpha: float | None, seed: int) -> tuple[np.ndarray, ...]:
    data = _dataset(name, data_dir)
    return tuple(partition_indices(np.asarray(data.y_train), num_partitions, alpha, seed))


def dataset(cfg: Mapping[str, Any]) -> Any:
    """The configured dataset (``DatasetArrays``), loaded once per process."""
    return _dataset(*_key(cfg))


def is_folder(cfg: Mapping[str, Any]) -> bool:
    """``dataset=folder``: node-local folders, the server holds only ``dataset.test_dir``."""
    return str(cfg["dataset"]["name"]) == "folder"


def geometry(cfg: Mapping[str, Any]) -> TaskGeometry:
    """Architecture and task geometry of the configured model on the configured dataset.

    For ``dataset=folder`` it is read from the server's test folder (a client
    uses its own folder, :func:`depl_fl.task.folder_data.geometry_of`).
    """
    if is_folder(cfg):
        from depl_fl.task.folder_data import geometry_of, test_folder

        return geometry_of(str(cfg["model"]["arch"]), test_folder(cfg))
    data = dataset(cfg)
    return TaskGeometry(str(cfg["model"]["arch"]), int(data.num_classes),
                        int(data.in_channels), int(data.image_size))


def client_partition(cfg: Mapping[str, Any], partition_id: int, num_partitions: int,
                     seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Training data ``(x, y)`` of one partition (seeded, equal on every process)."""
    alpha = cfg["partition"]["alpha"]
    seed = int(cfg["seed"]) if seed is None else int(seed)
    parts = _partitions(*_key(cfg), int(num_partitions),
                        None if alpha is None else float(alpha), seed)
    idx = parts[int(partition_id)]
    data = dataset(cfg)
    return np.asarray(data.x_train)[idx], np.asarray(data.y_train)[idx]


def test_split(cfg: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The server's held-out test split ``(x, y)``."""
    if is_folder(cfg):
        from depl_fl.task.folder_data import test_folder

        test = test_folder(cfg)
        return test.x, test.y
    data = dataset(cfg)
    return np.asarray(data.x_test), np.asarray(data.y_test)
